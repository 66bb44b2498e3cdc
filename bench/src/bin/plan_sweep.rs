//! Construction vs exhaustive search: for 66 shapes (BERT, MiniLM, GPT-2, LLaMA-3
//! layers, M from 1 to 16384, unaligned sizes) the planner's constructed tile choice is timed
//! against every launchable candidate on the GPU.
//!
//! ```text
//! cargo run --release -p fused-gemm-bench --bin plan_sweep
//! ```
//!
//! Environment: `PLAN_SWEEP_DTYPE` = `bf16` (default) or `f16`; `PLAN_SWEEP_MODEL_ONLY=1` only
//! constructs (no timing; also the mode without a GPU) and prints the plans and construction
//! times. A timed run writes `bench/results/<card>/plan_sweep-<dtype>.json` (`PLAN_SWEEP_RESULTS_DIR`
//! overrides the folder) (every candidate's
//! predicted and measured time) and `.md` (the table, with the command) and prints the table.

use fused_gemm_bench::report::{device_slug, results_dir};
use std::process::ExitCode;

use fused_gemm::device::types::DType;
use fused_gemm::host::kernel::GemmKernelSpec;
use fused_gemm::host::plan::{Plan, Planner, Problem};
use fused_gemm::host::sweep::{DeviceTimer, median_us, run_sweep, sweep_shapes};
use fused_gemm::host::validate::GemmCall;
use fused_gemm::host::{Error, Gpu, LaunchOptions, Result};
use fused_gemm::kernels::gemm;

/// The plain GEMM kernel of `dtype` (B stored N×K, no epilogue).
fn kernel(dtype: DType) -> &'static GemmKernelSpec {
    match dtype {
        DType::F16 => &gemm::GEMM_F16,
        _ => &gemm::GEMM_BF16,
    }
}

/// The GEMM launcher with an explicit plan: C = A·Bᵀ (B stored N×K), no epilogue, forced to the
/// plan's tile and split-K factor, through a handle with those options made when the plan
/// changes rather than per timed launch (the timer always passes the same `gpu`).
fn launcher() -> impl FnMut(&Gpu, &Plan, &GemmCall<'_>) -> Result<()> {
    let mut forced: Option<(LaunchOptions, Gpu)> = None;
    move |gpu, plan, call| {
        let options = LaunchOptions {
            tile: Some(plan.tile),
            splits: Some(plan.splits),
            ..Default::default()
        };
        let gpu = match &mut forced {
            Some((o, g)) if *o == options => &*g,
            slot => &slot.insert((options, gpu.with_options(options))).1,
        };
        match call.in_dtype {
            DType::F16 => gemm::gemm_f16(gpu, &call.a, &call.b, &mut call.c.clone()),
            _ => gemm::gemm_bf16(gpu, &call.a, &call.b, &mut call.c.clone()),
        }
        .map(drop)
    }
}

fn dtype() -> std::result::Result<DType, String> {
    match std::env::var("PLAN_SWEEP_DTYPE").as_deref() {
        Err(_) | Ok("bf16") => Ok(DType::Bf16),
        Ok("f16") => Ok(DType::F16),
        Ok(other) => Err(format!(
            "PLAN_SWEEP_DTYPE must be bf16 or f16, got {other:?}"
        )),
    }
}

fn model_only(planner: &Planner, dtype: DType) {
    println!("| shape | M | N | K | tile | splits | grid | predicted µs | bound | construct µs |");
    println!("|---|---:|---:|---:|---|---:|---|---:|---|---:|");
    let mut times = Vec::new();
    let mut search_us = 0.0;
    for s in sweep_shapes() {
        let p = Problem::gemm(s.m, s.n, s.k, dtype);
        let plan = match planner.plan(&p) {
            Ok(plan) => plan,
            Err(e) => {
                println!("| {} | {} | {} | {} | error: {e} |", s.name, s.m, s.n, s.k);
                continue;
            }
        };
        let us = median_us(101, || {
            std::hint::black_box(planner.plan(std::hint::black_box(&p)).ok());
        });
        times.push(us);
        // What the exhaustive search would spend, by the model: warm-up + timed launches.
        search_us += planner
            .candidates(&p)
            .map(|c| c.iter().map(|c| c.predicted_us * 13.0).sum::<f64>())
            .unwrap_or(0.0);
        let t = plan.tile;
        println!(
            "| {} | {} | {} | {} | {}x{}x{} {}x{}w {}st | {} | {:?} | {:.1} | {:?} | {:.2} |",
            s.name,
            s.m,
            s.n,
            s.k,
            t.bm,
            t.bn,
            t.bk,
            t.warps_m,
            t.warps_n,
            t.stages,
            plan.splits,
            plan.grid,
            plan.predicted_us,
            plan.model.bound,
            us
        );
    }
    times.sort_by(f64::total_cmp);
    if let Some(m) = times.get(times.len() / 2) {
        println!("\nmedian construction time: {m:.2} µs per shape");
    }
    println!(
        "exhaustive search by the model's times: {:.1} s of launches (3 warm-up + 10 timed each)",
        search_us * 1e-6
    );
}

fn main() -> ExitCode {
    let dtype = match dtype() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("plan_sweep: {e}");
            return ExitCode::FAILURE;
        }
    };
    let gpu = match Gpu::new(0) {
        Ok(g) => Some(g),
        Err(e @ (Error::NoDriver | Error::NoDevice { .. })) => {
            eprintln!("plan_sweep: {e}; constructing only");
            None
        }
        Err(e) => {
            eprintln!("plan_sweep: {e}");
            return ExitCode::FAILURE;
        }
    };
    let force_model = std::env::var("PLAN_SWEEP_MODEL_ONLY").is_ok_and(|v| v == "1");
    let Some(gpu) = gpu.filter(|_| !force_model) else {
        let props = fused_gemm::host::gpu::DeviceProps::h200();
        println!("Constructed plans for the H200's limits (no timing)\n");
        model_only(&Planner::new(props), dtype);
        return ExitCode::SUCCESS;
    };
    // Candidates are the tiles the kernel was compiled with (16-byte path).
    let planner = kernel(dtype).planner(&gpu, true);
    let device = format!(
        "{} (sm_{}, {} SMs)",
        gpu.name(),
        gpu.props().compute_capability,
        gpu.props().sm_count
    );
    let mut timer = DeviceTimer::new(&gpu, launcher());
    // Fail fast when the launcher cannot run at all, before spending minutes on the sweep.
    let probe = Problem::gemm(256, 256, 256, dtype);
    let first = match planner.plan(&probe) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("plan_sweep: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = fused_gemm::host::sweep::GemmTimer::time_ms(&mut timer, &probe, &first) {
        eprintln!("plan_sweep: the probe launch failed: {e}");
        return ExitCode::FAILURE;
    }
    let command = format!(
        "PLAN_SWEEP_DTYPE={} cargo run --release -p fused-gemm-bench --bin plan_sweep",
        dtype.name()
    );
    let shapes = sweep_shapes();
    let total = shapes.len();
    let mut done = 0;
    let report = run_sweep(
        &planner,
        &shapes,
        dtype,
        &mut timer,
        &command,
        &device,
        |r| {
            done += 1;
            eprintln!(
                "[{done}/{total}] {} {}×{}×{}: constructed {:?} µs, best {:?} µs, search {:.2} s",
                r.shape.name,
                r.shape.m,
                r.shape.n,
                r.shape.k,
                r.constructed_us,
                r.best_us,
                r.search_s
            );
        },
    );
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("plan_sweep: {e}");
            return ExitCode::FAILURE;
        }
    };
    let table = report.table();
    println!("{table}");
    let card = report.device.split(" (").next().unwrap_or("");
    let dir = results_dir("PLAN_SWEEP_RESULTS_DIR").join(device_slug(card));
    let stem = dir.join(format!("plan_sweep-{}", dtype.name()));
    let written = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(stem.with_extension("json"), report.to_json()))
        .and_then(|_| std::fs::write(stem.with_extension("md"), &table));
    match written {
        Ok(()) => {
            eprintln!("plan_sweep: wrote {}.{{json,md}}", stem.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("plan_sweep: cannot write {}: {e}", stem.display());
            ExitCode::FAILURE
        }
    }
}
