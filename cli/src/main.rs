//! `fused-gemm`: sentence embeddings with all-MiniLM-L6-v2, and a GPU smoke test.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use fused_gemm::Gpu;
use fused_gemm_cli::backend::cuda::GpuElement;
use fused_gemm_cli::backend::cuda::bench::{self, BenchConfig};
use fused_gemm_cli::device::{
    DeviceChoice, DeviceList, DtypeChoice, HalfDtype, LayerNormChoice, Placement, WeightDtype,
    check_dtype, resolve_device,
};
use fused_gemm_cli::input::{read_lines_from, read_lines_from_file};
use fused_gemm_cli::output::{
    Format, check_output_path, plural, similarity_table, write_jsonl, write_npy, write_output,
};
use fused_gemm_cli::{
    AnyCudaBackend, Backend, CpuBackend, CudaBackend, CudaOptions, DeviceShare, Dtype, Embeddings,
    Error, Model, Result, Stage, Timings, default_model_dir, embed, embed_on_devices,
    with_cuda_backend,
};

#[derive(Parser)]
#[command(
    name = "fused-gemm",
    version,
    about = "Fused GEMM + epilogue kernels: tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Embed sentences with all-MiniLM-L6-v2 (384-dim, L2-normalized, as sentence-transformers).
    Embed(EmbedArgs),
    /// Measure the GPU forward pass: latency and sentences/s per batch size (eager and CUDA
    /// graph), and the per-kernel times of one layer.
    Bench(BenchArgs),
    /// Write a copy of a model directory with its weights in f16 or bf16 (half the size).
    ConvertModel(ConvertArgs),
    /// Write a BERT model directory with random weights (BERT's initialization) of a named
    /// architecture or a config.json, with the tokenizer of a model directory: for timing
    /// models whose trained weights are not at hand.
    RandomModel(RandomModelArgs),
    /// Run axpy and a naive GEMM on the GPU (or on the CPU without one) and check them against
    /// an f64 reference.
    Smoke,
}

#[derive(clap::Args)]
struct EmbedArgs {
    /// Sentences to embed. Without any, and without --file, sentences are read from stdin, one
    /// per line.
    sentences: Vec<String>,
    /// Read sentences from this file, one per line (UTF-8). A blank line is an empty sentence,
    /// so output row i is always input line i.
    #[arg(long, short = 'f', conflicts_with = "sentences")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    format: Format,
    /// Write embeddings to this file (atomically: a temporary file renamed into place) instead
    /// of stdout; `-` is stdout.
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    /// Print the cosine-similarity matrix to stdout; embeddings are then written only when
    /// --output is given.
    #[arg(long)]
    similarity: bool,
    /// Where to run: auto = CUDA when a driver is present and GPU 0 opens, else the CPU (said
    /// on stderr).
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    device: DeviceChoice,
    /// Embed on several GPUs at once: `all`, or comma-separated ordinals such as `0,1` (no
    /// spaces: a word after the flag is a sentence). The batches are shared out, a thread per
    /// GPU, each taking the next batch when its last is done; the output keeps the input order.
    /// A GPU that fails ends the run with its error and writes nothing. --timings then gives
    /// the host's tokenizing and output times and each GPU's set-up (weights uploaded, kernels
    /// loaded), throughput and teardown, its batches replayed as CUDA graphs (one GPU with
    /// --timings runs them eagerly, step by step).
    /// Without --devices, --device decides.
    #[arg(long, value_name = "all|0,1,...")]
    devices: Option<DeviceList>,
    /// Storage dtype: auto = f16 on the GPU, f32 on the CPU. The CPU runs f32 only; the GPU
    /// runs f16 and bf16 (f32 accumulation).
    #[arg(long, value_enum, default_value_t = DtypeChoice::Auto)]
    dtype: DtypeChoice,
    /// Sentences per forward pass (sentences are sorted by length and padded per batch).
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Truncate inputs to this many tokens, [CLS] and [SEP] included; longer sentences are
    /// counted on stderr [default: 256 as sentence-transformers uses for this model, or the
    /// model's max_position_embeddings where smaller]
    #[arg(long)]
    max_seq_len: Option<usize>,
    /// Print per-stage times to stderr (each step synchronized; on the GPU, device times from
    /// CUDA events, every batch run eagerly).
    #[arg(long)]
    timings: bool,
    /// On the GPU, run every batch op by op instead of replaying a CUDA graph per batch shape.
    #[arg(long)]
    no_graphs: bool,
    /// On the GPU, where each LayerNorm is applied.
    #[arg(long, value_enum, default_value_t = LayerNormChoice::default())]
    layer_norm: LayerNormChoice,
    /// Model directory with config.json, model.safetensors and tokenizer.json [default: the
    /// cache filled by scripts/fetch-model.sh]
    #[arg(long, env = "FUSED_GEMM_MODEL_DIR")]
    model_dir: Option<PathBuf>,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Storage dtype on the GPU.
    #[arg(long, value_enum, default_value_t = DtypeChoice::F16)]
    dtype: DtypeChoice,
    /// Batch sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 32, 256])]
    batch_sizes: Vec<usize>,
    #[arg(
        long,
        default_value_t = 128,
        help = "Tokens per sequence ([CLS] and [SEP] included; every sequence full, no padding)"
    )]
    seq_len: usize,
    /// Device time to spend per measurement, milliseconds (sets the repetitions, 5 to 500).
    #[arg(long, default_value_t = 300.0)]
    target_ms: f64,
    /// Seed of the random token ids.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Measure the eager path only (no CUDA graphs).
    #[arg(long)]
    no_graphs: bool,
    /// Where each LayerNorm is applied.
    #[arg(long, value_enum, default_value_t = LayerNormChoice::default())]
    layer_norm: LayerNormChoice,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Model directory (as for `embed`).
    #[arg(long, env = "FUSED_GEMM_MODEL_DIR")]
    model_dir: Option<PathBuf>,
}

#[derive(clap::Args)]
struct ConvertArgs {
    /// Dtype of the written weights.
    #[arg(long, value_enum, default_value_t = HalfDtype::F16)]
    dtype: HalfDtype,
    /// Directory to write model.safetensors, config.json and tokenizer.json into (created if
    /// missing).
    #[arg(long, short = 'o')]
    output: PathBuf,
    /// Source model directory (as for `embed`).
    #[arg(long, env = "FUSED_GEMM_MODEL_DIR")]
    model_dir: Option<PathBuf>,
}

#[derive(clap::Args)]
struct RandomModelArgs {
    /// Architecture.
    #[arg(
        long,
        value_enum,
        conflicts_with = "config",
        required_unless_present = "config"
    )]
    preset: Option<fused_gemm_cli::random_model::Preset>,
    /// A BERT config.json to take the hyper-parameters from instead.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Dtype of the written weights.
    #[arg(long, value_enum, default_value_t = WeightDtype::F16)]
    dtype: WeightDtype,
    /// Seed of the weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Directory to write model.safetensors, config.json and tokenizer.json into (created if
    /// missing).
    #[arg(long, short = 'o')]
    output: PathBuf,
    /// Model directory whose tokenizer.json is copied (as for `embed`).
    #[arg(long, env = "FUSED_GEMM_MODEL_DIR")]
    model_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Embed(args) => run_embed(args),
        Command::Bench(args) => run_bench(args),
        Command::ConvertModel(args) => run_convert(args),
        Command::RandomModel(args) => run_random_model(args),
        Command::Smoke => run_smoke(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_embed(args: EmbedArgs) -> Result<()> {
    if args.batch_size == 0 {
        return Err(Error::invalid("--batch-size", "at least 1", 0));
    }
    let writes_embeddings = !args.similarity || args.output.is_some();
    let output = args.output.as_deref().filter(|p| *p != Path::new("-"));
    if let Some(path) = output {
        check_output_path(path)?;
    } else if writes_embeddings && args.format == Format::Npy && std::io::stdout().is_terminal() {
        return Err(Error::invalid(
            "--format npy",
            "--output PATH or a redirected stdout (binary data)",
            "a terminal",
        ));
    }
    let sentences = if let Some(path) = &args.file {
        read_lines_from_file(path)?
    } else if !args.sentences.is_empty() {
        args.sentences.clone()
    } else {
        if std::io::stdin().is_terminal() {
            eprintln!("fused-gemm: reading sentences from stdin, one per line (end with Ctrl-D)");
        }
        read_lines_from(std::io::stdin().lock(), "stdin")?
    };
    if sentences.is_empty() {
        let hint = if args.file.is_some() {
            "the --file input has no lines (a blank line is an empty sentence)"
        } else {
            "give sentences as arguments, with --file, or on stdin"
        };
        return Err(Error::EmptyInput { hint });
    }

    if args.devices.is_some() && args.device == DeviceChoice::Cpu {
        return Err(Error::invalid(
            "--devices",
            "--device cuda or auto (it lists GPUs)",
            "--device cpu",
        ));
    }
    // --devices lists GPUs, so it needs them as --device cuda does, and the first one it lists
    // stands for them where one GPU is asked for.
    let ordinals = match &args.devices {
        Some(list) => list.resolve(Gpu::device_count()?)?,
        None => Vec::new(),
    };
    let (choice, first) = match ordinals.first() {
        Some(&o) => (DeviceChoice::Cuda, o),
        None => (args.device, 0),
    };
    let (placement, note) = resolve_device(choice, || Gpu::new(first))?;
    let dtype = args.dtype.resolve(placement.is_cuda());
    if let Err(e) = check_dtype(&placement, dtype) {
        // Why the CPU was chosen explains why the dtype is refused.
        if let Some(note) = note {
            eprintln!("fused-gemm: {note}");
        }
        return Err(e);
    }
    if let Some(note) = note {
        eprintln!("fused-gemm: {note} ({dtype})");
    }
    let model_dir = args.model_dir.clone().unwrap_or_else(default_model_dir);
    let t_load = Instant::now();
    let model = Model::load(&model_dir, args.max_seq_len)?;
    let options = cuda_options(args.no_graphs, args.layer_norm);
    let mut cuda = match &placement {
        // Each GPU of --devices builds its backend in its own thread.
        Placement::Cuda(_) if args.devices.is_some() => None,
        Placement::Cuda(gpu) => Some(AnyCudaBackend::new(gpu, &model.weights, dtype, options)?),
        Placement::Cpu => {
            if args.layer_norm.deferred() {
                eprintln!(
                    "fused-gemm: --layer-norm deferred applies to the GPU; the CPU computes each \
                     LayerNorm directly"
                );
            }
            None
        }
    };
    let load_time = t_load.elapsed();

    let batches = sentences.len().div_ceil(args.batch_size);
    let bar = if batches > 1 && std::io::stderr().is_terminal() {
        let b = ProgressBar::new(sentences.len() as u64);
        b.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} sentences ({elapsed}, eta {eta})")
                .expect("static template"),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let mut timings = Timings::default();
    let t_embed = Instant::now();
    let mut shares = Vec::new();
    let emb = match (cuda.as_mut(), &args.devices) {
        (_, Some(_)) => {
            let run = GpuRun {
                ordinals: &ordinals,
                batch_size: args.batch_size,
                options,
                dtype,
            };
            let (emb, s) = embed_on_gpus(&run, &model, &sentences, &bar, &mut timings)?;
            shares = s;
            emb
        }
        (Some(any), None) => {
            with_cuda_backend!(any, b => embed_with(b, &model, &sentences, &args, &bar, &mut timings))?
        }
        (None, None) => {
            let mut b = CpuBackend::new(model.weights.clone(), dtype)?;
            embed_with(&mut b, &model, &sentences, &args, &bar, &mut timings)?
        }
    };
    bar.finish_and_clear();
    let embed_time = t_embed.elapsed();
    if !emb.truncated.is_empty() {
        eprintln!(
            "fused-gemm: {}",
            truncation_note(
                &emb.truncated,
                emb.count,
                model.tokenizer.max_seq_len(),
                model.config.max_position_embeddings
            )
        );
    }

    let t_out = Instant::now();
    if writes_embeddings {
        match args.format {
            Format::Jsonl => write_output(output, |w| write_jsonl(w, &sentences, &emb))?,
            Format::Npy => write_output(output, |w| write_npy(w, &emb))?,
        }
    }
    if args.similarity {
        let table = similarity_table(&sentences, &emb);
        write_output(None, |w| w.write_all(table.as_bytes()))?;
    }
    timings.add(Stage::Output, t_out.elapsed());

    if args.timings {
        eprintln!(
            "device {} ({dtype}), {} in {} of at most {}; model load {:.1} ms, \
             embed {:.1} ms ({:.1} sentences/s)",
            placement.name(),
            plural(sentences.len(), "sentence"),
            plural(batches, "batch"),
            args.batch_size,
            load_time.as_secs_f64() * 1e3,
            embed_time.as_secs_f64() * 1e3,
            sentences.len() as f64 / embed_time.as_secs_f64()
        );
        // With --devices the table holds the host's stages (tokenizing, output); the GPUs run
        // theirs at once, and each reports its share.
        eprintln!("{timings}");
        for (ordinal, s) in &shares {
            eprintln!(
                "GPU {ordinal}: set-up {:.1} ms, then {} in {}, busy {:.1} ms ({:.1} \
                 sentences/s), teardown {:.1} ms",
                s.setup.as_secs_f64() * 1e3,
                plural(s.items, "sentence"),
                plural(s.jobs, "batch"),
                s.busy.as_secs_f64() * 1e3,
                s.items_per_second(),
                s.teardown.as_secs_f64() * 1e3
            );
        }
    }
    Ok(())
}

/// The CUDA backend's options from `--no-graphs` and `--layer-norm`.
fn cuda_options(no_graphs: bool, layer_norm: LayerNormChoice) -> CudaOptions {
    CudaOptions {
        graphs: !no_graphs,
        deferred_layer_norm: layer_norm.deferred(),
        ..CudaOptions::default()
    }
}

/// What `embed --devices` runs: the GPUs' ordinals, sentences per batch, the backend's options
/// and its storage dtype.
struct GpuRun<'a> {
    ordinals: &'a [usize],
    batch_size: usize,
    options: CudaOptions,
    dtype: Dtype,
}

/// `embed --devices`: the batches shared out over the GPUs of `run`, each GPU's backend built
/// in its own thread ([`embed_on_devices`]); the tokenizing time goes into `timings`. Returns
/// the embeddings and each GPU's ordinal and share.
fn embed_on_gpus(
    run: &GpuRun<'_>,
    model: &Model,
    sentences: &[String],
    bar: &ProgressBar,
    timings: &mut Timings,
) -> Result<(Embeddings, Vec<(usize, DeviceShare)>)> {
    // One backend type per storage dtype.
    fn on<T: GpuElement>(
        run: &GpuRun<'_>,
        model: &Model,
        sentences: &[String],
        bar: &ProgressBar,
        timings: &mut Timings,
    ) -> Result<(Embeddings, Vec<DeviceShare>)> {
        let ran = embed_on_devices(
            run.ordinals.len(),
            |d| CudaBackend::<T>::new(&Gpu::new(run.ordinals[d])?, &model.weights, run.options),
            model.config.hidden_size,
            &model.tokenizer,
            sentences,
            run.batch_size,
            |done, _| bar.set_position(done as u64),
        )?;
        timings.add(Stage::Tokenize, ran.tokenize);
        Ok((ran.embeddings, ran.shares))
    }
    let ran = match run.dtype {
        Dtype::F16 => on::<half::f16>(run, model, sentences, bar, timings),
        Dtype::Bf16 => on::<half::bf16>(run, model, sentences, bar, timings),
        Dtype::F32 => Err(fused_gemm_cli::device::f32_on_gpu()),
    };
    // Name the failing GPU by its ordinal rather than its place in the list.
    let (emb, shares) = ran.map_err(|e| match e {
        Error::OnDevice { device, source } => Error::OnDevice {
            device: run.ordinals[device],
            source,
        },
        e => e,
    })?;
    Ok((emb, run.ordinals.iter().copied().zip(shares).collect()))
}

/// The stderr line for the sentences cut to `max_seq_len` tokens (`truncated`: their input
/// indices, of `count`), with the limit that keeps more of them when there is one.
fn truncation_note(
    truncated: &[usize],
    count: usize,
    max_seq_len: usize,
    positions: usize,
) -> String {
    const SHOWN: usize = 8;
    let mut indices = truncated
        .iter()
        .take(SHOWN)
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if truncated.len() > SHOWN {
        indices += ", ...";
    }
    let mut note = format!(
        "cut to the first {max_seq_len} tokens ([CLS] and [SEP] included), as \
         sentence-transformers does: {} of {} (index {indices})",
        truncated.len(),
        plural(count, "sentence"),
    );
    if max_seq_len < positions {
        note += &format!("; --max-seq-len up to {positions} keeps more");
    }
    note
}

/// [`embed()`] with the tool's progress bar and optional timings.
fn embed_with<B: Backend>(
    backend: &mut B,
    model: &Model,
    sentences: &[String],
    args: &EmbedArgs,
    bar: &ProgressBar,
    timings: &mut Timings,
) -> Result<Embeddings> {
    embed(
        backend,
        &model.tokenizer,
        sentences,
        args.batch_size,
        |done, _| bar.set_position(done as u64),
        args.timings.then_some(timings),
    )
}

fn run_bench(args: BenchArgs) -> Result<()> {
    let gpu = Gpu::new(0)?;
    let dtype = args.dtype.resolve(true);
    check_dtype(&Placement::Cuda(()), dtype)?;
    let model_dir = args.model_dir.clone().unwrap_or_else(default_model_dir);
    if let Some(path) = &args.json {
        check_output_path(path)?;
    }
    let t_load = Instant::now();
    let model = Model::load(&model_dir, None)?;
    let options = cuda_options(args.no_graphs, args.layer_norm);
    let mut any = AnyCudaBackend::new(&gpu, &model.weights, dtype, options)?;
    eprintln!(
        "fused-gemm bench: model loaded and kernels compiled in {:.1} s",
        t_load.elapsed().as_secs_f64()
    );
    let cfg = BenchConfig {
        batch_sizes: args.batch_sizes.clone(),
        seq_len: args.seq_len,
        target_ms: args.target_ms,
        seed: args.seed,
    };
    let t0 = Instant::now();
    let report = with_cuda_backend!(&mut any, b => bench::run(b, &cfg, |phase| {
        eprintln!("fused-gemm bench: {phase} ({:.1} s)", t0.elapsed().as_secs_f64())
    }))?;
    print!("{report}");
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&report)
            .map_err(|e| Error::io("write", path, std::io::Error::other(e)))?;
        write_output(Some(path), |w| w.write_all(&json))?;
    }
    Ok(())
}

fn run_convert(args: ConvertArgs) -> Result<()> {
    let src = args.model_dir.clone().unwrap_or_else(default_model_dir);
    let dtype = args.dtype.into();
    let r = fused_gemm_cli::convert::convert_model(&src, &args.output, dtype)?;
    eprintln!(
        "fused-gemm convert-model: {} tensors to {dtype} ({} copied as they were): {} -> {} \
         ({:.1} MB -> {:.1} MB); max rounding error {:.2e} absolute, {:.2e} relative",
        r.converted,
        r.copied,
        src.display(),
        r.weights.display(),
        r.bytes_in as f64 / 1e6,
        r.bytes_out as f64 / 1e6,
        r.max_abs_rounding,
        r.max_rel_rounding
    );
    Ok(())
}

fn run_random_model(args: RandomModelArgs) -> Result<()> {
    let config = match (args.preset, &args.config) {
        (Some(p), _) => p.config(),
        (None, Some(path)) => fused_gemm_cli::config::MiniLmConfig::from_file(path)?,
        (None, None) => unreachable!("clap requires --preset or --config"),
    };
    let tokenizer = args.model_dir.clone().unwrap_or_else(default_model_dir);
    let dtype = args.dtype.into();
    let r = fused_gemm_cli::random_model::write_random_model(
        &config,
        &tokenizer,
        &args.output,
        dtype,
        args.seed,
    )?;
    eprintln!(
        "fused-gemm random-model: {} layers, d {}, {} heads, FFN {}: {} tensors, {:.1} M \
         parameters in {dtype} ({:.1} MB) -> {}",
        config.num_layers,
        config.hidden_size,
        config.num_heads,
        config.intermediate_size,
        r.tensors,
        r.parameters as f64 / 1e6,
        r.bytes as f64 / 1e6,
        r.weights.display()
    );
    Ok(())
}

fn run_smoke() -> Result<()> {
    let gpu = fused_gemm::host::gpu::driver_present();
    if !gpu {
        eprintln!("fused-gemm smoke: no CUDA driver found; running the CPU path instead");
    }
    let r = fused_gemm_cli::smoke::run_smoke(gpu)?;
    println!(
        "smoke on {}: axpy (n=1025) max rel error {:.3e}; naive GEMM (67x45x129) max rel error {:.3e}",
        r.device, r.axpy_max_rel_error, r.gemm_max_rel_error
    );
    Ok(())
}
