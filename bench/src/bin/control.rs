//! Device-side control flow (issue 8, Grinder/Cocktailer) against host-driven control flow
//! (the same kernels launched one by one per step and block, each predicate read back with a
//! sync before deciding), in one process:
//!
//! - an LSTM cell (hidden 256) run for T = 100 and 1,000 steps at batch 1 and 64: one
//!   persistent launch with the trip count as a parameter (`device-loop`) or read from device
//!   memory (`device-loop[trips in memory]`), vs one launch per step (`host-loop`);
//! - 16 gated residual MLP blocks (gate, GEMM + bias + ReLU, GEMM + bias + residual) at
//!   batch 1, width 256 / 512 / 1024, with the skipped fraction swept 0 … 1 (`device-branch`
//!   vs `host-branch`, 16 predicate reads).
//!
//! Each case's plan comes from a plan cache keyed by (workload, trip-count bucket, sequence
//! bucket, batch bucket): the first call's planning time and the median cached lookup are
//! reported. Latency is the median of `--reps` runs timed with CUDA events after warm-up.
//! Writes `control-<date>.json` and `control-<date>.md` into `--out`.
//!
//! ```text
//! cargo run --release -p fused-gemm-bench --bin control -- --out bench/results/control
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use fused_gemm::control::{GatedMlp, Gating, LstmLoop};
use fused_gemm::host::schedule::control::{
    ControlRunner, HostDriven, LoopBody, LoopPlan, Trips, plan_loop,
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
    #[arg(long, default_value = "bench/results/control")]
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
    let vdev = schedule::exec::vdevice(gpu, &CONTROL_BF16)?;
    let (plan, first) = cache.get_or_plan(&key, |_| {
        plan_loop(
            body,
            &CONTROL_BF16,
            gpu.props(),
            vdev,
            &ScheduleOptions::default(),
        )
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
    let planning = (!first.hit).then(|| first.planning.as_secs_f64() * 1e3);
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
            let runner = ControlRunner::new(gpu, &CONTROL_BF16, &plan)?;
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
                ..base
            });
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
            let runner = ControlRunner::new(gpu, &CONTROL_BF16, &plan)?;
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
        .and_then(|_| gated_rows(&gpu, &args, &mut cache, &mut rows));
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
    let (pj, pm) = (
        args.out.join(format!("control-{}.json", report.date)),
        args.out.join(format!("control-{}.md", report.date)),
    );
    let w = std::fs::create_dir_all(&args.out)
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
