//! The Hopper mainloop against cuBLASLt on the H200 (issue 9), in one process: plain GEMM,
//! GEMM + bias + GELU (tanh, cuBLASLt's fused epilogue), GEMM + bias + residual + LayerNorm and
//! GEMM + SwiGLU, at 8192³ and the BERT-large and LLaMA-3-8B layer shapes, bf16.
//!
//! ```text
//! cargo run --release -p fused-gemm-bench --bin hopper
//! ```
//!
//! Timing: every implementation's launches are captured into a CUDA graph (`reps` launches
//! cycling through rotating buffer sets that together exceed the L2 twice, so inputs come from
//! DRAM as in a model); ours, cuBLAS's GEMM, cuBLASLt's fused epilogue and ours with each Hopper
//! tile forced are then replayed in turn, one graph between CUDA events at a time, in untimed
//! rounds for 250 ms of device time and then nine timed ones (until 2026-12-05: two untimed
//! rounds), and each one's median per-launch time is reported
//! (interleaved, so that clock changes and other work on the machine fall on all of them
//! alike). Graphs remove host overhead from both sides (cuBLASLt's
//! algorithm is chosen once per shape, as a framework caches it). cuBLASLt is column-major, so
//! row-major `C = A·Bᵀ` (B stored N×K) runs as `Cᵀ = B·Aᵀ` with `transa = T`.
//!
//! Environment: `HOPPER_BENCH_QUICK=1` runs three shapes; `HOPPER_BENCH_ROWS=<text>` only the
//! rows whose label contains the text (for a profiler); `HOPPER_BENCH_OUT` is the output
//! directory (default `bench/results`). Writes `hopper-<device>.csv`, `hopper-<device>.md` (the
//! table, the targets met or missed, the command), `hopper-<device>.png` (per row, ours ÷ cuBLAS
//! GEMM and ours ÷ cuBLASLt's fused epilogue) and the sm_90a cubin the process loaded with the
//! command that checks its SASS for `HGMMA`. `HOPPER_CHART_FROM=<csv>` only redraws the chart
//! of an earlier run's CSV next to it (no GPU needed). `HOPPER_BENCH_STAGES=1` instead times one
//! epilogue after another on the same operands (what each stage costs on this mainloop), each
//! with C stored by TMA and with per-thread stores;
//! with `HOPPER_BENCH_ONCE=1` it launches each kernel once, untimed, for a profiler.
//! `HOPPER_BENCH_GLOBAL_RESIDUAL=1` runs the forced tiles with `Overrides::global_residual`
//! (every `residual` read from global memory) and `HOPPER_BENCH_DIRECT_STORE=1` with
//! `Overrides::direct_store` (C stored per thread), to compare with a run without them.
//!
//! The "autotuned" column is ours with an autotuner (`fused_gemm::host::autotune`, its cache in
//! a fresh temporary directory): one launch before the capture times the candidates on this
//! device and caches the fastest, which the captured launches then use; the cache, with every
//! candidate's measured time, is kept as `hopper-<device>-autotune.json`.

use rand::{RngExt, SeedableRng};
use std::fmt::Write as _;
use std::process::ExitCode;

use fused_gemm::device::gemm::TileShape;
use fused_gemm::device::gemm::sm90::TILES_SM90;
use fused_gemm::device::types::DType;
use fused_gemm::host::autotune::Autotuner;
use fused_gemm::host::cudarc::cublaslt::{result as lt, sys as lts};
use fused_gemm::host::gemm::{
    Overrides, last_entry, last_finish_dependent, last_residual_with_tma, last_stored_with_tma,
    last_tail_splits, with_overrides,
};
use fused_gemm::host::graph::Graph;
use fused_gemm::host::plan::Plan;
use fused_gemm::host::{Error, Gpu, Result, Tensor};
use fused_gemm::kernels::hopper;
use fused_gemm_bench::chart::{Bars, draw_bars};

/// What is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Gemm,
    BiasGeluTanh,
    BiasResidualLayerNorm,
    SwiGlu,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Gemm => "gemm",
            Op::BiasGeluTanh => "gemm+bias+gelu_tanh",
            Op::BiasResidualLayerNorm => "gemm+bias+residual+layernorm",
            Op::SwiGlu => "gemm+swiglu",
        }
    }
}

/// One benchmark row: a layer's shape and what runs on it.
struct Case {
    label: &'static str,
    m: usize,
    n: usize,
    k: usize,
    op: Op,
}

fn cases(quick: bool) -> Vec<Case> {
    let c = |label, m, n, k, op| Case { label, m, n, k, op };
    let mut v = vec![
        c("square 8192", 8192, 8192, 8192, Op::Gemm),
        c("square 8192", 8192, 8192, 8192, Op::BiasGeluTanh),
        c("square 8192", 8192, 8192, 8192, Op::BiasResidualLayerNorm),
        c("square 8192", 8192, 8192, 8192, Op::SwiGlu),
    ];
    if quick {
        v.truncate(1);
        v.push(c("BERT-large FFN up", 4096, 4096, 1024, Op::BiasGeluTanh));
        v.push(c("LLaMA-3-8B MLP up", 8192, 28672, 4096, Op::SwiGlu));
        return v;
    }
    // BERT-large: d = 1024, FFN 4096, 8 × 512 tokens.
    v.extend([
        c("BERT-large QKV", 4096, 3072, 1024, Op::Gemm),
        c("BERT-large attn out", 4096, 1024, 1024, Op::Gemm),
        c(
            "BERT-large attn out",
            4096,
            1024,
            1024,
            Op::BiasResidualLayerNorm,
        ),
        c("BERT-large FFN up", 4096, 4096, 1024, Op::Gemm),
        c("BERT-large FFN up", 4096, 4096, 1024, Op::BiasGeluTanh),
        c("BERT-large FFN down", 4096, 1024, 4096, Op::Gemm),
        c(
            "BERT-large FFN down",
            4096,
            1024,
            4096,
            Op::BiasResidualLayerNorm,
        ),
        // BERT-base FFN up (a `bench/anchors/` shape).
        c("BERT-base FFN up", 4096, 3072, 768, Op::Gemm),
        c("BERT-base FFN up", 4096, 3072, 768, Op::BiasGeluTanh),
    ]);
    // LLaMA-3-8B: d = 4096, 32 query and 8 KV heads of 128, MLP 14336, 8192 tokens.
    v.extend([
        c("LLaMA-3-8B QKV", 8192, 6144, 4096, Op::Gemm),
        c("LLaMA-3-8B O proj", 8192, 4096, 4096, Op::Gemm),
        c("LLaMA-3-8B MLP up", 8192, 28672, 4096, Op::Gemm),
        c("LLaMA-3-8B MLP up", 8192, 28672, 4096, Op::SwiGlu),
        c("LLaMA-3-8B MLP down", 8192, 4096, 14336, Op::Gemm),
        // LLaMA-3-1B MLP up (the `bench/anchors/` SwiGLU shape: torch.compile 0.903 ms).
        c("LLaMA-3-1B MLP up", 8192, 16384, 2048, Op::Gemm),
        c("LLaMA-3-1B MLP up", 8192, 16384, 2048, Op::SwiGlu),
    ]);
    v
}

/// One rotating set of operands.
struct Set {
    a: Tensor,
    b: Tensor,
    c: Tensor,
    /// cuBLAS's M×N output where ours is narrower (SwiGLU writes M×N/2).
    gemm_out: Option<Tensor>,
    bias: Tensor,
    residual: Option<Tensor>,
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

fn make_sets(gpu: &Gpu, case: &Case) -> Result<Vec<Set>> {
    let (m, n, k) = (case.m, case.n, case.k);
    let out_n = if case.op == Op::SwiGlu { n / 2 } else { n };
    let residual = case.op == Op::BiasResidualLayerNorm;
    let bytes =
        2 * (m * k + n * k + m * out_n * (1 + residual as usize) + m * n * (out_n != n) as usize);
    // Enough sets to exceed twice the L2, at most 8 and at most ~12 GB in all.
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
                c: Tensor::zeros(gpu, m, out_n, DType::Bf16)?,
                gemm_out: if out_n != n {
                    Some(Tensor::zeros(gpu, m, n, DType::Bf16)?)
                } else {
                    None
                },
                bias: random_tensor(gpu, 1, n, seed + 2)?,
                residual: if residual {
                    Some(random_tensor(gpu, m, n, seed + 3)?)
                } else {
                    None
                },
                gamma: random_tensor(gpu, 1, n, seed + 4)?,
                beta: random_tensor(gpu, 1, n, seed + 5)?,
            })
        })
        .collect()
}

/// Our launcher for `op` on set `s`.
fn ours(g: &Gpu, op: Op, s: &mut Set) -> Result<Option<Plan>> {
    match op {
        Op::Gemm => hopper::h_gemm_bf16(g, &s.a, &s.b, &mut s.c),
        Op::BiasGeluTanh => hopper::h_bias_gelu_tanh(g, &s.a, &s.b, &mut s.c, &s.bias),
        Op::BiasResidualLayerNorm => {
            let r = s.residual.as_ref().expect("made for this op");
            hopper::h_bias_residual_layer_norm(
                g, &s.a, &s.b, &mut s.c, &s.bias, r, &s.gamma, &s.beta,
            )
        }
        Op::SwiGlu => hopper::h_swiglu(g, &s.a, &s.b, &mut s.c),
    }
}

/// cuBLASLt for one shape: handle, descriptors, workspace and the algorithm picked once.
struct Lt {
    handle: lts::cublasLtHandle_t,
    desc: lts::cublasLtMatmulDesc_t,
    layouts: [lts::cublasLtMatrixLayout_t; 3],
    algo: lts::cublasLtMatmulAlgo_t,
    workspace: Tensor,
    ws_bytes: usize,
    epilogue: lts::cublasLtEpilogue_t,
}

fn lt_err(e: impl std::fmt::Debug) -> Error {
    Error::invalid("cublasLt", "success", format!("{e:?}"))
}

impl Lt {
    /// cuBLASLt's `C(M×N) = A(M×K)·B(N×K)ᵀ [+ bias, GELU]`, bf16, f32 accumulation.
    fn new(
        gpu: &Gpu,
        m: usize,
        n: usize,
        k: usize,
        epilogue: lts::cublasLtEpilogue_t,
        bias: u64,
    ) -> Result<Self> {
        let ws_bytes = 32usize << 20;
        let workspace = Tensor::zeros(gpu, 1, ws_bytes / 2, DType::Bf16)?;
        let bf = lts::cudaDataType_t::CUDA_R_16BF;
        unsafe {
            let handle = lt::create_handle().map_err(lt_err)?;
            let desc = lt::create_matmul_desc(
                lts::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                lts::cudaDataType_t::CUDA_R_32F,
            )
            .map_err(lt_err)?;
            let set = |attr, v: *const std::ffi::c_void, size| {
                lt::set_matmul_desc_attribute(desc, attr, v, size).map_err(lt_err)
            };
            let t: i32 = 1;
            let nt: i32 = 0;
            set(
                lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                &t as *const i32 as *const _,
                4,
            )?;
            set(
                lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                &nt as *const i32 as *const _,
                4,
            )?;
            set(
                lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE,
                &epilogue as *const _ as *const _,
                std::mem::size_of::<lts::cublasLtEpilogue_t>(),
            )?;
            if epilogue != lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT {
                set(
                    lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    &bias as *const u64 as *const _,
                    8,
                )?;
            }
            // Column-major: Cᵀ (N×M, ld N) = op(B buffer = K×N, ld K)ᵀ · (A buffer = K×M, ld K).
            let la = lt::create_matrix_layout(bf, k as u64, n as u64, k as i64).map_err(lt_err)?;
            let lb = lt::create_matrix_layout(bf, k as u64, m as u64, k as i64).map_err(lt_err)?;
            let lc = lt::create_matrix_layout(bf, n as u64, m as u64, n as i64).map_err(lt_err)?;
            let pref = lt::create_matmul_pref().map_err(lt_err)?;
            lt::set_matmul_pref_attribute(
                pref,
                lts::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws_bytes as *const usize as *const _,
                std::mem::size_of::<usize>(),
            )
            .map_err(lt_err)?;
            let h = lt::get_matmul_algo_heuristic(handle, desc, la, lb, lc, lc, pref)
                .map_err(lt_err)?;
            lt::destroy_matmul_pref(pref).map_err(lt_err)?;
            Ok(Lt {
                handle,
                desc,
                layouts: [la, lb, lc],
                algo: h.algo,
                workspace,
                ws_bytes,
                epilogue,
            })
        }
    }

    fn run(&self, g: &Gpu, s: &Set) -> Result<()> {
        let (alpha, beta) = (1f32, 0f32);
        let [la, lb, lc] = self.layouts;
        let out = s.gemm_out.as_ref().unwrap_or(&s.c);
        unsafe {
            if self.epilogue != lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT {
                let bias = s.bias.desc().ptr;
                lt::set_matmul_desc_attribute(
                    self.desc,
                    lts::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    &bias as *const u64 as *const _,
                    8,
                )
                .map_err(lt_err)?;
            }
            lt::matmul(
                self.handle,
                self.desc,
                &alpha as *const f32 as *const _,
                &beta as *const f32 as *const _,
                s.b.desc().ptr as *const _,
                la,
                s.a.desc().ptr as *const _,
                lb,
                out.desc().ptr as *const _,
                lc,
                out.desc().ptr as *mut _,
                lc,
                &self.algo,
                self.workspace.desc().ptr as *mut _,
                self.ws_bytes,
                g.stream().cu_stream() as *mut _,
            )
            .map_err(lt_err)
        }
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        unsafe {
            for l in self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
            let _ = lt::destroy_matmul_desc(self.desc);
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

/// `reps` launches captured into one CUDA graph, for timing.
struct Timed {
    graph: Graph,
    reps: usize,
}

/// Captures enough launches of `launch` for about 4 ms of work (`est_ms` each, 4 to 200) into
/// a graph, after three untimed warm-up launches.
fn capture(
    gpu: &Gpu,
    est_ms: f64,
    mut launch: impl FnMut(&Gpu, usize) -> Result<()>,
) -> Result<Timed> {
    for i in 0..3 {
        launch(gpu, i)?;
    }
    gpu.synchronize()?;
    let reps = ((4.0 / est_ms.max(1e-3)).ceil() as usize).clamp(4, 200);
    let graph = gpu.capture(|g| {
        for i in 0..reps {
            launch(g, i)?;
        }
        Ok(())
    })?;
    graph.upload()?;
    Ok(Timed { graph, reps })
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

/// Relative Frobenius difference of `x` from `y`.
fn rel_diff(x: &[f32], y: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (p, q) in x.iter().zip(y) {
        num += (*p as f64 - *q as f64).powi(2);
        den += (*q as f64).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

struct Row {
    label: &'static str,
    op: Op,
    m: usize,
    n: usize,
    k: usize,
    ours_ms: f64,
    ours_entry: String,
    /// Ours with an autotuner, and the entry point it chose.
    tuned_ms: f64,
    tuned_entry: String,
    tiles_ms: Vec<(String, f64)>,
    cublas_gemm_ms: f64,
    cublaslt_fused_ms: Option<f64>,
    check: Option<f64>,
}

impl Row {
    fn tflops(&self, ms: f64) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64 / (ms * 1e-3) / 1e12
    }

    /// The issue's target for this row and whether ours (the launcher's choice) meets it.
    fn target(&self) -> (String, bool) {
        self.target_for(self.ours_ms)
    }

    /// The issue's target for this row and whether a time of `ms` meets it.
    fn target_for(&self, ms: f64) -> (String, bool) {
        match self.op {
            Op::Gemm => {
                let r = self.cublas_gemm_ms / ms;
                (format!("≥ 0.95× cuBLAS: {r:.3}×"), r >= 0.95)
            }
            Op::BiasGeluTanh => {
                let lt = self.cublaslt_fused_ms.unwrap_or(f64::NAN);
                let r = lt / ms;
                (format!("≥ 1.00× cuBLASLt fused: {r:.3}×"), r >= 1.0)
            }
            Op::BiasResidualLayerNorm | Op::SwiGlu => {
                let r = ms / self.cublas_gemm_ms;
                (format!("≤ 1.10× cuBLAS GEMM time: {r:.3}×"), r <= 1.10)
            }
        }
    }
}

/// Times one row. `tuner` is the autotuner of the "autotuned" column, set on `gpu` only while
/// that column is tuned and captured.
fn run_case(gpu: &Gpu, case: &Case, tuner: &mut Option<Autotuner>) -> Result<Row> {
    let mut sets = make_sets(gpu, case)?;
    let nsets = sets.len();
    let est_ms = 2.0 * (case.m * case.n * case.k) as f64 / 600e12 * 1e3;
    let op = case.op;

    // Ours (the launcher's choice), cuBLAS's plain GEMM and, for bias + GELU, cuBLASLt's fused
    // epilogue: captured once each, timed interleaved.
    let ours_graph = capture(gpu, est_ms, |g, i| {
        ours(g, op, &mut sets[i % nsets]).map(|_| ())
    })?;
    let ours_entry = last_entry().unwrap_or("?").to_string();
    // One launch outside the capture tunes (a capture times nothing), then the capture
    // launches the cached choice.
    gpu.set_autotuner(tuner.take());
    let tuned_graph = ours(gpu, op, &mut sets[0]).and_then(|_| {
        capture(gpu, est_ms, |g, i| {
            ours(g, op, &mut sets[i % nsets]).map(|_| ())
        })
    });
    *tuner = gpu.set_autotuner(None);
    let tuned_graph = tuned_graph?;
    let tuned_entry = last_entry().unwrap_or("?").to_string();
    let plain = Lt::new(
        gpu,
        case.m,
        case.n,
        case.k,
        lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
        0,
    )?;
    let plain_graph = capture(gpu, est_ms, |g, i| plain.run(g, &sets[i % nsets]))?;
    let fused = match op {
        Op::BiasGeluTanh => Some(Lt::new(
            gpu,
            case.m,
            case.n,
            case.k,
            lts::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
            sets[0].bias.desc().ptr,
        )?),
        _ => None,
    };
    let fused_graph = match &fused {
        Some(f) => Some(capture(gpu, est_ms, |g, i| f.run(g, &sets[i % nsets]))?),
        None => None,
    };
    // Ours with each Hopper tile forced (which one the launcher should pick), in the same
    // interleaved rounds: timed one after another, long rows drift by up to 10 % with the
    // clocks, more than the tiles differ. A tile that cannot run gets NaN.
    let mut tile_graphs = Vec::new();
    let global_residual = std::env::var_os("HOPPER_BENCH_GLOBAL_RESIDUAL").is_some();
    let direct_store = std::env::var_os("HOPPER_BENCH_DIRECT_STORE").is_some();
    for &t in TILES_SM90 {
        let o = Overrides {
            tile: Some(t),
            splits: None,
            global_residual,
            direct_store,
            ..Default::default()
        };
        let g = with_overrides(o, || {
            capture(gpu, est_ms, |g, i| {
                ours(g, op, &mut sets[i % nsets]).map(|_| ())
            })
        });
        tile_graphs.push((tile_name(&t), g.ok()));
    }
    let mut graphs = vec![&ours_graph, &plain_graph, &tuned_graph];
    graphs.extend(fused_graph.as_ref());
    let fixed = graphs.len();
    graphs.extend(tile_graphs.iter().filter_map(|(_, g)| g.as_ref()));
    let ms = time_interleaved(gpu, &graphs)?;
    let (ours_ms, cublas_gemm_ms, tuned_ms) = (ms[0], ms[1], ms[2]);
    let cublaslt_fused_ms = fused_graph.as_ref().map(|_| ms[3]);
    let mut tile_ms = ms[fixed..].iter();
    let tiles_ms = tile_graphs
        .iter()
        .map(|(name, g)| {
            let ms = g.as_ref().and_then(|_| tile_ms.next().copied());
            (name.clone(), ms.unwrap_or(f64::NAN))
        })
        .collect();
    drop(graphs);
    let check = match (&fused, op) {
        (Some(f), _) => Some(compare(gpu, op, &mut sets[0], |g, s| f.run(g, s))?),
        (None, Op::Gemm) => Some(compare(gpu, op, &mut sets[0], |g, s| plain.run(g, s))?),
        _ => None,
    };
    Ok(Row {
        label: case.label,
        op,
        m: case.m,
        n: case.n,
        k: case.k,
        ours_ms,
        ours_entry,
        tuned_ms,
        tuned_entry,
        tiles_ms,
        cublas_gemm_ms,
        cublaslt_fused_ms,
        check,
    })
}

/// Runs ours and `theirs` on the same inputs and returns the relative difference (a sanity
/// check that the timed kernels compute the same thing; the tests check against f64).
fn compare(
    gpu: &Gpu,
    op: Op,
    s: &mut Set,
    theirs: impl Fn(&Gpu, &Set) -> Result<()>,
) -> Result<f64> {
    ours(gpu, op, s)?;
    let mine = s.c.download_f32(gpu)?;
    theirs(gpu, s)?;
    let reference = s.c.download_f32(gpu)?;
    Ok(rel_diff(&mine, &reference))
}

fn tile_name(t: &TileShape) -> String {
    format!(
        "{}x{} {}",
        t.bm,
        t.bn,
        match t.warps_m {
            4 => "pingpong",
            16 => "cluster",
            _ => "coop",
        }
    )
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hopper bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Rows of the chart: label, ours, cuBLAS GEMM, cuBLASLt fused (if any), autotuned (if
/// timed), ms.
type ChartRow = (String, f64, f64, Option<f64>, Option<f64>);

/// The ratio chart: per (layer, op) label, ours ÷ cuBLAS GEMM, ours ÷ cuBLASLt fused and
/// autotuned ÷ cuBLAS GEMM.
fn chart(title: &str, rows: &[ChartRow], path: &std::path::Path) -> Result<()> {
    let groups: Vec<Bars> = rows
        .iter()
        .map(|(label, ours, gemm, fused, tuned)| Bars {
            label: label.clone(),
            ratios: [
                Some(ours / gemm),
                fused.map(|f| ours / f),
                tuned.map(|t| t / gemm),
            ],
        })
        .collect();
    draw_bars(
        title,
        &groups,
        &[
            "ours / cuBLAS GEMM",
            "ours / cuBLASLt fused epilogue",
            "autotuned / cuBLAS GEMM",
        ],
        path,
    )
    .map_err(|e| Error::LaunchLimit(format!("chart {}: {e}", path.display())))
}

/// The chart of an earlier run's CSV (this binary's columns), written next to it as `.png`.
fn chart_from_csv(csv: &std::path::Path) -> Result<()> {
    let text = std::fs::read_to_string(csv).map_err(|e| io(csv, e))?;
    let bad = |line: usize| {
        Error::invalid(
            "HOPPER_CHART_FROM",
            "this benchmark's CSV",
            format!("line {line}"),
        )
    };
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        // Written by `run`: no field contains a comma.
        let f: Vec<&str> = line.split(',').collect();
        let num = |j: usize| f.get(j).and_then(|v| v.parse::<f64>().ok());
        let (Some(ours), Some(gemm)) = (num(5), num(8)) else {
            return Err(bad(i + 1));
        };
        // Runs before the autotuned column have 12 fields.
        rows.push((format!("{} {}", f[0], f[1]), ours, gemm, num(9), num(12)));
    }
    let png = csv.with_extension("png");
    chart(
        "Hopper mainloop: time ratios vs cuBLAS (H200, bf16)",
        &rows,
        &png,
    )?;
    println!("wrote {}", png.display());
    Ok(())
}

/// The epilogues [`stage_costs`] times, each a Hopper kernel of `fused_gemm::kernels::hopper`.
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

fn launch_stage(
    g: &Gpu,
    which: &str,
    s: &mut Set,
    col_scale: &Tensor,
    half: &mut Tensor,
) -> Result<()> {
    match which {
        "[]" => hopper::h_gemm_bf16(g, &s.a, &s.b, &mut s.c),
        "[bias]" => hopper::h_bias_bf16(g, &s.a, &s.b, &mut s.c, &s.bias),
        "[scale(col), gelu_tanh]" => {
            hopper::h_colscale_gelu_tanh(g, &s.a, &s.b, &mut s.c, col_scale)
        }
        "[bias, gelu_tanh]" => hopper::h_bias_gelu_tanh(g, &s.a, &s.b, &mut s.c, &s.bias),
        "[bias, gelu]" => hopper::h_bias_gelu(g, &s.a, &s.b, &mut s.c, &s.bias),
        "[residual, silu]" => {
            let r = s.residual.as_ref().expect("stage sets carry a residual");
            hopper::h_residual_silu(g, &s.a, &s.b, &mut s.c, r)
        }
        "[swiglu]" => hopper::h_swiglu(g, &s.a, &s.b, half),
        "[bias, residual, layer_norm]" => {
            let r = s.residual.as_ref().expect("stage sets carry a residual");
            hopper::h_bias_residual_layer_norm(
                g, &s.a, &s.b, &mut s.c, &s.bias, r, &s.gamma, &s.beta,
            )
        }
        other => Err(Error::invalid(
            "stage kernel",
            "one of STAGE_KERNELS",
            other,
        )),
    }
    .map(|_| ())
}

/// Times every epilogue of [`STAGE_KERNELS`] on the same shapes (launcher's tile choice),
/// interleaved, so differences give each stage's cost on the Hopper mainloop.
fn stage_costs(gpu: &Gpu) -> Result<()> {
    let once = std::env::var_os("HOPPER_BENCH_ONCE").is_some();
    for &(m, n, k) in &[
        (4096usize, 4096usize, 1024usize),
        (4096, 3072, 768),
        (4096, 1024, 1024),
        (8192, 8192, 8192),
    ] {
        let case = Case {
            label: "stages",
            m,
            n,
            k,
            op: Op::BiasResidualLayerNorm,
        };
        // The LayerNorm op's sets: they carry an M×N residual.
        let mut sets = make_sets(gpu, &case)?;
        let nsets = sets.len();
        let col_scale = Tensor::from_f32(gpu, 1, n, DType::F32, &vec![0.5; n])?;
        // SwiGLU's M×N/2 output.
        let mut half = Tensor::zeros(gpu, m, n / 2, DType::Bf16)?;
        let est_ms = 2.0 * (m * n * k) as f64 / 600e12 * 1e3;
        if once {
            for &which in STAGE_KERNELS {
                launch_stage(gpu, which, &mut sets[0], &col_scale, &mut half)?;
                gpu.synchronize()?;
                println!(
                    "{m}x{n}x{k} {which}: launched once ({})",
                    last_entry().unwrap_or("?")
                );
            }
            continue;
        }
        // Each epilogue as the launcher plans it (C stored with TMA where it can, the last
        // partial round of ping-pong tiles split along K where the model says so, a norm's
        // finishing kernel after the GEMM), then with one of those choices changed: per-thread
        // stores (`Overrides::direct_store`), the last round whole (`Overrides::tail_splits =
        // Some(1)`), the residual loaded per thread with C still stored with TMA
        // (`Overrides::global_residual`), the finishing kernel launched as the GEMM's
        // programmatic dependent (`Overrides::dependent_finish`).
        let mut graphs = Vec::new();
        let mut kernels = Vec::new();
        for &which in STAGE_KERNELS {
            let mut variants = vec![
                Overrides::default(),
                Overrides {
                    direct_store: true,
                    ..Default::default()
                },
                Overrides {
                    tail_splits: Some(1),
                    ..Default::default()
                },
            ];
            if which.contains("residual") {
                variants.push(Overrides {
                    global_residual: true,
                    ..Default::default()
                });
            }
            if which.contains("norm") {
                variants.push(Overrides {
                    dependent_finish: true,
                    ..Default::default()
                });
            }
            // What the launcher's own plan did (the first variant), and whether the variant
            // that asks for a dependent finishing kernel got one.
            let mut planned = None;
            let mut dependent = false;
            for &o in &variants {
                graphs.push(with_overrides(o, || {
                    capture(gpu, est_ms, |g, i| {
                        launch_stage(g, which, &mut sets[i % nsets], &col_scale, &mut half)
                    })
                })?);
                planned.get_or_insert((
                    last_entry().unwrap_or("?"),
                    last_stored_with_tma(),
                    last_residual_with_tma(),
                    last_tail_splits(),
                ));
                dependent |= o.dependent_finish && last_finish_dependent();
            }
            let (entry, tma, tma_residual, pieces) = planned.expect("at least one variant");
            kernels.push((which, variants, entry, tma, tma_residual, pieces, dependent));
        }
        let ms = time_interleaved(gpu, &graphs.iter().collect::<Vec<_>>())?;
        let mut at = 0;
        for (which, variants, entry, tma, tma_residual, pieces, dependent) in kernels {
            let ms = &ms[at..at + variants.len()];
            at += variants.len();
            let mut notes = vec![format!(
                "direct stores {:.4} ms{}",
                ms[1],
                if tma { "" } else { "; no TMA store here" }
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
                        if tma_residual {
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
                "{m:>5}x{n:>5}x{k:>5} {which:<26} {:.4} ms  {:.0} TF/s  ({})  {entry}",
                ms[0],
                2.0 * (m * n * k) as f64 / (ms[0] * 1e-3) / 1e12,
                notes.join("; "),
            );
        }
    }
    Ok(())
}

fn run() -> Result<()> {
    if let Some(csv) = std::env::var_os("HOPPER_CHART_FROM") {
        return chart_from_csv(std::path::Path::new(&csv));
    }
    let gpu = Gpu::new(0)?;
    // "ours" is the model's choice even under FUSED_GEMM_AUTOTUNE=1; the autotuned column has
    // its own tuner.
    gpu.set_autotuner(None);
    if std::env::var_os("HOPPER_BENCH_STAGES").is_some() {
        return stage_costs(&gpu);
    }
    let arch = gpu.module_arch(&fused_gemm::ptx::BUILTIN)?;
    println!(
        "device: {} ({} SMs), module {arch}",
        gpu.name(),
        gpu.props().sm_count
    );
    if arch != "sm_90a" {
        return Err(Error::LaunchLimit(format!(
            "the Hopper benchmark needs an H100/H200 (sm_90a module); this device loads {arch}"
        )));
    }
    // SAFETY: probes for the library before cudarc would panic on its absence.
    if !std::panic::catch_unwind(|| unsafe { lts::is_culib_present() }).unwrap_or(false) {
        return Err(Error::LaunchLimit("libcublasLt not found".into()));
    }
    let quick = std::env::var_os("HOPPER_BENCH_QUICK").is_some();
    let out_dir = std::path::PathBuf::from(
        std::env::var("HOPPER_BENCH_OUT").unwrap_or_else(|_| "bench/results".into()),
    );
    std::fs::create_dir_all(&out_dir).map_err(|e| io(&out_dir, e))?;

    // The autotuned column's cache: fresh, so that every row is tuned in this run.
    let tune_dir = std::env::temp_dir().join(format!("fused-gemm-hopper-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tune_dir);
    let mut tuner = Some(Autotuner::new(&tune_dir));
    // A profiler's filter: only the rows whose label contains this text.
    let only = std::env::var("HOPPER_BENCH_ROWS").unwrap_or_default();
    let mut rows = Vec::new();
    for case in cases(quick).into_iter().filter(|c| c.label.contains(&only)) {
        print!(
            "{:<22} {:<30} {:>5}x{:>5}x{:>5} ... ",
            case.label,
            case.op.name(),
            case.m,
            case.n,
            case.k
        );
        let row = run_case(&gpu, &case, &mut tuner)?;
        let (target, met) = row.target();
        println!(
            "ours {:.3} ms ({:.0} TF/s) cuBLAS {:.3} ms{} — {target} {}",
            row.ours_ms,
            row.tflops(row.ours_ms),
            row.cublas_gemm_ms,
            row.cublaslt_fused_ms
                .map(|x| format!(" cuBLASLt fused {x:.3} ms"))
                .unwrap_or_default(),
            if met { "met" } else { "MISSED" }
        );
        println!(
            "{:>88} autotuned {:.3} ms — {} ({})",
            "",
            row.tuned_ms,
            row.target_for(row.tuned_ms).0,
            row.tuned_entry
        );
        rows.push(row);
    }

    // `hopper-h200.*` on an H200: results of different cards never overwrite each other.
    let slug = fused_gemm_bench::report::device_slug(gpu.name());
    let stem = format!("hopper-{}", slug.strip_prefix("nvidia-").unwrap_or(&slug));
    let mut csv = String::from(
        "label,op,m,n,k,ours_ms,ours_tflops,ours_entry,cublas_gemm_ms,cublaslt_fused_ms,tile_times_ms,check_rel_diff,tuned_ms,tuned_entry\n",
    );
    for r in &rows {
        let tiles: Vec<String> = r
            .tiles_ms
            .iter()
            .map(|(t, ms)| format!("{t}={ms:.4}"))
            .collect();
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{:.4},{:.1},{},{:.4},{},{},{},{:.4},{}",
            r.label,
            r.op.name(),
            r.m,
            r.n,
            r.k,
            r.ours_ms,
            r.tflops(r.ours_ms),
            r.ours_entry,
            r.cublas_gemm_ms,
            r.cublaslt_fused_ms
                .map(|x| format!("{x:.4}"))
                .unwrap_or_default(),
            tiles.join(";"),
            r.check.map(|x| format!("{x:.2e}")).unwrap_or_default(),
            r.tuned_ms,
            r.tuned_entry
        );
    }
    let csv_path = out_dir.join(format!("{stem}.csv"));
    std::fs::write(&csv_path, &csv).map_err(|e| io(&csv_path, e))?;
    let ratios: Vec<_> = rows
        .iter()
        .map(|r| {
            let label = format!("{} {}", r.label, r.op.name());
            (
                label,
                r.ours_ms,
                r.cublas_gemm_ms,
                r.cublaslt_fused_ms,
                Some(r.tuned_ms),
            )
        })
        .collect();
    let title = format!(
        "Hopper mainloop: time ratios vs cuBLAS ({}, bf16)",
        gpu.name()
    );
    chart(&title, &ratios, &out_dir.join(format!("{stem}.png")))?;

    let cubin = out_dir.join("fused_gemm.sm_90a.cubin");
    let module = fused_gemm::ptx::BUILTIN
        .modules
        .iter()
        .find(|m| m.arch == "sm_90a")
        .expect("checked above");
    if !module.cubin.is_empty() {
        std::fs::write(&cubin, module.cubin).map_err(|e| io(&cubin, e))?;
    }
    let mut md = format!(
        "# Hopper mainloop vs cuBLASLt ({}, bf16)\n\n`cargo run --release -p fused-gemm-bench --bin hopper`{}\n\n\
         Median per-launch time of CUDA-graph replays over rotating buffers (> 2× L2). \
         \"ours\" is the launcher's choice (the model's tile); \"autotuned\" is the launcher with an autotuner, which timed the candidates on this device first; \
         the tile columns force each Hopper tile (all timed in the same interleaved rounds). \
         Targets (issue 9): GEMM ≥ 0.95× cuBLAS; GEMM+bias+GELU ≥ cuBLASLt's fused epilogue; \
         +residual+LayerNorm and +SwiGLU within 10% of the plain cuBLAS GEMM.\n\n\
         | layer | op | M×N×K | ours ms | TF/s | cuBLAS GEMM ms | cuBLASLt fused ms | target | autotuned ms | autotuned target | {} | check |\n\
         |---|---|---|---:|---:|---:|---:|---|---:|---|{}---|\n",
        gpu.name(),
        match (quick, only.is_empty()) {
            (true, _) => " (HOPPER_BENCH_QUICK)".to_string(),
            (false, false) => format!(" (HOPPER_BENCH_ROWS={only})"),
            (false, true) => String::new(),
        },
        TILES_SM90
            .iter()
            .map(tile_name)
            .collect::<Vec<_>>()
            .join(" | "),
        "---:|".repeat(TILES_SM90.len())
    );
    for r in &rows {
        let (target, met) = r.target();
        let (tuned_target, tuned_met) = r.target_for(r.tuned_ms);
        let _ = writeln!(
            md,
            "| {} | {} | {}×{}×{} | {:.3} | {:.0} | {:.3} | {} | {}{} | {:.3} | {}{} | {} | {} |",
            r.label,
            r.op.name(),
            r.m,
            r.n,
            r.k,
            r.ours_ms,
            r.tflops(r.ours_ms),
            r.cublas_gemm_ms,
            r.cublaslt_fused_ms
                .map(|x| format!("{x:.3}"))
                .unwrap_or("–".into()),
            target,
            if met { " ✓" } else { " ✗" },
            r.tuned_ms,
            tuned_target,
            if tuned_met { " ✓" } else { " ✗" },
            r.tiles_ms
                .iter()
                .map(|(_, ms)| format!("{ms:.3}"))
                .collect::<Vec<_>>()
                .join(" | "),
            r.check.map(|x| format!("{x:.1e}")).unwrap_or("–".into())
        );
    }
    let _ = write!(
        md,
        "\nSASS check (every Hopper entry point issues HGMMA, none spills):\n\n```text\n\
         cuobjdump --dump-sass {p} | grep -c HGMMA\n\
         cuobjdump --dump-sass {p} | grep -cE 'STL|LDL'\n```\n",
        p = cubin.display()
    );
    let md_path = out_dir.join(format!("{stem}.md"));
    std::fs::write(&md_path, &md).map_err(|e| io(&md_path, e))?;
    println!("\n{md}");
    println!("wrote {} and {}", csv_path.display(), md_path.display());
    if let Some(t) = &tuner {
        println!("autotuner: {} warnings", t.warnings().len());
        // What the tuner measured per candidate, beside the table.
        let kept = out_dir.join(format!("{stem}-autotune.json"));
        if let Err(e) = std::fs::copy(t.cache_path(), &kept) {
            println!("autotuner cache not kept: {e}");
        }
    }
    let _ = std::fs::remove_dir_all(&tune_dir);
    Ok(())
}

fn io(path: &std::path::Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}
