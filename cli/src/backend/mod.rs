//! The forward pass, written once against the [`Backend`] trait whose steps are the fused
//! kernels of one post-LayerNorm BERT layer.
//!
//! [`forward`] runs, for a padded [`TokenBatch`] of B sequences of length T (M = B·T rows,
//! d = hidden size, F = FFN width, all activations row-major f32 or the backend's dtype):
//!
//! | step | computes | output |
//! |---|---|---|
//! | [`Backend::embeddings`] | `LN(word[id] + position[t] + token_type[type])` | `x: [M, d]` |
//! | per layer: [`Backend::qkv_projection`] | `x·W_qkvᵀ + b_qkv` (one GEMM + bias) | `qkv: [M, 3d]` |
//! | [`Backend::attention`] | per sequence and head, `softmax(q·kᵀ/√head_dim + mask)·v`; padded keys get weight 0 | `ctx: [M, d]` |
//! | [`Backend::attn_out_residual_layernorm`] | `LN(ctx·W_oᵀ + b_o + x)` | `h: [M, d]` |
//! | [`Backend::ffn_up_gelu`] | `GELU(h·W_1ᵀ + b_1)` | `mid: [M, F]` |
//! | [`Backend::ffn_down_residual_layernorm`] | `LN(mid·W_2ᵀ + b_2 + h)` | `x: [M, d]` (next layer's input) |
//! | [`Backend::mean_pool_normalize`] | masked mean over t, then `v/max(‖v‖₂, 1e-12)` | `[B, d]` on the host |
//!
//! A CUDA backend implements the same steps with fused GEMM + epilogue kernels; the driver,
//! the buffer plan and the timings stay shared.

pub mod cpu;

use std::fmt;
use std::time::{Duration, Instant};

use crate::config::MiniLmConfig;
use crate::error::Result;
use crate::tokenize::TokenBatch;

/// Element type of the weights and activations a backend computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Dtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary16 (accumulation in f32).
    F16,
    /// bfloat16 (accumulation in f32).
    Bf16,
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        })
    }
}

/// One step of the forward pass (and the host work around it), for timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Text to token ids.
    Tokenize,
    /// Host-to-device copy of the token batch.
    Upload,
    /// [`Backend::embeddings`].
    Embeddings,
    /// [`Backend::qkv_projection`].
    QkvProjection,
    /// [`Backend::attention`].
    Attention,
    /// [`Backend::attn_out_residual_layernorm`].
    AttnOutResidualLayerNorm,
    /// [`Backend::ffn_up_gelu`].
    FfnUpGelu,
    /// [`Backend::ffn_down_residual_layernorm`].
    FfnDownResidualLayerNorm,
    /// [`Backend::mean_pool_normalize`] (includes the device-to-host copy).
    MeanPoolNormalize,
    /// Writing the output.
    Output,
}

impl Stage {
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; 10] = [
        Stage::Tokenize,
        Stage::Upload,
        Stage::Embeddings,
        Stage::QkvProjection,
        Stage::Attention,
        Stage::AttnOutResidualLayerNorm,
        Stage::FfnUpGelu,
        Stage::FfnDownResidualLayerNorm,
        Stage::MeanPoolNormalize,
        Stage::Output,
    ];

    /// The stage's name, as the fused kernel it stands for.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Tokenize => "tokenize",
            Stage::Upload => "upload",
            Stage::Embeddings => "embeddings+layernorm",
            Stage::QkvProjection => "qkv_projection+bias",
            Stage::Attention => "attention",
            Stage::AttnOutResidualLayerNorm => "attn_out+bias+residual+layernorm",
            Stage::FfnUpGelu => "ffn_up+bias+gelu",
            Stage::FfnDownResidualLayerNorm => "ffn_down+bias+residual+layernorm",
            Stage::MeanPoolNormalize => "mean_pool+l2_normalize",
            Stage::Output => "output",
        }
    }
}

/// Accumulated wall-clock time and call count per [`Stage`].
///
/// When timings are collected, [`forward`] synchronizes the backend after every step so that
/// each step's time is its own (this serializes a GPU pipeline; leave timings off to measure
/// throughput).
#[derive(Clone, Debug, Default)]
pub struct Timings {
    totals: [Duration; Stage::ALL.len()],
    calls: [u64; Stage::ALL.len()],
}

impl Timings {
    /// Adds `d` to `stage`.
    pub fn add(&mut self, stage: Stage, d: Duration) {
        let i = stage as usize;
        self.totals[i] += d;
        self.calls[i] += 1;
    }

    /// Total time of `stage`.
    pub fn total(&self, stage: Stage) -> Duration {
        self.totals[stage as usize]
    }

    /// Number of times `stage` ran.
    pub fn calls(&self, stage: Stage) -> u64 {
        self.calls[stage as usize]
    }

    /// Sum over all stages.
    pub fn sum(&self) -> Duration {
        self.totals.iter().sum()
    }
}

impl fmt::Display for Timings {
    /// A table: stage, calls, total ms, mean ms per call, share of the sum.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sum = self.sum().as_secs_f64().max(f64::MIN_POSITIVE);
        writeln!(
            f,
            "{:<34} {:>6} {:>11} {:>11} {:>6}",
            "stage", "calls", "total ms", "mean ms", "share"
        )?;
        for s in Stage::ALL {
            let (t, n) = (self.total(s).as_secs_f64(), self.calls(s));
            if n == 0 {
                continue;
            }
            writeln!(
                f,
                "{:<34} {:>6} {:>11.3} {:>11.4} {:>5.1}%",
                s.name(),
                n,
                t * 1e3,
                t * 1e3 / n as f64,
                100.0 * t / sum
            )?;
        }
        write!(f, "{:<34} {:>6} {:>11.3}", "sum", "", sum * 1e3)
    }
}

/// A device that runs the forward pass step by step.
///
/// Tensors are row-major matrices owned by the caller ([`forward`]) and allocated through
/// [`Backend::alloc`]; a step never aliases its inputs and outputs. `layer` indexes the encoder
/// layers, `0..config().num_layers`.
pub trait Backend {
    /// A row-major matrix on the backend's device.
    type Tensor;
    /// The token batch (ids, type ids, mask, lengths) as the backend's kernels read it.
    type Inputs;

    /// Short name used in messages (`"cpu"`, `"cuda"`).
    fn name(&self) -> &'static str;

    /// The model's hyper-parameters.
    fn config(&self) -> &MiniLmConfig;

    /// Copies a token batch to the device.
    ///
    /// # Errors
    /// A token id outside the vocabulary, a sequence longer than the position table, or a
    /// device error.
    fn upload_inputs(&mut self, batch: &TokenBatch) -> Result<Self::Inputs>;

    /// A `[rows, cols]` matrix (contents unspecified).
    ///
    /// # Errors
    /// Device out of memory.
    fn alloc(&mut self, rows: usize, cols: usize) -> Result<Self::Tensor>;

    /// `x[m] = LN(word[ids[m]] + position[m mod T] + token_type[type_ids[m]])`; `x: [M, d]`.
    ///
    /// # Errors
    /// Device errors.
    fn embeddings(&mut self, inputs: &Self::Inputs, x: &mut Self::Tensor) -> Result<()>;

    /// `qkv = x·W_qkvᵀ + b_qkv` with the packed weight `[3d, d]`; `x: [M, d]`, `qkv: [M, 3d]`.
    ///
    /// # Errors
    /// Device errors.
    fn qkv_projection(
        &mut self,
        layer: usize,
        x: &Self::Tensor,
        qkv: &mut Self::Tensor,
    ) -> Result<()>;

    /// Scaled dot-product attention per sequence and head from `qkv: [M, 3d]` into
    /// `ctx: [M, d]` (head h in columns `h·head_dim..(h+1)·head_dim`); keys where the mask is 0
    /// get weight exactly 0. Rows of padded queries are unspecified (never pooled).
    ///
    /// # Errors
    /// Device errors.
    fn attention(
        &mut self,
        layer: usize,
        inputs: &Self::Inputs,
        qkv: &Self::Tensor,
        ctx: &mut Self::Tensor,
    ) -> Result<()>;

    /// `out = LN(ctx·W_oᵀ + b_o + residual)`; all `[M, d]`.
    ///
    /// # Errors
    /// Device errors.
    fn attn_out_residual_layernorm(
        &mut self,
        layer: usize,
        ctx: &Self::Tensor,
        residual: &Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<()>;

    /// `mid = GELU(h·W_1ᵀ + b_1)`; `h: [M, d]`, `mid: [M, F]`; the GELU variant is the config's.
    ///
    /// # Errors
    /// Device errors.
    fn ffn_up_gelu(&mut self, layer: usize, h: &Self::Tensor, mid: &mut Self::Tensor)
    -> Result<()>;

    /// `out = LN(mid·W_2ᵀ + b_2 + residual)`; `mid: [M, F]`, `residual`, `out: [M, d]`.
    ///
    /// # Errors
    /// Device errors.
    fn ffn_down_residual_layernorm(
        &mut self,
        layer: usize,
        mid: &Self::Tensor,
        residual: &Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<()>;

    /// Mean of `x`'s rows over each sequence's real positions, L2-normalized
    /// (`v / max(‖v‖₂, 1e-12)`), returned to the host as `[B, d]` row-major f32.
    ///
    /// # Errors
    /// Device errors.
    fn mean_pool_normalize(&mut self, inputs: &Self::Inputs, x: &Self::Tensor) -> Result<Vec<f32>>;

    /// Waits until all submitted work is done (used to time steps).
    ///
    /// # Errors
    /// Device errors.
    fn synchronize(&mut self) -> Result<()>;
}

/// Runs the whole encoder on one batch and returns `[B, d]` L2-normalized sentence embeddings.
///
/// With `timings`, every step is followed by [`Backend::synchronize`] and its time added.
///
/// # Errors
/// Whatever the backend's steps return.
pub fn forward<B: Backend>(
    backend: &mut B,
    batch: &TokenBatch,
    mut timings: Option<&mut Timings>,
) -> Result<Vec<f32>> {
    let cfg = backend.config().clone();
    let (m, d, f) = (batch.tokens(), cfg.hidden_size, cfg.intermediate_size);

    let mut clock = Clock::start(timings.is_some());
    let inputs = backend.upload_inputs(batch)?;
    clock.lap(backend, &mut timings, Stage::Upload)?;

    let mut x = backend.alloc(m, d)?;
    let mut h = backend.alloc(m, d)?;
    let mut qkv = backend.alloc(m, 3 * d)?;
    let mut ctx = backend.alloc(m, d)?;
    let mut mid = backend.alloc(m, f)?;
    clock.reset();

    backend.embeddings(&inputs, &mut x)?;
    clock.lap(backend, &mut timings, Stage::Embeddings)?;
    for layer in 0..cfg.num_layers {
        backend.qkv_projection(layer, &x, &mut qkv)?;
        clock.lap(backend, &mut timings, Stage::QkvProjection)?;
        backend.attention(layer, &inputs, &qkv, &mut ctx)?;
        clock.lap(backend, &mut timings, Stage::Attention)?;
        backend.attn_out_residual_layernorm(layer, &ctx, &x, &mut h)?;
        clock.lap(backend, &mut timings, Stage::AttnOutResidualLayerNorm)?;
        backend.ffn_up_gelu(layer, &h, &mut mid)?;
        clock.lap(backend, &mut timings, Stage::FfnUpGelu)?;
        backend.ffn_down_residual_layernorm(layer, &mid, &h, &mut x)?;
        clock.lap(backend, &mut timings, Stage::FfnDownResidualLayerNorm)?;
    }
    let out = backend.mean_pool_normalize(&inputs, &x)?;
    clock.lap(backend, &mut timings, Stage::MeanPoolNormalize)?;
    Ok(out)
}

/// Times consecutive steps when enabled; free otherwise.
struct Clock {
    last: Option<Instant>,
}

impl Clock {
    fn start(enabled: bool) -> Self {
        Clock {
            last: enabled.then(Instant::now),
        }
    }

    fn reset(&mut self) {
        if self.last.is_some() {
            self.last = Some(Instant::now());
        }
    }

    fn lap<B: Backend>(
        &mut self,
        backend: &mut B,
        timings: &mut Option<&mut Timings>,
        stage: Stage,
    ) -> Result<()> {
        if let (Some(last), Some(t)) = (self.last, timings.as_deref_mut()) {
            backend.synchronize()?;
            let now = Instant::now();
            t.add(stage, now - last);
            self.last = Some(now);
        }
        Ok(())
    }
}
