//! Device-side control flow ([`fused_gemm_host::schedule::control`]) over the built-in control
//! family ([`crate::kernels::control::CONTROL_BF16`]): typed constructors for the operators
//! only loop and branch bodies use (`bias_residual`, the gate), and the issue-8 workloads with
//! random weights: an LSTM cell run for T steps inside one launch ([`LstmLoop`]) and a stack of
//! gated residual MLP blocks ([`GatedMlp`]). Each owns its buffers and builds its
//! [`LoopBody`]; every buffer must outlive the runners built from it.

use fused_gemm_device::epilogue::stages::{MatrixParams, VectorParams};
use fused_gemm_device::epilogue::{Cons, Nil};
use fused_gemm_device::gemm::GemmArgs;
use fused_gemm_device::kernel::rnn::{self, LstmStationaryArgs};
use fused_gemm_device::types::DType;
use fused_gemm_host::cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig};
use fused_gemm_host::kernel::{AsMatrix, AsVector};
use fused_gemm_host::launch::{Kernel, LaunchShape};
use fused_gemm_host::plan::Problem;
use fused_gemm_host::schedule::control::{BodyOp, GATE_KIND, LoopBody, gate_words};
use fused_gemm_host::schedule::{OpSpec, Region};
use fused_gemm_host::tensor::MatrixDesc;
use fused_gemm_host::validate::{BLayout, EpilogueArg, Operand};
use fused_gemm_host::{Error, Gpu, Result, Tensor};

use crate::kernels::control::kind;
use crate::waves::{bias_arg, epi_words, standard_op};

/// `bias_residual`: C = A·Wᵀ + bias + R. A M×K, W N×K, bias length N, R and C M×N; bf16.
///
/// # Errors
/// The operand checks of a `#[fused_gemm]` launcher, as typed errors naming the operand;
/// [`Error::Misaligned`] when A or W rows are not 16-byte aligned; M = 0 or N = 0.
pub fn bias_residual(
    gpu: &Gpu,
    name: &str,
    a: &impl AsMatrix,
    w: &impl AsMatrix,
    bias: &impl AsVector,
    residual: &impl AsMatrix,
    c: &impl AsMatrix,
) -> Result<OpSpec> {
    let (a, w, c, b, r) = (
        a.matrix(gpu)?,
        w.matrix(gpu)?,
        c.matrix(gpu)?,
        bias.vector(gpu)?,
        residual.matrix(gpu)?,
    );
    let epilogue = [
        bias_arg(b),
        EpilogueArg {
            name: "residual",
            stage: 1,
            operand: Operand::Residual(r),
        },
    ];
    let (args, problem, reads, writes) =
        standard_op(name, kind::BIAS_RESIDUAL, a, w, c, &epilogue, None)?;
    let params = Cons {
        head: VectorParams { ptr: b.ptr },
        tail: Cons {
            head: MatrixParams {
                ptr: r.ptr,
                ld: r.ld as u32,
                _pad: 0,
            },
            tail: Nil,
        },
    };
    Ok(OpSpec {
        name: name.to_owned(),
        kind: kind::BIAS_RESIDUAL,
        problem,
        args,
        epi: epi_words(&params),
        reads,
        writes,
    })
}

/// The gate (`fused_gemm_device::kernel::control::gate_tile`): `gate = mean over the rows of
/// x·g`, predicate `gate > threshold` (1 = run the guarded operators). x M×K bf16, g 1×K bf16,
/// `pred` 1×2 f32-typed slot receiving (predicate as `u32` bits, gate value).
///
/// # Errors
/// [`Error::DtypeMismatch`], [`Error::ShapeMismatch`] for wrong dtypes or shapes (g not 1×K,
/// `pred` not 1×2), [`Error::NullPointer`], [`Error::Misaligned`] (`pred` not 8-byte aligned),
/// [`Error::Aliasing`] when `pred` overlaps x or g, M or K zero, sizes beyond 32 bits.
pub fn gate(
    gpu: &Gpu,
    name: &str,
    x: &impl AsMatrix,
    g: &impl AsMatrix,
    pred: &impl AsMatrix,
    threshold: f32,
) -> Result<OpSpec> {
    let (x, g, pred) = (x.matrix(gpu)?, g.matrix(gpu)?, pred.matrix(gpu)?);
    for (arg, d, dt) in [
        ("x", &x, DType::Bf16),
        ("g", &g, DType::Bf16),
        ("pred", &pred, DType::F32),
    ] {
        if d.dtype != dt {
            return Err(Error::DtypeMismatch {
                arg,
                expected: dt,
                actual: d.dtype,
            });
        }
        if d.ptr == 0 {
            return Err(Error::NullPointer {
                arg,
                elements: d.elements(),
            });
        }
        if d.rows > u32::MAX as usize || d.cols > u32::MAX as usize || d.ld > u32::MAX as usize {
            return Err(Error::TooLarge {
                arg,
                max: u32::MAX as u64,
                actual: d.rows.max(d.cols).max(d.ld) as u64,
            });
        }
    }
    if x.rows == 0 || x.cols == 0 {
        return Err(Error::invalid("x", "M > 0 and K > 0", x.shape_str()));
    }
    if (g.rows, g.cols) != (1, x.cols) {
        return Err(Error::shape("g", format!("1×{}", x.cols), g.shape_str()));
    }
    if (pred.rows, pred.cols) != (1, 2) {
        return Err(Error::shape("pred", "1×2", pred.shape_str()));
    }
    if x.ptr % 2 != 0 || g.ptr % 2 != 0 || pred.ptr % 8 != 0 {
        let (arg, align, actual) = if pred.ptr % 8 != 0 {
            ("pred", 8, pred.ptr)
        } else if x.ptr % 2 != 0 {
            ("x", 2, x.ptr)
        } else {
            ("g", 2, g.ptr)
        };
        return Err(Error::Misaligned {
            arg,
            what: "address",
            align,
            actual,
        });
    }
    for (i, d) in [("x", &x), ("g", &g)] {
        if fused_gemm_host::validate::overlap(&pred, d)
            != fused_gemm_host::validate::Overlap::Disjoint
        {
            return Err(Error::Aliasing {
                output: "pred",
                input: i,
                detail: format!("`{name}`: the predicate overlaps {i}"),
            });
        }
    }
    let (m, k) = (x.rows as u32, x.cols as u32);
    // N = 8: the model sees a one-tile operator (the gate computes one value).
    let n = 8;
    let args = GemmArgs {
        a: x.ptr,
        b: g.ptr,
        c: pred.ptr,
        workspace: 0,
        counters: 0,
        m,
        n,
        k,
        lda: x.ld as u32,
        ldb: g.ld.max(g.cols) as u32,
        ldc: 2,
        splits: 1,
        k_per_split: 0,
    };
    let problem = Problem {
        m,
        n,
        k,
        in_dtype: DType::Bf16,
        out_dtype: DType::Bf16,
        b_layout: BLayout::NxK,
        pairs: false,
        row_norm: false,
        epilogue_read_bytes_per_output: 0.0,
        vector: true,
        epilogue_tma: true,
    };
    Ok(OpSpec {
        name: name.to_owned(),
        kind: GATE_KIND,
        problem,
        args,
        epi: gate_words(threshold),
        reads: vec![Region::rows(x), Region::whole(g)],
        writes: vec![Region::whole(pred)],
    })
}

/// A bf16 `rows × cols` tensor of `fill` values times `scale`.
fn random(
    gpu: &Gpu,
    fill: &mut dyn FnMut(usize) -> Vec<f32>,
    rows: usize,
    cols: usize,
    scale: f32,
) -> Result<Tensor> {
    let v: Vec<f32> = fill(rows * cols).into_iter().map(|x| x * scale).collect();
    Tensor::from_f32(gpu, rows, cols, DType::Bf16, &v)
}

/// An LSTM cell (input size = hidden size H, batch B) run for up to `max_trips` steps.
///
/// Layout: `x` holds `max_trips + 1` blocks of B rows × 2H bf16 columns; block t is
/// `[x_t | h_{t−1}]`, the A operand of step t (block 0's right half is the zero initial state),
/// and step t writes h_t into block t + 1's right half. `c` holds `max_trips + 1` f32 slots of
/// B × H: slot t is c_{t−1} (slot 0 zero). Weights: W = `[W_ih | W_hh]` (4H × 2H) with gate
/// rows interleaved per unit, bias 4H.
pub struct LstmLoop {
    /// Steps the buffers hold.
    pub max_trips: u32,
    /// Batch B.
    pub batch: usize,
    /// Hidden size H.
    pub hidden: usize,
    /// The step inputs and hidden states (see the type docs).
    pub x: Tensor,
    /// Cell states.
    pub c: Tensor,
    /// W (4H × 2H).
    pub w: Tensor,
    /// Bias (4H).
    pub bias: Tensor,
    /// The loop body: one `lstm` operator per step.
    pub body: LoopBody,
}

impl LstmLoop {
    /// Allocates and fills (inputs x_t and weights random, states zero) and builds the body.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero sizes; allocation and operand-validation errors.
    pub fn new(
        gpu: &Gpu,
        max_trips: u32,
        batch: usize,
        hidden: usize,
        fill: &mut dyn FnMut(usize) -> Vec<f32>,
    ) -> Result<Self> {
        if max_trips == 0 || batch == 0 || hidden == 0 {
            return Err(Error::invalid(
                "lstm loop",
                "steps, batch and hidden > 0",
                format!("{max_trips}, {batch}, {hidden}"),
            ));
        }
        let (t_n, b, h) = (max_trips as usize, batch, hidden);
        let mut xh = vec![0f32; (t_n + 1) * b * 2 * h];
        for t in 0..t_n {
            let v = fill(b * h);
            for r in 0..b {
                let row = (t * b + r) * 2 * h;
                xh[row..row + h].copy_from_slice(&v[r * h..(r + 1) * h]);
            }
        }
        let x = Tensor::from_f32(gpu, (t_n + 1) * b, 2 * h, DType::Bf16, &xh)?;
        let c = Tensor::zeros(gpu, (t_n + 1) * b, h, DType::F32)?;
        let w = random(gpu, fill, 4 * h, 2 * h, 1.0 / ((2 * h) as f32).sqrt())?;
        let bias = random(gpu, fill, 1, 4 * h, 0.1)?;
        let body = {
            let (x, c, w, bias) = (&x, &c, &w, &bias);
            LoopBody::new(max_trips, &mut |it| {
                let t = it as usize;
                let a = x.slice(t * b..(t + 1) * b, ..)?;
                let out = x.slice((t + 1) * b..(t + 2) * b, h..2 * h)?;
                let c_prev = c.slice(t * b..(t + 1) * b, ..)?;
                let c_out = c.slice((t + 1) * b..(t + 2) * b, ..)?;
                let spec = crate::waves::lstm_cell(
                    gpu,
                    &format!("cell t{t}"),
                    &a,
                    w,
                    bias,
                    Some(&c_prev),
                    &c_out,
                    &out,
                )?;
                Ok(vec![BodyOp {
                    spec,
                    guard: None,
                    skip_copy: None,
                }])
            })?
        };
        Ok(LstmLoop {
            max_trips,
            batch,
            hidden,
            x,
            c,
            w,
            bias,
            body,
        })
    }

    /// Writes NaN over every step output (h_t for t < `max_trips` and c slots 1..).
    ///
    /// # Errors
    /// Driver errors.
    pub fn poison(&mut self, gpu: &Gpu) -> Result<()> {
        let (b, h, t) = (self.batch, self.hidden, self.max_trips as usize);
        self.x
            .slice_mut(b..(t + 1) * b, h..2 * h)?
            .fill(gpu, f32::NAN)?;
        self.c.slice_mut(b..(t + 1) * b, ..)?.fill(gpu, f32::NAN)
    }
}

impl std::fmt::Debug for LstmLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LstmLoop")
            .field("max_trips", &self.max_trips)
            .field("batch", &self.batch)
            .field("hidden", &self.hidden)
            .finish()
    }
}

/// The weight-stationary execution of an [`LstmLoop`]'s recurrence
/// (`fused_gemm_device::kernel::rnn`, persistent RNNs: Diamos et al., ICML'16): one warp per
/// hidden unit keeps its gate rows of W in shared memory for the whole launch, the input half
/// of a step is computed before the step's wait. For small batches (B ≤ 4) and H a multiple of
/// 64 up to 512; same buffers and layout as the loop program.
pub struct LstmStationary {
    kernel: Kernel<LstmStationaryArgs>,
    cfg: LaunchConfig,
    args: LstmStationaryArgs,
    max_trips: u32,
    _counters: CudaSlice<u32>,
}

impl std::fmt::Debug for LstmStationary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LstmStationary")
            .field("batch", &self.args.batch)
            .field("hidden", &self.args.hidden)
            .finish()
    }
}

impl LstmStationary {
    /// Prepares `lp`'s buffers (which must outlive the runner).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a batch above 4 or H not a multiple of 64 or above 512;
    /// [`Error::LaunchLimit`] when the H / 8 CTAs cannot all be resident at once (the steps'
    /// barrier would deadlock); module-loading and driver errors.
    pub fn new(gpu: &Gpu, lp: &LstmLoop) -> Result<Self> {
        let (b, h) = (lp.batch, lp.hidden);
        if b > 4 {
            return Err(Error::invalid(
                "batch",
                "1..=4 (the loop program serves larger)",
                b,
            ));
        }
        if h % 64 != 0 || h > rnn::MAX_HIDDEN as usize {
            return Err(Error::invalid(
                "hidden",
                format!("a multiple of 64 up to {}", rnn::MAX_HIDDEN),
                h,
            ));
        }
        let entry = if b == 1 {
            crate::kernels::control::fg_lstm_stationary_b1
        } else {
            crate::kernels::control::fg_lstm_stationary_b4
        };
        let kernel = gpu.kernel(&crate::ptx::BUILTIN, entry)?;
        let ctas = h as u32 / rnn::UNITS_PER_CTA;
        let smem = rnn::smem_bytes(h as u32);
        let cfg = LaunchShape {
            grid: (ctas, 1, 1),
            block: (rnn::THREADS, 1, 1),
            smem_bytes: smem,
        }
        .prepare(&kernel, gpu.props())?;
        let per_sm = kernel.occupancy_max_active_blocks_per_multiprocessor(
            rnn::THREADS,
            smem as usize,
            None,
        )?;
        let slots = per_sm as u64 * gpu.props().sm_count as u64;
        if ctas as u64 > slots {
            return Err(Error::LaunchLimit(format!(
                "{ctas} CTAs of `{}` but only {slots} are co-resident: the step barrier could \
                 deadlock",
                entry.name()
            )));
        }
        let counters = gpu.zeros::<u32>(2)?;
        let ptr = |t: &Tensor| t.desc().ptr;
        let args = LstmStationaryArgs {
            x: ptr(&lp.x),
            c: ptr(&lp.c),
            w: ptr(&lp.w),
            bias: ptr(&lp.bias),
            counters: counters.device_ptr(gpu.stream()).0,
            batch: b as u32,
            hidden: h as u32,
            t0: 0,
            trips: 0,
        };
        Ok(LstmStationary {
            kernel,
            cfg,
            args,
            max_trips: lp.max_trips,
            _counters: counters,
        })
    }

    fn launch_steps(&self, gpu: &Gpu, t0: u32, trips: u32) -> Result<()> {
        let args = LstmStationaryArgs {
            t0,
            trips,
            ..self.args
        };
        // SAFETY: the buffers are the `LstmLoop`'s ((max_trips + 1) blocks, checked: t0 + trips
        // ≤ max_trips), batch ≤ the entry's B, H checked, every CTA co-resident (checked in
        // `new`).
        unsafe { self.kernel.launch(gpu, self.cfg, &args) }?;
        Ok(())
    }

    fn check_trips(&self, trips: u32) -> Result<()> {
        if trips == 0 {
            return Err(Error::invalid("trips", "at least 1", 0));
        }
        if trips > self.max_trips {
            return Err(Error::TooLarge {
                arg: "trips",
                max: self.max_trips as u64,
                actual: trips as u64,
            });
        }
        Ok(())
    }

    /// Enqueues one launch running steps 0..`trips` (no wait).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 trips, [`Error::TooLarge`] above the buffers' steps;
    /// driver errors.
    pub fn launch(&self, gpu: &Gpu, trips: u32) -> Result<()> {
        self.check_trips(trips)?;
        self.launch_steps(gpu, 0, trips)
    }

    /// The host-driven loop over the same kernel: one launch per step (no wait).
    ///
    /// # Errors
    /// As [`LstmStationary::launch`].
    pub fn launch_per_step(&self, gpu: &Gpu, trips: u32) -> Result<()> {
        self.check_trips(trips)?;
        for t in 0..trips {
            self.launch_steps(gpu, t, 1)?;
        }
        Ok(())
    }
}

/// How the gates of a [`GatedMlp`] decide.
#[derive(Clone, Debug, PartialEq)]
pub enum Gating {
    /// Data-dependent: every gate compares its value with this threshold.
    Threshold(f32),
    /// Forced: block i is skipped when `skip[i]` (threshold +∞), run otherwise (threshold −∞);
    /// the gate is still computed on the device.
    Forced(Vec<bool>),
}

impl Gating {
    /// `blocks` gates with `round(fraction·blocks)` of them skipped, spread evenly (block i is
    /// skipped when ⌊(i + 1)·f⌋ > ⌊i·f⌋ for the rounded fraction f).
    pub fn fraction(blocks: usize, fraction: f64) -> Self {
        let n_skip = (fraction.clamp(0.0, 1.0) * blocks as f64).round() as usize;
        let skip = (0..blocks)
            .map(|i| (i + 1) * n_skip / blocks.max(1) > i * n_skip / blocks.max(1))
            .collect();
        Gating::Forced(skip)
    }

    fn threshold(&self, block: usize) -> f32 {
        match self {
            Gating::Threshold(t) => *t,
            Gating::Forced(s) if s.get(block).copied().unwrap_or(false) => f32::INFINITY,
            Gating::Forced(_) => f32::NEG_INFINITY,
        }
    }
}

/// SkipNet/BlockDrop-style residual MLP blocks (Wang et al., ECCV'18; Wu et al., CVPR'18) at
/// batch B: block i computes `gate_i = mean(x_i·g_i) > θ_i`; if it runs,
/// `u_i = relu(x_i·W1_iᵀ + b1_i)` (B × F) and `x_{i+1} = u_i·W2_iᵀ + b2_i + x_i` (B × D); if
/// skipped, `x_{i+1} = x_i` (copied, so the next block reads a fixed address).
pub struct GatedMlp {
    /// Blocks.
    pub blocks: usize,
    /// Batch B.
    pub batch: usize,
    /// Width D.
    pub d: usize,
    /// Hidden width F.
    pub ffn: usize,
    /// `x_0 … x_blocks`, `(blocks + 1)·B × D` (x_i is rows `i·B..(i+1)·B`).
    pub xs: Tensor,
    /// `u_i`, `blocks·B × F`.
    pub up: Tensor,
    /// W1 per block (F × D).
    pub w1: Vec<Tensor>,
    /// b1 per block (F).
    pub b1: Vec<Tensor>,
    /// W2 per block (D × F).
    pub w2: Vec<Tensor>,
    /// b2 per block (D).
    pub b2: Vec<Tensor>,
    /// Gate vectors, `blocks × D`.
    pub g: Tensor,
    /// Per block (predicate bits, gate value), f32-typed `blocks × 2`.
    pub preds: Tensor,
    /// The gating.
    pub gating: Gating,
    /// The body (one pass, `max_trips` = 1): per block gate, up (guarded), down (guarded,
    /// skip copy x_i).
    pub body: LoopBody,
}

impl GatedMlp {
    /// Allocates, fills and builds the body.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero sizes or a forced gating of the wrong length;
    /// allocation and operand-validation errors.
    pub fn new(
        gpu: &Gpu,
        blocks: usize,
        batch: usize,
        d: usize,
        ffn: usize,
        gating: Gating,
        fill: &mut dyn FnMut(usize) -> Vec<f32>,
    ) -> Result<Self> {
        if blocks == 0 || batch == 0 || d == 0 || ffn == 0 {
            return Err(Error::invalid(
                "gated mlp",
                "blocks, batch, d, ffn > 0",
                format!("{blocks}, {batch}, {d}, {ffn}"),
            ));
        }
        if let Gating::Forced(s) = &gating
            && s.len() != blocks
        {
            return Err(Error::invalid(
                "gating",
                format!("{blocks} skip flags"),
                s.len(),
            ));
        }
        let b = batch;
        let mut xs = Tensor::zeros(gpu, (blocks + 1) * b, d, DType::Bf16)?;
        xs.slice_mut(0..b, ..)?.upload_f32(gpu, &fill(b * d))?;
        let up = Tensor::zeros(gpu, blocks * b, ffn, DType::Bf16)?;
        let (mut w1, mut b1, mut w2, mut b2) = (vec![], vec![], vec![], vec![]);
        for _ in 0..blocks {
            w1.push(random(gpu, fill, ffn, d, 1.0 / (d as f32).sqrt())?);
            b1.push(random(gpu, fill, 1, ffn, 0.1)?);
            w2.push(random(gpu, fill, d, ffn, 0.5 / (ffn as f32).sqrt())?);
            b2.push(random(gpu, fill, 1, d, 0.1)?);
        }
        let g = random(gpu, fill, blocks, d, 1.0 / (d as f32).sqrt())?;
        let preds = Tensor::zeros(gpu, blocks, 2, DType::F32)?;
        let body = {
            let (xs, up, g, preds) = (&xs, &up, &g, &preds);
            let (w1, b1, w2, b2) = (&w1, &b1, &w2, &b2);
            let gating = &gating;
            LoopBody::new(1, &mut |_| {
                let mut ops = Vec::with_capacity(3 * blocks);
                for i in 0..blocks {
                    let x = xs.slice(i * b..(i + 1) * b, ..)?;
                    let next = xs.slice((i + 1) * b..(i + 2) * b, ..)?;
                    let u = up.slice(i * b..(i + 1) * b, ..)?;
                    let gi = ops.len();
                    ops.push(BodyOp {
                        spec: gate(
                            gpu,
                            &format!("gate{i}"),
                            &x,
                            &g.slice(i..i + 1, ..)?,
                            &preds.slice(i..i + 1, ..)?,
                            gating.threshold(i),
                        )?,
                        guard: None,
                        skip_copy: None,
                    });
                    ops.push(BodyOp {
                        spec: crate::waves::bias_relu(
                            gpu,
                            &format!("up{i}"),
                            &x,
                            &w1[i],
                            &b1[i],
                            &u,
                        )?,
                        guard: Some(gi),
                        skip_copy: None,
                    });
                    ops.push(BodyOp {
                        spec: bias_residual(
                            gpu,
                            &format!("down{i}"),
                            &u,
                            &w2[i],
                            &b2[i],
                            &x,
                            &next,
                        )?,
                        guard: Some(gi),
                        skip_copy: Some(x.desc()),
                    });
                }
                Ok(ops)
            })?
        };
        Ok(GatedMlp {
            blocks,
            batch,
            d,
            ffn,
            xs,
            up,
            w1,
            b1,
            w2,
            b2,
            g,
            preds,
            gating,
            body,
        })
    }

    /// Writes NaN over every block output (x_1.., u, predicates).
    ///
    /// # Errors
    /// Driver errors.
    pub fn poison(&mut self, gpu: &Gpu) -> Result<()> {
        let b = self.batch;
        self.xs
            .slice_mut(b..(self.blocks + 1) * b, ..)?
            .fill(gpu, f32::NAN)?;
        self.up.fill(gpu, f32::NAN)?;
        self.preds.fill(gpu, f32::NAN)
    }

    /// Per block, whether it ran (from the predicates on the device).
    ///
    /// # Errors
    /// Driver errors.
    pub fn ran(&self, gpu: &Gpu) -> Result<Vec<bool>> {
        let p = self.preds.download_f32(gpu)?;
        Ok((0..self.blocks).map(|i| p[2 * i].to_bits() != 0).collect())
    }

    /// Per block, the gate value computed on the device.
    ///
    /// # Errors
    /// Driver errors.
    pub fn gate_values(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        let p = self.preds.download_f32(gpu)?;
        Ok((0..self.blocks).map(|i| p[2 * i + 1]).collect())
    }
}

impl std::fmt::Debug for GatedMlp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatedMlp")
            .field("blocks", &self.blocks)
            .field("batch", &self.batch)
            .field("d", &self.d)
            .field("ffn", &self.ffn)
            .field("gating", &self.gating)
            .finish()
    }
}

/// The matrix descriptor of a gate's predicate slot (for callers building their own bodies).
pub fn pred_slot(preds: &Tensor, i: usize) -> Result<MatrixDesc> {
    Ok(preds.slice(i..i + 1, ..)?.desc())
}
