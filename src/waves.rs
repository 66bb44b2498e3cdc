//! Typed operators for the wave scheduler ([`fused_gemm_host::schedule`]) over the built-in
//! wave families ([`crate::kernels::waves`]), and the workloads its benchmark and tests run.
//!
//! Each constructor validates its operands like a `#[fused_gemm]` launcher (shapes, dtypes,
//! leading dimensions, null pointers, aliasing; the 16-byte row alignment the arms' vector loads
//! need) and returns the [`OpSpec`] a [`WaveGraph`] takes: the GEMM arguments, the epilogue
//! parameters as the device reads them, and the regions read and written. A graph holds device
//! addresses: every buffer must outlive the runners built from it.
//!
//! Layouts, for every kind: A is M×K row-major, the weight W is N×K row-major (a `Linear`
//! weight: C = A·Wᵀ), C is M×N row-major (M×N/4 for `lstm`), all bf16; vectors have one value
//! per output column, broadcast down the rows.
//!
//! ```no_run
//! use fused_gemm::host::schedule::{self, WaveGraph, WaveRunner, ScheduleOptions};
//! use fused_gemm::host::{Gpu, Tensor};
//! use fused_gemm::device::types::DType;
//! use fused_gemm::kernels::waves::WAVES_BF16;
//! # fn main() -> fused_gemm::Result<()> {
//! let gpu = Gpu::new(0)?;
//! let a = Tensor::zeros(&gpu, 256, 256, DType::Bf16)?;
//! let w = Tensor::zeros(&gpu, 256, 256, DType::Bf16)?;
//! let b = Tensor::zeros(&gpu, 1, 256, DType::Bf16)?;
//! let c = Tensor::zeros(&gpu, 256, 256, DType::Bf16)?;
//! let mut g = WaveGraph::new();
//! g.add(fused_gemm::waves::bias_relu(&gpu, "gemm0", &a, &w, &b, &c)?)?;
//! let vdev = schedule::exec::vdevice(&gpu, &WAVES_BF16)?;
//! let s = schedule::schedule(&g, &WAVES_BF16, gpu.props(), vdev, &ScheduleOptions::default())?;
//! let runner = WaveRunner::new(&gpu, &g, &WAVES_BF16, &s)?;
//! runner.launch(&gpu)?;
//! # Ok(()) }
//! ```

use fused_gemm_device::epilogue::stages::{LayerNormParams, MatrixParams, VectorParams};
use fused_gemm_device::epilogue::{Cons, Nil};
use fused_gemm_device::gemm::GemmArgs;
use fused_gemm_device::kernel::persistent::{EPI_WORDS, LstmParams};
use fused_gemm_device::params::KernelParam;
use fused_gemm_device::types::DType;
use fused_gemm_host::kernel::{AsMatrix, AsVector};
use fused_gemm_host::plan::Problem;
use fused_gemm_host::schedule::{OpSpec, Region};
use fused_gemm_host::tensor::{MatrixDesc, VectorDesc};
use fused_gemm_host::validate::{
    BLayout, EpilogueArg, GemmCall, Operand, Overlap, VECTOR_BYTES, Work, check_gemm, overlap,
};
use fused_gemm_host::{Error, Gpu, Result};

use crate::kernels::waves::kind;

pub use fused_gemm_host::schedule::WaveGraph;

/// The `#[repr(C)]` bytes of `p` as a task's epilogue words (zero-padded).
pub(crate) fn epi_words<P: KernelParam>(p: &P) -> [u64; EPI_WORDS] {
    assert!(
        std::mem::size_of::<P>() <= 8 * EPI_WORDS,
        "epilogue parameters larger than a task's words"
    );
    let mut w = [0u64; EPI_WORDS];
    // SAFETY: `P` is a `KernelParam` (plain `#[repr(C)]` data without implicit padding in the
    // stage parameter types used here) no larger than `w`.
    unsafe {
        std::ptr::copy_nonoverlapping(
            p as *const P as *const u8,
            w.as_mut_ptr() as *mut u8,
            std::mem::size_of::<P>(),
        )
    };
    w
}

/// Validates a standard-kind GEMM and returns its args, model problem and regions.
pub(crate) fn standard_op(
    name: &str,
    kind: &'static str,
    a: MatrixDesc,
    w: MatrixDesc,
    c: MatrixDesc,
    epilogue: &[EpilogueArg],
    row_norm_stage: Option<usize>,
) -> Result<(GemmArgs, Problem, Vec<Region>, Vec<Region>)> {
    let call = GemmCall {
        a,
        b: w,
        b_layout: BLayout::NxK,
        c,
        in_dtype: DType::Bf16,
        out_dtype: DType::Bf16,
        epilogue,
        pair_stage: None,
        row_norm_stage,
    };
    let checked = check_gemm(&call)?;
    if checked.work == Work::Empty {
        return Err(Error::invalid(
            "c",
            "M > 0 and N > 0 (a wave operator computes at least one tile)",
            format!("{} for `{name}` ({kind})", c.shape_str()),
        ));
    }
    checked.require_vector()?;
    let args = GemmArgs {
        a: a.ptr,
        b: w.ptr,
        c: c.ptr,
        workspace: 0,
        counters: 0,
        m: checked.m,
        n: checked.n,
        k: checked.k,
        lda: a.ld as u32,
        ldb: w.ld as u32,
        ldc: c.ld as u32,
        splits: 1,
        k_per_split: 0,
    };
    let problem = Problem::from_call(&call, &checked, false);
    let mut reads = Vec::new();
    if checked.work == Work::Gemm {
        reads.push(Region::rows(a));
        reads.push(Region::whole(w));
    }
    for e in epilogue {
        match e.operand {
            Operand::Residual(r) => reads.push(Region::rows(r)),
            Operand::Bias(v) | Operand::Gamma(v) | Operand::Beta(v) => {
                reads.push(Region::whole(v.as_matrix()))
            }
            _ => {}
        }
    }
    Ok((args, problem, reads, vec![Region::rows(c)]))
}

pub(crate) fn bias_arg(v: VectorDesc) -> EpilogueArg {
    EpilogueArg {
        name: "bias",
        stage: 0,
        operand: Operand::Bias(v),
    }
}

fn simple(
    gpu: &Gpu,
    name: &str,
    kind: &'static str,
    a: &impl AsMatrix,
    w: &impl AsMatrix,
    bias: &impl AsVector,
    c: &impl AsMatrix,
) -> Result<OpSpec> {
    let (a, w, c, b) = (
        a.matrix(gpu)?,
        w.matrix(gpu)?,
        c.matrix(gpu)?,
        bias.vector(gpu)?,
    );
    let (args, problem, reads, writes) = standard_op(name, kind, a, w, c, &[bias_arg(b)], None)?;
    // `Bias`, `BiasRelu` and `BiasGelu` all take `Cons<VectorParams, ...Nil>`: the bias pointer.
    let params = Cons {
        head: VectorParams { ptr: b.ptr },
        tail: Cons {
            head: Nil,
            tail: Nil,
        },
    };
    Ok(OpSpec {
        name: name.to_owned(),
        kind,
        problem,
        args,
        epi: epi_words(&params),
        reads,
        writes,
    })
}

/// `bias_relu`: C = relu(A·Wᵀ + bias). A M×K, W N×K, bias length N, C M×N; bf16.
///
/// # Errors
/// The operand checks of a `#[fused_gemm]` launcher (`check_gemm`), as typed errors naming the
/// operand; [`Error::Misaligned`] when A or W rows are not 16-byte aligned; M = 0 or N = 0.
pub fn bias_relu(
    gpu: &Gpu,
    name: &str,
    a: &impl AsMatrix,
    w: &impl AsMatrix,
    bias: &impl AsVector,
    c: &impl AsMatrix,
) -> Result<OpSpec> {
    simple(gpu, name, kind::BIAS_RELU, a, w, bias, c)
}

/// `bias`: C = A·Wᵀ + bias. Shapes and errors as [`bias_relu`].
///
/// # Errors
/// As [`bias_relu`].
pub fn bias(
    gpu: &Gpu,
    name: &str,
    a: &impl AsMatrix,
    w: &impl AsMatrix,
    bias: &impl AsVector,
    c: &impl AsMatrix,
) -> Result<OpSpec> {
    simple(gpu, name, kind::BIAS, a, w, bias, c)
}

/// `bias_gelu`: C = gelu(A·Wᵀ + bias), erf GELU. Shapes and errors as [`bias_relu`].
///
/// # Errors
/// As [`bias_relu`].
pub fn bias_gelu(
    gpu: &Gpu,
    name: &str,
    a: &impl AsMatrix,
    w: &impl AsMatrix,
    bias: &impl AsVector,
    c: &impl AsMatrix,
) -> Result<OpSpec> {
    simple(gpu, name, kind::BIAS_GELU, a, w, bias, c)
}

/// `bias_residual_layer_norm`: C = LayerNorm(A·Wᵀ + bias + R)·γ + β over each row (biased
/// variance, ε added to it), finished in the CTA: N must fit one row tile (N ≤ 384).
/// R is M×N (may be C itself), bias, γ, β length N; bf16.
///
/// # Errors
/// As [`bias_relu`], plus ε not finite or negative; a row wider than every row tile is
/// [`Error::LaunchLimit`] when scheduled.
#[allow(clippy::too_many_arguments)]
pub fn bias_residual_layer_norm(
    gpu: &Gpu,
    name: &str,
    a: &impl AsMatrix,
    w: &impl AsMatrix,
    bias: &impl AsVector,
    residual: &impl AsMatrix,
    gamma: &impl AsVector,
    beta: &impl AsVector,
    eps: f32,
    c: &impl AsMatrix,
) -> Result<OpSpec> {
    let (a, w, c) = (a.matrix(gpu)?, w.matrix(gpu)?, c.matrix(gpu)?);
    let (b, r, g, be) = (
        bias.vector(gpu)?,
        residual.matrix(gpu)?,
        gamma.vector(gpu)?,
        beta.vector(gpu)?,
    );
    let epilogue = [
        bias_arg(b),
        EpilogueArg {
            name: "residual",
            stage: 1,
            operand: Operand::Residual(r),
        },
        EpilogueArg {
            name: "gamma",
            stage: 2,
            operand: Operand::Gamma(g),
        },
        EpilogueArg {
            name: "beta",
            stage: 2,
            operand: Operand::Beta(be),
        },
        EpilogueArg {
            name: "eps",
            stage: 2,
            operand: Operand::Eps(eps),
        },
    ];
    let (args, problem, reads, writes) = standard_op(
        name,
        kind::BIAS_RESIDUAL_LAYER_NORM,
        a,
        w,
        c,
        &epilogue,
        Some(2),
    )?;
    let params = Cons {
        head: VectorParams { ptr: b.ptr },
        tail: Cons {
            head: MatrixParams {
                ptr: r.ptr,
                ld: r.ld as u32,
                _pad: 0,
            },
            tail: Cons {
                head: LayerNormParams {
                    gamma: g.ptr,
                    beta: be.ptr,
                    stats: 0,
                    eps,
                    _pad: 0,
                },
                tail: Nil,
            },
        },
    };
    Ok(OpSpec {
        name: name.to_owned(),
        kind: kind::BIAS_RESIDUAL_LAYER_NORM,
        problem,
        args,
        epi: epi_words(&params),
        reads,
        writes,
    })
}

fn check_matrix(
    arg: &'static str,
    d: &MatrixDesc,
    rows: usize,
    cols: usize,
    dtype: DType,
    vector: bool,
) -> Result<()> {
    if d.dtype != dtype {
        return Err(Error::DtypeMismatch {
            arg,
            expected: dtype,
            actual: d.dtype,
        });
    }
    if (d.rows, d.cols) != (rows, cols) {
        return Err(Error::shape(arg, format!("{rows}×{cols}"), d.shape_str()));
    }
    if d.ld < d.cols {
        return Err(Error::LeadingDimension {
            arg,
            ld: d.ld as u64,
            cols: d.cols as u64,
        });
    }
    if d.ld > u32::MAX as usize || rows > u32::MAX as usize || cols > u32::MAX as usize {
        return Err(Error::TooLarge {
            arg,
            max: u32::MAX as u64,
            actual: d.ld.max(rows).max(cols) as u64,
        });
    }
    if d.ptr == 0 {
        return Err(Error::NullPointer {
            arg,
            elements: d.elements(),
        });
    }
    let size = dtype.size() as u64;
    let pitch = d.ld as u64 * size;
    let (align, what, actual) = if !d.ptr.is_multiple_of(size) {
        (size, "address", d.ptr)
    } else if vector && !d.ptr.is_multiple_of(VECTOR_BYTES) {
        (VECTOR_BYTES, "address", d.ptr)
    } else if vector && rows > 1 && !pitch.is_multiple_of(VECTOR_BYTES) {
        (VECTOR_BYTES, "leading dimension (bytes)", pitch)
    } else if vector && !(cols as u64 * size).is_multiple_of(VECTOR_BYTES) {
        (VECTOR_BYTES, "row length (bytes)", cols as u64 * size)
    } else {
        return Ok(());
    };
    Err(Error::Misaligned {
        arg,
        what,
        align,
        actual,
    })
}

/// `lstm`: one LSTM cell step on `[x_t | h_{t−1}]` (see
/// [`fused_gemm_device::kernel::persistent::LstmCell`] for the formula): gates = A·Wᵀ + bias
/// with W's 4H rows interleaved per hidden unit (`[i₀ f₀ g₀ o₀ i₁ …]`, PyTorch's gate order);
/// `h` ← o·tanh(c), `c_out` ← f·c_prev + i·g.
///
/// A M×K bf16, W 4H×K bf16, bias length 4H bf16, `h` M×H bf16, `c_prev` (None: zeros) and
/// `c_out` M×H f32 with the same leading dimension.
///
/// # Errors
/// Typed errors naming the operand for wrong dtypes, shapes, leading dimensions, null or
/// misaligned pointers (A and W rows 16-byte aligned), `c_prev` and `c_out` with different
/// leading dimensions, N not a multiple of 4, outputs overlapping inputs (`c_out` may be exactly
/// `c_prev`: each element is read before it is written by the same thread), M or N zero.
#[allow(clippy::too_many_arguments)]
pub fn lstm_cell(
    gpu: &Gpu,
    name: &str,
    a: &impl AsMatrix,
    w: &impl AsMatrix,
    bias: &impl AsVector,
    c_prev: Option<&dyn AsMatrix>,
    c_out: &impl AsMatrix,
    h: &impl AsMatrix,
) -> Result<OpSpec> {
    let (a, w, b) = (a.matrix(gpu)?, w.matrix(gpu)?, bias.vector(gpu)?);
    let (c_out, h) = (c_out.matrix(gpu)?, h.matrix(gpu)?);
    let c_prev = c_prev.map(|c| c.matrix(gpu)).transpose()?;
    let (m, k, n) = (a.rows, a.cols, w.rows);
    if m == 0 || n == 0 {
        return Err(Error::invalid("a", "M > 0 and 4H > 0", format!("{m}×{n}")));
    }
    if !n.is_multiple_of(4) {
        return Err(Error::shape(
            "w",
            "4H rows (a multiple of 4: i, f, g, o per unit)",
            w.shape_str(),
        ));
    }
    let hidden = n / 4;
    check_matrix("a", &a, m, k, DType::Bf16, true)?;
    check_matrix("w", &w, n, k, DType::Bf16, true)?;
    check_matrix("h", &h, m, hidden, DType::Bf16, false)?;
    check_matrix("c_out", &c_out, m, hidden, DType::F32, false)?;
    check_matrix("bias", &b.as_matrix(), 1, n, DType::Bf16, false)?;
    if let Some(cp) = &c_prev {
        check_matrix("c_prev", cp, m, hidden, DType::F32, false)?;
        if cp.ld != c_out.ld {
            return Err(Error::invalid(
                "c_prev",
                format!("the leading dimension of c_out ({})", c_out.ld),
                cp.ld,
            ));
        }
    }
    let inputs: Vec<(&'static str, MatrixDesc)> = [
        Some(("a", a)),
        Some(("w", w)),
        Some(("bias", b.as_matrix())),
        c_prev.map(|c| ("c_prev", c)),
    ]
    .into_iter()
    .flatten()
    .collect();
    for (out_name, o) in [("h", h), ("c_out", c_out)] {
        for (in_name, i) in &inputs {
            match overlap(&o, i) {
                Overlap::Disjoint => {}
                Overlap::Exact if out_name == "c_out" && *in_name == "c_prev" => {}
                _ => {
                    return Err(Error::Aliasing {
                        output: out_name,
                        input: in_name,
                        detail: format!(
                            "`{name}`: {} at {:#x} vs {} at {:#x}",
                            o.shape_str(),
                            o.ptr,
                            i.shape_str(),
                            i.ptr
                        ),
                    });
                }
            }
        }
    }
    if overlap(&h, &c_out) != Overlap::Disjoint {
        return Err(Error::Aliasing {
            output: "h",
            input: "c_out",
            detail: format!("`{name}`: both outputs share memory"),
        });
    }
    let args = GemmArgs {
        a: a.ptr,
        b: w.ptr,
        c: h.ptr,
        workspace: 0,
        counters: 0,
        m: m as u32,
        n: n as u32,
        k: k as u32,
        lda: a.ld as u32,
        ldb: w.ld as u32,
        ldc: h.ld as u32,
        splits: 1,
        k_per_split: 0,
    };
    let problem = Problem {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        in_dtype: DType::Bf16,
        out_dtype: DType::Bf16,
        b_layout: BLayout::NxK,
        // The model knows pair reductions (N/2 outputs); the cell's N/4 outputs plus its f32
        // state come to about as many bytes.
        pairs: true,
        row_norm: false,
        epilogue_read_bytes_per_output: 2.0,
        vector: true,
        epilogue_tma: true,
    };
    let params = Cons {
        head: LstmParams {
            bias: b.ptr,
            c_prev: c_prev.map_or(0, |c| c.ptr),
            c_out: c_out.ptr,
            ld_state: c_out.ld as u32,
            _pad: 0,
        },
        tail: Nil,
    };
    let mut reads = vec![Region::whole(w), Region::whole(b.as_matrix())];
    if k > 0 {
        reads.push(Region::rows(a));
    }
    if let Some(cp) = c_prev {
        reads.push(Region::rows(cp));
    }
    Ok(OpSpec {
        name: name.to_owned(),
        kind: kind::LSTM,
        problem,
        args,
        epi: epi_words(&params),
        reads,
        writes: vec![Region::rows(h), Region::rows(c_out)],
    })
}

pub mod workloads;
