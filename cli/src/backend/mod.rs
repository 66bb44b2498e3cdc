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
//! The CUDA backend ([`cuda`]) implements the same steps with fused GEMM + epilogue kernels;
//! the order of the steps ([`encode`]) and the timings stay shared.

pub mod cpu;
pub mod cuda;

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

/// Accumulated time and call count per [`Stage`].
///
/// When timings are collected, [`forward`] brackets every step with [`Backend::begin_step`] and
/// [`Backend::end_step`], which wait for the step to finish, so that each step's time is its
/// own (this serializes a GPU pipeline; leave timings off to measure throughput). How the
/// device steps were timed is recorded with [`Timings::set_clock`] and printed with the table.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    totals: [Duration; Stage::ALL.len()],
    calls: [u64; Stage::ALL.len()],
    clock: Option<&'static str>,
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

    /// Records how the device steps were timed ([`Backend::timing_clock`]).
    pub fn set_clock(&mut self, clock: &'static str) {
        self.clock = Some(clock);
    }

    /// How the device steps were timed, when recorded.
    pub fn clock(&self) -> Option<&'static str> {
        self.clock
    }
}

impl fmt::Display for Timings {
    /// A table: stage, calls, total ms, mean ms per call, share of the sum; preceded by the
    /// clock's description when one was recorded.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sum = self.sum().as_secs_f64().max(f64::MIN_POSITIVE);
        if let Some(clock) = self.clock {
            writeln!(f, "per-step times: {clock}")?;
        }
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

/// The activation matrices of one forward pass over `M` token rows, row-major, in the
/// backend's dtype. Widths are the backend's (see [`Backend::activations`]): `qkv` and `ctx` may
/// be wider than `3d` and `d` when a backend pads attention heads.
#[derive(Debug)]
pub struct Activations<T> {
    /// Layer input and output, `[M, d]`.
    pub x: T,
    /// After attention + LayerNorm, `[M, d]`.
    pub h: T,
    /// QKV projection output, `[M, ≥3d]`.
    pub qkv: T,
    /// Attention context, `[M, ≥d]`.
    pub ctx: T,
    /// FFN inner activations, `[M, F]`.
    pub mid: T,
}

/// A device that runs the forward pass step by step.
///
/// Tensors are row-major matrices owned by the caller ([`forward`]) and allocated through
/// [`Backend::activations`]; a step never aliases its inputs and outputs. `layer` indexes the
/// encoder layers, `0..config().num_layers`; a step that reads a layer's weights returns
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an index past them.
pub trait Backend {
    /// A row-major matrix on the backend's device.
    type Tensor;
    /// The token batch (ids, type ids, mask, lengths) as the backend's kernels read it.
    type Inputs;

    /// Short name used in messages (`"cpu"`, `"cuda"`).
    fn name(&self) -> &'static str;

    /// The model's hyper-parameters.
    fn config(&self) -> &MiniLmConfig;

    /// Checks a token batch with [`TokenBatch::validate`] and copies it to the device.
    ///
    /// # Errors
    /// [`TokenBatch::validate`]'s errors (array lengths that do not match the shape, a mask
    /// that disagrees with the lengths, a token id outside the vocabulary, a sequence longer
    /// than the position table), or a device error.
    fn upload_inputs(&mut self, batch: &TokenBatch) -> Result<Self::Inputs>;

    /// The activation matrices for `rows` token rows (contents unspecified): `x`, `h`: `[rows,
    /// d]`; `qkv`: `[rows, 3d]` (or the backend's padded width); `ctx`: `[rows, d]` (or padded);
    /// `mid`: `[rows, F]`.
    ///
    /// # Errors
    /// Device out of memory.
    fn activations(&mut self, rows: usize) -> Result<Activations<Self::Tensor>>;

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

    /// Waits until all submitted work is done.
    ///
    /// # Errors
    /// Device errors.
    fn synchronize(&mut self) -> Result<()>;

    /// Marks the start of a timed step ([`forward`] with timings). The default does nothing: the
    /// caller's host clock starts.
    ///
    /// # Errors
    /// Device errors.
    fn begin_step(&mut self) -> Result<()> {
        Ok(())
    }

    /// Waits until the step begun by [`Backend::begin_step`] has finished and returns its time
    /// when the backend measures it on the device (CUDA events), or `None` to have the caller
    /// read its host clock. The default synchronizes and returns `None`.
    ///
    /// # Errors
    /// Device errors.
    fn end_step(&mut self) -> Result<Option<Duration>> {
        self.synchronize()?;
        Ok(None)
    }

    /// How [`Backend::end_step`] times a step, for the timings table.
    fn timing_clock(&self) -> &'static str {
        "host wall clock around each step"
    }

    /// Embeds one padded batch: `[B, d]` L2-normalized f32 rows. The default is [`forward`];
    /// a backend may override it with a faster path (pooled buffers, CUDA graphs) that runs the
    /// same steps.
    ///
    /// # Errors
    /// Whatever the steps return.
    fn run_batch(&mut self, batch: &TokenBatch, timings: Option<&mut Timings>) -> Result<Vec<f32>>
    where
        Self: Sized,
    {
        forward(self, batch, timings)
    }
}

/// Runs the whole encoder on one batch and returns `[B, d]` L2-normalized sentence embeddings:
/// uploads the batch, allocates [`Activations`], runs [`encode`], pools.
///
/// With `timings`, every step (upload included) is timed on its own (see [`Timings`]).
///
/// # Errors
/// Whatever the backend's steps return.
pub fn forward<B: Backend>(
    backend: &mut B,
    batch: &TokenBatch,
    mut timings: Option<&mut Timings>,
) -> Result<Vec<f32>> {
    if let Some(t) = timings.as_deref_mut() {
        t.set_clock(backend.timing_clock());
    }
    let inputs = timed(backend, &mut timings, Stage::Upload, |b| {
        b.upload_inputs(batch)
    })?;
    let mut acts = backend.activations(batch.tokens())?;
    encode(backend, &inputs, &mut acts, timings.as_deref_mut())?;
    timed(backend, &mut timings, Stage::MeanPoolNormalize, |b| {
        b.mean_pool_normalize(&inputs, &acts.x)
    })
}

/// The encoder's steps in order, written once for every backend: embeddings into `acts.x`, then
/// per layer QKV projection, attention, out-projection + residual + LayerNorm (into `acts.h`),
/// FFN up + GELU, FFN down + residual + LayerNorm (back into `acts.x`). On return `acts.x`
/// holds the last layer's output `[M, d]`.
///
/// # Errors
/// Whatever the backend's steps return.
pub fn encode<B: Backend>(
    backend: &mut B,
    inputs: &B::Inputs,
    acts: &mut Activations<B::Tensor>,
    mut timings: Option<&mut Timings>,
) -> Result<()> {
    let layers = backend.config().num_layers;
    let Activations {
        x,
        h,
        qkv,
        ctx,
        mid,
    } = acts;
    let t = &mut timings;
    timed(backend, t, Stage::Embeddings, |b| b.embeddings(inputs, x))?;
    for layer in 0..layers {
        timed(backend, t, Stage::QkvProjection, |b| {
            b.qkv_projection(layer, x, qkv)
        })?;
        timed(backend, t, Stage::Attention, |b| {
            b.attention(layer, inputs, qkv, ctx)
        })?;
        timed(backend, t, Stage::AttnOutResidualLayerNorm, |b| {
            b.attn_out_residual_layernorm(layer, ctx, x, h)
        })?;
        timed(backend, t, Stage::FfnUpGelu, |b| {
            b.ffn_up_gelu(layer, h, mid)
        })?;
        timed(backend, t, Stage::FfnDownResidualLayerNorm, |b| {
            b.ffn_down_residual_layernorm(layer, mid, h, x)
        })?;
    }
    Ok(())
}

/// Runs `step`; with timings, brackets it with [`Backend::begin_step`] / [`Backend::end_step`]
/// and adds its time (the device's when the backend measures it, else the host clock's).
fn timed<B: Backend, R>(
    backend: &mut B,
    timings: &mut Option<&mut Timings>,
    stage: Stage,
    step: impl FnOnce(&mut B) -> Result<R>,
) -> Result<R> {
    let Some(t) = timings.as_deref_mut() else {
        return step(backend);
    };
    backend.begin_step()?;
    let start = Instant::now();
    let r = step(backend)?;
    let device = backend.end_step()?;
    t.add(stage, device.unwrap_or_else(|| start.elapsed()));
    Ok(r)
}
