//! The CUDA backend: the forward pass through the project's fused kernels, f16 or bf16 storage
//! with f32 accumulation.
//!
//! | step | kernel |
//! |---|---|
//! | embeddings + LayerNorm | [`fused_gemm::bert::embeddings`] |
//! | QKV projection + bias | [`GpuElement::gemm_bias`] (`#[fused_gemm(epilogue = [bias])]`) |
//! | attention (key-padding mask) | [`fused_gemm::bert::attention`] (the model's heads, tensor cores; see [`layout`]) |
//! | out-proj + bias + residual + LayerNorm | [`GpuElement::gemm_bias_residual_layer_norm`] |
//! | FFN up + bias + GELU | [`GpuElement::gemm_bias_gelu`] |
//! | FFN down + bias + residual + LayerNorm | [`GpuElement::gemm_bias_residual_layer_norm`] |
//! | mean pooling + L2 normalization | [`fused_gemm::bert::mean_pool_l2`] (f32 output) |
//!
//! # Deferred LayerNorms ([`CudaOptions::deferred_layer_norm`])
//! A post-norm LayerNorm needs whole rows, so a GEMM that finishes one needs a tile spanning
//! the row, a cluster or a second kernel. Deferred (CODA's reparameterisation), each GEMM
//! that produces a norm's input stores it centred with per-row statistics per 64 columns
//! (`row_moments`), and the GEMMs that read it normalize: the next GEMM through folded
//! weights (`folded_layer_norm`), the next residual on load (`normed_residual`).
//!
//! | step | layer 0 | layers 1.. | last layer |
//! |---|---|---|---|
//! | QKV projection | `bias` | `folded_layer_norm` (norm of the previous FFN) | as before |
//! | out-proj | `bias, residual, row_moments` | `bias, normed_residual, row_moments` | as before |
//! | FFN up | `folded_layer_norm, gelu` | the same | the same |
//! | FFN down | `bias, normed_residual, row_moments` | the same | `bias, normed_residual, layer_norm` |
//!
//! The last FFN down normalizes in full, so pooling reads normalized rows. The folded weights
//! replace the plain QKV and FFN-up weights on the device (no second copy).
//!
//! Weights are converted from the f32 host copy to the element type and uploaded once, in
//! [`CudaBackend::new`]. Activations stay on the device in the element type; only the token
//! batch goes up and the pooled `[B, d]` f32 embeddings come back.
//!
//! # The throughput path ([`Backend::run_batch`] without timings)
//! - Batches are padded to a length multiple of [`CudaOptions::seq_multiple`] (padding is
//!   masked, so results do not change), and a *bucket* per `(B, T)` keeps the token buffers
//!   ([`SeqBatch`]), the activations and the pooled output: no allocation per batch once a shape
//!   has been seen, and one refill of ids and lengths per batch.
//! - With [`CudaOptions::graphs`], the first batches of a bucket run eagerly; after
//!   [`CudaOptions::graph_after_runs`] of them the forward is captured as a CUDA graph
//!   ([`Gpu::capture`]) and later batches of that shape replay it.
//!   A graph holds device addresses, including the GEMM launcher's split-K / statistics
//!   workspace on the backend's [`Gpu`]: the backend watches the workspace sizes its plans need
//!   and re-captures when a launch may have grown (re-allocated) it. Do not launch other
//!   GEMMs on the same `Gpu` handle (or a clone) while the backend's graphs are live; give the
//!   backend a handle of its own (`Gpu::new`) if you do.
//!
//! With timings ([`forward`] with a [`Timings`]), every step runs eagerly between two CUDA
//! events and the stream is synchronized after it: per-kernel device times, serialized.

pub mod bench;
pub mod element;
pub mod layout;

use std::collections::HashMap;
use std::time::Duration;

use fused_gemm::bert::{self, EmbeddingWeights as DeviceTables, SeqBatch};
use fused_gemm::device::epilogue::stages::MOMENT_GROUP_COLS;
use fused_gemm::host::cudarc::driver::sys::CUevent_flags;
use fused_gemm::host::cudarc::driver::{CudaEvent, CudaSlice, DeviceRepr, ValidAsZeroBits};
use fused_gemm::host::graph::Graph;
use fused_gemm::host::kernel::MatRef;
use fused_gemm::host::plan::{NormPath, Plan};
use fused_gemm::host::weights::fold_layer_norm;
use fused_gemm::host::{Gpu, LaunchReport};

use crate::backend::{Activations, Backend, Dtype, Stage, Timings, encode, forward};
use crate::config::{Activation, MiniLmConfig};
use crate::error::{Error, Result};
use crate::tokenize::TokenBatch;
use crate::weights::{LayerNormWeights, Linear, ModelWeights};

pub use element::{GpuElement, LAYER_NORM_EPS};
pub use layout::HeadLayout;

/// Tuning of the throughput path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaOptions {
    /// Capture one CUDA graph per `(B, T)` bucket and replay it for later batches of that shape.
    pub graphs: bool,
    /// Eager runs of a shape before its graph is captured (at least 1): a shape seen once costs
    /// no capture.
    pub graph_after_runs: u32,
    /// Pad each batch's length T up to a multiple of this (at least 1; capped at the position
    /// table), so that batches of similar length share buffers and graphs.
    pub seq_multiple: usize,
    /// Buckets (buffers and graph of one `(B, T)`) kept at most; the least recently used is
    /// dropped first.
    pub max_buckets: usize,
    /// Fill every new activation and output buffer with NaN, so that an element a kernel fails
    /// to write shows up in the embeddings (tests).
    pub poison: bool,
    /// Defer each LayerNorm to the GEMMs that read its output (see the [module docs](self)).
    pub deferred_layer_norm: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            graphs: true,
            graph_after_runs: 2,
            seq_multiple: 16,
            max_buckets: 8,
            poison: false,
            deferred_layer_norm: false,
        }
    }
}

/// A row-major `[rows, cols]` matrix on the GPU in a buffer of exactly `rows·cols` elements,
/// with, for the output of a deferred LayerNorm's producer, its row statistics.
#[derive(Debug)]
pub struct DeviceMatrix<T> {
    buf: CudaSlice<T>,
    rows: usize,
    cols: usize,
    /// `[rows, 4·⌈cols/64⌉]` f32 `row_moments` statistics (see [`element`]).
    moments: Option<CudaSlice<f32>>,
}

/// `f32` values per row of a `row_moments` statistics matrix for `cols` columns.
fn moments_cols(cols: usize) -> usize {
    4 * cols.div_ceil(MOMENT_GROUP_COLS as usize)
}

impl<T: GpuElement> DeviceMatrix<T> {
    /// A new matrix, zeroed, or NaN-filled when `poison`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or overflowing shape; device out of memory.
    pub fn new(gpu: &Gpu, rows: usize, cols: usize, poison: bool) -> Result<Self> {
        let len = checked_len(rows, cols)?;
        let buf = fresh(gpu, len, poison.then(|| T::from_f32(f32::NAN)))?;
        Ok(DeviceMatrix {
            buf,
            rows,
            cols,
            moments: None,
        })
    }

    /// The same matrix with a statistics buffer for a deferred LayerNorm (zeroed, or NaN when
    /// `poison`).
    ///
    /// # Errors
    /// Device out of memory.
    pub fn with_moments(mut self, gpu: &Gpu, poison: bool) -> Result<Self> {
        let len = checked_len(self.rows, moments_cols(self.cols))?;
        self.moments = Some(fresh(gpu, len, poison.then_some(f32::NAN))?);
        Ok(self)
    }

    /// A matrix holding `data` (`rows·cols` values, row-major) converted from f32.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `data` has the wrong length; device errors.
    pub fn from_f32(gpu: &Gpu, rows: usize, cols: usize, data: &[f32]) -> Result<Self> {
        if checked_len(rows, cols)? != data.len() {
            return Err(Error::invalid(
                "matrix data",
                format!("{} values ([{rows}, {cols}])", rows * cols),
                data.len(),
            ));
        }
        Ok(DeviceMatrix {
            buf: upload_as::<T>(gpu, data)?,
            rows,
            cols,
            moments: None,
        })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (the row stride).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The device buffer, `rows·cols` elements.
    pub fn buffer(&self) -> &CudaSlice<T> {
        &self.buf
    }

    /// The whole matrix as a GEMM operand.
    fn mat(&self) -> Result<MatRef<'_, T>> {
        Ok(MatRef::new(&self.buf, self.rows, self.cols)?)
    }

    /// The row statistics as a GEMM operand.
    fn moments(&self, what: &'static str) -> Result<MatRef<'_, f32>> {
        let m = self.moments.as_ref().ok_or_else(|| {
            Error::invalid(what, "a matrix with deferred-LayerNorm statistics", "none")
        })?;
        Ok(MatRef::new(m, self.rows, moments_cols(self.cols))?)
    }

    /// Copies the matrix to the host, widened to f32 (synchronizes).
    ///
    /// # Errors
    /// Driver errors.
    pub fn download_f32(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        Ok(gpu
            .download(&self.buf)?
            .iter()
            .map(|v| v.to_f32())
            .collect())
    }

    fn expect(&self, rows: usize, cols: usize, what: &'static str) -> Result<()> {
        if (self.rows, self.cols) != (rows, cols) {
            return Err(Error::invalid(
                what,
                format!("[{rows}, {cols}]"),
                format!("[{}, {}]", self.rows, self.cols),
            ));
        }
        Ok(())
    }
}

/// A new buffer of `len` elements, zeroed, or filled with `fill`.
fn fresh<U: DeviceRepr + ValidAsZeroBits + Clone>(
    gpu: &Gpu,
    len: usize,
    fill: Option<U>,
) -> Result<CudaSlice<U>> {
    Ok(match fill {
        Some(v) => gpu.upload(&vec![v; len])?,
        None => gpu.zeros(len)?,
    })
}

/// Overwrites every element of `buf` with `v` (queued on `gpu`'s stream).
fn refill<U: DeviceRepr + Clone>(gpu: &Gpu, buf: &mut CudaSlice<U>, v: U) -> Result<()> {
    let fill = vec![v; buf.len()];
    gpu.stream()
        .memcpy_htod(&fill, buf)
        .map_err(fused_gemm::Error::from)?;
    Ok(())
}

fn checked_len(rows: usize, cols: usize) -> Result<usize> {
    rows.checked_mul(cols)
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::invalid("matrix shape", "non-empty", format!("[{rows}, {cols}]")))
}

/// `data` converted from f32 to `T` (round to nearest even) and uploaded.
fn upload_as<T: GpuElement>(gpu: &Gpu, data: &[f32]) -> Result<CudaSlice<T>> {
    let v: Vec<T> = data.iter().map(|&x| T::from_f32(x)).collect();
    Ok(gpu.upload(&v)?)
}

/// A linear layer on the device: weight `[N, K]` (PyTorch layout), bias `[N]`.
#[derive(Debug)]
struct DeviceLinear<T> {
    weight: DeviceMatrix<T>,
    bias: CudaSlice<T>,
}

impl<T: GpuElement> DeviceLinear<T> {
    fn new(gpu: &Gpu, n: usize, k: usize, weight: &[f32], bias: &[f32]) -> Result<Self> {
        if bias.len() != n {
            return Err(Error::invalid("bias", format!("{n} values"), bias.len()));
        }
        Ok(DeviceLinear {
            weight: DeviceMatrix::from_f32(gpu, n, k, weight)?,
            bias: upload_as(gpu, bias)?,
        })
    }

    fn from_linear(gpu: &Gpu, l: &Linear) -> Result<Self> {
        Self::new(gpu, l.out_features, l.in_features, &l.weight, &l.bias)
    }
}

/// A `Linear` layer with the deferred LayerNorm before it folded in
/// ([`fused_gemm::host::weights::fold_layer_norm`]): weight `B·diag(γ)` `[N, K]`, column sums
/// `[⌈K/64⌉, N]` f32, offset `β·Bᵀ + bias` `[N]` f32.
#[derive(Debug)]
struct DeviceFolded<T> {
    weight: DeviceMatrix<T>,
    colsum: CudaSlice<f32>,
    offset: CudaSlice<f32>,
}

impl<T: GpuElement> DeviceFolded<T> {
    fn new(gpu: &Gpu, l: &Linear, norm: &LayerNormWeights) -> Result<Self> {
        let (n, k) = (l.out_features, l.in_features);
        let folded = fold_layer_norm(
            &l.weight,
            Some(&l.bias),
            &norm.gamma,
            &norm.beta,
            n,
            k,
            <T as fused_gemm::host::tensor::HostElement>::DTYPE,
        )
        .map_err(|e| {
            Error::invalid("LayerNorm folded into a linear layer", "matching shapes", e)
        })?;
        Ok(DeviceFolded {
            weight: DeviceMatrix::from_f32(gpu, n, k, &folded.weight)?,
            colsum: gpu.upload(&folded.colsum)?,
            offset: gpu.upload(&folded.offset)?,
        })
    }

    fn colsum(&self) -> Result<MatRef<'_, f32>> {
        let (n, k) = (self.weight.rows, self.weight.cols);
        Ok(MatRef::new(
            &self.colsum,
            k.div_ceil(MOMENT_GROUP_COLS as usize),
            n,
        )?)
    }
}

/// A linear layer as uploaded: plain, or with the deferred LayerNorm before it folded in.
#[derive(Debug)]
enum Projection<T> {
    Plain(DeviceLinear<T>),
    Folded(DeviceFolded<T>),
}

impl<T: GpuElement> Projection<T> {
    /// `out = input·Wᵀ + b`, then erf GELU when `gelu`; folded, `input` is a deferred norm's
    /// centred output and its statistics are read (`what` names it in errors).
    fn launch(
        &self,
        gpu: &Gpu,
        input: &DeviceMatrix<T>,
        out: &mut DeviceMatrix<T>,
        gelu: bool,
        what: &'static str,
    ) -> Result<LaunchReport> {
        Ok(match self {
            Projection::Plain(p) => {
                let f = if gelu {
                    T::gemm_bias_gelu
                } else {
                    T::gemm_bias
                };
                f(
                    gpu,
                    &input.mat()?,
                    &p.weight.mat()?,
                    &mut out.mat()?,
                    &p.bias,
                )?
            }
            Projection::Folded(f) => {
                let launch = if gelu {
                    T::folded_gemm_gelu
                } else {
                    T::folded_gemm
                };
                launch(
                    gpu,
                    &input.mat()?,
                    &f.weight.mat()?,
                    &mut out.mat()?,
                    &input.moments(what)?,
                    &f.colsum()?,
                    &f.offset,
                )?
            }
        })
    }

    /// The weight as uploaded, `[N, K]`.
    fn weight(&self) -> &DeviceMatrix<T> {
        match self {
            Projection::Plain(p) => &p.weight,
            Projection::Folded(f) => &f.weight,
        }
    }

    /// `l`, with `norm` folded in when given.
    fn new(gpu: &Gpu, l: &Linear, norm: Option<&LayerNormWeights>) -> Result<Self> {
        Ok(match norm {
            Some(n) => Projection::Folded(DeviceFolded::new(gpu, l, n)?),
            None => Projection::Plain(DeviceLinear::from_linear(gpu, l)?),
        })
    }
}

/// LayerNorm γ and β on the device, `[d]` each.
#[derive(Debug)]
struct DeviceNorm<T> {
    gamma: CudaSlice<T>,
    beta: CudaSlice<T>,
}

impl<T: GpuElement> DeviceNorm<T> {
    fn new(gpu: &Gpu, ln: &LayerNormWeights) -> Result<Self> {
        Ok(DeviceNorm {
            gamma: upload_as(gpu, &ln.gamma)?,
            beta: upload_as(gpu, &ln.beta)?,
        })
    }
}

/// One layer's weights on the device (QKV packed `[3d, d]`, rows Q | K | V).
#[derive(Debug)]
struct DeviceLayer<T> {
    qkv: Projection<T>,
    attn_out: DeviceLinear<T>,
    attn_norm: DeviceNorm<T>,
    ffn_up: Projection<T>,
    ffn_down: DeviceLinear<T>,
    ffn_norm: DeviceNorm<T>,
}

/// The embedding tables and their LayerNorm on the device.
#[derive(Debug)]
struct DeviceEmbeddings<T> {
    word: CudaSlice<T>,
    position: CudaSlice<T>,
    token_type: CudaSlice<T>,
    norm: DeviceNorm<T>,
}

/// The workspace sizes the GEMM plans so far needed (split-K partials, counters, row
/// statistics). The launcher re-allocates a workspace only when a plan needs more than it has,
/// so `epoch` (bumped whenever a need exceeds the high-water mark) changes at least whenever a
/// workspace address may have changed.
#[derive(Clone, Copy, Debug, Default)]
struct WorkspaceWatch {
    high: [u64; 3],
    epoch: u64,
}

impl WorkspaceWatch {
    fn note(&mut self, plan: &Plan) {
        let split = plan.splits > 1;
        let stats = match plan.norm {
            NormPath::Partials { stats_bytes, .. } => stats_bytes,
            NormPath::None
            | NormPath::InCta
            | NormPath::Cluster { .. }
            | NormPath::GlobalExchange { .. } => 0,
        };
        let need = [
            if split { plan.workspace_bytes } else { 0 },
            if split { plan.counter_bytes } else { 0 },
            stats,
        ];
        for (high, need) in self.high.iter_mut().zip(need) {
            if need > *high {
                *high = need;
                self.epoch += 1;
            }
        }
    }
}

/// Buffers (and the graph) of one `(B, T)` shape.
///
/// Field order matters: the graph, which holds the addresses of the buffers below, is dropped
/// first.
struct Bucket<T> {
    graph: Option<Graph>,
    /// [`WorkspaceWatch::epoch`] when the graph was captured.
    graph_epoch: u64,
    seq: SeqBatch,
    acts: Activations<DeviceMatrix<T>>,
    /// `[B, d]` f32.
    pooled: CudaSlice<f32>,
    /// Use counter value of the last batch (LRU).
    last_used: u64,
    /// Eager runs so far.
    eager_runs: u32,
}

/// The plan of each GEMM launched by the last steps, for reports (`(step, plan)`).
pub type PlanLog = Vec<(Stage, Plan)>;

/// The forward pass on one GPU with storage dtype `T` ([`half::f16`] or [`half::bf16`]).
pub struct CudaBackend<T: GpuElement> {
    gpu: Gpu,
    config: MiniLmConfig,
    heads: HeadLayout,
    options: CudaOptions,
    emb: DeviceEmbeddings<T>,
    layers: Vec<DeviceLayer<T>>,
    buckets: HashMap<(usize, usize), Bucket<T>>,
    uses: u64,
    watch: WorkspaceWatch,
    step_start: Option<CudaEvent>,
    graph_error: Option<String>,
    plans: PlanLog,
}

impl<T: GpuElement> std::fmt::Debug for CudaBackend<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("gpu", &self.gpu.name())
            .field("dtype", &T::CLI_DTYPE)
            .field("heads", &self.heads)
            .field("options", &self.options)
            .field("buckets", &self.buckets.len())
            .finish_non_exhaustive()
    }
}

/// Checks that `config` is a model the CUDA kernels compute exactly: erf GELU, LayerNorm ε =
/// [`LAYER_NORM_EPS`], hidden sizes within the BERT kernels' limits, a head dimension the
/// attention kernel is built for ([`fused_gemm::bert::HEAD_DIMS`]).
///
/// # Errors
/// [`Error::InvalidArgument`] (`model`) naming what does not fit.
pub fn check_config(config: &MiniLmConfig) -> Result<HeadLayout> {
    let unsupported =
        |expected: &str, actual: String| Err(Error::invalid("model", expected, actual));
    if config.activation != Activation::GeluErf {
        return unsupported(
            "hidden_act `gelu` (erf) on the GPU",
            format!("{:?}", config.activation),
        );
    }
    if config.layer_norm_eps != LAYER_NORM_EPS {
        return unsupported(
            "layer_norm_eps 1e-12 (compiled into the GPU kernels)",
            config.layer_norm_eps.to_string(),
        );
    }
    if config.hidden_size > bert::MAX_HIDDEN {
        return unsupported(
            &format!("hidden_size ≤ {}", bert::MAX_HIDDEN),
            config.hidden_size.to_string(),
        );
    }
    HeadLayout::for_kernel(config)
}

impl<T: GpuElement> CudaBackend<T> {
    /// Converts `weights` to `T`, uploads everything to `gpu`, and loads the kernels
    /// (the first load JIT-compiles the built-in PTX for the device).
    ///
    /// `gpu` is cloned; see the [module docs](self) about sharing it while graphs are live.
    ///
    /// # Errors
    /// As [`ModelWeights::check_shapes`] and [`check_config`]; device errors (out of memory,
    /// PTX not built or not loadable).
    pub fn new(gpu: &Gpu, weights: &ModelWeights, options: CudaOptions) -> Result<Self> {
        weights.check_shapes()?;
        let config = weights.config.clone();
        let heads = check_config(&config)?;
        let e = &weights.embeddings;
        let emb = DeviceEmbeddings {
            word: upload_as(gpu, &e.word)?,
            position: upload_as(gpu, &e.position)?,
            token_type: upload_as(gpu, &e.token_type)?,
            norm: DeviceNorm::new(gpu, &e.layer_norm)?,
        };
        let deferred = options.deferred_layer_norm;
        let mut layers = Vec::with_capacity(weights.layers.len());
        for (i, l) in weights.layers.iter().enumerate() {
            let norm_before_qkv = match i.checked_sub(1) {
                Some(prev) if deferred => Some(&weights.layers[prev].ffn_norm),
                _ => None,
            };
            layers.push(DeviceLayer {
                qkv: Projection::new(gpu, &l.qkv, norm_before_qkv)?,
                attn_out: DeviceLinear::from_linear(gpu, &l.attn_out)?,
                attn_norm: DeviceNorm::new(gpu, &l.attn_norm)?,
                ffn_up: Projection::new(gpu, &l.ffn_up, deferred.then_some(&l.attn_norm))?,
                ffn_down: DeviceLinear::from_linear(gpu, &l.ffn_down)?,
                ffn_norm: DeviceNorm::new(gpu, &l.ffn_norm)?,
            });
        }
        // Load the module now, so a PTX problem is reported here and the JIT time counts as
        // model loading.
        gpu.function(
            &fused_gemm::ptx::BUILTIN,
            fused_gemm::kernels::bert::POOL_L2_F32,
        )?;
        gpu.synchronize()?;
        Ok(CudaBackend {
            gpu: gpu.clone(),
            config,
            heads,
            options: CudaOptions {
                seq_multiple: options.seq_multiple.max(1),
                graph_after_runs: options.graph_after_runs.max(1),
                max_buckets: options.max_buckets.max(1),
                ..options
            },
            emb,
            layers,
            buckets: HashMap::new(),
            uses: 0,
            watch: WorkspaceWatch::default(),
            step_start: None,
            graph_error: None,
            plans: Vec::new(),
        })
    }

    /// The device handle the backend launches on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The head layout on the device.
    pub fn heads(&self) -> HeadLayout {
        self.heads
    }

    /// The options in effect.
    pub fn options(&self) -> CudaOptions {
        self.options
    }

    /// Why graph capture was turned off, if it failed (the backend then runs eagerly).
    pub fn graph_error(&self) -> Option<&str> {
        self.graph_error.as_deref()
    }

    /// Buckets currently holding a captured graph.
    pub fn graphs_live(&self) -> usize {
        self.buckets.values().filter(|b| b.graph.is_some()).count()
    }

    /// Refills every buffer of every bucket (activations, pooled output) with NaN, keeping
    /// graphs: a replay that fails to write an element then shows NaN (tests).
    ///
    /// # Errors
    /// Driver errors.
    pub fn poison_buckets(&mut self) -> Result<()> {
        let nan = T::from_f32(f32::NAN);
        for b in self.buckets.values_mut() {
            let a = &mut b.acts;
            for m in [&mut a.x, &mut a.h, &mut a.qkv, &mut a.ctx, &mut a.mid] {
                refill(&self.gpu, &mut m.buf, nan)?;
                if let Some(moments) = &mut m.moments {
                    refill(&self.gpu, moments, f32::NAN)?;
                }
            }
            refill(&self.gpu, &mut b.pooled, f32::NAN)?;
        }
        Ok(self.gpu.synchronize()?)
    }

    /// Takes the plans of the GEMMs launched since the last call.
    pub fn take_plans(&mut self) -> PlanLog {
        std::mem::take(&mut self.plans)
    }

    fn note(&mut self, stage: Stage, report: LaunchReport) {
        if let Some(p) = report.plan {
            self.watch.note(&p);
            if self.plans.len() < 4096 {
                self.plans.push((stage, p));
            }
        }
    }

    /// Checks a token batch against the model's tables ([`TokenBatch::validate`]) before
    /// anything is uploaded: the kernels of a replayed graph are not re-validated.
    fn check_batch(&self, batch: &TokenBatch) -> Result<()> {
        batch.validate(&self.config)
    }

    /// `batch` padded on the right to a length multiple of [`CudaOptions::seq_multiple`]
    /// (capped at the position table); the padding is masked.
    fn bucketed(&self, batch: &TokenBatch) -> TokenBatch {
        let limit = self.config.max_position_embeddings.max(batch.seq_len);
        let t = batch
            .seq_len
            .next_multiple_of(self.options.seq_multiple)
            .min(limit);
        pad_to(batch, t)
    }

    fn lengths_u32(batch: &TokenBatch) -> Vec<u32> {
        batch.lengths.iter().map(|&l| l as u32).collect()
    }

    /// A new bucket for `batch`'s shape, its token buffers already holding `batch`.
    fn new_bucket(&self, batch: &TokenBatch) -> Result<Bucket<T>> {
        let seq = SeqBatch::new(
            &self.gpu,
            &batch.ids,
            &Self::lengths_u32(batch),
            batch.seq_len,
        )?;
        let acts = self.alloc_activations(batch.tokens())?;
        let d = self.config.hidden_size;
        let pooled = fresh(
            &self.gpu,
            batch.batch * d,
            self.options.poison.then_some(f32::NAN),
        )?;
        Ok(Bucket {
            graph: None,
            graph_epoch: 0,
            seq,
            acts,
            pooled,
            last_used: 0,
            eager_runs: 0,
        })
    }

    fn alloc_activations(&self, rows: usize) -> Result<Activations<DeviceMatrix<T>>> {
        let (d, f, p) = (
            self.config.hidden_size,
            self.config.intermediate_size,
            self.options.poison,
        );
        let g = &self.gpu;
        // Deferred, x (between layers) and h (inside one) are stored centred with statistics.
        let normed = |m: DeviceMatrix<T>| {
            if self.options.deferred_layer_norm {
                m.with_moments(g, p)
            } else {
                Ok(m)
            }
        };
        Ok(Activations {
            x: normed(DeviceMatrix::new(g, rows, d, p)?)?,
            h: normed(DeviceMatrix::new(g, rows, d, p)?)?,
            qkv: DeviceMatrix::new(g, rows, self.heads.qkv_width(), p)?,
            ctx: DeviceMatrix::new(g, rows, self.heads.ctx_width(), p)?,
            mid: DeviceMatrix::new(g, rows, f, p)?,
        })
    }

    /// Launches the whole forward pass of `bucket` (encoder + pooling into `bucket.pooled`)
    /// on the backend's current handle, without waiting.
    fn launch_forward(&mut self, bucket: &mut Bucket<T>) -> Result<()> {
        encode(self, &bucket.seq, &mut bucket.acts, None)?;
        self.launch_pool(&bucket.seq, &bucket.acts.x, &mut bucket.pooled)
    }

    fn launch_pool(
        &mut self,
        seq: &SeqBatch,
        x: &DeviceMatrix<T>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let d = self.config.hidden_size;
        x.expect(seq.tokens(), d, "pooling input")?;
        Ok(bert::mean_pool_l2(&self.gpu, seq, d, &x.buf, out)?)
    }

    /// Records `bucket`'s forward pass as a CUDA graph. Nothing runs. Returns `None` (and no
    /// graph) when the workspace watch moved during the capture.
    fn capture(&mut self, bucket: &mut Bucket<T>) -> Result<Option<Graph>> {
        let (epoch, logged) = (self.watch.epoch, self.plans.len());
        let gpu = self.gpu.clone();
        let mut recorded: Result<()> = Ok(());
        let graph = gpu.capture(|capturing| {
            let eager = std::mem::replace(&mut self.gpu, capturing.clone());
            recorded = self.launch_forward(bucket);
            self.gpu = eager;
            match &recorded {
                Ok(()) => Ok(()),
                Err(e) => Err(fused_gemm::Error::Capture(format!(
                    "the forward pass failed while recording: {e}"
                ))),
            }
        });
        // The recorded launches repeat the eager run's plans; keep the log to one copy.
        self.plans.truncate(logged);
        recorded?;
        let graph = graph?;
        if self.watch.epoch != epoch {
            return Ok(None);
        }
        graph.upload()?;
        Ok(Some(graph))
    }

    /// The throughput path: bucketed buffers, graph replay where possible. `batch` is already
    /// padded to its bucket length and checked.
    fn run_bucketed(&mut self, batch: &TokenBatch) -> Result<Vec<f32>> {
        let key = (batch.batch, batch.seq_len);
        self.uses += 1;
        let mut bucket = match self.buckets.remove(&key) {
            Some(mut b) => {
                b.seq
                    .refill(&self.gpu, &batch.ids, &Self::lengths_u32(batch))?;
                b
            }
            None => {
                self.evict();
                self.new_bucket(batch)?
            }
        };
        bucket.last_used = self.uses;
        let r = self.run_in(&mut bucket);
        if r.is_ok() {
            self.buckets.insert(key, bucket);
        }
        r
    }

    fn run_in(&mut self, bucket: &mut Bucket<T>) -> Result<Vec<f32>> {
        match &bucket.graph {
            Some(graph) if bucket.graph_epoch == self.watch.epoch => graph.replay()?,
            _ => self.run_eager_then_capture(bucket)?,
        }
        Ok(self.gpu.download(&bucket.pooled)?)
    }

    /// Runs `bucket`'s forward pass eagerly and, once it has run often enough, captures its
    /// graph for the next batches (a capture failure turns graphs off and is kept in
    /// [`CudaBackend::graph_error`]).
    fn run_eager_then_capture(&mut self, bucket: &mut Bucket<T>) -> Result<()> {
        bucket.graph = None;
        self.launch_forward(bucket)?;
        bucket.eager_runs += 1;
        if self.options.graphs
            && self.graph_error.is_none()
            && bucket.eager_runs >= self.options.graph_after_runs
        {
            let epoch = self.watch.epoch;
            match self.capture(bucket) {
                Ok(g) => {
                    bucket.graph = g;
                    bucket.graph_epoch = epoch;
                }
                Err(e) => self.graph_error = Some(e.to_string()),
            }
        }
        Ok(())
    }

    /// Drops least recently used buckets until there is room for one more.
    fn evict(&mut self) {
        while self.buckets.len() >= self.options.max_buckets {
            let Some(&oldest) = self
                .buckets
                .iter()
                .min_by_key(|(_, b)| b.last_used)
                .map(|(k, _)| k)
            else {
                return;
            };
            self.buckets.remove(&oldest);
        }
    }
}

/// `batch` right-padded to length `t ≥ batch.seq_len` (pad id 0 = `[PAD]`, type 0, mask 0).
/// `batch` must have passed [`TokenBatch::validate`] (it is indexed by its shape).
pub(crate) fn pad_to(batch: &TokenBatch, t: usize) -> TokenBatch {
    let t = t.max(batch.seq_len);
    if t == batch.seq_len {
        return batch.clone();
    }
    let (b, t0) = (batch.batch, batch.seq_len);
    let mut out = TokenBatch {
        batch: b,
        seq_len: t,
        ids: vec![0; b * t],
        type_ids: vec![0; b * t],
        mask: vec![0; b * t],
        lengths: batch.lengths.clone(),
    };
    for s in 0..b {
        let (src, dst) = (s * t0..(s + 1) * t0, s * t..s * t + t0);
        out.ids[dst.clone()].copy_from_slice(&batch.ids[src.clone()]);
        out.type_ids[dst.clone()].copy_from_slice(&batch.type_ids[src.clone()]);
        out.mask[dst].copy_from_slice(&batch.mask[src]);
    }
    out
}

impl<T: GpuElement> Backend for CudaBackend<T> {
    type Tensor = DeviceMatrix<T>;
    type Inputs = SeqBatch;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn config(&self) -> &MiniLmConfig {
        &self.config
    }

    fn upload_inputs(&mut self, batch: &TokenBatch) -> Result<SeqBatch> {
        self.check_batch(batch)?;
        let seq = SeqBatch::new(
            &self.gpu,
            &batch.ids,
            &Self::lengths_u32(batch),
            batch.seq_len,
        )?;
        if batch.type_ids.iter().any(|&t| t != 0) {
            Ok(seq.with_token_types(&self.gpu, &batch.type_ids)?)
        } else {
            Ok(seq)
        }
    }

    fn activations(&mut self, rows: usize) -> Result<Activations<DeviceMatrix<T>>> {
        self.alloc_activations(rows)
    }

    fn embeddings(&mut self, inputs: &SeqBatch, x: &mut DeviceMatrix<T>) -> Result<()> {
        x.expect(
            inputs.tokens(),
            self.config.hidden_size,
            "embeddings output",
        )?;
        let e = &self.emb;
        let tables = DeviceTables {
            word: &e.word,
            position: &e.position,
            token_type: &e.token_type,
            gamma: &e.norm.gamma,
            beta: &e.norm.beta,
            eps: self.config.layer_norm_eps,
        };
        Ok(bert::embeddings(&self.gpu, inputs, &tables, &mut x.buf)?)
    }

    fn qkv_projection(
        &mut self,
        layer: usize,
        x: &DeviceMatrix<T>,
        qkv: &mut DeviceMatrix<T>,
    ) -> Result<()> {
        let l = self.layer(layer)?;
        x.expect(x.rows, self.config.hidden_size, "QKV input")?;
        qkv.expect(x.rows, self.heads.qkv_width(), "QKV output")?;
        let report = l.qkv.launch(&self.gpu, x, qkv, false, "QKV input")?;
        self.note(Stage::QkvProjection, report);
        Ok(())
    }

    fn attention(
        &mut self,
        _layer: usize,
        inputs: &SeqBatch,
        qkv: &DeviceMatrix<T>,
        ctx: &mut DeviceMatrix<T>,
    ) -> Result<()> {
        let rows = inputs.tokens();
        qkv.expect(rows, self.heads.qkv_width(), "attention input")?;
        ctx.expect(rows, self.heads.ctx_width(), "attention output")?;
        Ok(bert::attention(
            &self.gpu,
            inputs,
            self.heads.heads,
            self.heads.head_dim,
            &qkv.buf,
            &mut ctx.buf,
        )?)
    }

    fn attn_out_residual_layernorm(
        &mut self,
        layer: usize,
        ctx: &DeviceMatrix<T>,
        residual: &DeviceMatrix<T>,
        out: &mut DeviceMatrix<T>,
    ) -> Result<()> {
        let l = self.layer(layer)?;
        let (m, d) = (ctx.rows, self.config.hidden_size);
        ctx.expect(
            m,
            self.heads.ctx_width(),
            "attention output projection input",
        )?;
        residual.expect(m, d, "attention residual")?;
        out.expect(m, d, "attention output projection output")?;
        // The residual is the previous layer's output, its FFN norm deferred after layer 0.
        let r_norm = match layer.checked_sub(1) {
            Some(prev) => Some(&self.layer(prev)?.ffn_norm),
            None => None,
        };
        let report = post_norm(
            &self.gpu,
            self.options.deferred_layer_norm,
            PostNorm {
                input: ctx,
                linear: &l.attn_out,
                residual,
                residual_norm: r_norm,
                norm: &l.attn_norm,
                last: false,
            },
            out,
        )?;
        self.note(Stage::AttnOutResidualLayerNorm, report);
        Ok(())
    }

    fn ffn_up_gelu(
        &mut self,
        layer: usize,
        h: &DeviceMatrix<T>,
        mid: &mut DeviceMatrix<T>,
    ) -> Result<()> {
        let l = self.layer(layer)?;
        h.expect(h.rows, self.config.hidden_size, "FFN input")?;
        mid.expect(h.rows, self.config.intermediate_size, "FFN inner")?;
        let report = l.ffn_up.launch(&self.gpu, h, mid, true, "FFN input")?;
        self.note(Stage::FfnUpGelu, report);
        Ok(())
    }

    fn ffn_down_residual_layernorm(
        &mut self,
        layer: usize,
        mid: &DeviceMatrix<T>,
        residual: &DeviceMatrix<T>,
        out: &mut DeviceMatrix<T>,
    ) -> Result<()> {
        let l = self.layer(layer)?;
        let (m, d) = (mid.rows, self.config.hidden_size);
        mid.expect(m, self.config.intermediate_size, "FFN inner")?;
        residual.expect(m, d, "FFN residual")?;
        out.expect(m, d, "FFN output")?;
        let report = post_norm(
            &self.gpu,
            self.options.deferred_layer_norm,
            PostNorm {
                input: mid,
                linear: &l.ffn_down,
                residual,
                residual_norm: Some(&l.attn_norm),
                norm: &l.ffn_norm,
                // The last layer normalizes in full: pooling reads its rows.
                last: layer + 1 == self.layers.len(),
            },
            out,
        )?;
        self.note(Stage::FfnDownResidualLayerNorm, report);
        Ok(())
    }

    fn mean_pool_normalize(&mut self, inputs: &SeqBatch, x: &DeviceMatrix<T>) -> Result<Vec<f32>> {
        let n = inputs.batch() * self.config.hidden_size;
        let mut out = fresh(&self.gpu, n, self.options.poison.then_some(f32::NAN))?;
        self.launch_pool(inputs, x, &mut out)?;
        Ok(self.gpu.download(&out)?)
    }

    fn synchronize(&mut self) -> Result<()> {
        Ok(self.gpu.synchronize()?)
    }

    fn begin_step(&mut self) -> Result<()> {
        self.gpu.synchronize()?;
        self.step_start = Some(record(&self.gpu)?);
        Ok(())
    }

    fn end_step(&mut self) -> Result<Option<Duration>> {
        let end = record(&self.gpu)?;
        let Some(start) = self.step_start.take() else {
            self.gpu.synchronize()?;
            return Ok(None);
        };
        let ms = start.elapsed_ms(&end).map_err(fused_gemm::Error::from)?;
        Ok(Some(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3)))
    }

    fn timing_clock(&self) -> &'static str {
        "device time between CUDA events around each step, the stream synchronized before and \
         after it (serialized: per-kernel cost, not throughput); tokenize and output on the host \
         clock"
    }

    fn run_batch(&mut self, batch: &TokenBatch, timings: Option<&mut Timings>) -> Result<Vec<f32>> {
        self.check_batch(batch)?;
        let padded = self.bucketed(batch);
        if timings.is_some() || padded.type_ids.iter().any(|&t| t != 0) {
            return forward(self, &padded, timings);
        }
        self.run_bucketed(&padded)
    }
}

impl<T: GpuElement> CudaBackend<T> {
    fn layer(&self, layer: usize) -> Result<&DeviceLayer<T>> {
        self.layers
            .get(layer)
            .ok_or_else(|| Error::invalid("layer", format!("below {}", self.layers.len()), layer))
    }
}

/// A post-norm layer's GEMM: `LayerNorm(input·Wᵀ + b + residual)` with `norm`'s γ and β.
struct PostNorm<'a, T> {
    input: &'a DeviceMatrix<T>,
    linear: &'a DeviceLinear<T>,
    /// Stored centred with its statistics when `residual_norm` is given (deferred).
    residual: &'a DeviceMatrix<T>,
    /// The deferred norm the residual is read through.
    residual_norm: Option<&'a DeviceNorm<T>>,
    norm: &'a DeviceNorm<T>,
    /// Whether to normalize in full even when deferred (the last layer, before pooling).
    last: bool,
}

/// Launches `g` into `out`: with the norm in full (`deferred` false, or `g.last`), or
/// deferred, storing `out` centred with its row statistics; the residual normalized on load
/// where `g.residual_norm` says it was deferred.
fn post_norm<T: GpuElement>(
    gpu: &Gpu,
    deferred: bool,
    g: PostNorm<'_, T>,
    out: &mut DeviceMatrix<T>,
) -> Result<LaunchReport> {
    let (a, w, b, r) = (
        &g.input.mat()?,
        &g.linear.weight.mat()?,
        &g.linear.bias,
        &g.residual.mat()?,
    );
    let (c, norm) = (&mut out.mat()?, g.norm);
    let residual_norm = g.residual_norm.filter(|_| deferred);
    Ok(match (residual_norm, deferred && !g.last) {
        (None, false) => {
            T::gemm_bias_residual_layer_norm(gpu, a, w, c, b, r, &norm.gamma, &norm.beta)?
        }
        (None, true) => T::gemm_bias_residual_moments(
            gpu,
            a,
            w,
            c,
            b,
            r,
            &mut out.moments("post-norm GEMM output")?,
        )?,
        (Some(rn), true) => T::gemm_bias_normed_residual_moments(
            gpu,
            a,
            w,
            c,
            b,
            r,
            &g.residual.moments("post-norm GEMM residual")?,
            &rn.gamma,
            &rn.beta,
            &mut out.moments("post-norm GEMM output")?,
        )?,
        (Some(rn), false) => T::gemm_bias_normed_residual_layer_norm(
            gpu,
            a,
            w,
            c,
            b,
            r,
            &g.residual.moments("post-norm GEMM residual")?,
            &rn.gamma,
            &rn.beta,
            &norm.gamma,
            &norm.beta,
        )?,
    })
}

/// An event with timing recorded on `gpu`'s stream now.
fn record(gpu: &Gpu) -> Result<CudaEvent> {
    Ok(gpu
        .stream()
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(fused_gemm::Error::from)?)
}

/// The CUDA backend for the dtype chosen at run time.
#[derive(Debug)]
pub enum AnyCudaBackend {
    /// f16 storage.
    F16(CudaBackend<half::f16>),
    /// bf16 storage.
    Bf16(CudaBackend<half::bf16>),
}

impl AnyCudaBackend {
    /// A backend for `dtype`.
    ///
    /// # Errors
    /// [`Error::NotImplemented`] for [`Dtype::F32`] (the tensor-core mainloop takes 16-bit
    /// inputs); as [`CudaBackend::new`].
    pub fn new(
        gpu: &Gpu,
        weights: &ModelWeights,
        dtype: Dtype,
        options: CudaOptions,
    ) -> Result<Self> {
        match dtype {
            Dtype::F16 => Ok(Self::F16(CudaBackend::new(gpu, weights, options)?)),
            Dtype::Bf16 => Ok(Self::Bf16(CudaBackend::new(gpu, weights, options)?)),
            Dtype::F32 => Err(crate::device::f32_on_gpu()),
        }
    }
}

/// Runs `$body` with `$b` bound to the concrete backend of an [`AnyCudaBackend`].
#[macro_export]
macro_rules! with_cuda_backend {
    ($any:expr, $b:ident => $body:expr) => {
        match $any {
            $crate::backend::cuda::AnyCudaBackend::F16($b) => $body,
            $crate::backend::cuda::AnyCudaBackend::Bf16($b) => $body,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_gemm::device::gemm::TileShape;
    use fused_gemm::device::types::DType;
    use fused_gemm::host::gpu::DeviceProps;
    use fused_gemm::host::plan::{Planner, Problem};

    #[test]
    fn configs_the_kernels_cannot_compute_exactly_are_rejected() {
        let ok = MiniLmConfig::ALL_MINILM_L6_V2;
        assert_eq!(check_config(&ok).unwrap().head_dim, 32);
        let bad = [
            MiniLmConfig {
                activation: Activation::GeluTanh,
                ..ok.clone()
            },
            MiniLmConfig {
                layer_norm_eps: 1e-5,
                ..ok.clone()
            },
            MiniLmConfig {
                hidden_size: 2048,
                num_heads: 32,
                ..ok.clone()
            },
            // Head dimension 96: no attention kernel.
            MiniLmConfig {
                num_heads: 4,
                ..ok.clone()
            },
        ];
        for c in bad {
            let e = check_config(&c).unwrap_err();
            assert!(
                matches!(e, Error::InvalidArgument { arg: "model", .. }),
                "{e}"
            );
        }
    }

    #[test]
    fn padding_to_a_bucket_keeps_tokens_and_masks_the_rest() {
        let b = TokenBatch::pad(&[vec![101u32, 7, 102], vec![101, 102]], 0).unwrap();
        let p = pad_to(&b, 5);
        assert_eq!((p.batch, p.seq_len), (2, 5));
        assert_eq!(p.ids, vec![101, 7, 102, 0, 0, 101, 102, 0, 0, 0]);
        assert_eq!(p.mask, vec![1, 1, 1, 0, 0, 1, 1, 0, 0, 0]);
        assert_eq!(p.lengths, vec![3, 2]);
        assert_eq!(pad_to(&b, 2), b);
    }

    /// A real plan of the H200 planner: M×384×1536 f16 with `splits` K splits, a 64×64×64 tile,
    /// with or without a row norm (a row norm on a 64-wide tile needs the statistics buffer).
    fn plan(m: u32, splits: u32, row_norm: bool) -> Plan {
        let mut p = Problem::gemm(m, 384, 1536, DType::F16);
        p.row_norm = row_norm;
        let tile = TileShape::new(64, 64, 64, 2, 2, 4);
        Planner::new(DeviceProps::h200())
            .evaluate(&p, &tile, splits)
            .expect("a launchable plan")
    }

    #[test]
    fn workspace_watch_moves_whenever_a_workspace_may_grow() {
        let mut w = WorkspaceWatch::default();
        w.note(&plan(128, 1, false));
        assert_eq!(w.epoch, 0, "no workspace needed");
        let split = plan(128, 4, false);
        assert!(split.workspace_bytes > 0 && split.counter_bytes > 0);
        w.note(&split);
        let e = w.epoch;
        assert!(e > 0, "first split-K workspace");
        w.note(&plan(128, 2, false));
        assert_eq!(w.epoch, e, "smaller needs reuse the buffers");
        let stats = plan(128, 1, true);
        assert!(
            matches!(stats.norm, NormPath::Partials { .. }),
            "{:?}",
            stats.norm
        );
        w.note(&stats);
        assert!(w.epoch > e, "first statistics buffer");
        let e = w.epoch;
        w.note(&plan(1024, 4, false));
        assert!(w.epoch > e, "larger split-K partials");
    }
}
