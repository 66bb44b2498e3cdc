//! GPU tests of device-side control flow (issue 8): loop programs and gated blocks compute bit
//! for bit what the host-driven execution of the same kernels computes (same arms and split
//! factors → same arithmetic order), and match f64 references of the stored inputs. Outputs
//! are poisoned (NaN) before every run. Without a GPU every test prints why it is skipped and
//! passes.

use fused_gemm::control::{GatedMlp, Gating, LstmLoop};
use fused_gemm::device::types::DType;
use fused_gemm::host::reference::epilogue::sigmoid;
use fused_gemm::host::reference::{gemm, rel_frobenius_error};
use fused_gemm::host::schedule::control::{
    ControlRunner, HostDriven, LoopBody, LoopPlan, Trips, plan_loop, simulate,
};
use fused_gemm::host::schedule::{self, ScheduleOptions, VDevice};
use fused_gemm::host::testing::{gpu_or_skip, rng, uniform};
use fused_gemm::host::{Error, Gpu, Result, Tensor};
use fused_gemm::kernels::control::{CONTROL_BF16, T16X64};

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

/// Plans `body` with the driver's occupancy, replays the plan on the CPU (deadlock and
/// ordering check), and prepares both executions.
fn prepare(
    gpu: &Gpu,
    body: &LoopBody,
    trips: u32,
    opts: &ScheduleOptions,
) -> Result<(LoopPlan, ControlRunner, HostDriven)> {
    let vdev = schedule::exec::vdevice(gpu, &CONTROL_BF16)?;
    let plan = plan_loop(body, &CONTROL_BF16, gpu.props(), vdev, opts)?;
    let mut k = 0usize;
    simulate(body, &plan, trips.min(4), &mut |n| {
        k += 7;
        k % n
    })
    .map_err(|e| Error::LaunchLimit(format!("plan check: {e}")))?;
    let runner = ControlRunner::new(gpu, &CONTROL_BF16, &plan)?;
    let host = HostDriven::new(gpu, &CONTROL_BF16, body, &plan)?;
    Ok((plan, runner, host))
}

/// f64 LSTM step from the inputs it read: (h, c).
fn lstm_step(
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
fn lstm_loop_matches_host_driven_and_f64() {
    let test = "lstm_loop_matches_host_driven_and_f64";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    for (steps, batch, hidden) in [(5u32, 1usize, 64usize), (7, 3, 128), (4, 17, 256)] {
        let mut lp =
            LstmLoop::new(&gpu, steps, batch, hidden, &mut |n| uniform(&mut r, n)).unwrap();
        let (plan, runner, host) = prepare(&gpu, &lp.body, steps, &Default::default()).unwrap();
        let v = plan.variants[0];
        eprintln!(
            "{test}: T {steps} B {batch} H {hidden}: {} CTAs, {} tasks/step, tile {}×{}, {} splits",
            plan.ctas,
            plan.tasks_per_iteration(),
            v.tile.bm,
            v.tile.bn,
            v.splits
        );
        lp.poison(&gpu).unwrap();
        let st = host.run(&gpu, steps).unwrap();
        assert_eq!(st.launches, steps as usize);
        let (want_x, want_c) = (bits(&lp.x, &gpu), bits(&lp.c, &gpu));
        for run in 0..3 {
            lp.poison(&gpu).unwrap();
            match run {
                // Twice (the counters reset themselves), then as a CUDA graph.
                0 | 1 => runner.launch(&gpu, Trips::Fixed(steps)).unwrap(),
                _ => {
                    let g = gpu
                        .capture(|g| runner.launch(g, Trips::Fixed(steps)))
                        .unwrap();
                    g.replay().unwrap();
                }
            }
            gpu.synchronize().unwrap();
            assert!(
                bits(&lp.x, &gpu) == want_x,
                "run {run}: h differs from host-driven"
            );
            assert!(
                bits(&lp.c, &gpu) == want_c,
                "run {run}: c differs from host-driven"
            );
        }

        // Each step against f64 of the inputs it read, and the whole recurrence in f64.
        let (x, c) = (f64s(&lp.x, &gpu), f64s(&lp.c, &gpu));
        let (w, bias) = (f64s(&lp.w, &gpu), f64s(&lp.bias, &gpu));
        let (b, h) = (batch, hidden);
        let blk = |t: usize| &x[t * b * 2 * h..(t + 1) * b * 2 * h];
        let slot = |t: usize| &c[t * b * h..(t + 1) * b * h];
        let right = |t: usize| -> Vec<f64> {
            (0..b)
                .flat_map(|r| blk(t)[r * 2 * h + h..(r + 1) * 2 * h].to_vec())
                .collect()
        };
        let (mut got, mut want, mut got_c, mut want_c) = (vec![], vec![], vec![], vec![]);
        let mut h_full = vec![0.0; b * h];
        let mut c_full = vec![0.0; b * h];
        let mut full = vec![];
        for t in 0..steps as usize {
            let (hh, cc) = lstm_step(blk(t), &w, &bias, slot(t), b, h);
            want.extend(hh);
            want_c.extend(cc);
            got.extend(right(t + 1));
            got_c.extend_from_slice(slot(t + 1));
            // The f64 recurrence from x_t alone.
            let a: Vec<f64> = (0..b)
                .flat_map(|r| {
                    let mut row = blk(t)[r * 2 * h..r * 2 * h + h].to_vec();
                    row.extend_from_slice(&h_full[r * h..(r + 1) * h]);
                    row
                })
                .collect();
            let (hh, cc) = lstm_step(&a, &w, &bias, &c_full, b, h);
            h_full = hh;
            c_full = cc;
            full.extend_from_slice(&h_full);
        }
        let (eh, ec, ef) = (
            rel_frobenius_error(&got, &want),
            rel_frobenius_error(&got_c, &want_c),
            rel_frobenius_error(&got, &full),
        );
        eprintln!(
            "{test}: T {steps} B {batch} H {hidden}: per-step h {eh:.2e}, c {ec:.2e}; \
             f64 recurrence h {ef:.2e}"
        );
        assert!(eh < 1e-2 && ec < 1e-3, "h {eh}, c {ec}");
        // bf16 h rounding compounds over the steps.
        assert!(ef < 3e-2, "recurrence {ef}");
    }
}

#[test]
fn trip_count_read_from_device_memory() {
    let test = "trip_count_read_from_device_memory";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    let (max, batch, hidden) = (6u32, 2usize, 64usize);
    let mut lp = LstmLoop::new(&gpu, max, batch, hidden, &mut |n| uniform(&mut r, n)).unwrap();
    let (_, runner, host) = prepare(&gpu, &lp.body, max, &Default::default()).unwrap();
    let (b, h) = (batch, hidden);
    for device_trips in [3u32, 0, 1000] {
        let ran = device_trips.min(max) as usize;
        let want = if ran > 0 {
            lp.poison(&gpu).unwrap();
            host.run(&gpu, ran as u32).unwrap();
            Some(bits(&lp.x, &gpu))
        } else {
            None
        };
        let t = gpu.upload(&[device_trips]).unwrap();
        let ptr = {
            use cudarc::driver::DevicePtr;
            t.device_ptr(gpu.stream()).0
        };
        lp.poison(&gpu).unwrap();
        runner.launch(&gpu, Trips::Device(ptr)).unwrap();
        gpu.synchronize().unwrap();
        let got = bits(&lp.x, &gpu);
        let x = lp.x.download_f32(&gpu).unwrap();
        if let Some(w) = &want {
            assert!(
                got == *w,
                "device trips {device_trips}: differs from host-driven"
            );
        }
        // Steps past the trip count were not run: their outputs are still poisoned.
        for tt in ran..max as usize {
            let row = (tt + 1) * b * 2 * h;
            assert!(
                x[row + h..row + 2 * h].iter().all(|v| v.is_nan()),
                "device trips {device_trips}: step {tt} ran"
            );
        }
        for tt in 0..ran {
            let row = (tt + 1) * b * 2 * h;
            assert!(x[row + h..row + 2 * h].iter().all(|v| v.is_finite()));
        }
        eprintln!("{test}: device trip count {device_trips}: {ran} steps ran");
    }
}

fn gated_case(gpu: &Gpu, test: &str, d: usize, ffn: usize, gating: Gating) -> Vec<bool> {
    let mut r = rng(&format!("{test} {d} {gating:?}"));
    let mut m = GatedMlp::new(gpu, 16, 1, d, ffn, gating.clone(), &mut |n| {
        uniform(&mut r, n)
    })
    .unwrap();
    let (plan, runner, host) = prepare(gpu, &m.body, 1, &Default::default()).unwrap();
    m.poison(gpu).unwrap();
    let st = host.run(gpu, 1).unwrap();
    let (want_x, want_p) = (bits(&m.xs, gpu), bits(&m.preds, gpu));
    let want_ran = m.ran(gpu).unwrap();
    m.poison(gpu).unwrap();
    runner.launch(gpu, Trips::Fixed(1)).unwrap();
    gpu.synchronize().unwrap();
    assert!(
        bits(&m.preds, gpu) == want_p,
        "{gating:?}: predicates differ"
    );
    assert!(
        bits(&m.xs, gpu) == want_x,
        "{gating:?}: block outputs differ"
    );
    let ran = m.ran(gpu).unwrap();
    assert_eq!(ran, want_ran);
    assert_eq!(st.skipped, 2 * ran.iter().filter(|r| !**r).count());
    assert_eq!(st.syncs, 16);
    if let Gating::Forced(skip) = &gating {
        let want: Vec<bool> = skip.iter().map(|s| !s).collect();
        assert_eq!(ran, want, "forced gates");
    }
    // f64 reference per block from its stored input.
    let xs = f64s(&m.xs, gpu);
    let up = f64s(&m.up, gpu);
    let gv = m.gate_values(gpu).unwrap();
    let g = f64s(&m.g, gpu);
    let (mut got, mut want) = (vec![], vec![]);
    for i in 0..16 {
        let x = &xs[i * d..(i + 1) * d];
        let next = &xs[(i + 1) * d..(i + 2) * d];
        let gate: f64 = x
            .iter()
            .zip(&g[i * d..(i + 1) * d])
            .map(|(a, b)| a * b)
            .sum();
        assert!(
            (gate - gv[i] as f64).abs() <= 1e-3 * (1.0 + gate.abs()),
            "block {i}: gate {} vs f64 {gate}",
            gv[i]
        );
        if let Gating::Threshold(t) = gating {
            if (gate - t as f64).abs() > 1e-3 {
                assert_eq!(ran[i], gate > t as f64, "block {i}: gate {gate}");
            }
        }
        if !ran[i] {
            assert!(
                next.iter().zip(x).all(|(a, b)| a.to_bits() == b.to_bits()),
                "block {i} skipped but x_{{i+1}} ≠ x_i"
            );
            continue;
        }
        let mut u = gemm(1, ffn, d, x, &f64s(&m.w1[i], gpu), true);
        let b1 = f64s(&m.b1[i], gpu);
        for (j, v) in u.iter_mut().enumerate() {
            *v = (*v + b1[j]).max(0.0);
        }
        let u_got = &up[i * ffn..(i + 1) * ffn];
        got.extend_from_slice(u_got);
        want.extend(u);
        let mut y = gemm(1, d, ffn, u_got, &f64s(&m.w2[i], gpu), true);
        let b2 = f64s(&m.b2[i], gpu);
        for (j, v) in y.iter_mut().enumerate() {
            *v += b2[j] + x[j];
        }
        got.extend_from_slice(next);
        want.extend(y);
    }
    let err = if got.is_empty() {
        0.0
    } else {
        rel_frobenius_error(&got, &want)
    };
    eprintln!(
        "{test}: d {d} {gating:?}: {} of 16 ran, {} CTAs, rel error {err:.2e}",
        ran.iter().filter(|r| **r).count(),
        plan.ctas
    );
    assert!(err < 1e-2, "relative error {err}");
    ran
}

#[test]
fn gated_blocks_match_host_driven_at_every_skip_fraction() {
    let test = "gated_blocks_match_host_driven_at_every_skip_fraction";
    let Some(gpu) = gpu_or_skip(test) else { return };
    for f in [0.0, 0.5, 1.0] {
        let ran = gated_case(&gpu, test, 256, 512, Gating::fraction(16, f));
        assert_eq!(
            ran.iter().filter(|r| !**r).count(),
            (16.0 * f) as usize,
            "skip fraction {f}"
        );
    }
    gated_case(&gpu, test, 1024, 1024, Gating::fraction(16, 0.25));
}

#[test]
fn data_dependent_gates_match_host_driven() {
    let test = "data_dependent_gates_match_host_driven";
    let Some(gpu) = gpu_or_skip(test) else { return };
    // Threshold 0 on random gate vectors: about half the blocks run, decided on the device.
    for d in [256, 512] {
        gated_case(&gpu, test, d, 2 * d, Gating::Threshold(0.0));
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let test = "bad_inputs_are_typed_errors";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    let lp = LstmLoop::new(&gpu, 4, 2, 64, &mut |n| uniform(&mut r, n)).unwrap();
    let (_, runner, host) = prepare(&gpu, &lp.body, 4, &Default::default()).unwrap();
    let e = runner.launch(&gpu, Trips::Fixed(0)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = runner.launch(&gpu, Trips::Fixed(5)).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
    let e = runner.launch(&gpu, Trips::Device(0)).unwrap_err();
    assert!(matches!(e, Error::NullPointer { .. }), "{e}");
    let e = host.run(&gpu, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = LstmLoop::new(&gpu, 0, 2, 64, &mut |n| uniform(&mut r, n)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");

    // Mismatched shapes: a gate vector of the wrong length, a forced gating of the wrong length.
    let x = Tensor::zeros(&gpu, 1, 256, DType::Bf16).unwrap();
    let g = Tensor::zeros(&gpu, 1, 255, DType::Bf16).unwrap();
    let p = Tensor::zeros(&gpu, 1, 2, DType::F32).unwrap();
    let e = fused_gemm::control::gate(&gpu, "g", &x, &g, &p, 0.0).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = GatedMlp::new(
        &gpu,
        4,
        1,
        256,
        256,
        Gating::Forced(vec![true; 3]),
        &mut |n| uniform(&mut r, n),
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");

    // More CTAs than co-resident: pretend each SM holds 16, with 16×64 tiles on a gate GEMM
    // of 256×4096 (1024 tiles; the LSTM cell cannot split K).
    let big = LstmLoop::new(&gpu, 2, 256, 1024, &mut |n| uniform(&mut r, n)).unwrap();
    let real = schedule::exec::vdevice(&gpu, &CONTROL_BF16).unwrap();
    let fake = VDevice {
        sms: real.sms,
        ctas_per_sm: 16,
    };
    let arm = CONTROL_BF16
        .arms
        .iter()
        .position(|a| a.tile == T16X64 && a.kind == "lstm")
        .unwrap();
    let opts = ScheduleOptions {
        max_ctas_per_sm: 16,
        co_resident_speedup: 1.0,
        fixed: vec![Some((arm, 1))],
        ..Default::default()
    };
    let plan = plan_loop(&big.body, &CONTROL_BF16, gpu.props(), fake, &opts).unwrap();
    let slots = real.sms as u64 * real.ctas_per_sm as u64;
    if (plan.ctas as u64) <= slots {
        eprintln!(
            "{test}: {} CTAs fit the {slots} slots: the co-residency refusal is not exercised",
            plan.ctas
        );
        return;
    }
    let e = ControlRunner::new(&gpu, &CONTROL_BF16, &plan).unwrap_err();
    assert!(
        matches!(e, Error::LaunchLimit(ref m) if m.contains("deadlock")),
        "{e}"
    );
}
