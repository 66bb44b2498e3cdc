//! GPU tests of the wave scheduler: persistent programs compute bit for bit what per-operator
//! launches of the same variants compute (same tile shapes and splits → same arithmetic order),
//! and both match f64 references of the stored inputs (relative Frobenius error and each element,
//! `assert_close`). Outputs are poisoned (NaN) before every run. Without a GPU every test
//! prints why it is skipped and passes (fails with `FUSED_GEMM_REQUIRE_GPU=1`).

use fused_gemm::device::types::DType;
use fused_gemm::host::reference::epilogue::{gelu_erf, sigmoid};
use fused_gemm::host::reference::{bert::layer_norm_row, gemm};
use fused_gemm::host::schedule::verify::verify;
use fused_gemm::host::schedule::{
    self, Family, Program, Schedule, ScheduleOptions, WaveGraph, WaveRunner,
};
use fused_gemm::host::testing::{assert_close, gpu_or_skip, rng, uniform};
use fused_gemm::host::{Error, Gpu, Result, Tensor};
use fused_gemm::kernels::waves::{T16X64, WAVES_BF16, WAVES_BF16_ROWS};
use fused_gemm::waves::workloads::{Gemms, LstmStack, MINILM_EPS, MiniLmLayer};

fn f64s(t: &Tensor, gpu: &Gpu) -> Vec<f64> {
    t.download_f32(gpu)
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect()
}

fn bits(t: &Tensor, gpu: &Gpu) -> Vec<u32> {
    t.download_f32(gpu)
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect()
}

/// Schedules `g` on `family` with the driver's occupancy, checks the plan, prepares it.
fn prepare(
    gpu: &Gpu,
    g: &WaveGraph,
    family: &Family,
    opts: &ScheduleOptions,
) -> Result<(Schedule, WaveRunner)> {
    let vdev = schedule::exec::vdevice(gpu, family)?;
    let s = schedule::schedule(g, family, gpu.props(), vdev, opts)?;
    verify(g, family, &s).map_err(|e| Error::LaunchLimit(format!("schedule check: {e}")))?;
    let r = WaveRunner::new(gpu, g, family, &s)?;
    Ok((s, r))
}

fn persistent_programs(s: &Schedule) -> usize {
    s.programs
        .iter()
        .filter(|p| matches!(p, Program::Persistent(_)))
        .count()
}

fn gemm_outputs_match(test: &str, shapes: &[(usize, usize, usize)], opts: ScheduleOptions) {
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    let mut w = Gemms::new(&gpu, shapes, &mut |n| uniform(&mut r, n)).unwrap();
    let (s, persistent) = prepare(&gpu, &w.graph, &WAVES_BF16, &opts).unwrap();
    assert!(persistent_programs(&s) >= 1, "{:?}", s.programs);
    let per_op = WaveRunner::new(&gpu, &w.graph, &WAVES_BF16, &s.as_launches()).unwrap();

    for c in &mut w.c {
        c.poison(&gpu).unwrap();
    }
    per_op.launch(&gpu).unwrap();
    let want: Vec<Vec<u32>> = w.c.iter().map(|c| bits(c, &gpu)).collect();
    for c in &mut w.c {
        c.poison(&gpu).unwrap();
    }
    persistent.launch(&gpu).unwrap();
    gpu.synchronize().unwrap();
    for (i, &(m, n, k)) in shapes.iter().enumerate() {
        let got = bits(&w.c[i], &gpu);
        let v = s.variants[i];
        assert!(
            got == want[i],
            "op {i} ({m}×{n}×{k}, tile {}×{}, {} splits): persistent differs from per-op",
            v.tile.bm,
            v.tile.bn,
            v.splits
        );
        let (a, b, bias) = (
            f64s(&w.a[i], &gpu),
            f64s(&w.w[i], &gpu),
            f64s(&w.bias[i], &gpu),
        );
        let mut reference = gemm(m, n, k, &a, &b, true);
        for (j, x) in reference.iter_mut().enumerate() {
            *x = (*x + bias[j % n]).max(0.0);
        }
        let got: Vec<f64> = got.iter().map(|&x| f32::from_bits(x) as f64).collect();
        assert_close(
            &got,
            &reference,
            1e-2,
            &format!(
                "{test}: op {i} {m}×{n}×{k} tile {}×{} splits {}",
                v.tile.bm, v.tile.bn, v.splits
            ),
        );
    }
}

#[test]
fn independent_gemms_persistent_matches_per_op() {
    gemm_outputs_match(
        "independent_gemms_persistent_matches_per_op",
        &[
            (256, 256, 256),
            (1, 64, 64),
            (17, 136, 72),
            (100, 520, 136),
            (33, 1000, 264),
            (256, 256, 256),
            (129, 64, 512),
            (64, 8, 8),
        ],
        ScheduleOptions::default(),
    );
}

#[test]
fn forced_split_k_and_small_tiles_match_per_op() {
    // Arm 0 (16×64) with 3 splits, arm 1 (64×64) with 2, arm 2 (128×64) with 4.
    let fixed = vec![Some((0, 3)), Some((1, 2)), Some((2, 4)), Some((0, 1))];
    gemm_outputs_match(
        "forced_split_k_and_small_tiles_match_per_op",
        &[
            (45, 200, 384),
            (130, 72, 256),
            (200, 128, 1024),
            (5, 64, 40),
        ],
        ScheduleOptions {
            fixed,
            fallback: false,
            ..Default::default()
        },
    );
}

#[test]
fn minilm_layer_persistent_matches_per_op() {
    let test = "minilm_layer_persistent_matches_per_op";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    for seq in [17, 64] {
        let mut layer = MiniLmLayer::new(&gpu, seq, &mut |n| uniform(&mut r, n)).unwrap();
        let (_, pre) = prepare(&gpu, &layer.pre, &WAVES_BF16_ROWS, &Default::default()).unwrap();
        let (s, post) = prepare(&gpu, &layer.post, &WAVES_BF16_ROWS, &Default::default()).unwrap();
        assert_eq!(
            post.launches(),
            1,
            "the three GEMMs are one program: {:?}",
            s.programs
        );
        let post_per_op =
            WaveRunner::new(&gpu, &layer.post, &WAVES_BF16_ROWS, &s.as_launches()).unwrap();
        pre.launch(&gpu).unwrap();
        layer.attention(&gpu).unwrap();

        let outs = |layer: &mut MiniLmLayer, runner: &WaveRunner| {
            for t in [&mut layer.h1, &mut layer.f, &mut layer.y] {
                t.poison(&gpu).unwrap();
            }
            runner.launch(&gpu).unwrap();
            [&layer.h1, &layer.f, &layer.y].map(|t| bits(t, &gpu))
        };
        let want = outs(&mut layer, &post_per_op);
        let got = outs(&mut layer, &post);
        for (name, (g, w)) in ["h1", "f", "y"].iter().zip(got.iter().zip(&want)) {
            assert!(
                g == w,
                "seq {seq}: {name} differs between persistent and per-op"
            );
        }

        // Each GEMM against f64 of its (GPU-produced) inputs.
        let d = 384;
        let attn: Vec<f64> = gpu
            .download(&layer.attn)
            .unwrap()
            .into_iter()
            .map(|x| x.to_f64())
            .collect();
        let x = f64s(&layer.x, &gpu);
        let (h1, f, y) = (
            f64s(&layer.h1, &gpu),
            f64s(&layer.f, &gpu),
            f64s(&layer.y, &gpu),
        );
        let ln = |pre: Vec<f64>, g: &Tensor, b: &Tensor| -> Vec<f64> {
            let (g, b) = (f64s(g, &gpu), f64s(b, &gpu));
            pre.chunks(d)
                .flat_map(|row| layer_norm_row(row, &g, &b, MINILM_EPS as f64))
                .collect()
        };
        let add = |mut v: Vec<f64>, bias: &[f64], res: Option<&[f64]>, n: usize| {
            for (j, x) in v.iter_mut().enumerate() {
                *x += bias[j % n] + res.map_or(0.0, |r| r[j]);
            }
            v
        };
        let h1_ref = ln(
            add(
                gemm(seq, d, d, &attn, &f64s(&layer.w_o, &gpu), true),
                &f64s(&layer.b_o, &gpu),
                Some(&x),
                d,
            ),
            &layer.g1,
            &layer.be1,
        );
        let f_ref: Vec<f64> = add(
            gemm(seq, 1536, d, &h1, &f64s(&layer.w_1, &gpu), true),
            &f64s(&layer.b_1, &gpu),
            None,
            1536,
        )
        .into_iter()
        .map(gelu_erf)
        .collect();
        let y_ref = ln(
            add(
                gemm(seq, d, 1536, &f, &f64s(&layer.w_2, &gpu), true),
                &f64s(&layer.b_2, &gpu),
                Some(&h1),
                d,
            ),
            &layer.g2,
            &layer.be2,
        );
        for (name, g, w) in [("h1", &h1, &h1_ref), ("f", &f, &f_ref), ("y", &y, &y_ref)] {
            assert_close(g, w, 1e-2, &format!("{test}: seq {seq} {name}"));
        }
    }
}

/// f64 of one LSTM cell from the (bf16) inputs it actually read.
fn lstm_cell_ref(
    a: &[f64],
    w: &[f64],
    bias: &[f64],
    c_prev: &[f64],
    m: usize,
    hidden: usize,
) -> (Vec<f64>, Vec<f64>) {
    let k = a.len() / m;
    let gates = gemm(m, 4 * hidden, k, a, w, true);
    let (mut h, mut c) = (vec![0.0; m * hidden], vec![0.0; m * hidden]);
    for r in 0..m {
        for j in 0..hidden {
            let g = |q: usize| gates[r * 4 * hidden + 4 * j + q] + bias[4 * j + q];
            let (i, f, gg, o) = (sigmoid(g(0)), sigmoid(g(1)), g(2).tanh(), sigmoid(g(3)));
            let cv = f * c_prev[r * hidden + j] + i * gg;
            c[r * hidden + j] = cv;
            h[r * hidden + j] = o * cv.tanh();
        }
    }
    (h, c)
}

#[test]
fn lstm_stack_persistent_matches_per_op_and_replays() {
    let test = "lstm_stack_persistent_matches_per_op_and_replays";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    let (layers, steps, batch, hidden) = (3, 4, 3, 64);
    let mut stack = LstmStack::new(&gpu, layers, steps, batch, hidden, &mut |n| {
        uniform(&mut r, n)
    })
    .unwrap();
    let (s, persistent) = prepare(&gpu, &stack.graph, &WAVES_BF16, &Default::default()).unwrap();
    assert_eq!(persistent.launches(), 1, "{:?}", s.programs);
    let per_op = WaveRunner::new(&gpu, &stack.graph, &WAVES_BF16, &s.as_launches()).unwrap();
    assert_eq!(per_op.launches(), layers * steps);

    // The inputs x_t and zero initial states live in `d` too: poison only the cells' outputs.
    let poison = |stack: &mut LstmStack| {
        for t in 0..steps {
            for l in 1..=layers {
                let rows = (l + t) * batch..(l + t + 1) * batch;
                let mut v = stack
                    .d
                    .slice_mut(rows, l * hidden..(l + 1) * hidden)
                    .unwrap();
                v.fill(&gpu, f32::NAN).unwrap();
            }
        }
        for l in 1..=layers {
            let s0 = (l - 1) * (steps + 1);
            let mut v = stack
                .c
                .slice_mut((s0 + 1) * batch..(s0 + steps + 1) * batch, ..)
                .unwrap();
            v.fill(&gpu, f32::NAN).unwrap();
        }
    };
    poison(&mut stack);
    per_op.launch(&gpu).unwrap();
    let (want_d, want_c) = (bits(&stack.d, &gpu), bits(&stack.c, &gpu));
    for run in 0..3 {
        poison(&mut stack);
        match run {
            // Twice in a row (the ready counters reset themselves), then as a CUDA graph.
            0 | 1 => persistent.launch(&gpu).unwrap(),
            _ => {
                let graph = gpu.capture(|g| persistent.launch(g)).unwrap();
                graph.replay().unwrap();
            }
        }
        gpu.synchronize().unwrap();
        assert!(
            bits(&stack.d, &gpu) == want_d,
            "run {run}: h differs from per-op"
        );
        assert!(
            bits(&stack.c, &gpu) == want_c,
            "run {run}: c differs from per-op"
        );
    }

    // Every cell against f64 of the inputs it read.
    let d = f64s(&stack.d, &gpu);
    let c = f64s(&stack.c, &gpu);
    let cols = (layers + 1) * hidden;
    let (mut got_h, mut want_h, mut got_c, mut want_c) = (vec![], vec![], vec![], vec![]);
    for t in 0..steps {
        for l in 1..=layers {
            let u = l + t;
            let a: Vec<f64> = (0..batch)
                .flat_map(|b| {
                    let row = ((u - 1) * batch + b) * cols;
                    d[row + (l - 1) * hidden..row + (l + 1) * hidden].to_vec()
                })
                .collect();
            let slot = |tt: usize| ((l - 1) * (steps + 1) + tt) * batch * hidden;
            let c_prev = &c[slot(t)..slot(t) + batch * hidden];
            let (h, cc) = lstm_cell_ref(
                &a,
                &f64s(&stack.w[l - 1], &gpu),
                &f64s(&stack.bias[l - 1], &gpu),
                c_prev,
                batch,
                hidden,
            );
            want_h.extend(h);
            want_c.extend(cc);
            got_c.extend_from_slice(&c[slot(t + 1)..slot(t + 1) + batch * hidden]);
            for b in 0..batch {
                let row = (u * batch + b) * cols;
                got_h.extend_from_slice(&d[row + l * hidden..row + (l + 1) * hidden]);
            }
        }
    }
    assert_close(&got_h, &want_h, 1e-2, &format!("{test}: h"));
    assert_close(&got_c, &want_c, 1e-3, &format!("{test}: c"));
}

#[test]
fn more_ctas_than_co_resident_is_refused() {
    let test = "more_ctas_than_co_resident_is_refused";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    let w = Gemms::new(&gpu, &[(256, 512, 64); 8], &mut |n| uniform(&mut r, n)).unwrap();
    let real = schedule::exec::vdevice(&gpu, &WAVES_BF16).unwrap();
    // Pretend the SMs hold far more CTAs than they do; perfect co-residency makes every vEU
    // worth using, and 16×64 tiles give 8·16·8 = 1024 tasks.
    let fake = schedule::VDevice {
        sms: real.sms,
        ctas_per_sm: 16,
    };
    let arm = WAVES_BF16
        .arms
        .iter()
        .position(|a| a.tile == T16X64)
        .unwrap();
    let opts = ScheduleOptions {
        max_ctas_per_sm: 16,
        co_resident_speedup: 1.0,
        fallback: false,
        fixed: vec![Some((arm, 1)); 8],
        ..Default::default()
    };
    let s = schedule::schedule(&w.graph, &WAVES_BF16, gpu.props(), fake, &opts).unwrap();
    let Program::Persistent(p) = &s.programs[0] else {
        panic!("expected a persistent program")
    };
    assert!(p.ctas > real.sms * real.ctas_per_sm, "{} CTAs", p.ctas);
    let e = WaveRunner::new(&gpu, &w.graph, &WAVES_BF16, &s).unwrap_err();
    assert!(
        matches!(e, Error::LaunchLimit(ref m) if m.contains("deadlock")),
        "{e}"
    );
}

#[test]
fn misaligned_operands_are_typed_errors() {
    let test = "misaligned_operands_are_typed_errors";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let a = Tensor::zeros(&gpu, 4, 36, DType::Bf16).unwrap();
    let w = Tensor::zeros(&gpu, 64, 36, DType::Bf16).unwrap();
    let b = Tensor::zeros(&gpu, 1, 64, DType::Bf16).unwrap();
    let c = Tensor::zeros(&gpu, 4, 64, DType::Bf16).unwrap();
    // K = 36: rows of 72 bytes, not a multiple of 16.
    let e = fused_gemm::waves::bias_relu(&gpu, "k36", &a, &w, &b, &c).unwrap_err();
    assert!(matches!(e, Error::Misaligned { .. }), "{e}");
    // Wrong bias length.
    let a = Tensor::zeros(&gpu, 4, 32, DType::Bf16).unwrap();
    let w = Tensor::zeros(&gpu, 64, 32, DType::Bf16).unwrap();
    let b = Tensor::zeros(&gpu, 1, 63, DType::Bf16).unwrap();
    let e = fused_gemm::waves::bias_relu(&gpu, "bias", &a, &w, &b, &c).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // LSTM: N not a multiple of 4, and c_prev/c_out leading dimensions differing.
    let bias = Tensor::zeros(&gpu, 1, 62, DType::Bf16).unwrap();
    let w62 = Tensor::zeros(&gpu, 62, 32, DType::Bf16).unwrap();
    let h = Tensor::zeros(&gpu, 4, 16, DType::Bf16).unwrap();
    let st = Tensor::zeros(&gpu, 4, 16, DType::F32).unwrap();
    let e = fused_gemm::waves::lstm_cell(&gpu, "n62", &a, &w62, &bias, None, &st, &h).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let bias = Tensor::zeros(&gpu, 1, 64, DType::Bf16).unwrap();
    let wide = Tensor::zeros(&gpu, 4, 32, DType::F32).unwrap();
    let prev = wide.slice(.., 0..16).unwrap();
    let e =
        fused_gemm::waves::lstm_cell(&gpu, "ld", &a, &w, &bias, Some(&prev), &st, &h).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}
