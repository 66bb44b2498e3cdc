//! Checks run before every GEMM launch: a launch that passes never reads or writes outside
//! the operands it was given, and a launch that would is a typed [`Error`] naming the operand,
//! never a fault or a panic.
//!
//! # What is checked ([`check_gemm`])
//!
//! | check | error |
//! |---|---|
//! | A, B, C and epilogue operands have the kernel's dtypes (A, B: input dtype; C, bias, residual, gamma, beta: output dtype; row/column scales: f32) | [`Error::DtypeMismatch`] |
//! | B is K×N ([`BLayout::KxN`]) or N×K ([`BLayout::NxK`]) for A = M×K; C is M×N, or M×N/2 after a pair-reducing stage (N even) | [`Error::ShapeMismatch`] |
//! | epilogue vectors have length N (per column, N/2 after a pair stage) or M (per row); `residual` is M×N (output shape) | [`Error::ShapeMismatch`] |
//! | leading dimension ≥ columns | [`Error::LeadingDimension`] |
//! | M, N, K and every leading dimension ≤ `u32::MAX` (the kernel's argument type); byte extents fit in 64 bits | [`Error::TooLarge`] |
//! | non-empty operands have a non-null address aligned to their element size | [`Error::NullPointer`], [`Error::Misaligned`] |
//! | C does not overlap A, B or an epilogue vector; C and `residual` are either disjoint or exactly the same matrix | [`Error::Aliasing`] |
//! | RoPE: `head_dim > 0`, even (or the row is one head), N a multiple of it; `rotary_dim` even, in 1..=head_dim; `seq_len > 0`; θ finite and > 0; positions fit in `u32`; RoPE before any pair stage | [`Error::InvalidArgument`] |
//! | norm ε finite and ≥ 0 | [`Error::InvalidArgument`] |
//!
//! Grid limits are checked where the grid is chosen ([`crate::plan`], which returns
//! [`Error::LaunchLimit`] when no tile keeps `gridDim.y ≤ 65535`) and again by
//! [`crate::launch::LaunchShape::check`]. A PTX arch newer than the device is
//! [`Error::UnsupportedArch`] from [`crate::module::PtxSet::select`]. Device memory exhaustion is
//! [`Error::OutOfMemory`] (checked before allocating, and mapped from the driver).
//!
//! # Zero-sized problems
//!
//! - M = 0 or N = 0: C has no elements; [`Work::Empty`], the launcher returns `Ok(())` without
//!   launching. Shapes and dtypes are still checked, pointers are not (they may be null).
//! - K = 0: A·B is the M×N zero matrix, so C = epilogue(0) (e.g. `bias` gives C = bias broadcast,
//!   `accumulate` leaves C unchanged). [`Work::ZeroK`]: the kernel runs with zero k-tiles (its
//!   mainloop does nothing and the epilogue runs on a zero accumulator); A and B are not read and
//!   may be null.
//!
//! # Aliasing
//!
//! C may be exactly the `residual` matrix (same address, shape, leading dimension, dtype): every
//! thread reads its residual elements before it writes the same elements of C, and no other
//! thread touches them. It may not when a row-norm stage precedes `residual` (the deferred
//! partial-statistics path writes C before the finishing kernel reads `residual`). Every partial
//! overlap is an error. Two matrices with the same leading dimension are compared element by
//! element (column sub-views of one buffer do not overlap); otherwise their byte ranges are
//! compared, which may reject strided operands that interleave without sharing an element.
//!
//! # Vector path
//!
//! The mainloop copies global → shared in 16-byte chunks (`cp.async.cg.shared.global` with
//! 16-byte `cp-size`, PTX ISA §9.7.9.25). That needs a 16-byte aligned address, a row pitch
//! (`ld · size`) that is a multiple of 16, and a row length (`cols · size`) that is a multiple
//! of 16. [`Checked::vector`] says per operand whether this holds; when it does not, the
//! launcher picks the scalar variant, or returns [`Checked::require_vector`]'s
//! [`Error::Misaligned`] if it has none. Epilogue loads and the C store are pairwise and check
//! alignment at run time on the device, so they only need element alignment.

use fused_gemm_device::epilogue::stages::MOMENT_GROUP_COLS;
use fused_gemm_device::types::DType;

use crate::tensor::{MatrixDesc, VectorDesc};
use crate::{Error, Result};

/// Bytes per vector access of the mainloop's global → shared copies.
pub const VECTOR_BYTES: u64 = 16;

/// Largest M, N, K or leading dimension: the kernel takes them as `u32`.
pub const MAX_DIM: u64 = u32::MAX as u64;

/// How B is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BLayout {
    /// K×N row-major (`ldb ≥ N`).
    KxN,
    /// N×K row-major (`ldb ≥ K`): Bᵀ stored, as a PyTorch/safetensors `Linear` weight.
    NxK,
}

/// RoPE parameters as the `rope(theta)` stage takes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeSpec {
    /// Base θ of the frequencies (10000 for LLaMA-2, 500000 for LLaMA-3).
    pub theta: f32,
    /// Columns per head.
    pub head_dim: u32,
    /// Rotated columns at the start of each head.
    pub rotary_dim: u32,
    /// Tokens per sequence: row r is at position `r % seq_len + pos_offset`.
    pub seq_len: u32,
    /// Position of each sequence's first row.
    pub pos_offset: u32,
}

/// One launch-time input of an epilogue stage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    /// `bias`: one value per output column (length N, or N/2 after a pair stage), output dtype.
    Bias(VectorDesc),
    /// `bias(row)`: one value per row (length M), output dtype.
    BiasRow(VectorDesc),
    /// `scale(row)`: length M, f32.
    ScaleRow(VectorDesc),
    /// `scale(col)`: one value per output column, f32.
    ScaleCol(VectorDesc),
    /// `residual`: an M×N matrix (output shape), output dtype.
    Residual(MatrixDesc),
    /// Norm γ: one value per output column, output dtype.
    Gamma(VectorDesc),
    /// LayerNorm β: one value per output column, output dtype.
    Beta(VectorDesc),
    /// `rope(theta)` parameters.
    Rope(RopeSpec),
    /// A norm's ε.
    Eps(f32),
    /// `row_moments`: the row statistics it writes, f32, M × 4·ceil(N/64) or wider (count, mean,
    /// M2 and shift per row and group of 64 columns), 16-byte aligned rows.
    RowStats(MatrixDesc),
    /// `folded_layer_norm`: the statistics of A's rows as `row_moments` wrote them, f32,
    /// M × 4·ceil(K/64) or wider, 16-byte aligned rows.
    InputStats(MatrixDesc),
    /// `normed_residual`: the stored (shifted) pre-norm h′ it normalizes and adds, an M×N
    /// matrix (output shape), output dtype.
    NormedResidual(MatrixDesc),
    /// `normed_residual`: the statistics of its matrix's rows as `row_moments` wrote them, f32,
    /// M × 4·ceil(N/64) or wider, 16-byte aligned rows.
    ResidualStats(MatrixDesc),
    /// `folded_layer_norm`: `Σ_k γ[k]·W[k, c]` over each group of 64 K columns, f32,
    /// ceil(K/64) × N (a row per group).
    Colsum(MatrixDesc),
    /// `folded_layer_norm`: `Σ_k β[k]·W[k, c] + b[c]`, f32, one per output column.
    NormOffset(VectorDesc),
}

/// An epilogue operand with its name (for messages) and the index of its stage in the
/// `epilogue = [...]` list (stages apply in list order).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpilogueArg {
    /// The argument's name in the launcher (`"bias"`, `"residual"`, `"gamma"`, ...).
    pub name: &'static str,
    /// Index of the stage it belongs to.
    pub stage: usize,
    /// The operand.
    pub operand: Operand,
}

/// Everything a GEMM launch is given, as descriptors.
#[derive(Clone, Copy, Debug)]
pub struct GemmCall<'a> {
    /// A, M×K.
    pub a: MatrixDesc,
    /// B, K×N or N×K (see `b_layout`).
    pub b: MatrixDesc,
    /// How B is stored.
    pub b_layout: BLayout,
    /// C, M×N or M×N/2 (pair stage).
    pub c: MatrixDesc,
    /// The dtype of A and B the kernel was compiled for.
    pub in_dtype: DType,
    /// The dtype of C (and of bias, residual, gamma, beta).
    pub out_dtype: DType,
    /// Epilogue operands.
    pub epilogue: &'a [EpilogueArg],
    /// Index of the pair-reducing stage (`swiglu`, `geglu`), if any.
    pub pair_stage: Option<usize>,
    /// Index of the row-norm stage (`layer_norm`, `rms_norm`), if any.
    pub row_norm_stage: Option<usize>,
}

/// What the launcher has to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Work {
    /// M = 0 or N = 0: nothing to compute; return without launching.
    Empty,
    /// K = 0: C = epilogue(0); launch with zero k-tiles.
    ZeroK,
    /// An ordinary GEMM.
    Gemm,
}

/// Why an operand cannot use the 16-byte vector path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Misalignment {
    /// The operand.
    pub arg: &'static str,
    /// "address", "leading dimension (bytes)" or "row length (bytes)".
    pub what: &'static str,
    /// The offending value.
    pub actual: u64,
}

/// Which operands allow 16-byte vector accesses (see the [module docs](self#vector-path)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorPath {
    /// A's rows can be copied in 16-byte chunks.
    pub a: bool,
    /// B's rows can be copied in 16-byte chunks.
    pub b: bool,
    /// C's rows can be stored in 16-byte chunks.
    pub c: bool,
    /// Every epilogue vector and matrix allows 16-byte loads.
    pub epilogue: bool,
    /// The first mainloop operand (A, then B) that cannot, and why.
    pub mainloop_reason: Option<Misalignment>,
}

impl VectorPath {
    /// Whether the mainloop's 16-byte copies are allowed (A and B).
    pub fn mainloop(&self) -> bool {
        self.a && self.b
    }
}

/// The result of [`check_gemm`]: dimensions as the kernel takes them and what to launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of the product.
    pub n: u32,
    /// Inner dimension.
    pub k: u32,
    /// Columns of C (N, or N/2 after a pair stage).
    pub n_out: u32,
    /// Empty, K = 0, or an ordinary GEMM.
    pub work: Work,
    /// Where 16-byte vector accesses are allowed.
    pub vector: VectorPath,
}

impl Checked {
    /// `Ok` when the mainloop's 16-byte vector path is allowed; otherwise the
    /// [`Error::Misaligned`] naming the first operand that prevents it (for launchers without a
    /// scalar variant).
    pub fn require_vector(&self) -> Result<()> {
        match self.vector.mainloop_reason {
            None => Ok(()),
            Some(m) => Err(Error::Misaligned {
                arg: m.arg,
                what: m.what,
                align: VECTOR_BYTES,
                actual: m.actual,
            }),
        }
    }
}

fn dim(arg: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::TooLarge {
        arg,
        max: MAX_DIM,
        actual: v as u64,
    })
}

fn check_dtype(arg: &'static str, expected: DType, actual: DType) -> Result<()> {
    if expected != actual {
        return Err(Error::DtypeMismatch {
            arg,
            expected,
            actual,
        });
    }
    Ok(())
}

/// Leading dimension, size limits and address of one matrix.
fn check_matrix(arg: &'static str, ld_arg: &'static str, d: &MatrixDesc) -> Result<()> {
    if d.is_empty() {
        return Ok(());
    }
    if d.ld < d.cols {
        return Err(Error::LeadingDimension {
            arg,
            ld: d.ld as u64,
            cols: d.cols as u64,
        });
    }
    dim(ld_arg, d.ld)?;
    let span = d.span_bytes().ok_or(Error::TooLarge {
        arg,
        max: u64::MAX,
        actual: u64::MAX,
    })?;
    check_address(arg, d.ptr, span, d.elements(), d.dtype)
}

fn check_address(
    arg: &'static str,
    ptr: u64,
    span: u64,
    elements: u64,
    dtype: DType,
) -> Result<()> {
    if ptr == 0 {
        return Err(Error::NullPointer { arg, elements });
    }
    let size = dtype.size() as u64;
    if !ptr.is_multiple_of(size) {
        return Err(Error::Misaligned {
            arg,
            what: "address",
            align: size,
            actual: ptr,
        });
    }
    if ptr.checked_add(span).is_none() {
        return Err(Error::TooLarge {
            arg,
            max: u64::MAX - span,
            actual: ptr,
        });
    }
    Ok(())
}

/// A row-statistics matrix (`row_moments`, `folded_layer_norm`): f32, `m` rows of at least
/// 4·ceil(width/64) values, rows 16-byte aligned (each group is one 16-byte store or load).
fn check_stats(
    arg: &'static str,
    d: &MatrixDesc,
    m: usize,
    width: u64,
    width_name: &str,
) -> Result<()> {
    check_dtype(arg, DType::F32, d.dtype)?;
    let cols = 4 * width.div_ceil(MOMENT_GROUP_COLS as u64);
    if d.rows != m || (d.cols as u64) < cols {
        return Err(Error::shape(
            arg,
            format!("{m}×{cols} or wider (M × 4·ceil({width_name}/{MOMENT_GROUP_COLS}), f32)"),
            d.shape_str(),
        ));
    }
    check_matrix(arg, arg, d)?;
    if d.is_empty() {
        return Ok(());
    }
    let misaligned = |what, actual| Error::Misaligned {
        arg,
        what,
        align: 16,
        actual,
    };
    if !d.ptr.is_multiple_of(16) {
        return Err(misaligned("address", d.ptr));
    }
    if !(d.ld as u64 * 4).is_multiple_of(16) {
        return Err(misaligned("leading dimension (bytes)", d.ld as u64 * 4));
    }
    Ok(())
}

fn check_vector(
    arg: &'static str,
    v: &VectorDesc,
    len: u64,
    what: &str,
    dtype: DType,
) -> Result<()> {
    check_dtype(arg, dtype, v.dtype)?;
    if v.len as u64 != len {
        return Err(Error::shape(arg, format!("length {len} ({what})"), v.len));
    }
    if v.len == 0 {
        return Ok(());
    }
    let span = (v.len as u64)
        .checked_mul(v.dtype.size() as u64)
        .ok_or(Error::TooLarge {
            arg,
            max: u64::MAX,
            actual: u64::MAX,
        })?;
    check_address(arg, v.ptr, span, v.len as u64, v.dtype)
}

/// Where the 16-byte vector path fails for a matrix, if it does.
fn misalignment(arg: &'static str, d: &MatrixDesc) -> Option<Misalignment> {
    if d.is_empty() {
        return None;
    }
    let size = d.dtype.size() as u64;
    let m = |what, actual| Some(Misalignment { arg, what, actual });
    if !d.ptr.is_multiple_of(VECTOR_BYTES) {
        return m("address", d.ptr);
    }
    if d.rows > 1 && !(d.ld as u64 * size).is_multiple_of(VECTOR_BYTES) {
        return m("leading dimension (bytes)", d.ld as u64 * size);
    }
    if !(d.cols as u64 * size).is_multiple_of(VECTOR_BYTES) {
        return m("row length (bytes)", d.cols as u64 * size);
    }
    None
}

/// How two operands share memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlap {
    /// No element in common.
    Disjoint,
    /// The same matrix: address, shape, leading dimension, dtype.
    Exact,
    /// Some elements in common (or, for operands of different leading dimension or dtype,
    /// overlapping byte ranges).
    Partial,
}

/// Whether `x` and `y` share elements (see the [module docs](self#aliasing)).
pub fn overlap(x: &MatrixDesc, y: &MatrixDesc) -> Overlap {
    if x.is_empty() || y.is_empty() {
        return Overlap::Disjoint;
    }
    if x == y {
        return Overlap::Exact;
    }
    let (Some(sx), Some(sy)) = (x.span_bytes(), y.span_bytes()) else {
        return Overlap::Partial;
    };
    let spans_meet = x.ptr < y.ptr.saturating_add(sy) && y.ptr < x.ptr.saturating_add(sx);
    if !spans_meet {
        return Overlap::Disjoint;
    }
    let size = x.dtype.size() as u64;
    if x.ld != y.ld || x.dtype != y.dtype || x.ld == 0 {
        return Overlap::Partial;
    }
    let (lo, hi) = if x.ptr <= y.ptr { (x, y) } else { (y, x) };
    let d_bytes = hi.ptr - lo.ptr;
    if d_bytes % size != 0 {
        return Overlap::Partial;
    }
    let (ld, d) = (lo.ld as u64, d_bytes / size);
    let (q, s) = (d / ld, d % ld);
    let (lo_rows, lo_cols) = (lo.rows as u64, lo.cols as u64);
    let (hi_rows, hi_cols) = (hi.rows as u64, hi.cols as u64);
    // Element (r, c) of `hi` is element (q + r, s + c) of `lo`'s grid when s + c < ld, else
    // (q + r + 1, s + c − ld): two rectangles to intersect with lo's rows × cols.
    let rows_meet = |first: u64| first < lo_rows && hi_rows > 0;
    let same_row = s < lo_cols && rows_meet(q);
    let wrapped = s + hi_cols > ld && lo_cols > 0 && rows_meet(q + 1);
    if same_row || wrapped {
        Overlap::Partial
    } else {
        Overlap::Disjoint
    }
}

fn check_rope(arg: &'static str, r: &RopeSpec, n_at_stage: u64) -> Result<()> {
    let bad = |what: &'static str, expected: String, actual: String| {
        Err(Error::InvalidArgument {
            arg: what,
            expected,
            actual: format!("{actual} (in `{arg}`)"),
        })
    };
    if r.head_dim == 0 {
        return bad("head_dim", "> 0".into(), "0".into());
    }
    // The kernel rotates the column pairs (2i, 2i + 1) of the row; a head that started at an
    // odd column would pair across two heads.
    if !r.head_dim.is_multiple_of(2) && n_at_stage != r.head_dim as u64 {
        return bad(
            "head_dim",
            format!("even, or equal to N = {n_at_stage} (one head per row)"),
            r.head_dim.to_string(),
        );
    }
    if !n_at_stage.is_multiple_of(r.head_dim as u64) {
        return bad(
            "head_dim",
            format!("a divisor of N = {n_at_stage}"),
            r.head_dim.to_string(),
        );
    }
    if r.rotary_dim == 0 || !r.rotary_dim.is_multiple_of(2) || r.rotary_dim > r.head_dim {
        return bad(
            "rotary_dim",
            format!("even, in 2..={}", r.head_dim),
            r.rotary_dim.to_string(),
        );
    }
    if r.seq_len == 0 {
        return bad("seq_len", "> 0".into(), "0".into());
    }
    if r.pos_offset as u64 + r.seq_len as u64 - 1 > u32::MAX as u64 {
        return bad(
            "pos_offset",
            format!("≤ {} (positions fit in u32)", u32::MAX - (r.seq_len - 1)),
            r.pos_offset.to_string(),
        );
    }
    if !(r.theta.is_finite() && r.theta > 0.0) {
        return bad("theta", "finite and > 0".into(), r.theta.to_string());
    }
    Ok(())
}

/// Checks a GEMM launch (see the [module docs](self) for the list).
///
/// # Errors
/// [`Error::DtypeMismatch`], [`Error::ShapeMismatch`], [`Error::LeadingDimension`],
/// [`Error::TooLarge`], [`Error::NullPointer`], [`Error::Misaligned`] (element alignment),
/// [`Error::Aliasing`], [`Error::InvalidArgument`] (RoPE, ε), each naming the operand.
pub fn check_gemm(call: &GemmCall<'_>) -> Result<Checked> {
    let GemmCall { a, b, c, .. } = call;
    check_dtype("a", call.in_dtype, a.dtype)?;
    check_dtype("b", call.in_dtype, b.dtype)?;
    check_dtype("c", call.out_dtype, c.dtype)?;

    let (m, k) = (a.rows, a.cols);
    let (b_k, n, b_expect) = match call.b_layout {
        BLayout::KxN => (b.rows, b.cols, format!("{k}×{} (K×N, K from a)", b.cols)),
        BLayout::NxK => (b.cols, b.rows, format!("{}×{k} (N×K, K from a)", b.rows)),
    };
    if b_k != k {
        return Err(Error::shape("b", b_expect, b.shape_str()));
    }
    let pairs = call.pair_stage.is_some();
    if pairs && n % 2 != 0 {
        return Err(Error::shape(
            "b",
            "an even N (a pair-reducing stage halves the columns)",
            format!("N = {n}"),
        ));
    }
    let n_out = if pairs { n / 2 } else { n };
    if c.rows != m || c.cols != n_out {
        let what = if pairs { "M×N/2" } else { "M×N" };
        return Err(Error::shape(
            "c",
            format!("{m}×{n_out} ({what})"),
            c.shape_str(),
        ));
    }
    let (m32, n32, k32) = (dim("m", m)?, dim("n", n)?, dim("k", k)?);

    let work = if m == 0 || n == 0 {
        Work::Empty
    } else if k == 0 {
        Work::ZeroK
    } else {
        Work::Gemm
    };
    if work != Work::ZeroK {
        check_matrix("a", "a.ld", a)?;
        check_matrix("b", "b.ld", b)?;
    }
    check_matrix("c", "c.ld", c)?;

    let mut epilogue_vector = true;
    for arg in call.epilogue {
        let after_pairs = call.pair_stage.is_some_and(|p| p < arg.stage);
        let width = if after_pairs { n_out } else { n } as u64;
        let out = call.out_dtype;
        let (vec, is_residual) = match &arg.operand {
            Operand::Bias(v) | Operand::Gamma(v) | Operand::Beta(v) => {
                check_vector(arg.name, v, width, "N, one per output column", out)?;
                (Some(v.as_matrix()), false)
            }
            Operand::ScaleCol(v) => {
                check_vector(arg.name, v, width, "N, one per output column", DType::F32)?;
                (Some(v.as_matrix()), false)
            }
            Operand::BiasRow(v) => {
                check_vector(arg.name, v, m as u64, "M, one per row", out)?;
                (Some(v.as_matrix()), false)
            }
            Operand::ScaleRow(v) => {
                check_vector(arg.name, v, m as u64, "M, one per row", DType::F32)?;
                (Some(v.as_matrix()), false)
            }
            Operand::Residual(r) | Operand::NormedResidual(r) => {
                check_dtype(arg.name, out, r.dtype)?;
                if r.rows != m || r.cols as u64 != width {
                    return Err(Error::shape(
                        arg.name,
                        format!("{m}×{width} (M×N, output shape)"),
                        r.shape_str(),
                    ));
                }
                check_matrix(arg.name, arg.name, r)?;
                (Some(*r), true)
            }
            Operand::Rope(spec) => {
                if after_pairs {
                    return Err(Error::invalid(
                        arg.name,
                        "rope before the pair-reducing stage (it rotates column pairs)",
                        format!("rope at stage {} after the pair stage", arg.stage),
                    ));
                }
                check_rope(arg.name, spec, width)?;
                (None, false)
            }
            Operand::Eps(e) => {
                if !(e.is_finite() && *e >= 0.0) {
                    return Err(Error::invalid(arg.name, "finite and ≥ 0", e));
                }
                (None, false)
            }
            Operand::RowStats(d) => {
                check_stats(arg.name, d, m, n as u64, "N")?;
                if work == Work::Gemm {
                    for (name, x) in [("a", a), ("b", b)] {
                        if overlap(d, x) != Overlap::Disjoint {
                            return Err(Error::Aliasing {
                                output: arg.name,
                                input: name,
                                detail: "the statistics are written while the mainloop reads it"
                                    .into(),
                            });
                        }
                    }
                }
                (Some(*d), false)
            }
            Operand::InputStats(d) => {
                if k == 0 {
                    return Err(Error::invalid(
                        arg.name,
                        "K ≥ 1 (a row normalized over no columns has no statistics)",
                        "K = 0",
                    ));
                }
                check_stats(arg.name, d, m, k as u64, "K")?;
                (Some(*d), false)
            }
            Operand::ResidualStats(d) => {
                check_stats(arg.name, d, m, width, "N")?;
                (Some(*d), false)
            }
            Operand::Colsum(d) => {
                check_dtype(arg.name, DType::F32, d.dtype)?;
                let groups = (k as u64).div_ceil(MOMENT_GROUP_COLS as u64) as usize;
                if d.rows != groups || d.cols as u64 != width {
                    return Err(Error::shape(
                        arg.name,
                        format!(
                            "{groups}×{width} (ceil(K/{MOMENT_GROUP_COLS}) × N: a row per group \
                             of K columns, f32)"
                        ),
                        d.shape_str(),
                    ));
                }
                check_matrix(arg.name, arg.name, d)?;
                (Some(*d), false)
            }
            Operand::NormOffset(v) => {
                check_vector(arg.name, v, width, "N, one per output column", DType::F32)?;
                (Some(v.as_matrix()), false)
            }
        };
        let Some(d) = vec else { continue };
        if work != Work::Empty && misalignment(arg.name, &d).is_some() {
            epilogue_vector = false;
        }
        match overlap(c, &d) {
            Overlap::Disjoint => {}
            Overlap::Exact if is_residual => {
                if call.row_norm_stage.is_some_and(|s| s < arg.stage) {
                    return Err(Error::Aliasing {
                        output: "c",
                        input: arg.name,
                        detail: "C may alias the residual only when no row norm precedes it \
                                 (the partial-statistics path writes C before the residual is read)"
                            .into(),
                    });
                }
            }
            o => {
                return Err(Error::Aliasing {
                    output: "c",
                    input: arg.name,
                    detail: format!(
                        "{} ({} at {:#x} vs {} at {:#x})",
                        if o == Overlap::Exact {
                            "same memory"
                        } else {
                            "partial overlap"
                        },
                        c.shape_str(),
                        c.ptr,
                        d.shape_str(),
                        d.ptr
                    ),
                });
            }
        }
    }
    // The statistics `row_moments` writes must not meet anything the epilogue reads: other
    // CTAs may still be reading it.
    for w in call.epilogue {
        let Operand::RowStats(stats) = w.operand else {
            continue;
        };
        for r in call.epilogue {
            let read = match r.operand {
                Operand::Bias(v)
                | Operand::BiasRow(v)
                | Operand::ScaleRow(v)
                | Operand::ScaleCol(v)
                | Operand::Gamma(v)
                | Operand::Beta(v)
                | Operand::NormOffset(v) => v.as_matrix(),
                Operand::Residual(d)
                | Operand::Colsum(d)
                | Operand::NormedResidual(d)
                | Operand::InputStats(d)
                | Operand::ResidualStats(d) => d,
                Operand::RowStats(_) | Operand::Rope(_) | Operand::Eps(_) => continue,
            };
            if overlap(&stats, &read) != Overlap::Disjoint {
                return Err(Error::Aliasing {
                    output: w.name,
                    input: r.name,
                    detail: "the statistics are written while other CTAs read it".into(),
                });
            }
        }
    }
    if work == Work::Gemm {
        for (name, x) in [("a", a), ("b", b)] {
            if overlap(c, x) != Overlap::Disjoint {
                return Err(Error::Aliasing {
                    output: "c",
                    input: name,
                    detail: format!(
                        "C ({} at {:#x}) shares elements with {name} ({} at {:#x}); the mainloop \
                         reads {name} while other CTAs write C",
                        c.shape_str(),
                        c.ptr,
                        x.shape_str(),
                        x.ptr
                    ),
                });
            }
        }
    }

    let (ra, rb) = if work == Work::Gemm {
        (misalignment("a", a), misalignment("b", b))
    } else {
        (None, None)
    };
    let vector = VectorPath {
        a: ra.is_none(),
        b: rb.is_none(),
        c: work == Work::Empty || misalignment("c", c).is_none(),
        epilogue: epilogue_vector,
        mainloop_reason: ra.or(rb),
    };
    Ok(Checked {
        m: m32,
        n: n32,
        k: k32,
        n_out: n_out as u32,
        work,
        vector,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(ptr: u64, rows: usize, cols: usize, ld: usize) -> MatrixDesc {
        MatrixDesc::new(ptr, rows, cols, ld, DType::F16)
    }

    #[test]
    fn overlap_is_exact_for_same_ld() {
        let base = 0x10000;
        let parent = d(base, 8, 16, 16);
        // Left and right column halves of one buffer: spans interleave, elements do not.
        let left = d(base, 8, 8, 16);
        let right = d(base + 16, 8, 8, 16);
        assert_eq!(overlap(&left, &right), Overlap::Disjoint);
        assert_eq!(overlap(&right, &left), Overlap::Disjoint);
        assert_eq!(overlap(&parent, &right), Overlap::Partial);
        assert_eq!(overlap(&left, &left), Overlap::Exact);
        // Rows 0..4 and 4..8.
        assert_eq!(
            overlap(&d(base, 4, 16, 16), &d(base + 4 * 32, 4, 16, 16)),
            Overlap::Disjoint
        );
        assert_eq!(
            overlap(&d(base, 5, 16, 16), &d(base + 4 * 32, 4, 16, 16)),
            Overlap::Partial
        );
        // A view starting at column 12 of row 0 with 8 columns wraps into row 1, columns 0..4.
        let wrap = d(base + 12 * 2, 2, 8, 16);
        assert_eq!(overlap(&d(base + 32, 1, 4, 16), &wrap), Overlap::Partial);
        assert_eq!(
            overlap(&d(base + 32 + 8, 1, 4, 16), &wrap),
            Overlap::Disjoint
        );
        // Different ld: byte ranges.
        assert_eq!(
            overlap(&d(base, 2, 4, 4), &d(base + 4, 2, 2, 8)),
            Overlap::Partial
        );
        assert_eq!(
            overlap(&d(base, 2, 4, 4), &d(base + 16, 2, 2, 8)),
            Overlap::Disjoint
        );
        // Empty matrices never overlap.
        assert_eq!(overlap(&d(base, 0, 4, 4), &parent), Overlap::Disjoint);
    }

    #[test]
    fn overlap_matches_brute_force() {
        // Every pair of small views of one 6×8 buffer (ld 8), against element sets.
        let ld = 8usize;
        let mut views = Vec::new();
        for off in 0..20u64 {
            for rows in 1..4 {
                for cols in 1..=ld {
                    if (off as usize % ld) + cols <= ld + 3 {
                        views.push(d(0x1000 + off * 2, rows, cols, ld));
                    }
                }
            }
        }
        let elems = |v: &MatrixDesc| {
            let mut s = std::collections::HashSet::new();
            for r in 0..v.rows {
                for c in 0..v.cols {
                    s.insert((v.ptr - 0x1000) / 2 + (r * v.ld + c) as u64);
                }
            }
            s
        };
        for x in &views {
            for y in &views {
                let shared = !elems(x).is_disjoint(&elems(y));
                let got = overlap(x, y);
                assert_eq!(got != Overlap::Disjoint, shared, "{x:?} {y:?}");
            }
        }
    }
}
