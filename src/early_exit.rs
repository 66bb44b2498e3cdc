//! MiniLM with early exit (DeeBERT: Xin et al., "DeeBERT: Dynamic Early Exiting for
//! Accelerating BERT Inference", ACL'20), the third workload of device-side control flow
//! (Grinder/Cocktailer): a classifier head after every encoder layer; once every
//! sequence's head is confident (its largest softmax probability reaches the layer's
//! threshold) the remaining layers are skipped.
//!
//! Two executions of the same kernels, with the same results bit for bit:
//! - [`ExitRunner::run_device`]: every layer's launches are enqueued at once (or replayed as one
//!   CUDA graph, [`ExitRunner::capture_device`]). The exit head
//!   (`fused_gemm_device::kernel::control::exit_head`) writes the exit state in device memory,
//!   and every later launch reads it first and returns at once: the layer's wave programs
//!   ([`WaveRunner::launch_unless`]), its attention ([`bert::attention_unless`]) and the later
//!   heads. No host round trip.
//! - [`ExitRunner::run_host_driven`]: what a framework does: after each head the exit state is
//!   copied to the host (a sync), and the host decides whether to launch the next layer.
//!
//! Shapes are MiniLM-L6's (d = 384, 12 heads of 32, FFN 1536, 6 layers) in bf16; weights and
//! heads are random (the heads are untrained, so benchmarks place exits with thresholds:
//! [`ExitPolicy`]). Sequence lengths are served in buckets (powers of two, at least 16): a
//! request is padded to its bucket, the attention masks the padding, and the bucket's plan
//! (tile choices and wave programs of a layer's two graphs, [`ExitPlan`]) comes from a
//! [`fused_gemm_host::schedule::plan_cache::PlanCache`].

use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig};
use fused_gemm_device::kernel::control::ExitHeadArgs;
use fused_gemm_device::types::DType;
use fused_gemm_host::kernel::MatRef;
use fused_gemm_host::launch::{Kernel, LaunchShape};
use fused_gemm_host::schedule::exec::{WaveRunner, vdevice};
use fused_gemm_host::schedule::plan_cache::bucket;
use fused_gemm_host::schedule::{Schedule, ScheduleOptions, WaveGraph, schedule};
use fused_gemm_host::{Error, Gpu, Result, Tensor};

use crate::bert::{self, SeqBatch};
use crate::kernels::control::{EXIT_HEAD_SMEM, EXIT_HEAD_THREADS, MAX_EXIT_LOGITS, fg_exit_head};
use crate::kernels::waves::WAVES_BF16_ROWS;
use crate::ptx::BUILTIN;
use crate::waves::workloads::{
    MINILM_D, MINILM_EPS, MINILM_FFN, MINILM_HEAD_DIM, MINILM_HEADS, random,
};
use crate::waves::{bias, bias_gelu, bias_residual_layer_norm};

/// Shortest sequence bucket.
pub const MIN_SEQ_BUCKET: usize = 16;

/// The sequence bucket of a request of `len` tokens: the smallest power of two ≥ `len`, at
/// least [`MIN_SEQ_BUCKET`].
pub fn seq_bucket(len: usize) -> usize {
    (bucket(len.min(u32::MAX as usize) as u32) as usize).max(MIN_SEQ_BUCKET)
}

/// One layer's weights (bf16; `nn.Linear` layout, N×K) and its exit head.
#[derive(Debug)]
pub struct ExitLayer {
    /// Fused QKV weight (1152 × 384).
    pub w_qkv: Tensor,
    /// QKV bias (1152).
    pub b_qkv: Tensor,
    /// Attention output projection (384 × 384).
    pub w_o: Tensor,
    /// Its bias.
    pub b_o: Tensor,
    /// First LayerNorm γ.
    pub g1: Tensor,
    /// First LayerNorm β.
    pub be1: Tensor,
    /// FFN up (1536 × 384).
    pub w_1: Tensor,
    /// FFN up bias.
    pub b_1: Tensor,
    /// FFN down (384 × 1536).
    pub w_2: Tensor,
    /// FFN down bias.
    pub b_2: Tensor,
    /// Second LayerNorm γ.
    pub g2: Tensor,
    /// Second LayerNorm β.
    pub be2: Tensor,
    /// Exit head weight (labels × 384).
    pub head_w: Tensor,
    /// Exit head bias (labels).
    pub head_b: Tensor,
}

/// The model: MiniLM-shaped layers with an exit head each, random weights.
#[derive(Debug)]
pub struct EarlyExitMiniLm {
    /// Layers in order.
    pub layers: Vec<ExitLayer>,
    /// Classes of every head.
    pub labels: usize,
}

impl EarlyExitMiniLm {
    /// `layers` layers with `labels`-way heads, weights from `fill(len)` (values in about
    /// [−1, 1], scaled by 1/√fan-in).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 layers or labels outside `1..=32`; allocation errors.
    pub fn new(
        gpu: &Gpu,
        layers: usize,
        labels: usize,
        fill: &mut dyn FnMut(usize) -> Vec<f32>,
    ) -> Result<Self> {
        if layers == 0 {
            return Err(Error::invalid("layers", "at least 1", 0));
        }
        if !(1..=32).contains(&labels) {
            return Err(Error::invalid("labels", "1..=32", labels));
        }
        let (d, ffn) = (MINILM_D, MINILM_FFN);
        let (s_d, s_f) = (1.0 / (d as f32).sqrt(), 1.0 / (ffn as f32).sqrt());
        let ones_ish = |fill: &mut dyn FnMut(usize) -> Vec<f32>| -> Result<Tensor> {
            let v: Vec<f32> = fill(d).into_iter().map(|x| 1.0 + 0.1 * x).collect();
            Tensor::from_f32(gpu, 1, d, DType::Bf16, &v)
        };
        let mut out = Vec::with_capacity(layers);
        for _ in 0..layers {
            out.push(ExitLayer {
                w_qkv: random(gpu, fill, 3 * d, d, s_d)?,
                b_qkv: random(gpu, fill, 1, 3 * d, 0.1)?,
                w_o: random(gpu, fill, d, d, s_d)?,
                b_o: random(gpu, fill, 1, d, 0.1)?,
                g1: ones_ish(fill)?,
                be1: random(gpu, fill, 1, d, 0.1)?,
                w_1: random(gpu, fill, ffn, d, s_d)?,
                b_1: random(gpu, fill, 1, ffn, 0.1)?,
                w_2: random(gpu, fill, d, ffn, s_f)?,
                b_2: random(gpu, fill, 1, d, 0.1)?,
                g2: ones_ish(fill)?,
                be2: random(gpu, fill, 1, d, 0.1)?,
                head_w: random(gpu, fill, labels, d, 4.0 * s_d)?,
                head_b: random(gpu, fill, 1, labels, 0.1)?,
            });
        }
        Ok(EarlyExitMiniLm {
            layers: out,
            labels,
        })
    }
}

/// When the heads exit.
#[derive(Clone, Debug, PartialEq)]
pub enum ExitPolicy {
    /// Every head exits when each sequence's largest softmax probability is ≥ this.
    Confidence(f32),
    /// The head of this layer (0-based) exits, no earlier one does (thresholds 0 and +∞);
    /// decided on the device all the same.
    AtLayer(usize),
}

impl ExitPolicy {
    /// The threshold of `layer`'s head.
    pub fn threshold(&self, layer: usize) -> f32 {
        match self {
            ExitPolicy::Confidence(t) => *t,
            ExitPolicy::AtLayer(e) if *e == layer => 0.0,
            ExitPolicy::AtLayer(_) => f32::INFINITY,
        }
    }
}

/// A bucket's plan: the schedules (variants and wave programs) of a layer's graph before the
/// attention (QKV projection) and after it (out-proj + LayerNorm, FFN up + GELU, FFN down +
/// LayerNorm). Every layer of the bucket runs them; they depend on shapes only.
#[derive(Clone, Debug)]
pub struct ExitPlan {
    /// Rows (batch × sequence bucket) planned for.
    pub rows: usize,
    /// Before the attention.
    pub pre: Schedule,
    /// After the attention.
    pub post: Schedule,
}

/// Options of the exit plans: one persistent program per graph (so every launch can be
/// skipped on the device: plain launches cannot read the exit state).
fn exit_options() -> ScheduleOptions {
    ScheduleOptions {
        merge: true,
        fallback: false,
        ..ScheduleOptions::default()
    }
}

/// One layer's activations in a bucket.
#[derive(Debug)]
pub struct LayerActs {
    /// QKV projection (rows × 1152).
    pub qkv: CudaSlice<half::bf16>,
    /// Attention output (rows × 384).
    pub attn: CudaSlice<half::bf16>,
    /// After the first LayerNorm (rows × 384).
    pub h1: Tensor,
    /// FFN hidden (rows × 1536).
    pub f: Tensor,
    /// The layer's output (rows × 384).
    pub y: Tensor,
}

/// What [`ExitRunner::run_host_driven`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExitStats {
    /// Kernel launches.
    pub launches: usize,
    /// Exit states read back (each a copy and a sync).
    pub syncs: usize,
    /// Layers run.
    pub layers_run: usize,
}

/// A model's buffers, wave runners and heads for one (batch, sequence bucket).
pub struct ExitRunner {
    /// Batch B.
    pub batch: usize,
    /// Sequence bucket T (tokens per sequence, padded).
    pub seq: usize,
    /// Input hidden states (B·T × 384): what the embeddings would produce.
    pub x: Tensor,
    /// Per layer.
    pub acts: Vec<LayerActs>,
    /// Logits of the head that exited (B × labels, f32).
    pub logits: Tensor,
    /// Exit state: `[exited (0/1), layer that exited]`.
    pub state: CudaSlice<u32>,
    state_ptr: u64,
    seqs: SeqBatch,
    runners: Vec<(WaveRunner, WaveRunner)>,
    heads: Vec<ExitHeadArgs>,
    head: Kernel<ExitHeadArgs>,
    head_cfg: LaunchConfig,
}

impl std::fmt::Debug for ExitRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExitRunner")
            .field("batch", &self.batch)
            .field("seq", &self.seq)
            .field("layers", &self.acts.len())
            .finish()
    }
}

impl ExitRunner {
    /// The graphs of one layer reading `input` (rows × 384) into `acts`.
    fn graphs(
        gpu: &Gpu,
        l: &ExitLayer,
        input: &Tensor,
        acts: &LayerActs,
        rows: usize,
    ) -> Result<(WaveGraph, WaveGraph)> {
        let d = MINILM_D;
        let mut pre = WaveGraph::new();
        let qkv = MatRef::new(&acts.qkv, rows, 3 * d)?;
        pre.add(bias(gpu, "qkv", input, &l.w_qkv, &l.b_qkv, &qkv)?)?;
        let mut post = WaveGraph::new();
        let attn = MatRef::new(&acts.attn, rows, d)?;
        post.add(bias_residual_layer_norm(
            gpu, "out_proj", &attn, &l.w_o, &l.b_o, input, &l.g1, &l.be1, MINILM_EPS, &acts.h1,
        )?)?;
        post.add(bias_gelu(gpu, "ffn_up", &acts.h1, &l.w_1, &l.b_1, &acts.f)?)?;
        post.add(bias_residual_layer_norm(
            gpu, "ffn_down", &acts.f, &l.w_2, &l.b_2, &acts.h1, &l.g2, &l.be2, MINILM_EPS, &acts.y,
        )?)?;
        Ok((pre, post))
    }

    /// Plans a bucket of `rows` = B·T rows (the plan cache's miss path): schedules one layer's
    /// graphs over scratch buffers of that size.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 rows; scheduling, allocation and validation errors.
    pub fn plan(gpu: &Gpu, model: &EarlyExitMiniLm, rows: usize) -> Result<ExitPlan> {
        if rows == 0 {
            return Err(Error::invalid("rows", "at least 1", 0));
        }
        let x = Tensor::zeros(gpu, rows, MINILM_D, DType::Bf16)?;
        let acts = Self::acts(gpu, rows)?;
        let (pre, post) = Self::graphs(gpu, &model.layers[0], &x, &acts, rows)?;
        let vdev = vdevice(gpu, &WAVES_BF16_ROWS)?;
        let opts = exit_options();
        Ok(ExitPlan {
            rows,
            pre: schedule(&pre, &WAVES_BF16_ROWS, gpu.props(), vdev, &opts)?,
            post: schedule(&post, &WAVES_BF16_ROWS, gpu.props(), vdev, &opts)?,
        })
    }

    fn acts(gpu: &Gpu, rows: usize) -> Result<LayerActs> {
        let d = MINILM_D;
        Ok(LayerActs {
            qkv: gpu.zeros::<half::bf16>(rows * 3 * d)?,
            attn: gpu.zeros::<half::bf16>(rows * d)?,
            h1: Tensor::zeros(gpu, rows, d, DType::Bf16)?,
            f: Tensor::zeros(gpu, rows, MINILM_FFN, DType::Bf16)?,
            y: Tensor::zeros(gpu, rows, d, DType::Bf16)?,
        })
    }

    /// Buffers and runners for `batch` sequences of bucket length `seq` with `plan` (made by
    /// [`ExitRunner::plan`] for `batch·seq` rows) and `policy`'s thresholds. Every sequence is
    /// `seq` tokens long until [`ExitRunner::set_lengths`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero size, a plan for another row count, or more than
    /// `MAX_EXIT_LOGITS` logits per head; allocation, module-loading and launch-limit errors.
    pub fn new(
        gpu: &Gpu,
        model: &EarlyExitMiniLm,
        plan: &ExitPlan,
        batch: usize,
        seq: usize,
        policy: &ExitPolicy,
    ) -> Result<Self> {
        if batch == 0 || seq == 0 {
            return Err(Error::invalid(
                "batch, seq",
                "both at least 1",
                format!("{batch}, {seq}"),
            ));
        }
        let rows = batch * seq;
        if plan.rows != rows {
            return Err(Error::invalid(
                "plan",
                format!("a plan for {rows} rows"),
                plan.rows,
            ));
        }
        if batch * model.labels > MAX_EXIT_LOGITS as usize {
            return Err(Error::invalid(
                "batch × labels",
                format!("at most {MAX_EXIT_LOGITS}"),
                batch * model.labels,
            ));
        }
        let d = MINILM_D;
        let x = Tensor::zeros(gpu, rows, d, DType::Bf16)?;
        let logits = Tensor::zeros(gpu, batch, model.labels, DType::F32)?;
        let state = gpu.zeros::<u32>(2)?;
        let mut acts: Vec<LayerActs> = Vec::with_capacity(model.layers.len());
        let mut runners = Vec::with_capacity(model.layers.len());
        for (i, l) in model.layers.iter().enumerate() {
            let a = Self::acts(gpu, rows)?;
            let input = if i == 0 { &x } else { &acts[i - 1].y };
            let (pre, post) = Self::graphs(gpu, l, input, &a, rows)?;
            runners.push((
                WaveRunner::new(gpu, &pre, &WAVES_BF16_ROWS, &plan.pre)?,
                WaveRunner::new(gpu, &post, &WAVES_BF16_ROWS, &plan.post)?,
            ));
            acts.push(a);
        }
        let ptr = |t: &Tensor| t.desc().ptr;
        let state_ptr = state.device_ptr(gpu.stream()).0;
        let last = model.layers.len() - 1;
        let heads = model
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| ExitHeadArgs {
                x: ptr(&acts[i].y),
                w: ptr(&l.head_w),
                bias: ptr(&l.head_b),
                logits: ptr(&logits),
                state: state_ptr,
                rows: batch as u32,
                d: d as u32,
                ldx: (seq * d) as u32,
                labels: model.labels as u32,
                layer: i as u32,
                last: (i == last) as u32,
                threshold: policy.threshold(i),
                _pad: 0,
            })
            .collect();
        let head = gpu.kernel(&BUILTIN, fg_exit_head)?;
        let head_cfg = LaunchShape {
            grid: (1, 1, 1),
            block: (EXIT_HEAD_THREADS, 1, 1),
            smem_bytes: EXIT_HEAD_SMEM,
        }
        .prepare(&head, gpu.props())?;
        let seqs = SeqBatch::new(gpu, &vec![0; rows], &vec![seq as u32; batch], seq)?;
        Ok(ExitRunner {
            batch,
            seq,
            x,
            acts,
            logits,
            state,
            state_ptr,
            seqs,
            runners,
            heads,
            head,
            head_cfg,
        })
    }

    /// Sets each sequence's real length (1..=T; the attention masks the rest).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a wrong count or a length outside 1..=T.
    pub fn set_lengths(&mut self, gpu: &Gpu, lengths: &[u32]) -> Result<()> {
        let ids = vec![0; self.batch * self.seq];
        self.seqs.refill(gpu, &ids, lengths)
    }

    fn launch_head(&self, gpu: &Gpu, layer: usize) -> Result<()> {
        // SAFETY: the head's addresses are this runner's buffers (B rows of 384 at stride
        // T·384, a labels × 384 weight, B × labels logits, the two-word state), B·labels ≤
        // MAX_EXIT_LOGITS (checked in `new`).
        unsafe { self.head.launch(gpu, self.head_cfg, &self.heads[layer]) }?;
        Ok(())
    }

    /// One layer's launches; with `skip_if`, each returns at once when the exit state says a
    /// head has exited.
    fn launch_layer(&mut self, gpu: &Gpu, layer: usize, skip_if: Option<u64>) -> Result<()> {
        let (pre, post) = &self.runners[layer];
        match skip_if {
            Some(s) => pre.launch_unless(gpu, s)?,
            None => pre.launch(gpu)?,
        }
        let acts = &mut self.acts[layer];
        bert::attention_unless(
            gpu,
            &self.seqs,
            MINILM_HEADS,
            MINILM_HEAD_DIM,
            &acts.qkv,
            &mut acts.attn,
            skip_if.unwrap_or(0),
        )?;
        match skip_if {
            Some(s) => post.launch_unless(gpu, s)?,
            None => post.launch(gpu)?,
        }
        self.launch_head(gpu, layer)
    }

    /// Enqueues the whole model with the exit decided on the device: the state is zeroed, then
    /// every layer's launches follow with no host round trip (launches after an exit return at
    /// once). Nothing waits; may be recorded by [`Gpu::capture`].
    ///
    /// # Errors
    /// Driver errors.
    pub fn run_device(&mut self, gpu: &Gpu) -> Result<()> {
        gpu.stream().memset_zeros(&mut self.state)?;
        let s = self.state_ptr;
        for layer in 0..self.acts.len() {
            self.launch_layer(gpu, layer, Some(s))?;
        }
        Ok(())
    }

    /// [`ExitRunner::run_device`] recorded as one CUDA graph. The graph holds the addresses of
    /// this runner's activations, exit state and tables: drop it before the runner.
    ///
    /// # Errors
    /// Capture and driver errors.
    pub fn capture_device(&mut self, gpu: &Gpu) -> Result<fused_gemm_host::graph::Graph> {
        gpu.capture(|g| self.run_device(g))
    }

    /// The host-driven execution: layer by layer, reading the exit state back after each head
    /// (a copy and a sync) before deciding to go on. Returns when done.
    ///
    /// # Errors
    /// Driver errors.
    pub fn run_host_driven(&mut self, gpu: &Gpu) -> Result<ExitStats> {
        let mut st = ExitStats::default();
        gpu.stream().memset_zeros(&mut self.state)?;
        for layer in 0..self.acts.len() {
            self.launch_layer(gpu, layer, None)?;
            st.launches += 4;
            st.layers_run += 1;
            let s = gpu.download(&self.state)?;
            st.syncs += 1;
            if s[0] != 0 {
                break;
            }
        }
        Ok(st)
    }

    /// The exit state after a run: the layer whose head exited (the last layer's always does).
    ///
    /// # Errors
    /// Driver errors; [`Error::LaunchLimit`] when no head has exited (the run did not finish).
    pub fn exit_layer(&self, gpu: &Gpu) -> Result<usize> {
        let s = gpu.download(&self.state)?;
        if s[0] == 0 {
            return Err(Error::LaunchLimit(
                "no exit head has run to completion".into(),
            ));
        }
        Ok(s[1] as usize)
    }

    /// Writes NaN over every activation, the logits and the exit state (all ones).
    ///
    /// # Errors
    /// Driver errors.
    pub fn poison(&mut self, gpu: &Gpu) -> Result<()> {
        for a in &mut self.acts {
            let nan = half::bf16::NAN;
            let rows = a.h1.rows();
            let d = MINILM_D;
            let n3 = vec![nan; rows * 3 * d];
            let n1 = vec![nan; rows * d];
            gpu.stream().memcpy_htod(&n3, &mut a.qkv)?;
            gpu.stream().memcpy_htod(&n1, &mut a.attn)?;
            a.h1.fill(gpu, f32::NAN)?;
            a.f.fill(gpu, f32::NAN)?;
            a.y.fill(gpu, f32::NAN)?;
        }
        self.logits.fill(gpu, f32::NAN)?;
        gpu.stream().memcpy_htod(&[u32::MAX; 2], &mut self.state)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_buckets_are_powers_of_two_from_16() {
        for (len, b) in [
            (0, 16),
            (1, 16),
            (16, 16),
            (17, 32),
            (100, 128),
            (300, 512),
            (512, 512),
        ] {
            assert_eq!(seq_bucket(len), b, "length {len}");
        }
    }

    #[test]
    fn forced_exits_put_the_only_reachable_threshold_on_their_layer() {
        let p = ExitPolicy::AtLayer(2);
        for layer in 0..6 {
            let t = p.threshold(layer);
            // A largest softmax probability is in (0, 1].
            assert_eq!(t <= 0.0, layer == 2, "layer {layer}: {t}");
            assert!(layer == 2 || t > 1.0);
        }
        assert_eq!(ExitPolicy::Confidence(0.7).threshold(4), 0.7);
    }
}
