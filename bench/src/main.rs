//! `fused-gemm-bench`: our fused GEMMs and cuBLAS in one process on one GPU, and the merge of
//! every side of the comparison into the curated table (see the library docs).
//!
//! ```text
//! fused-gemm-bench list [--json]                   # the rows (no GPU needed)
//! fused-gemm-bench run --json ours.json            # every row: ours, model's tile, tiles, cuBLAS
//! fused-gemm-bench run --quick --json ours.json    # one row of each epilogue
//! fused-gemm-bench run --rows bert-base,llama3-8b.gate-up --json ours.json
//! fused-gemm-bench report --ours ours.json --torch torch.json --out bench/results/h100
//! fused-gemm-bench timing                          # check the timing primitive on the GPU
//! ```
//!
//! `bench/compare/run.sh` runs all of it on a GPU host. Exit status: 0 when every path that ran
//! was verified; 1 when a path was wrong or failed (results are still written); 2 when the
//! command could not start (no GPU, bad options).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use cudarc::driver::DevicePtr;
use fused_gemm::Gpu;
use fused_gemm::host::autotune::Autotuner;
use fused_gemm::host::cudarc;
use fused_gemm_bench::compare::{self, Inputs};
use fused_gemm_bench::cublaslt::{self, Lt};
use fused_gemm_bench::epilogue::Epilogue;
use fused_gemm_bench::error::{BenchError, Result};
use fused_gemm_bench::report::{self, DeviceInfo, Report, Settings, Status};
use fused_gemm_bench::run::{self, RunConfig};
use fused_gemm_bench::shapes;
use fused_gemm_bench::timing::{self, TimingConfig, rotation_sets, time_gpu};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Dtype {
    Bf16,
    F16,
}

/// Our fused GEMMs against cuBLAS on one GPU, and the merged comparison table.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the rows (name, which ends with the epilogue, M, N, K); no GPU needed.
    List {
        /// As JSON, for the PyTorch side of the comparison.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        select: Select,
    },
    /// Check and time every selected row: ours (the launcher's default choice, tuned afresh;
    /// the model's tile; each Hopper tile forced), cuBLAS's GEMM and cuBLASLt's fused epilogue.
    Run(RunArgs),
    /// Merge the sides of one comparison run into compare.md, compare.csv and compare.png.
    Report(ReportArgs),
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

/// Which rows.
#[derive(Debug, Args)]
struct Select {
    /// Rows: comma-separated names or dotted prefixes (`bert-base`, `llama3-8b.gate-up`) or
    /// literal MxNxK. Default: every row (`list` shows them).
    #[arg(long, value_delimiter = ',')]
    rows: Vec<String>,

    /// Epilogues of literal MxNxK rows (comma-separated).
    #[arg(long, value_delimiter = ',', value_enum, default_value = "gemm")]
    epilogues: Vec<Epilogue>,

    /// A few rows that cover every epilogue (when no --rows are given).
    #[arg(long)]
    quick: bool,
}

impl Select {
    fn rows(&self) -> Result<Vec<shapes::Row>> {
        let patterns: Vec<String> = if self.quick && self.rows.is_empty() {
            shapes::QUICK.iter().map(|s| s.to_string()).collect()
        } else {
            self.rows.clone()
        };
        shapes::select(&shapes::table(), &patterns, &self.epilogues)
    }
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    select: Select,

    /// Write the results here (JSON).
    #[arg(long)]
    json: PathBuf,

    /// Interleaved rounds: every path is timed once per round, in turn.
    #[arg(long, default_value_t = 5)]
    rounds: usize,

    /// Timed runs of each path per round.
    #[arg(long, default_value_t = 20)]
    runs: usize,

    /// Untimed runs of each path before its first round.
    #[arg(long, default_value_t = 10)]
    warmup: usize,

    /// Skip the forced-tile columns.
    #[arg(long)]
    no_tiles: bool,

    /// No autotuner: `ours` is the model's tile, and that column is not repeated.
    #[arg(long)]
    no_autotune: bool,

    /// Storage type of every operand.
    #[arg(long, value_enum, default_value_t = Dtype::Bf16)]
    dtype: Dtype,

    /// Seed of the random inputs (default: fresh, recorded in the results).
    #[arg(long)]
    seed: Option<u64>,

    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,

    /// Most rotation sets per row.
    #[arg(long, default_value_t = 64)]
    max_sets: usize,
}

#[derive(Debug, Args)]
struct ReportArgs {
    /// `fused-gemm-bench run` output of the run's first pass.
    #[arg(long)]
    ours: PathBuf,
    /// `fused-gemm-bench run` output of the run's last pass.
    #[arg(long)]
    ours_last: Option<PathBuf>,
    /// `bench/compare/torch_rows.py` output.
    #[arg(long)]
    torch: Option<PathBuf>,
    /// `fused-gemm bench --json` output (MiniLM forward, ours).
    #[arg(long)]
    minilm_ours: Option<PathBuf>,
    /// `bench/minilm/pytorch_baseline.py` output (MiniLM forward, PyTorch).
    #[arg(long)]
    minilm_torch: Option<PathBuf>,
    /// `fused-gemm bench --json` output on a `fused-gemm random-model --preset bert-base`
    /// directory (BERT-base forward, ours).
    #[arg(long)]
    bert_ours: Option<PathBuf>,
    /// `bench/minilm/pytorch_baseline.py` output on the same directory (BERT-base, PyTorch).
    #[arg(long)]
    bert_torch: Option<PathBuf>,
    /// The driver version, as `nvidia-smi` reports it.
    #[arg(long, default_value = "")]
    driver: String,
    /// The command that ran the comparison, for the table's header.
    #[arg(long, default_value = "bench/compare/run.sh")]
    command: String,
    /// Folder for compare.md, compare.csv and compare.png.
    #[arg(long)]
    out: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::List { json, select } => list(select, *json).map(|_| ExitCode::SUCCESS),
        Command::Run(args) => bench(args),
        Command::Report(args) => report_cmd(args),
        Command::Timing {
            mib,
            runs,
            warmup,
            device,
        } => timing_check(*device, *mib, *runs, *warmup).map(|_| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fused-gemm-bench: {e}");
            ExitCode::from(2)
        }
    }
}

fn list(select: &Select, json: bool) -> Result<()> {
    let rows = select.rows()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!("{:<46} {:>6} {:>6} {:>6}", "row", "M", "N", "K");
    for r in &rows {
        println!("{:<46} {:>6} {:>6} {:>6}", r.name, r.m, r.n, r.k);
    }
    println!(
        "
quick: {}
epilogues: {}",
        shapes::QUICK.join(", "),
        Epilogue::ALL.map(|e| e.name()).join(", ")
    );
    Ok(())
}

fn bench(args: &RunArgs) -> Result<ExitCode> {
    let rows = args.select.rows()?;
    if args.runs == 0 || args.rounds == 0 {
        return Err(BenchError::Usage {
            what: "--runs/--rounds",
            detail: "at least 1 each".into(),
        });
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let cfg = RunConfig {
        rows,
        warmup: args.warmup,
        rounds: args.rounds,
        runs_per_round: args.runs,
        seed,
        max_sets: args.max_sets,
        tiles: !args.no_tiles,
    };

    let gpu = Gpu::new(args.device)?;
    let mut lt = if cublaslt::available() {
        match Lt::new(&gpu) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("fused-gemm-bench: cuBLASLt unusable ({e}); its columns are n/a");
                None
            }
        }
    } else {
        eprintln!("fused-gemm-bench: libcublasLt not found; its columns are n/a");
        None
    };
    // The autotuner caches in a fresh folder, so every run measures its candidates anew, as a
    // first launch on a new machine does.
    let tune_dir = tempfile::tempdir().map_err(|source| BenchError::Io {
        path: std::env::temp_dir().display().to_string(),
        source,
    })?;
    let mut tuner = (!args.no_autotune).then(|| Autotuner::new(tune_dir.path()));
    let date = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let dtype = match args.dtype {
        Dtype::Bf16 => "bf16",
        Dtype::F16 => "f16",
    };
    eprintln!(
        "fused-gemm-bench: {} row(s) on {} ({dtype}), seed {seed}",
        cfg.rows.len(),
        gpu.name(),
    );
    let pb = ProgressBar::new(cfg.rows.len() as u64);
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} rows [{elapsed_precise}] {msg}")
            .expect("the template is valid"),
    );
    let p = gpu.props();
    let mut report = Report {
        schema_version: report::SCHEMA_VERSION,
        tool: format!("fused-gemm-bench {}", env!("CARGO_PKG_VERSION")),
        command_line: std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        date,
        git_commit: env!("FUSED_GEMM_GIT_COMMIT").to_owned(),
        device: DeviceInfo {
            name: gpu.name().to_owned(),
            compute_capability: p.compute_capability,
            sm_count: p.sm_count,
            l2_bytes: p.l2_bytes as u64,
        },
        dtype: dtype.into(),
        settings: Settings {
            warmup: args.warmup,
            rounds: args.rounds,
            runs_per_round: args.runs,
            seed,
            cublas_algos: cublaslt::HEURISTIC_ALGOS,
            cublas_workspace_bytes: cublaslt::WORKSPACE_BYTES,
            cublaslt_available: lt.is_some(),
            method: timing::METHOD.into(),
        },
        rows: Vec::new(),
    };
    // The rows so far are saved after each row: a run cut short keeps what it measured.
    let mut save_error = None;
    let mut save = |rows: &[report::RowResult]| {
        report.rows = rows.to_vec();
        if let Err(e) = write_json(&args.json, &report) {
            save_error.get_or_insert(e);
        }
    };
    let rows = match args.dtype {
        Dtype::Bf16 => {
            run::run_all::<half::bf16>(&gpu, &cfg, lt.as_mut(), &mut tuner, &pb, &mut save)
        }
        Dtype::F16 => {
            run::run_all::<half::f16>(&gpu, &cfg, lt.as_mut(), &mut tuner, &pb, &mut save)
        }
    };
    pb.finish_and_clear();
    if let Some(e) = save_error {
        return Err(e);
    }
    report.rows = rows;
    println!("{}", report::format_table(&report));
    write_json(&args.json, &report)?;
    eprintln!("fused-gemm-bench: wrote {}", args.json.display());
    let bad = report
        .rows
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

fn write_json(path: &Path, r: &Report) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
            path: dir.display().to_string(),
            source,
        })?;
    }
    std::fs::write(path, serde_json::to_string_pretty(r)?).map_err(|source| BenchError::Io {
        path: path.display().to_string(),
        source,
    })
}

fn report_cmd(a: &ReportArgs) -> Result<ExitCode> {
    let mut missing = Vec::new();
    let inputs = Inputs {
        ours: compare::load(Some(&a.ours), &mut missing),
        ours_last: compare::load(a.ours_last.as_deref(), &mut missing),
        torch: compare::load(a.torch.as_deref(), &mut missing),
        minilm_ours: compare::load(a.minilm_ours.as_deref(), &mut missing),
        minilm_torch: compare::load(a.minilm_torch.as_deref(), &mut missing),
        bert_ours: compare::load(a.bert_ours.as_deref(), &mut missing),
        bert_torch: compare::load(a.bert_torch.as_deref(), &mut missing),
        driver: a.driver.clone(),
        command: a.command.clone(),
        missing,
    };
    for m in &inputs.missing {
        eprintln!("fused-gemm-bench: could not read {m}");
    }
    // Without our side there is nothing to compare; an empty table must not replace a good one.
    if inputs.ours.is_none() {
        eprintln!("fused-gemm-bench: no table written: our results are missing");
        return Ok(ExitCode::from(1));
    }
    for f in compare::write(&inputs, &a.out)? {
        eprintln!("fused-gemm-bench: wrote {}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `timing`: exercises the primitive on known quantities.
fn timing_check(device: usize, mib: usize, runs: usize, warmup: usize) -> Result<()> {
    let gpu = Gpu::new(device)?;
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
