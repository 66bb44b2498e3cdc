//! GPU tests of device-side control flow: loop programs and gated blocks compute bit for bit
//! what the host-driven execution of the same kernels computes (same arms and split factors →
//! same arithmetic order), and match f64 references of the stored inputs (relative Frobenius
//! error and each element, `assert_close`). Outputs are poisoned (NaN) before every run.
//! Without a GPU every test prints why it is skipped and passes (fails with
//! `FUSED_GEMM_REQUIRE_GPU=1`). The early-exit MiniLM (the third workload) is checked the same
//! way: the device-decided runs equal the host-driven one, and the layers after the exit stay
//! poisoned.

use fused_gemm::control::{GatedMlp, Gating, LstmLoop, LstmStationary};
use fused_gemm::device::types::DType;
use fused_gemm::early_exit::{EarlyExitMiniLm, ExitPolicy, ExitRunner, seq_bucket};
use fused_gemm::host::reference::epilogue::sigmoid;
use fused_gemm::host::reference::gemm;
use fused_gemm::host::schedule::control::{
    ControlRunner, HostDriven, LoopBody, LoopPlan, Trips, plan_loop, plan_loop_tuned, simulate,
};
use fused_gemm::host::schedule::{self, ScheduleOptions, VDevice};
use fused_gemm::host::testing::{assert_close, gpu_or_skip, rng, sanitizing, uniform};
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
    prepare_with(gpu, body, trips, plan)
}

/// [`prepare`] with a given plan (made for `body` or for another body of its signature).
fn prepare_with(
    gpu: &Gpu,
    body: &LoopBody,
    trips: u32,
    plan: LoopPlan,
) -> Result<(LoopPlan, ControlRunner, HostDriven)> {
    let mut k = 0usize;
    simulate(body, &plan, trips.min(4), &mut |n| {
        k += 7;
        k % n
    })
    .map_err(|e| Error::LaunchLimit(format!("plan check: {e}")))?;
    let runner = ControlRunner::new(gpu, &CONTROL_BF16, &plan, body)?;
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
        let what = format!("{test}: T {steps} B {batch} H {hidden}");
        assert_close(&got, &want, 1e-2, &format!("{what}: per-step h"));
        assert_close(&got_c, &want_c, 1e-3, &format!("{what}: per-step c"));
        // bf16 h rounding compounds over the steps.
        assert_close(&got, &full, 3e-2, &format!("{what}: f64 recurrence h"));
    }
}

#[test]
fn stationary_lstm_matches_per_step_launches_and_f64() {
    let test = "stationary_lstm_matches_per_step_launches_and_f64";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    for (steps, batch, hidden) in [
        (6u32, 1usize, 64usize),
        (9, 3, 128),
        (40, 1, 256),
        (5, 4, 512),
    ] {
        let mut lp =
            LstmLoop::new(&gpu, steps, batch, hidden, &mut |n| uniform(&mut r, n)).unwrap();
        let st = LstmStationary::new(&gpu, &lp).unwrap();
        lp.poison(&gpu).unwrap();
        st.launch_per_step(&gpu, steps).unwrap();
        let (want_x, want_c) = (bits(&lp.x, &gpu), bits(&lp.c, &gpu));
        for run in 0..2 {
            // Twice: the counters reset themselves.
            lp.poison(&gpu).unwrap();
            st.launch(&gpu, steps).unwrap();
            gpu.synchronize().unwrap();
            assert!(
                bits(&lp.x, &gpu) == want_x,
                "run {run}: h differs from per-step launches"
            );
            assert!(
                bits(&lp.c, &gpu) == want_c,
                "run {run}: c differs from per-step launches"
            );
        }
        // Per step, f64 from the stored inputs of that step.
        let (x, c) = (f64s(&lp.x, &gpu), f64s(&lp.c, &gpu));
        let (w, bias) = (f64s(&lp.w, &gpu), f64s(&lp.bias, &gpu));
        let (b, h) = (batch, hidden);
        let (mut got, mut want, mut got_c, mut want_c) = (vec![], vec![], vec![], vec![]);
        for t in 0..steps as usize {
            let blk = &x[t * b * 2 * h..(t + 1) * b * 2 * h];
            let (hh, cc) = lstm_step(blk, &w, &bias, &c[t * b * h..(t + 1) * b * h], b, h);
            want.extend(hh);
            want_c.extend(cc);
            let next = &x[(t + 1) * b * 2 * h..(t + 2) * b * 2 * h];
            got.extend((0..b).flat_map(|r| next[r * 2 * h + h..(r + 1) * 2 * h].to_vec()));
            got_c.extend_from_slice(&c[(t + 1) * b * h..(t + 2) * b * h]);
        }
        let what = format!("{test}: T {steps} B {batch} H {hidden}");
        assert_close(&got, &want, 1e-2, &format!("{what}: per-step h"));
        assert_close(&got_c, &want_c, 1e-3, &format!("{what}: per-step c"));
    }
    // Out of its range: typed errors.
    let lp = LstmLoop::new(&gpu, 2, 5, 64, &mut |n| uniform(&mut r, n)).unwrap();
    assert!(matches!(
        LstmStationary::new(&gpu, &lp),
        Err(Error::InvalidArgument { .. })
    ));
    let lp = LstmLoop::new(&gpu, 2, 1, 96, &mut |n| uniform(&mut r, n)).unwrap();
    assert!(matches!(
        LstmStationary::new(&gpu, &lp),
        Err(Error::InvalidArgument { .. })
    ));
    let lp = LstmLoop::new(&gpu, 2, 1, 64, &mut |n| uniform(&mut r, n)).unwrap();
    let st = LstmStationary::new(&gpu, &lp).unwrap();
    assert!(matches!(st.launch(&gpu, 3), Err(Error::TooLarge { .. })));
    assert!(matches!(
        st.launch(&gpu, 0),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn tuned_loop_plan_runs_and_matches_host_driven() {
    let test = "tuned_loop_plan_runs_and_matches_host_driven";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    // Under the sanitizer, where every timed launch is instrumented, a shorter loop.
    let steps = if sanitizing() { 4 } else { 16 };
    let mut lp = LstmLoop::new(&gpu, steps, 1, 256, &mut |n| uniform(&mut r, n)).unwrap();
    let opts = ScheduleOptions::default();
    let (plan, log) = plan_loop_tuned(&gpu, &lp.body, &CONTROL_BF16, &opts, steps, 3).unwrap();
    eprintln!("{test}: candidates (ms for {steps} steps): {log:?}");
    assert_eq!(log[0].0, "model");
    assert!(log.len() > 2, "uniform candidates were timed");
    assert!(log.iter().all(|(_, ms)| ms.is_finite() && *ms > 0.0));
    let v = plan.variants[0];
    eprintln!(
        "{test}: chose tile {}×{}, {} splits",
        v.tile.bm, v.tile.bn, v.splits
    );
    let (_, runner, host) = prepare_with(&gpu, &lp.body, steps, plan).unwrap();
    lp.poison(&gpu).unwrap();
    host.run(&gpu, steps).unwrap();
    let want = (bits(&lp.x, &gpu), bits(&lp.c, &gpu));
    lp.poison(&gpu).unwrap();
    runner.launch(&gpu, Trips::Fixed(steps)).unwrap();
    gpu.synchronize().unwrap();
    assert!(
        (bits(&lp.x, &gpu), bits(&lp.c, &gpu)) == want,
        "tuned plan differs from host-driven"
    );
    let e = plan_loop_tuned(&gpu, &lp.body, &CONTROL_BF16, &opts, 0, 3).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
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
    gated_case_with(gpu, test, d, ffn, gating, None).0
}

/// Runs 16 gated blocks on fresh buffers, with `plan` when given (a plan-cache hit made for
/// other buffers and gates) or a new plan; returns which blocks ran and the plan.
fn gated_case_with(
    gpu: &Gpu,
    test: &str,
    d: usize,
    ffn: usize,
    gating: Gating,
    plan: Option<LoopPlan>,
) -> (Vec<bool>, LoopPlan) {
    let mut r = rng(&format!("{test} {d} {gating:?}"));
    let mut m = GatedMlp::new(gpu, 16, 1, d, ffn, gating.clone(), &mut |n| {
        uniform(&mut r, n)
    })
    .unwrap();
    let (plan, runner, host) = match plan {
        Some(p) => prepare_with(gpu, &m.body, 1, p).unwrap(),
        None => prepare(gpu, &m.body, 1, &Default::default()).unwrap(),
    };
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
        if let Gating::Threshold(t) = gating
            && (gate - t as f64).abs() > 1e-3
        {
            assert_eq!(ran[i], gate > t as f64, "block {i}: gate {gate}");
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
    // Nothing to compare when every block was skipped (their bitwise checks are above).
    assert_close(
        &got,
        &want,
        1e-2,
        &format!(
            "{test}: d {d} {gating:?}: {} of 16 ran, {} CTAs",
            ran.iter().filter(|r| **r).count(),
            plan.ctas
        ),
    );
    (ran, plan)
}

#[test]
fn cached_plan_serves_new_buffers_and_random_gates() {
    let test = "cached_plan_serves_new_buffers_and_random_gates";
    let Some(gpu) = gpu_or_skip(test) else { return };
    // The plan cache keys plans by shape: a hit must run on the caller's buffers and gates,
    // not on those of the body it was planned for.
    let (_, plan) = gated_case_with(&gpu, test, 256, 512, Gating::fraction(16, 0.0), None);
    let mut r = rng(test);
    for _ in 0..3 {
        let skip: Vec<bool> = uniform(&mut r, 16).iter().map(|v| *v > 0.0).collect();
        let want: Vec<bool> = skip.iter().map(|s| !s).collect();
        let (ran, _) = gated_case_with(
            &gpu,
            test,
            256,
            512,
            Gating::Forced(skip),
            Some(plan.clone()),
        );
        assert_eq!(ran, want);
    }
    // A body of another shape is refused.
    let mut r2 = rng("other shape");
    let other = GatedMlp::new(&gpu, 16, 1, 512, 512, Gating::Threshold(0.0), &mut |n| {
        uniform(&mut r2, n)
    })
    .unwrap();
    let e = ControlRunner::new(&gpu, &CONTROL_BF16, &plan, &other.body).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
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
    let e = ControlRunner::new(&gpu, &CONTROL_BF16, &plan, &big.body).unwrap_err();
    assert!(
        matches!(e, Error::LaunchLimit(ref m) if m.contains("deadlock")),
        "{e}"
    );
}

/// One early-exit case: host-driven and device-decided runs (stream and CUDA graph) of the
/// same runner give the same exit layer, logits and layer outputs bit for bit; layers after
/// the exit are never written on the device (they stay poisoned); the exit head's logits match
/// an f64 reference from the stored layer output.
fn early_exit_case(
    gpu: &Gpu,
    test: &str,
    model: &EarlyExitMiniLm,
    lengths: &[u32],
    policy: ExitPolicy,
) -> usize {
    let batch = lengths.len();
    let t = seq_bucket(*lengths.iter().max().unwrap() as usize);
    let plan = ExitRunner::plan(gpu, model, batch * t).unwrap();
    let mut run = ExitRunner::new(gpu, model, &plan, batch, t, &policy).unwrap();
    let mut r = rng(&format!("{test} {lengths:?} {policy:?}"));
    run.x
        .upload_f32(gpu, &uniform(&mut r, batch * t * 384))
        .unwrap();
    run.set_lengths(gpu, lengths).unwrap();
    run.poison(gpu).unwrap();
    let st = run.run_host_driven(gpu).unwrap();
    let exit = run.exit_layer(gpu).unwrap();
    assert_eq!(st.layers_run, exit + 1);
    assert_eq!(st.syncs, exit + 1);
    if let ExitPolicy::AtLayer(e) = policy {
        assert_eq!(exit, e.min(model.layers.len() - 1));
    }
    let want_logits = bits(&run.logits, gpu);
    let want_y: Vec<Vec<u32>> = run.acts.iter().map(|a| bits(&a.y, gpu)).collect();
    for mode in 0..2 {
        run.poison(gpu).unwrap();
        if mode == 0 {
            run.run_device(gpu).unwrap();
        } else {
            let g = run.capture_device(gpu).unwrap();
            g.replay().unwrap();
        }
        gpu.synchronize().unwrap();
        assert_eq!(
            run.exit_layer(gpu).unwrap(),
            exit,
            "mode {mode}: exit layer"
        );
        assert!(
            bits(&run.logits, gpu) == want_logits,
            "mode {mode}: logits differ"
        );
        for (i, a) in run.acts.iter().enumerate() {
            let y = bits(&a.y, gpu);
            if i <= exit {
                assert!(y == want_y[i], "mode {mode}: layer {i} output differs");
            } else {
                assert!(
                    y.iter().all(|v| f32::from_bits(*v).is_nan()),
                    "mode {mode}: layer {i} after the exit at {exit} was written"
                );
            }
        }
    }
    // f64 logits of the exiting head from the stored layer output (first token per sequence).
    let y = f64s(&run.acts[exit].y, gpu);
    let (w, b) = (
        f64s(&model.layers[exit].head_w, gpu),
        f64s(&model.layers[exit].head_b, gpu),
    );
    let labels = model.labels;
    let got = f64s(&run.logits, gpu);
    let mut want = Vec::new();
    for s in 0..batch {
        let row = &y[s * t * 384..s * t * 384 + 384];
        want.extend(
            gemm(1, labels, 384, row, &w, true)
                .iter()
                .zip(&b)
                .map(|(v, b)| v + b),
        );
    }
    assert_close(
        &got,
        &want,
        1e-4,
        &format!(
            "{test}: lengths {lengths:?} (bucket {t}) {policy:?}: exit after layer {exit}, \
             {} launches and {} syncs host-driven, logits",
            st.launches, st.syncs
        ),
    );
    exit
}

#[test]
fn early_exit_matches_host_driven_and_skips_on_the_device() {
    let test = "early_exit_matches_host_driven_and_skips_on_the_device";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    let model = EarlyExitMiniLm::new(&gpu, 6, 4, &mut |n| uniform(&mut r, n)).unwrap();
    for lengths in [vec![1u32], vec![17], vec![100, 3, 64]] {
        for e in [0, 2, 5] {
            early_exit_case(&gpu, test, &model, &lengths, ExitPolicy::AtLayer(e));
        }
    }
    // Data-dependent: random heads of 4 classes, confidence thresholds from certain to never.
    let mut exits = Vec::new();
    for th in [0.0f32, 0.3, 0.5, 0.9, 1.1] {
        exits.push(early_exit_case(
            &gpu,
            test,
            &model,
            &[33, 7],
            ExitPolicy::Confidence(th),
        ));
    }
    assert_eq!(exits[0], 0, "threshold 0 exits at the first head");
    assert_eq!(
        *exits.last().unwrap(),
        5,
        "an unreachable threshold runs every layer"
    );
}

#[test]
fn early_exit_bad_inputs_are_typed_errors() {
    let test = "early_exit_bad_inputs_are_typed_errors";
    let Some(gpu) = gpu_or_skip(test) else { return };
    let mut r = rng(test);
    let model = EarlyExitMiniLm::new(&gpu, 2, 3, &mut |n| uniform(&mut r, n)).unwrap();
    assert!(EarlyExitMiniLm::new(&gpu, 0, 3, &mut |n| uniform(&mut r, n)).is_err());
    assert!(EarlyExitMiniLm::new(&gpu, 2, 33, &mut |n| uniform(&mut r, n)).is_err());
    let plan = ExitRunner::plan(&gpu, &model, 32).unwrap();
    let p = ExitPolicy::AtLayer(0);
    // A plan for another row count, zero sizes, too many logits.
    for (b, t) in [(1usize, 16usize), (0, 32), (2, 0)] {
        let e = ExitRunner::new(&gpu, &model, &plan, b, t, &p).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    }
    let big = ExitRunner::plan(&gpu, &model, 400 * 16).unwrap();
    let e = ExitRunner::new(&gpu, &model, &big, 400, 16, &p).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let mut run = ExitRunner::new(&gpu, &model, &plan, 2, 16, &p).unwrap();
    assert!(run.set_lengths(&gpu, &[17, 1]).is_err());
    assert!(run.set_lengths(&gpu, &[1]).is_err());
    assert!(run.exit_layer(&gpu).is_err(), "no run yet");
}
