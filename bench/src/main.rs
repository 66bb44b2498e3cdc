//! `fused-gemm-bench`: ours vs cuBLASLt vs unfused on the GPU (see the library docs).
//!
//! ```text
//! fused-gemm-bench --quick --out bench/results     # a few small shapes, all four epilogues
//! fused-gemm-bench                                 # the whole table
//! fused-gemm-bench --shapes anchor,bert-base --epilogues bias-gelu,bias-residual-layernorm
//! fused-gemm-bench list                            # the shape table (no GPU needed)
//! fused-gemm-bench timing                          # check the timing primitive on the GPU
//! ```
//!
//! Exit status: 0 when every path that ran was verified; 1 when a path was wrong or failed
//! (results are still written); 2 when the benchmark could not start (no GPU, bad options).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use cudarc::driver::DevicePtr;
use fused_gemm::Gpu;
use fused_gemm::host::cudarc;
use fused_gemm_bench::cublaslt::{self, Lt};
use fused_gemm_bench::epilogue::Epilogue;
use fused_gemm_bench::error::{BenchError, Result};
use fused_gemm_bench::problem::BenchElement;
use fused_gemm_bench::report::{self, DeviceInfo, Report, Settings, Status};
use fused_gemm_bench::run::{self, RunConfig};
use fused_gemm_bench::timing::{self, TimingConfig, rotation_sets, time_gpu};
use fused_gemm_bench::{chart, shapes};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Dtype {
    Bf16,
    F16,
}

/// GEMM + epilogue benchmarks: our fused kernels, cuBLASLt (fused epilogue where it has one)
/// and the unfused sequence (cuBLASLt GEMM, then row kernels), side by side on one GPU.
#[derive(Debug, Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// Shapes: comma-separated table names or prefixes (`bert-base`, `llama3-8b.gate-up`,
    /// `anchor`) or literal MxNxK. Default: the whole table (`list` shows it).
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,

    /// Epilogues for every selected shape (comma-separated). Default: each shape's own.
    #[arg(long, value_delimiter = ',', value_enum)]
    epilogues: Vec<Epilogue>,

    /// Timed runs per path (the median and percentiles are over these; at least 50
    /// recommended). Default: 100, or 50 with --quick.
    #[arg(long)]
    runs: Option<usize>,

    /// Untimed runs per path first.
    #[arg(long, default_value_t = 10)]
    warmup: usize,

    /// Folder for the JSON, the table and the PNG chart.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,

    /// A few small shapes covering bias+GELU, bias+residual+LayerNorm, SwiGLU and
    /// RMSNorm-scale, plus the BERT FFN-up anchor.
    #[arg(long)]
    quick: bool,

    /// Storage type of every operand.
    #[arg(long, value_enum, default_value_t = Dtype::Bf16)]
    dtype: Dtype,

    /// Seed of the random inputs (default: fresh, recorded in the results).
    #[arg(long)]
    seed: Option<u64>,

    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,

    /// Most rotation sets per case.
    #[arg(long, default_value_t = 64)]
    max_sets: usize,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the shape table and each shape's epilogues (no GPU needed).
    List,
    /// Check the timing primitive on the GPU: a fixed-length spin, a rotated device-to-device
    /// copy (bandwidth) and an almost empty kernel (launch floor).
    Timing {
        /// Bytes per copy, MiB.
        #[arg(long, default_value_t = 256)]
        mib: usize,
        /// Timed runs.
        #[arg(long, default_value_t = 100)]
        runs: usize,
        /// Untimed runs first.
        #[arg(long, default_value_t = 10)]
        warmup: usize,
        /// CUDA device ordinal.
        #[arg(long, default_value_t = 0)]
        device: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Command::List) => {
            list();
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Timing {
            mib,
            runs,
            warmup,
            device,
        }) => timing_check(*device, *mib, *runs, *warmup).map(|_| ExitCode::SUCCESS),
        None => bench(&cli),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fused-gemm-bench: {e}");
            ExitCode::from(2)
        }
    }
}

fn list() {
    println!(
        "{:<32} {:>6} {:>6} {:>6}  epilogues",
        "shape", "M", "N", "K"
    );
    for s in shapes::table() {
        let e: Vec<&str> = s.epilogues.iter().map(|e| e.name()).collect();
        println!(
            "{:<32} {:>6} {:>6} {:>6}  {}",
            s.name,
            s.m,
            s.n,
            s.k,
            e.join(", ")
        );
    }
    println!(
        "\nquick: {}\nepilogues: {}",
        shapes::QUICK.join(", "),
        Epilogue::ALL.map(|e| e.name()).join(", ")
    );
}

fn open(device: usize) -> Result<Gpu> {
    Ok(Gpu::new(device)?)
}

fn bench(cli: &Cli) -> Result<ExitCode> {
    let table = shapes::table();
    let patterns: Vec<String> = if cli.quick && cli.shapes.is_empty() {
        shapes::QUICK.iter().map(|s| s.to_string()).collect()
    } else {
        cli.shapes.clone()
    };
    let selected = shapes::select(&table, &patterns)?;
    let epilogues = (!cli.epilogues.is_empty()).then_some(cli.epilogues.as_slice());
    let runs = cli.runs.unwrap_or(if cli.quick { 50 } else { 100 });
    if runs == 0 {
        return Err(BenchError::Usage {
            what: "--runs",
            detail: "at least 1".into(),
        });
    }
    if runs < 50 {
        eprintln!("fused-gemm-bench: note: {runs} runs per path; medians over ≥ 50 are steadier");
    }
    let seed = cli.seed.unwrap_or_else(rand::random);
    let cfg = RunConfig {
        cases: run::cases(&selected, epilogues),
        timing: TimingConfig {
            warmup: cli.warmup,
            runs,
            ..TimingConfig::default()
        },
        seed,
        max_sets: cli.max_sets,
    };

    let gpu = open(cli.device)?;
    let lt_available = cublaslt::available();
    let mut lt = if lt_available {
        match Lt::new(&gpu) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("fused-gemm-bench: cuBLASLt unusable ({e}); its paths are n/a");
                None
            }
        }
    } else {
        eprintln!(
            "fused-gemm-bench: libcublasLt not found; the cuBLASLt and unfused paths are n/a"
        );
        None
    };
    let date = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    eprintln!(
        "fused-gemm-bench: {} case(s) on {} ({}), seed {seed}",
        cfg.cases.len(),
        gpu.name(),
        match cli.dtype {
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
        }
    );

    let pb = ProgressBar::new((cfg.cases.len() * 3) as u64);
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} paths [{elapsed_precise}] {msg}")
            .expect("the template is valid"),
    );
    let cases = match cli.dtype {
        Dtype::Bf16 => run_typed::<half::bf16>(&gpu, &cfg, lt.as_mut(), &pb),
        Dtype::F16 => run_typed::<half::f16>(&gpu, &cfg, lt.as_mut(), &pb),
    };
    pb.finish_and_clear();

    let p = gpu.props();
    let report = Report {
        schema_version: report::SCHEMA_VERSION,
        tool: format!("fused-gemm-bench {}", env!("CARGO_PKG_VERSION")),
        command_line: std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        date: date.clone(),
        git_commit: env!("FUSED_GEMM_GIT_COMMIT").to_owned(),
        device: DeviceInfo {
            name: gpu.name().to_owned(),
            compute_capability: p.compute_capability,
            sm_count: p.sm_count,
            l2_bytes: p.l2_bytes as u64,
        },
        dtype: match cli.dtype {
            Dtype::Bf16 => "bf16".into(),
            Dtype::F16 => "f16".into(),
        },
        settings: Settings {
            warmup: cli.warmup,
            runs,
            seed,
            cublaslt_available: lt.is_some(),
            method: "CUDA events around each run, runs queued back to back behind a spin \
                     kernel, inputs rotated over sets totalling ≥ 2× L2"
                .into(),
        },
        cases,
    };
    let table_text = report::format_table(&report);
    println!("{table_text}");
    let files = write_results(&report, &table_text, &cli.out)?;
    for f in files {
        eprintln!("fused-gemm-bench: wrote {}", f.display());
    }
    let bad = report
        .cases
        .iter()
        .flat_map(|c| &c.paths)
        .filter(|p| matches!(p.status, Status::Wrong | Status::Error))
        .count();
    if bad > 0 {
        eprintln!("fused-gemm-bench: {bad} path(s) were wrong or failed (see the table)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_typed<T: BenchElement>(
    gpu: &Gpu,
    cfg: &RunConfig,
    lt: Option<&mut Lt>,
    pb: &ProgressBar,
) -> Vec<report::CaseResult> {
    run::run_all::<T>(gpu, cfg, lt, pb)
}

/// Writes `<stem>.json`, `<stem>.txt` and `<stem>.png` under `dir`, the stem made of the
/// date, dtype and device.
fn write_results(r: &Report, table: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |source| BenchError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let device = fused_gemm_bench::report::device_slug(&r.device.name);
    let stem = format!("{}-{}-{device}", r.date.replace(':', ""), r.dtype);
    let json = dir.join(format!("{stem}.json"));
    std::fs::write(&json, serde_json::to_string_pretty(r)?).map_err(io(&json))?;
    let txt = dir.join(format!("{stem}.txt"));
    std::fs::write(&txt, table).map_err(io(&txt))?;
    let png = dir.join(format!("{stem}.png"));
    chart::draw(r, &png)?;
    Ok(vec![json, txt, png])
}

/// `timing`: exercises the primitive on known quantities.
fn timing_check(device: usize, mib: usize, runs: usize, warmup: usize) -> Result<()> {
    let gpu = open(device)?;
    let cfg = TimingConfig {
        warmup,
        runs,
        ..TimingConfig::default()
    };
    let l2 = gpu.props().l2_bytes as u64;
    println!(
        "{} · L2 {} MiB · {} SMs · {runs} runs after {warmup} warm-up",
        gpu.name(),
        l2 >> 20,
        gpu.props().sm_count
    );

    // 1. A spin of 100 µs must read as 0.100 ms (the events and the spin agree).
    let t = time_gpu(&gpu, &cfg, |_| timing::spin(&gpu, 100_000))?;
    println!(
        "spin 100 µs:        median {:.4} ms (p10 {:.4}, p90 {:.4}); host enqueue {:.1} µs/run",
        t.summary.median_ms, t.summary.p10_ms, t.summary.p90_ms, t.host_enqueue_us
    );

    // 2. Device-to-device copy over rotated buffers: read + write bandwidth.
    let bytes = mib.max(1) << 20;
    let (free, _) = gpu.context().mem_get_info()?;
    let sets = rotation_sets(2 * bytes as u64, l2, free as u64 / 2, 64);
    if sets == 0 {
        return Err(BenchError::OutOfMemory {
            needed: 2 * bytes as u64,
            free: free as u64,
        });
    }
    let mut bufs = Vec::with_capacity(sets);
    for _ in 0..sets {
        bufs.push((gpu.zeros::<u8>(bytes)?, gpu.zeros::<u8>(bytes)?));
    }
    let s = gpu.stream().clone();
    let t = time_gpu(&gpu, &cfg, |i| {
        let (src, dst) = &mut bufs[i % sets];
        s.memcpy_dtod(src, dst)?;
        Ok(())
    })?;
    let gbps = 2.0 * bytes as f64 / (t.summary.median_ms * 1e-3) / 1e9;
    println!(
        "copy {mib} MiB ×{sets} sets: median {:.4} ms (p10 {:.4}, p90 {:.4}) = {gbps:.0} GB/s read+write",
        t.summary.median_ms, t.summary.p10_ms, t.summary.p90_ms
    );
    drop(bufs);

    // 3. A one-element bias kernel: the floor of a launch in a back-to-back stream.
    let mut x = gpu.upload(&[half::bf16::from_f32(1.0); 8])?;
    let b = gpu.upload(&[half::bf16::from_f32(0.5); 8])?;
    let t = time_gpu(&gpu, &cfg, |_| {
        fused_gemm::rowwise::bias_act_in_place(
            &gpu,
            1,
            8,
            &mut x,
            8,
            Some(&b as &dyn DevicePtr<half::bf16>),
            fused_gemm::rowwise::Activation::None,
        )?;
        Ok(())
    })?;
    println!(
        "tiny kernel:        median {:.4} ms (p10 {:.4}, p90 {:.4}); host enqueue {:.1} µs/run",
        t.summary.median_ms, t.summary.p10_ms, t.summary.p90_ms, t.host_enqueue_us
    );
    Ok(())
}
