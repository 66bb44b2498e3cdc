//! The GPU benchmark behind `fused-gemm bench`: latency and sentences per second of the
//! MiniLM forward pass at fixed shapes, and the per-kernel breakdown of one layer.
//!
//! Inputs: B sequences of exactly T tokens (`[CLS]`, random ids in `1000..30000`, `[SEP]`; no
//! padding, as the PyTorch baseline `bench/minilm/pytorch_baseline.py`), uploaded once.
//! Measured, per batch size:
//! - `eager_ms`: the forward pass (embeddings → 6 layers → pooling into a device buffer)
//!   launched op by op; median of the device time between CUDA events around each repetition,
//!   repetitions queued back to back (so launch overhead counts when the GPU waits for the host,
//!   as in `torch.cuda.Event` / `triton.testing.do_bench` timings of PyTorch).
//! - `graph_ms`: the same forward pass replayed from a CUDA graph, measured the same way.
//! - `end_to_end_ms`: [`Backend::run_batch`] on the host clock: refill of token ids, forward
//!   (graph when available), download of the `[B, 384]` embeddings.
//! - `layer`: each step of one layer (and embeddings, pooling) launched alone, repeated, median
//!   device time; `kernel_sum_ms` = embeddings + layers × (sum of the layer's steps) + pooling.
//!   The layer is layer 1 where there is one: with deferred LayerNorms layer 0 reads normalized
//!   embeddings and runs other QKV and out-proj kernels than the layers after it. Each GEMM
//!   step is followed by the plain GEMM of its shape and weights (`plain_gemm_ms`, no
//!   epilogue), so the table shows what each epilogue costs.
//!
//! Eager timings of every batch size run before any graph is captured (capturing switches
//! cudarc to multi-stream bookkeeping, which adds host work to later eager launches).

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

use super::{Bucket, CudaBackend, DeviceMatrix, GpuElement, record};
use crate::backend::{Backend, Stage};
use crate::error::{Error, Result};
use crate::tokenize::TokenBatch;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Batch sizes B.
    pub batch_sizes: Vec<usize>,
    /// Tokens per sequence T (`[CLS]` and `[SEP]` included).
    pub seq_len: usize,
    /// Device time to spend per measurement, ms (sets the repetitions: 5..=500).
    pub target_ms: f64,
    /// Seed of the random token ids.
    pub seed: u64,
}

/// One timed step of the layer breakdown.
#[derive(Clone, Debug, Serialize)]
pub struct StepTime {
    /// The fused kernel ([`Stage::name`]).
    pub step: &'static str,
    /// Median device time, ms.
    pub ms: f64,
    /// The GEMM plan (`tile BMxBNxBK, splits S`), for GEMM steps.
    pub plan: Option<String>,
    /// The plain GEMM of the step's shape and weights (no epilogue), median ms, for GEMM steps.
    pub plain_gemm_ms: Option<f64>,
}

/// Results at one batch size.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// B.
    pub batch: usize,
    /// Eager forward pass, median ms.
    pub eager_ms: f64,
    /// CUDA-graph replay of the forward pass, median ms (`None` without a graph).
    pub graph_ms: Option<f64>,
    /// Host-clock median of one `run_batch` call (upload, forward, download), ms.
    pub end_to_end_ms: f64,
    /// `B / min(eager_ms, graph_ms)`, sentences per second.
    pub sentences_per_s: f64,
    /// Repetitions per measurement.
    pub reps: usize,
    /// The layer timed step by step.
    pub layer_index: usize,
    /// Embeddings, that layer's five steps, pooling.
    pub layer: Vec<StepTime>,
    /// Embeddings + layers × (the timed layer's steps) + pooling, ms: the kernels' own time.
    pub kernel_sum_ms: f64,
}

/// The whole benchmark.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// `"fused-gemm"`.
    pub tool: &'static str,
    /// The GPU's name.
    pub device: String,
    /// Storage dtype.
    pub dtype: String,
    /// T.
    pub seq_len: usize,
    /// Attention heads × head dimension on the device (e.g. `"12x32"`).
    pub heads: String,
    /// Where the LayerNorms ran: `"fused"` (in their producers) or `"deferred"`.
    pub layer_norm: &'static str,
    /// How the numbers were measured.
    pub method: &'static str,
    /// One row per batch size.
    pub rows: Vec<BenchRow>,
    /// Why graphs were not used, if capture failed.
    pub graph_error: Option<String>,
}

/// B sequences of T tokens: `[CLS]`, ids uniform in `1000..30000`, `[SEP]`.
///
/// # Errors
/// [`Error::InvalidArgument`] for B = 0 or T < 2.
pub fn random_batch(batch: usize, seq_len: usize, seed: u64) -> Result<TokenBatch> {
    if batch == 0 || seq_len < 2 {
        return Err(Error::invalid(
            "bench shape",
            "B ≥ 1 and T ≥ 2",
            format!("B = {batch}, T = {seq_len}"),
        ));
    }
    let (cls, sep) = (101, 102);
    let mut rng = StdRng::seed_from_u64(seed ^ (batch as u64) << 32 ^ seq_len as u64);
    let mut ids = Vec::with_capacity(batch * seq_len);
    for _ in 0..batch {
        ids.push(cls);
        ids.extend((0..seq_len - 2).map(|_| rng.random_range(1000u32..30000)));
        ids.push(sep);
    }
    Ok(TokenBatch {
        batch,
        seq_len,
        ids,
        type_ids: vec![0; batch * seq_len],
        mask: vec![1; batch * seq_len],
        lengths: vec![seq_len; batch],
    })
}

/// Median device time of `f`, ms: `reps` repetitions between CUDA events on the backend's
/// stream, queued back to back, after `warmup` untimed ones.
fn time_device<T: GpuElement>(
    be: &mut CudaBackend<T>,
    warmup: usize,
    reps: usize,
    mut f: impl FnMut(&mut CudaBackend<T>) -> Result<()>,
) -> Result<f64> {
    for _ in 0..warmup {
        f(be)?;
    }
    let mut events = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let start = record(&be.gpu)?;
        f(be)?;
        events.push((start, record(&be.gpu)?));
    }
    let mut ms = Vec::with_capacity(events.len());
    for (s, e) in &events {
        ms.push(f64::from(s.elapsed_ms(e).map_err(fused_gemm::Error::from)?));
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2])
}

/// Repetitions that take about `target_ms` for something that takes `one_ms`.
fn reps_for(target_ms: f64, one_ms: f64) -> usize {
    ((target_ms / one_ms.max(1e-3)) as usize).clamp(5, 500)
}

fn plan_text(be: &mut CudaBackend<impl GpuElement>, stage: Stage) -> Option<String> {
    be.take_plans()
        .into_iter()
        .rev()
        .find(|(s, _)| *s == stage)
        .map(|(_, p)| {
            format!(
                "tile {}x{}x{}, splits {}",
                p.tile.bm, p.tile.bn, p.tile.bk, p.splits
            )
        })
}

/// Eager forward, then each step of the breakdown of layer `l`, on `bucket`'s buffers.
fn eager_and_layer<T: GpuElement>(
    be: &mut CudaBackend<T>,
    bucket: &mut Bucket<T>,
    l: usize,
    target_ms: f64,
) -> Result<(f64, usize, Vec<StepTime>)> {
    be.launch_forward(bucket)?;
    be.synchronize()?;
    let once = time_device(be, 0, 1, |b| b.launch_forward(bucket))?;
    let reps = reps_for(target_ms, once);
    let eager = time_device(be, 3, reps, |b| b.launch_forward(bucket))?;
    be.take_plans();

    let mut steps = Vec::new();
    let mut step = |be: &mut CudaBackend<T>,
                    stage: Stage,
                    f: &mut dyn FnMut(&mut CudaBackend<T>) -> Result<()>|
     -> Result<()> {
        let ms = time_device(be, 3, reps, &mut *f)?;
        steps.push(StepTime {
            step: stage.name(),
            ms,
            plan: plan_text(be, stage),
            plain_gemm_ms: None,
        });
        Ok(())
    };
    let (seq, a) = (&bucket.seq, &mut bucket.acts);
    step(be, Stage::Embeddings, &mut |b| b.embeddings(seq, &mut a.x))?;
    step(be, Stage::QkvProjection, &mut |b| {
        b.qkv_projection(l, &a.x, &mut a.qkv)
    })?;
    step(be, Stage::Attention, &mut |b| {
        b.attention(l, seq, &a.qkv, &mut a.ctx)
    })?;
    step(be, Stage::AttnOutResidualLayerNorm, &mut |b| {
        b.attn_out_residual_layernorm(l, &a.ctx, &a.x, &mut a.h)
    })?;
    step(be, Stage::FfnUpGelu, &mut |b| {
        b.ffn_up_gelu(l, &a.h, &mut a.mid)
    })?;
    step(be, Stage::FfnDownResidualLayerNorm, &mut |b| {
        b.ffn_down_residual_layernorm(l, &a.mid, &a.h, &mut a.x)
    })?;
    let pooled = &mut bucket.pooled;
    step(be, Stage::MeanPoolNormalize, &mut |b| {
        b.launch_pool(seq, &a.x, pooled)
    })?;
    let mut plain = |be: &mut CudaBackend<T>,
                     stage: Stage,
                     input: &DeviceMatrix<T>,
                     out: &mut DeviceMatrix<T>|
     -> Result<()> {
        let ms = time_device(be, 3, reps, |b| plain_gemm(b, l, stage, input, out))?;
        if let Some(s) = steps.iter_mut().find(|s| s.step == stage.name()) {
            s.plain_gemm_ms = Some(ms);
        }
        Ok(())
    };
    plain(be, Stage::QkvProjection, &a.x, &mut a.qkv)?;
    plain(be, Stage::AttnOutResidualLayerNorm, &a.ctx, &mut a.h)?;
    plain(be, Stage::FfnUpGelu, &a.h, &mut a.mid)?;
    plain(be, Stage::FfnDownResidualLayerNorm, &a.mid, &mut a.x)?;
    Ok((eager, reps, steps))
}

/// `out = input·Wᵀ`, no epilogue, with the weight W of layer `l`'s GEMM `stage` as uploaded
/// (folded where its norm is deferred): the GEMM alone, for what the step's epilogue costs.
fn plain_gemm<T: GpuElement>(
    be: &mut CudaBackend<T>,
    l: usize,
    stage: Stage,
    input: &DeviceMatrix<T>,
    out: &mut DeviceMatrix<T>,
) -> Result<()> {
    let layer = be.layer(l)?;
    let w = match stage {
        Stage::QkvProjection => layer.qkv.weight(),
        Stage::AttnOutResidualLayerNorm => &layer.attn_out.weight,
        Stage::FfnUpGelu => layer.ffn_up.weight(),
        Stage::FfnDownResidualLayerNorm => &layer.ffn_down.weight,
        _ => return Err(Error::invalid("stage", "a GEMM step", stage.name())),
    };
    T::gemm(&be.gpu, &input.mat()?, &w.mat()?, &mut out.mat()?)?;
    Ok(())
}

/// Runs the benchmark on `be` (see the [module docs](self)); `progress` gets a line per
/// phase.
///
/// # Errors
/// Bad shapes; device errors; [`Error::InvalidArgument`] when the embeddings come out non-finite.
pub fn run<T: GpuElement>(
    be: &mut CudaBackend<T>,
    cfg: &BenchConfig,
    mut progress: impl FnMut(&str),
) -> Result<BenchReport> {
    let graphs = be.options.graphs;
    be.options.graphs = false;
    let layers = be.config.num_layers as f64;
    let layer_index = usize::from(be.layers.len() > 1);
    let mut rows = Vec::new();
    for &b in &cfg.batch_sizes {
        progress(&format!("eager forward and layer breakdown, batch {b}"));
        // Padded as `run_batch` pads it, so eager and graph runs see the same shape.
        let batch = be.bucketed(&random_batch(b, cfg.seq_len, cfg.seed)?);
        be.check_batch(&batch)?;
        let mut bucket = be.new_bucket(&batch)?;
        let (eager_ms, reps, layer) = eager_and_layer(be, &mut bucket, layer_index, cfg.target_ms)?;
        let pooled = be.gpu.download(&bucket.pooled)?;
        if let Some(i) = pooled.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(
                "benchmark output",
                "finite embeddings",
                format!("{} at element {i} (batch {b})", pooled[i]),
            ));
        }
        let ms = |s: Stage| {
            layer
                .iter()
                .find(|t| t.step == s.name())
                .map_or(0.0, |t| t.ms)
        };
        let per_layer: f64 = [
            Stage::QkvProjection,
            Stage::Attention,
            Stage::AttnOutResidualLayerNorm,
            Stage::FfnUpGelu,
            Stage::FfnDownResidualLayerNorm,
        ]
        .into_iter()
        .map(ms)
        .sum();
        let kernel_sum_ms =
            ms(Stage::Embeddings) + layers * per_layer + ms(Stage::MeanPoolNormalize);
        rows.push(BenchRow {
            batch: b,
            eager_ms,
            graph_ms: None,
            end_to_end_ms: f64::NAN,
            sentences_per_s: b as f64 / eager_ms * 1e3,
            reps,
            layer_index,
            layer,
            kernel_sum_ms,
        });
    }

    be.options.graphs = graphs;
    for row in &mut rows {
        let b = row.batch;
        progress(&format!("graph replay and end to end, batch {b}"));
        let batch = random_batch(b, cfg.seq_len, cfg.seed)?;
        // Eager runs until the graph is captured, then one replay.
        for _ in 0..=be.options.graph_after_runs {
            be.run_batch(&batch, None)?;
        }
        let key = (b, be.bucketed(&batch).seq_len);
        if let Some(mut bucket) = be.buckets.remove(&key) {
            if let Some(graph) = bucket.graph.take() {
                let graph_ms = time_device(be, 3, row.reps, |_| Ok(graph.replay()?))?;
                row.graph_ms = Some(graph_ms);
                row.sentences_per_s = b as f64 / graph_ms.min(row.eager_ms) * 1e3;
                bucket.graph = Some(graph);
            }
            be.buckets.insert(key, bucket);
        }
        let mut host = Vec::with_capacity(row.reps);
        for _ in 0..row.reps {
            let t0 = Instant::now();
            be.run_batch(&batch, None)?;
            host.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        host.sort_by(f64::total_cmp);
        row.end_to_end_ms = host[host.len() / 2];
    }
    let h = be.heads;
    Ok(BenchReport {
        tool: "fused-gemm",
        device: be.gpu.name().to_owned(),
        dtype: T::CLI_DTYPE.to_string(),
        seq_len: cfg.seq_len,
        heads: format!("{}x{}", h.heads, h.head_dim),
        layer_norm: if be.options.deferred_layer_norm {
            "deferred"
        } else {
            "fused"
        },
        method: "median of CUDA-event device times per forward pass (inputs on the device, \
                 repetitions back to back, after warm-up); end_to_end on the host clock",
        rows,
        graph_error: be.graph_error.clone(),
    })
}

impl std::fmt::Display for BenchReport {
    /// A compact table: one line per batch size, then the layer breakdown per batch size.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "fused-gemm MiniLM forward, {} on {}, seq {} (heads {}, LayerNorm {})",
            self.dtype, self.device, self.seq_len, self.heads, self.layer_norm
        )?;
        writeln!(
            f,
            "{:>6} {:>10} {:>10} {:>10} {:>12} {:>11}",
            "batch", "eager ms", "graph ms", "e2e ms", "sentences/s", "kernels ms"
        )?;
        for r in &self.rows {
            let g = r.graph_ms.map_or("-".to_owned(), |g| format!("{g:.3}"));
            writeln!(
                f,
                "{:>6} {:>10.3} {:>10} {:>10.3} {:>12.0} {:>11.3}",
                r.batch, r.eager_ms, g, r.end_to_end_ms, r.sentences_per_s, r.kernel_sum_ms
            )?;
        }
        for r in &self.rows {
            writeln!(
                f,
                "layer {}, batch {} (ms, each kernel alone):",
                r.layer_index, r.batch
            )?;
            writeln!(
                f,
                "  {:<34} {:>8} {:>9} {:>6}  plan",
                "step", "ms", "GEMM ms", "ratio"
            )?;
            for s in &r.layer {
                let (gemm, ratio) = s.plain_gemm_ms.map_or((String::new(), String::new()), |g| {
                    (format!("{g:.4}"), format!("{:.2}", s.ms / g))
                });
                writeln!(
                    f,
                    "  {:<34} {:>8.4} {:>9} {:>6}  {}",
                    s.step,
                    s.ms,
                    gemm,
                    ratio,
                    s.plan.as_deref().unwrap_or("")
                )?;
            }
        }
        if let Some(e) = &self.graph_error {
            writeln!(f, "CUDA graphs off: {e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_batches_are_full_and_reproducible() {
        let a = random_batch(3, 128, 7).unwrap();
        assert_eq!(a.ids.len(), 3 * 128);
        assert!(a.mask.iter().all(|&m| m == 1));
        for s in 0..3 {
            assert_eq!(a.ids[s * 128], 101);
            assert_eq!(a.ids[s * 128 + 127], 102);
            assert!(
                a.ids[s * 128 + 1..s * 128 + 127]
                    .iter()
                    .all(|&i| (1000..30000).contains(&i))
            );
        }
        assert_eq!(a, random_batch(3, 128, 7).unwrap());
        assert_ne!(a.ids, random_batch(3, 128, 8).unwrap().ids);
        assert!(random_batch(0, 128, 1).is_err());
        assert!(random_batch(1, 1, 1).is_err());
    }

    #[test]
    fn repetitions_are_bounded() {
        assert_eq!(reps_for(250.0, 0.5), 500);
        assert_eq!(reps_for(250.0, 5.0), 50);
        assert_eq!(reps_for(250.0, 1000.0), 5);
    }
}
