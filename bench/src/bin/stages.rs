//! What each epilogue stage costs on the Hopper mainloop: the launcher's plan of every stage
//! list below on the same operands, and the same plan with one choice changed (per-thread
//! stores instead of TMA stores, the last partial round whole, the residual loaded per thread,
//! a norm's finishing kernel as the GEMM's programmatic dependent), each captured into a CUDA
//! graph and replayed in interleaved rounds. Differences between rows give a stage's cost.
//!
//! ```text
//! cargo run --release -p fused-gemm-bench --bin stages
//! ```
//!
//! `STAGES_ONCE=1` launches each kernel once, untimed, for a profiler. Needs an H100/H200.

use rand::{RngExt, SeedableRng};

use fused_gemm::device::types::DType;
use fused_gemm::host::graph::Graph;
use fused_gemm::host::module::Arch;
use fused_gemm::host::{Error, Gpu, LaunchOptions, LaunchReport, Result, Tensor};
use fused_gemm::kernels::{blocks, gemm, hopper};
use fused_gemm_bench::ours::describe;

/// One rotating set of operands.
struct Set {
    a: Tensor,
    b: Tensor,
    c: Tensor,
    bias: Tensor,
    residual: Tensor,
    gamma: Tensor,
    beta: Tensor,
}

fn random_tensor(gpu: &Gpu, rows: usize, cols: usize, seed: u64) -> Result<Tensor> {
    // Deterministic per set: values only need to be finite and varied.
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let data: Vec<f32> = (0..rows * cols)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    Tensor::from_f32(gpu, rows, cols, DType::Bf16, &data)
}

/// Rotating sets of operands for an M×N×K problem: enough to exceed twice the L2, at most 8
/// and at most ~12 GB in all.
fn make_sets(gpu: &Gpu, m: usize, n: usize, k: usize) -> Result<Vec<Set>> {
    let bytes = 2 * (m * k + n * k + 2 * m * n);
    let l2 = gpu.props().l2_bytes as usize;
    let sets = (2 * l2)
        .div_ceil(bytes)
        .clamp(1, 8)
        .min((12usize << 30) / bytes)
        .max(1);
    (0..sets)
        .map(|s| {
            let seed = 1 + s as u64 * 7;
            Ok(Set {
                a: random_tensor(gpu, m, k, seed)?,
                b: random_tensor(gpu, n, k, seed + 1)?,
                c: Tensor::zeros(gpu, m, n, DType::Bf16)?,
                bias: random_tensor(gpu, 1, n, seed + 2)?,
                residual: random_tensor(gpu, m, n, seed + 3)?,
                gamma: random_tensor(gpu, 1, n, seed + 4)?,
                beta: random_tensor(gpu, 1, n, seed + 5)?,
            })
        })
        .collect()
}

struct Timed {
    graph: Graph,
    reps: usize,
}

/// Captures enough launches of `launch` for about 4 ms of work (`est_ms` each, 4 to 200) into
/// a graph, after three untimed warm-up launches. Returns it with what the last launch ran.
fn capture(
    gpu: &Gpu,
    est_ms: f64,
    mut launch: impl FnMut(&Gpu, usize) -> Result<LaunchReport>,
) -> Result<(Timed, LaunchReport)> {
    let mut report = launch(gpu, 0)?;
    for i in 1..3 {
        report = launch(gpu, i)?;
    }
    gpu.synchronize()?;
    let reps = ((4.0 / est_ms.max(1e-3)).ceil() as usize).clamp(4, 200);
    let graph = gpu.capture(|g| {
        for i in 0..reps {
            report = launch(g, i)?;
        }
        Ok(())
    })?;
    graph.upload()?;
    Ok((Timed { graph, reps }, report))
}

/// Rounds of [`time_interleaved`] that count.
const ROUNDS: usize = 9;

/// Device time of the untimed rounds before them, ms (the clocks settle).
const WARMUP_MS: f32 = 250.0;

/// Median time per launch of each graph, ms, replayed in interleaved rounds
/// ([`Gpu::time_interleaved`]) so that clock changes and other work on the GPU fall on every
/// implementation alike.
fn time_interleaved(gpu: &Gpu, graphs: &[&Timed]) -> Result<Vec<f64>> {
    let replays: Vec<_> = graphs.iter().map(|t| (&t.graph, t.reps)).collect();
    Ok(gpu
        .time_interleaved(&replays, WARMUP_MS, ROUNDS)?
        .into_iter()
        .map(f64::from)
        .collect())
}

const STAGE_KERNELS: &[&str] = &[
    "[]",
    "[bias]",
    "[scale(col), gelu_tanh]",
    "[bias, gelu_tanh]",
    "[bias, gelu]",
    "[residual, silu]",
    "[swiglu]",
    "[bias, residual, layer_norm]",
];

/// Launches the kernel of `which` (one of [`STAGE_KERNELS`]) on `s`.
fn launch_stage(
    g: &Gpu,
    which: &str,
    s: &mut Set,
    col_scale: &Tensor,
    half: &mut Tensor,
) -> Result<LaunchReport> {
    match which {
        "[]" => gemm::gemm_bf16(g, &s.a, &s.b, &mut s.c),
        "[bias]" => blocks::bias_bf16(g, &s.a, &s.b, &mut s.c, &s.bias),
        "[scale(col), gelu_tanh]" => {
            hopper::h_colscale_gelu_tanh(g, &s.a, &s.b, &mut s.c, col_scale)
        }
        "[bias, gelu_tanh]" => blocks::ffn_up_bias_gelu_tanh(g, &s.a, &s.b, &mut s.c, &s.bias),
        "[bias, gelu]" => blocks::ffn_up_bias_gelu(g, &s.a, &s.b, &mut s.c, &s.bias),
        "[residual, silu]" => hopper::h_residual_silu(g, &s.a, &s.b, &mut s.c, &s.residual),
        "[swiglu]" => blocks::mlp_up_swiglu(g, &s.a, &s.b, half),
        "[bias, residual, layer_norm]" => blocks::proj_bias_residual_layer_norm(
            g,
            &s.a,
            &s.b,
            &mut s.c,
            &s.bias,
            &s.residual,
            &s.gamma,
            &s.beta,
        ),
        other => Err(Error::invalid(
            "stage kernel",
            "one of STAGE_KERNELS",
            other,
        )),
    }
}

/// Times every epilogue of [`STAGE_KERNELS`] on the same shapes (launcher's tile choice),
/// interleaved, so differences give each stage's cost on the Hopper mainloop.
fn stage_costs(gpu: &Gpu) -> Result<()> {
    let once = std::env::var_os("STAGES_ONCE").is_some();
    for &(m, n, k) in &[
        (4096usize, 4096usize, 1024usize),
        (4096, 3072, 768),
        (4096, 1024, 1024),
        (8192, 8192, 8192),
    ] {
        let mut sets = make_sets(gpu, m, n, k)?;
        let nsets = sets.len();
        let col_scale = Tensor::from_f32(gpu, 1, n, DType::F32, &vec![0.5; n])?;
        // SwiGLU's M×N/2 output.
        let mut half = Tensor::zeros(gpu, m, n / 2, DType::Bf16)?;
        let est_ms = 2.0 * (m * n * k) as f64 / 600e12 * 1e3;
        if once {
            for &which in STAGE_KERNELS {
                let report = launch_stage(gpu, which, &mut sets[0], &col_scale, &mut half)?;
                gpu.synchronize()?;
                println!("{m}x{n}x{k} {which}: launched once ({})", describe(&report));
            }
            continue;
        }
        // Each epilogue as the launcher plans it (C stored with TMA where it can, the last
        // partial round of ping-pong tiles split along K where the model says so, a norm's
        // finishing kernel after the GEMM), then with one of those choices changed: per-thread
        // stores (`LaunchOptions::direct_store`), the last round whole
        // (`LaunchOptions::tail_splits = Some(1)`), the residual loaded per thread with C still
        // stored with TMA (`LaunchOptions::global_residual`), the finishing kernel launched as
        // the GEMM's programmatic dependent (`LaunchOptions::dependent_finish`).
        let mut graphs = Vec::new();
        let mut kernels = Vec::new();
        for &which in STAGE_KERNELS {
            let mut variants = vec![
                LaunchOptions::default(),
                LaunchOptions {
                    direct_store: true,
                    ..Default::default()
                },
                LaunchOptions {
                    tail_splits: Some(1),
                    ..Default::default()
                },
            ];
            if which.contains("residual") {
                variants.push(LaunchOptions {
                    global_residual: true,
                    ..Default::default()
                });
            }
            if which.contains("norm") {
                variants.push(LaunchOptions {
                    dependent_finish: true,
                    ..Default::default()
                });
            }
            // What the launcher's own plan did (the first variant), and whether the variant
            // that asks for a dependent finishing kernel got one.
            let mut planned = None;
            let mut dependent = false;
            for &o in &variants {
                let (timed, report) = capture(&gpu.with_options(o), est_ms, |g, i| {
                    launch_stage(g, which, &mut sets[i % nsets], &col_scale, &mut half)
                })?;
                graphs.push(timed);
                dependent |= o.dependent_finish && report.finish_dependent;
                planned.get_or_insert(report);
            }
            let planned = planned.expect("at least one variant");
            kernels.push((which, variants, planned, dependent));
        }
        let ms = time_interleaved(gpu, &graphs.iter().collect::<Vec<_>>())?;
        let mut at = 0;
        for (which, variants, planned, dependent) in kernels {
            let pieces = planned.tail_splits();
            let ms = &ms[at..at + variants.len()];
            at += variants.len();
            let mut notes = vec![format!(
                "direct stores {:.4} ms{}",
                ms[1],
                if planned.tma_store {
                    ""
                } else {
                    "; no TMA store here"
                }
            )];
            notes.push(if pieces > 1 {
                format!("last round in {pieces} K pieces, whole {:.4} ms", ms[2])
            } else {
                String::from("last round not split")
            });
            for (o, t) in variants.iter().zip(ms).skip(3) {
                if o.global_residual {
                    notes.push(format!(
                        "residual loaded per thread {t:.4} ms{}",
                        if planned.tma_residual {
                            ""
                        } else {
                            ", no TMA residual here"
                        }
                    ));
                }
                if o.dependent_finish {
                    notes.push(format!(
                        "finishing kernel as the GEMM's dependent {t:.4} ms{}",
                        if dependent {
                            ""
                        } else {
                            ", no dependent launch here"
                        }
                    ));
                }
            }
            println!(
                "{m:>5}x{n:>5}x{k:>5} {which:<26} {:.4} ms  {:.0} TF/s  ({})  {}",
                ms[0],
                2.0 * (m * n * k) as f64 / (ms[0] * 1e-3) / 1e12,
                notes.join("; "),
                describe(&planned),
            );
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let run = || -> Result<()> {
        let gpu = Gpu::new(0)?;
        // The model's plan, which this comparison is about, not a tuned one.
        gpu.set_autotuner(None);
        let arch = gpu.module_arch(&fused_gemm::ptx::BUILTIN)?;
        if arch != Arch::Sm90a {
            return Err(Error::LaunchLimit(format!(
                "stage costs need an H100/H200 (sm_90a module); this device loads {arch}"
            )));
        }
        stage_costs(&gpu)
    };
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stages: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
