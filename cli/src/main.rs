//! `fused-gemm`: sentence embeddings with all-MiniLM-L6-v2, and a GPU smoke test.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use fused_gemm_cli::device::{DeviceChoice, ResolvedDevice, resolve_device};
use fused_gemm_cli::input::{read_lines_from, read_lines_from_file};
use fused_gemm_cli::output::{
    Format, check_output_path, similarity_table, write_jsonl, write_npy, write_output,
};
use fused_gemm_cli::{
    CpuBackend, DEFAULT_MAX_SEQ_LEN, Dtype, Error, Model, Result, Stage, Timings,
    default_model_dir, embed,
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
    /// Run axpy and a naive GEMM on the GPU (or on the CPU without one) and check them against
    /// an f64 reference.
    Smoke,
}

#[derive(clap::Args)]
struct EmbedArgs {
    /// Sentences to embed. Without any, and without --file, sentences are read from stdin, one
    /// per line.
    sentences: Vec<String>,
    /// Read sentences from this file, one per line (UTF-8).
    #[arg(long, short = 'f', conflicts_with = "sentences")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    format: Format,
    /// Write embeddings to this file (atomically: a temporary file renamed into place) instead
    /// of stdout.
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    /// Print the cosine-similarity matrix to stdout; embeddings are then written only when
    /// --output is given.
    #[arg(long)]
    similarity: bool,
    /// Where to run: auto = CUDA when a driver is present, else the CPU (said on stderr).
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    device: DeviceChoice,
    /// Compute dtype (the CPU backend runs f32 only).
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    dtype: Dtype,
    /// Sentences per forward pass (sentences are sorted by length and padded per batch).
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    #[arg(
        long,
        default_value_t = DEFAULT_MAX_SEQ_LEN,
        help = "Truncate inputs to this many tokens, [CLS] and [SEP] included \
                (sentence-transformers uses 256 for this model)"
    )]
    max_seq_len: usize,
    /// Print per-stage times (each step synchronized) to stderr.
    #[arg(long)]
    timings: bool,
    /// Model directory with config.json, model.safetensors and tokenizer.json [default: the
    /// cache filled by scripts/fetch-model.sh]
    #[arg(long, env = "FUSED_GEMM_MODEL_DIR")]
    model_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Embed(args) => run_embed(args),
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
    if let Some(path) = &args.output {
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
        return Err(Error::EmptyInput {
            hint: "give sentences as arguments, with --file, or on stdin",
        });
    }

    let (device, note) = resolve_device(args.device, fused_gemm::host::gpu::driver_present())?;
    if let Some(note) = note {
        eprintln!("fused-gemm: {note}");
    }
    let model_dir = args.model_dir.clone().unwrap_or_else(default_model_dir);
    let t_load = Instant::now();
    let model = Model::load(&model_dir, args.max_seq_len)?;
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
    let emb = match device {
        ResolvedDevice::Cpu => {
            let mut backend = CpuBackend::new(model.weights.clone(), args.dtype)?;
            embed(
                &mut backend,
                &model.tokenizer,
                &sentences,
                args.batch_size,
                |done, _| bar.set_position(done as u64),
                args.timings.then_some(&mut timings),
            )?
        }
    };
    bar.finish_and_clear();
    let embed_time = t_embed.elapsed();

    let t_out = Instant::now();
    if writes_embeddings {
        let path = args.output.as_deref();
        match args.format {
            Format::Jsonl => write_output(path, |w| write_jsonl(w, &sentences, &emb))?,
            Format::Npy => write_output(path, |w| write_npy(w, &emb))?,
        }
    }
    if args.similarity {
        let table = similarity_table(&sentences, &emb);
        write_output(None, |w| w.write_all(table.as_bytes()))?;
    }
    timings.add(Stage::Output, t_out.elapsed());

    if args.timings {
        eprintln!(
            "device {}, {} sentences in {} batch(es) of at most {}; model load {:.1} ms, \
             embed {:.1} ms ({:.1} sentences/s)",
            device.name(),
            sentences.len(),
            batches,
            args.batch_size,
            load_time.as_secs_f64() * 1e3,
            embed_time.as_secs_f64() * 1e3,
            sentences.len() as f64 / embed_time.as_secs_f64()
        );
        eprintln!("{timings}");
    }
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
