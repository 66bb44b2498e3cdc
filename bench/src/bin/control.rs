//! Device-side control flow (Grinder/Cocktailer) against host-driven control flow
//! (the same kernels launched one by one per step and block, each predicate read back with a
//! sync before deciding), in one process:
//!
//! - an LSTM cell (hidden 256) run for T = 100 and 1,000 steps at batch 1 and 64: one
//!   persistent launch with the trip count as a parameter (`device-loop`) or read from device
//!   memory (`device-loop[trips in memory]`), vs one launch per step (`host-loop`); at batch 1
//!   also the weight-stationary kernel (`fused_gemm::control::LstmStationary`), all steps in
//!   one launch vs one launch of it per step (`... (weight-stationary)` rows);
//! - 16 gated residual MLP blocks (gate, GEMM + bias + ReLU, GEMM + bias + residual) at
//!   batch 1, width 256 / 512 / 1024, with the skipped fraction swept 0 … 1 (`device-branch`
//!   vs `host-branch`, 16 predicate reads);
//! - MiniLM-L6 shapes with an early-exit head after each layer at batch 1, sequence lengths 12,
//!   100 and 300 (buckets 16, 128, 512), exits forced after layer 1, 2, 3, 4 or 6: every launch
//!   enqueued at once with the exit decided on the device (`device-branch`, and replayed as one
//!   CUDA graph, `device-branch[graph]`) vs a sync after each head (`host-branch`).
//!
//! Each case's plan comes from a plan cache keyed by (workload, trip-count bucket, sequence
//! bucket, batch bucket): the first call's planning time (the loops' plans are chosen by timing
//! candidates, `plan_loop_tuned`) and the median cached lookup are reported. Latency is the
//! median of `--reps` runs timed with CUDA events after warm-up.
//! Writes `control.json` and `control.md` into `--out/<card>` (the latest run per card).
//!
//! ```text
//! cargo run --release -p fused-gemm-bench --bin control -- --out bench/results
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use fused_gemm::control::{GatedMlp, Gating, LstmLoop, LstmStationary};
use fused_gemm::early_exit::{EarlyExitMiniLm, ExitPlan, ExitPolicy, ExitRunner, seq_bucket};
use fused_gemm::host::schedule::control::{
    ControlRunner, HostDriven, LoopBody, LoopPlan, Trips, plan_loop, plan_loop_tuned,
    uniform_variants,
};
use fused_gemm::host::schedule::plan_cache::{PlanCache, PlanKey, bucket};
use fused_gemm::host::schedule::{self, ScheduleOptions};
use fused_gemm::host::testing::{rng, uniform};
use fused_gemm::host::{Gpu, Result, Tensor};
use fused_gemm::kernels::control::CONTROL_BF16;
use serde::Serialize;

const COMMAND: &str = "cargo run --release -p fused-gemm-bench --bin control";

/// Device-side loops and branches vs host-driven control flow.
#[derive(Parser, Debug)]
#[command(name = "control")]
struct Args {
    /// Results folder (JSON and markdown).
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Timed runs per mode (median reported).
    #[arg(long, default_value_t = 30)]
    reps: usize,
    /// Untimed warm-up runs per mode.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Only T = 100, width 256 and skip fractions 0, 0.5, 1.
    #[arg(long)]
    quick: bool,
    /// Also time every tile shape × split factor of the LSTM (b1 and b64, T = 1000) and of the
    /// gated blocks (d256, none skipped), device and host-driven, to check the planner's choice.
    #[arg(long)]
    sweep: bool,
}

#[derive(Clone, Debug, Serialize)]
struct Row {
    workload: String,
    mode: String,
    median_ms: f64,
    runs: usize,
    launches: usize,
    host_syncs: usize,
    /// Blocks skipped (gated workload).
    skipped: Option<usize>,
    /// Plan-cache miss: planning time of the first call, ms.
    planning_ms: Option<f64>,
    /// Plan-cache hit: median lookup, µs.
    lookup_us: Option<f64>,
    /// Largest |device − host-driven| over the outputs (0 = identical).
    max_abs_diff_vs_host: Option<f64>,
    /// Persistent CTAs of the device program.
    ctas: Option<u32>,
}

#[derive(Serialize)]
struct Report {
    command: String,
    date: String,
    device: String,
    rows: Vec<Row>,
}

fn max_abs_diff(x: &[f32], y: &[f32]) -> f64 {
    x.iter()
        .zip(y)
        .map(|(a, b)| {
            if a.to_bits() == b.to_bits() {
                0.0
            } else if a.is_nan() || b.is_nan() {
                f64::INFINITY
            } else {
                (a - b).abs() as f64
            }
        })
        .fold(0.0, f64::max)
}

fn outputs(gpu: &Gpu, ts: &[&Tensor]) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    for t in ts {
        v.extend(t.download_f32(gpu)?);
    }
    Ok(v)
}

/// Plans `body` through the cache; returns the plan, the first call's planning time (ms) if it
/// missed, and the median of 1,000 cached lookups of a neighbouring size in the same bucket
/// (µs).
fn cached_plan(
    cache: &mut PlanCache<LoopPlan>,
    gpu: &Gpu,
    key: PlanKey,
    neighbour: PlanKey,
    body: &LoopBody,
) -> Result<(std::sync::Arc<LoopPlan>, Option<f64>, f64)> {
    let (plan, first) = cache.get_or_plan(&key, |_| {
        // Chosen by timing the candidates for a few iterations (part of the planning time).
        let (plan, log) = plan_loop_tuned(
            gpu,
            body,
            &CONTROL_BF16,
            &ScheduleOptions::default(),
            body.max_trips.min(64),
            5,
        )?;
        let log: Vec<String> = log.iter().map(|(l, ms)| format!("{l} {ms:.3}")).collect();
        eprintln!("plan {}: tuned over [{}] ms", key.workload, log.join(", "));
        Ok::<_, fused_gemm::host::Error>(plan)
    })?;
    let mut lookups = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        let (p, l) = cache.get_or_plan(&neighbour, |_| -> Result<LoopPlan> {
            unreachable!("a neighbouring size shares the bucket")
        })?;
        lookups.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(l.hit && std::sync::Arc::ptr_eq(&p, &plan));
    }
    lookups.sort_by(f64::total_cmp);
    let planning = (!first.hit).then_some(first.planning.as_secs_f64() * 1e3);
    Ok((plan, planning, lookups[lookups.len() / 2]))
}

fn lstm_rows(
    gpu: &Gpu,
    args: &Args,
    cache: &mut PlanCache<LoopPlan>,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let mut r = rng("control-bench-lstm");
    let steps: &[u32] = if args.quick { &[100] } else { &[100, 1000] };
    for &t in steps {
        for batch in [1usize, 64] {
            let name = format!("LSTM cell h256 b{batch} T{t}");
            // Buffers for the whole trip-count bucket: every T in it reuses the plan.
            let max = bucket(t);
            let mut lp = LstmLoop::new(gpu, max, batch, 256, &mut |n| uniform(&mut r, n))?;
            let key = PlanKey::new("lstm-h256", t, 1, batch as u32);
            let near = PlanKey::new("lstm-h256", t - 1, 1, batch as u32);
            let (plan, planning, lookup) = cached_plan(cache, gpu, key, near, &lp.body)?;
            let runner = ControlRunner::new(gpu, &CONTROL_BF16, &plan, &lp.body)?;
            let host = HostDriven::new(gpu, &CONTROL_BF16, &lp.body, &plan)?;
            let trips_buf = gpu.upload(&[t])?;
            let trips_ptr = {
                use cudarc::driver::DevicePtr;
                trips_buf.device_ptr(gpu.stream()).0
            };
            eprintln!(
                "{name}: {} CTAs, {} tasks/step, tile {}x{} s{}",
                plan.ctas,
                plan.tasks_per_iteration(),
                plan.variants[0].tile.bm,
                plan.variants[0].tile.bn,
                plan.variants[0].splits
            );
            lp.poison(gpu)?;
            let st = host.run(gpu, t)?;
            let want = outputs(gpu, &[&lp.x, &lp.c])?;
            lp.poison(gpu)?;
            runner.launch(gpu, Trips::Fixed(t))?;
            let diff = max_abs_diff(&want, &outputs(gpu, &[&lp.x, &lp.c])?);
            lp.poison(gpu)?;
            runner.launch(gpu, Trips::Device(trips_ptr))?;
            let diff_dev = max_abs_diff(&want, &outputs(gpu, &[&lp.x, &lp.c])?);

            let reps = args.reps;
            let t_dev = gpu.time_ms(args.warmup, reps, |g| runner.launch(g, Trips::Fixed(t)))?;
            let t_mem = gpu.time_ms(args.warmup, reps, |g| {
                runner.launch(g, Trips::Device(trips_ptr))
            })?;
            let t_host = gpu.time_ms(args.warmup, reps, |g| host.run(g, t).map(|_| ()))?;
            let base = Row {
                workload: name.clone(),
                mode: String::new(),
                median_ms: 0.0,
                runs: reps,
                launches: 1,
                host_syncs: 0,
                skipped: None,
                planning_ms: None,
                lookup_us: None,
                max_abs_diff_vs_host: None,
                ctas: Some(plan.ctas),
            };
            rows.push(Row {
                mode: "device-loop".into(),
                median_ms: t_dev as f64,
                planning_ms: planning,
                lookup_us: Some(lookup),
                max_abs_diff_vs_host: Some(diff),
                ..base.clone()
            });
            rows.push(Row {
                mode: "device-loop[trips in memory]".into(),
                median_ms: t_mem as f64,
                max_abs_diff_vs_host: Some(diff_dev),
                ..base.clone()
            });
            rows.push(Row {
                mode: "host-loop".into(),
                median_ms: t_host as f64,
                launches: st.launches,
                host_syncs: 1,
                ctas: None,
                ..base.clone()
            });
            if batch <= 4 {
                // The weight-stationary kernel on the same buffers: one launch for all steps
                // vs one launch per step of the same kernel.
                let ws = LstmStationary::new(gpu, &lp)?;
                lp.poison(gpu)?;
                ws.launch_per_step(gpu, t)?;
                let want = outputs(gpu, &[&lp.x, &lp.c])?;
                lp.poison(gpu)?;
                ws.launch(gpu, t)?;
                let diff = max_abs_diff(&want, &outputs(gpu, &[&lp.x, &lp.c])?);
                let t_dev = gpu.time_ms(args.warmup, reps, |g| ws.launch(g, t))?;
                let t_host = gpu.time_ms(args.warmup, reps, |g| ws.launch_per_step(g, t))?;
                let workload = format!("{name} (weight-stationary)");
                eprintln!("{workload}: device {t_dev:.4} ms, per-step launches {t_host:.4} ms");
                rows.push(Row {
                    workload: workload.clone(),
                    mode: "device-loop".into(),
                    median_ms: t_dev as f64,
                    max_abs_diff_vs_host: Some(diff),
                    ctas: Some(256 / 8),
                    ..base.clone()
                });
                rows.push(Row {
                    workload,
                    mode: "host-loop".into(),
                    median_ms: t_host as f64,
                    launches: t as usize,
                    host_syncs: 1,
                    ctas: None,
                    ..base
                });
            }
        }
    }
    Ok(())
}

fn gated_rows(
    gpu: &Gpu,
    args: &Args,
    cache: &mut PlanCache<LoopPlan>,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let mut r = rng("control-bench-gated");
    let widths: &[usize] = if args.quick {
        &[256]
    } else {
        &[256, 512, 1024]
    };
    let fractions: &[f64] = if args.quick {
        &[0.0, 0.5, 1.0]
    } else {
        &[0.0, 0.25, 0.5, 0.75, 1.0]
    };
    for &d in widths {
        for &f in fractions {
            let name = format!("16 gated MLP blocks d{d} b1 skip{:.0}%", f * 100.0);
            let mut m = GatedMlp::new(gpu, 16, 1, d, d, Gating::fraction(16, f), &mut |n| {
                uniform(&mut r, n)
            })?;
            // The plan depends on the shapes, not on the gating: one per width.
            let key = PlanKey::new(&format!("gated-mlp16-d{d}"), 1, 1, 1);
            let (plan, planning, lookup) = cached_plan(cache, gpu, key.clone(), key, &m.body)?;
            let runner = ControlRunner::new(gpu, &CONTROL_BF16, &plan, &m.body)?;
            let host = HostDriven::new(gpu, &CONTROL_BF16, &m.body, &plan)?;
            m.poison(gpu)?;
            let st = host.run(gpu, 1)?;
            let want = outputs(gpu, &[&m.xs, &m.preds])?;
            m.poison(gpu)?;
            runner.launch(gpu, Trips::Fixed(1))?;
            let diff = max_abs_diff(&want, &outputs(gpu, &[&m.xs, &m.preds])?);
            let skipped = m.ran(gpu)?.iter().filter(|x| !**x).count();
            let t_dev = gpu.time_ms(args.warmup, args.reps, |g| {
                runner.launch(g, Trips::Fixed(1))
            })?;
            let t_host = gpu.time_ms(args.warmup, args.reps, |g| host.run(g, 1).map(|_| ()))?;
            eprintln!(
                "{name}: {} CTAs, {} tasks, {skipped} skipped: device {t_dev:.4} ms, host {t_host:.4} ms",
                plan.ctas,
                plan.tasks_per_iteration()
            );
            rows.push(Row {
                workload: name.clone(),
                mode: "device-branch".into(),
                median_ms: t_dev as f64,
                runs: args.reps,
                launches: 1,
                host_syncs: 0,
                skipped: Some(skipped),
                planning_ms: planning,
                lookup_us: Some(lookup),
                max_abs_diff_vs_host: Some(diff),
                ctas: Some(plan.ctas),
            });
            rows.push(Row {
                workload: name,
                mode: "host-branch".into(),
                median_ms: t_host as f64,
                runs: args.reps,
                launches: st.launches,
                host_syncs: st.syncs,
                skipped: Some(st.skipped / 2),
                planning_ms: None,
                lookup_us: None,
                max_abs_diff_vs_host: None,
                ctas: None,
            });
        }
    }
    Ok(())
}

/// Device and host-driven time of `body` with every non-gate operator fixed to each arm of
/// its kind and each split factor (`uniform_variants`), as rows named
/// `<name> [<BM>x<BN> s<splits>]`.
fn sweep_body(
    gpu: &Gpu,
    args: &Args,
    name: &str,
    body: &LoopBody,
    trips: u32,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let vdev = schedule::exec::vdevice(gpu, &CONTROL_BF16)?;
    for (label, fixed) in uniform_variants(body, &CONTROL_BF16) {
        let opts = ScheduleOptions {
            fixed,
            ..ScheduleOptions::default()
        };
        let plan = match plan_loop(body, &CONTROL_BF16, gpu.props(), vdev, &opts) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("{name} [{label}]: not planned: {e}");
                continue;
            }
        };
        let runner = ControlRunner::new(gpu, &CONTROL_BF16, &plan, body)?;
        let host = HostDriven::new(gpu, &CONTROL_BF16, body, &plan)?;
        let t_dev = gpu.time_ms(args.warmup, args.reps, |g| {
            runner.launch(g, Trips::Fixed(trips))
        })?;
        let t_host = gpu.time_ms(args.warmup, args.reps, |g| host.run(g, trips).map(|_| ()))?;
        let workload = format!("{name} [{label}]");
        eprintln!(
            "{workload}: {} CTAs, {} tasks/iteration: device {t_dev:.4} ms, host {t_host:.4} ms",
            plan.ctas,
            plan.tasks_per_iteration()
        );
        for (mode, ms) in [("device", t_dev), ("host-driven", t_host)] {
            rows.push(Row {
                workload: workload.clone(),
                mode: mode.into(),
                median_ms: ms as f64,
                runs: args.reps,
                launches: 0,
                host_syncs: 0,
                skipped: None,
                planning_ms: None,
                lookup_us: None,
                max_abs_diff_vs_host: None,
                ctas: Some(plan.ctas),
            });
        }
    }
    Ok(())
}

fn sweep_rows(gpu: &Gpu, args: &Args, rows: &mut Vec<Row>) -> Result<()> {
    let mut r = rng("control-bench-sweep");
    for batch in [1usize, 64] {
        let lp = LstmLoop::new(gpu, 1000, batch, 256, &mut |n| uniform(&mut r, n))?;
        let name = format!("LSTM cell h256 b{batch} T1000");
        sweep_body(gpu, args, &name, &lp.body, 1000, rows)?;
    }
    let m = GatedMlp::new(gpu, 16, 1, 256, 256, Gating::fraction(16, 0.0), &mut |n| {
        uniform(&mut r, n)
    })?;
    sweep_body(
        gpu,
        args,
        "16 gated MLP blocks d256 b1 skip0%",
        &m.body,
        1,
        rows,
    )
}

/// MiniLM (6 layers, 4-class heads) with early exit at batch 1: per sequence length (three
/// buckets) and exit layer, the device-decided run (`device-branch`: launches enqueued at once;
/// `device-branch[graph]`: replayed as one CUDA graph) vs `host-branch` (a sync after each
/// head). Plans come from the cache per (sequence bucket, batch bucket).
fn early_exit_rows(gpu: &Gpu, args: &Args, rows: &mut Vec<Row>) -> Result<()> {
    let mut r = rng("control-bench-early-exit");
    let model = EarlyExitMiniLm::new(gpu, 6, 4, &mut |n| uniform(&mut r, n))?;
    let mut cache: PlanCache<ExitPlan> = PlanCache::new(16);
    let lengths: &[usize] = if args.quick { &[100] } else { &[12, 100, 300] };
    let exits: &[usize] = if args.quick {
        &[0, 5]
    } else {
        &[0, 1, 2, 3, 5]
    };
    for &len in lengths {
        let t = seq_bucket(len);
        let key = PlanKey::new("minilm-exit-l6", 1, t as u32, 1);
        let (plan, first) = cache.get_or_plan(&key, |_| ExitRunner::plan(gpu, &model, t))?;
        let planning = (!first.hit).then_some(first.planning.as_secs_f64() * 1e3);
        // Another length of the same bucket reuses the plan.
        let near = PlanKey::new("minilm-exit-l6", 1, (t / 2 + 1) as u32, 1);
        let t0 = Instant::now();
        let (again, l) = cache.get_or_plan(&near, |_| ExitRunner::plan(gpu, &model, t))?;
        let lookup = t0.elapsed().as_secs_f64() * 1e6;
        assert!(l.hit && std::sync::Arc::ptr_eq(&plan, &again));
        for &e in exits {
            let name = format!(
                "MiniLM-L6 early exit b1 len{len} (bucket {t}) exit@{}",
                e + 1
            );
            let mut run = ExitRunner::new(gpu, &model, &plan, 1, t, &ExitPolicy::AtLayer(e))?;
            run.x.upload_f32(gpu, &uniform(&mut r, t * 384))?;
            run.set_lengths(gpu, &[len as u32])?;
            run.poison(gpu)?;
            let st = run.run_host_driven(gpu)?;
            let want = outputs(gpu, &[&run.logits, &run.acts[e].y])?;
            run.poison(gpu)?;
            run.run_device(gpu)?;
            let diff = max_abs_diff(&want, &outputs(gpu, &[&run.logits, &run.acts[e].y])?);
            let graph = run.capture_device(gpu)?;
            run.poison(gpu)?;
            graph.replay()?;
            let diff_g = max_abs_diff(&want, &outputs(gpu, &[&run.logits, &run.acts[e].y])?);
            let t_host = gpu.time_ms(args.warmup, args.reps, |g| {
                run.run_host_driven(g).map(|_| ())
            })?;
            let t_dev = gpu.time_ms(args.warmup, args.reps, |g| run.run_device(g))?;
            let t_graph = gpu.time_ms(args.warmup, args.reps, |_| graph.replay())?;
            eprintln!(
                "{name}: device {t_dev:.4} ms, graph {t_graph:.4} ms, host {t_host:.4} ms, diff {diff:e}"
            );
            let row = |mode: &str, ms: f32, launches, syncs| Row {
                workload: name.clone(),
                mode: mode.into(),
                median_ms: ms as f64,
                runs: args.reps,
                launches,
                host_syncs: syncs,
                skipped: Some(5 - e),
                planning_ms: None,
                lookup_us: None,
                max_abs_diff_vs_host: None,
                ctas: None,
            };
            rows.push(Row {
                planning_ms: if e == exits[0] { planning } else { None },
                lookup_us: Some(lookup),
                max_abs_diff_vs_host: Some(diff),
                ..row("device-branch", t_dev, 24, 0)
            });
            rows.push(Row {
                max_abs_diff_vs_host: Some(diff_g),
                ..row("device-branch[graph]", t_graph, 1, 0)
            });
            rows.push(row("host-branch", t_host, st.launches, st.syncs));
        }
    }
    Ok(())
}

fn markdown(report: &Report) -> String {
    let mut s = format!(
        "# Device-side control flow vs host-driven ({}, {})\n\n`{}`\n\n\
         | workload | mode | median ms | vs host | launches | host syncs | planning ms | lookup µs | max abs diff |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
        report.device, report.date, report.command
    );
    for r in &report.rows {
        let host = report
            .rows
            .iter()
            .find(|h| h.workload == r.workload && h.mode.starts_with("host-"))
            .map_or(f64::NAN, |h| h.median_ms);
        s += &format!(
            "| {} | {} | {:.4} | {:.2}x | {} | {} | {} | {} | {} |\n",
            r.workload,
            r.mode,
            r.median_ms,
            host / r.median_ms,
            r.launches,
            r.host_syncs,
            r.planning_ms.map_or("-".into(), |x| format!("{x:.2}")),
            r.lookup_us.map_or("-".into(), |x| format!("{x:.2}")),
            r.max_abs_diff_vs_host
                .map_or("-".into(), |x| format!("{x:.1e}")),
        );
    }
    s
}

fn main() -> ExitCode {
    let args = Args::parse();
    let gpu = match Gpu::new(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("control: needs a GPU: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut cache = PlanCache::new(64);
    let mut rows = Vec::new();
    let res = lstm_rows(&gpu, &args, &mut cache, &mut rows)
        .and_then(|_| gated_rows(&gpu, &args, &mut cache, &mut rows))
        .and_then(|_| early_exit_rows(&gpu, &args, &mut rows))
        .and_then(|_| {
            if args.sweep {
                sweep_rows(&gpu, &args, &mut rows)
            } else {
                Ok(())
            }
        });
    if let Err(e) = res {
        eprintln!("control: {e}");
        return ExitCode::FAILURE;
    }
    let report = Report {
        command: COMMAND.into(),
        date: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)[..10]
            .to_owned(),
        device: gpu.name().to_owned(),
        rows,
    };
    let md = markdown(&report);
    println!("{md}");
    let json = serde_json::to_string_pretty(&report).expect("plain data serializes");
    let dir = args
        .out
        .join(fused_gemm_bench::report::device_slug(&report.device));
    let (pj, pm) = (dir.join("control.json"), dir.join("control.md"));
    let w = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&pj, json))
        .and_then(|_| std::fs::write(&pm, md));
    match w {
        Ok(()) => {
            eprintln!("control: wrote {} and {}", pj.display(), pm.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("control: could not write {}: {e}", args.out.display());
            ExitCode::FAILURE
        }
    }
}
