//! Host launchers for the unfused element-wise and row kernels ([`crate::kernels::rowwise`]):
//! bias + activation, SwiGLU, bias + residual + LayerNorm, RMSNorm and the per-row inverse RMS.
//!
//! These are what a plain GEMM is followed by when the epilogue is not fused (the "unfused"
//! baseline of `fused-gemm-bench`), and references for the fused kernels on the GPU.
//!
//! # Conventions
//! - Matrices are row-major: an M×N operand with leading dimension `ld` (elements, `ld ≥ N`)
//!   occupies `(M − 1)·ld + N` elements from the start of its buffer. Per-column vectors (bias,
//!   γ, β) hold at least N elements, one per column, broadcast down the rows.
//! - Storage is f32, f16 or bf16 ([`RowElement`]); all arithmetic is f32, each output rounded
//!   once to the storage type.
//! - Any [`DevicePtr`] works as an operand: a `CudaSlice`, or a `CudaView` from `slice(a..b)`
//!   (an offset view may be misaligned for 16-byte accesses: the kernels then fall back to
//!   scalar accesses, correct and slower; see [`vectorizable`]).
//! - `m = 0` launches nothing and returns `Ok(())`; `n = 0` is an error.
//!
//! # Errors
//! Every launcher validates before launching and returns [`Error::InvalidArgument`] naming the
//! operand (a buffer too short for its shape, a leading dimension below N, an operand from
//! another device, N beyond what a row kernel holds, a non-finite or negative ε), or
//! [`Error::LaunchLimit`] / driver errors from the launch itself. It never panics.

use cudarc::driver::{DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice, ValidAsZeroBits};
use fused_gemm_device::kernel::rowwise::{
    BiasActArgs, LayerNormArgs, ROW_SLOTS, RmsNormArgs, RmsScaleArgs, SwigluArgs,
};
use fused_gemm_device::params::ParamLayout;
use fused_gemm_device::types::DType;
use fused_gemm_host::launch::{Entry, LaunchShape};
use fused_gemm_host::{Error, Gpu, Result};

use crate::kernels::rowwise as k;
use crate::ptx::BUILTIN;

use fused_gemm_host::cudarc;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A storage type the row kernels are instantiated for: `f32`, `half::f16`, `half::bf16`.
pub trait RowElement:
    DeviceRepr
    + ValidAsZeroBits
    + Copy
    + Default
    + Send
    + Sync
    + std::fmt::Debug
    + 'static
    + sealed::Sealed
{
    /// The device-side tag.
    const DTYPE: DType;
    /// Widens to f32 (exact).
    fn to_f32(self) -> f32;
    /// Rounds to nearest even.
    fn from_f32(x: f32) -> Self;
}

impl RowElement for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl RowElement for half::f16 {
    const DTYPE: DType = DType::F16;
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        half::f16::from_f32(x)
    }
}

impl RowElement for half::bf16 {
    const DTYPE: DType = DType::Bf16;
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        half::bf16::from_f32(x)
    }
}

/// The activation of [`bias_act`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// Identity (bias only).
    None,
    /// max(x, 0).
    Relu,
    /// GELU with the exact normal CDF, x·Φ(x) (BERT's `"gelu"`).
    Gelu,
    /// GELU, tanh approximation (`gelu_new`, `gelu_pytorch_tanh`, cuBLASLt's GELU epilogue).
    GeluTanh,
    /// x·sigmoid(x).
    Silu,
}

impl Activation {
    /// Every activation.
    pub const ALL: [Activation; 5] = [
        Activation::None,
        Activation::Relu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
    ];

    /// Lower-case name (`none`, `relu`, `gelu`, `gelu_tanh`, `silu`).
    pub fn name(self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
        }
    }
}

/// The entry point of [`bias_act`] for a storage type and activation.
pub fn bias_act_kernel(dtype: DType, act: Activation) -> Entry<BiasActArgs> {
    use Activation as A;
    match (dtype, act) {
        (DType::F32, A::None) => k::fg_bias_f32,
        (DType::F32, A::Relu) => k::fg_bias_relu_f32,
        (DType::F32, A::Gelu) => k::fg_bias_gelu_f32,
        (DType::F32, A::GeluTanh) => k::fg_bias_gelu_tanh_f32,
        (DType::F32, A::Silu) => k::fg_bias_silu_f32,
        (DType::Bf16, A::None) => k::fg_bias_bf16,
        (DType::Bf16, A::Relu) => k::fg_bias_relu_bf16,
        (DType::Bf16, A::Gelu) => k::fg_bias_gelu_bf16,
        (DType::Bf16, A::GeluTanh) => k::fg_bias_gelu_tanh_bf16,
        (DType::Bf16, A::Silu) => k::fg_bias_silu_bf16,
        (DType::F16, A::None) => k::fg_bias_f16,
        (DType::F16, A::Relu) => k::fg_bias_relu_f16,
        (DType::F16, A::Gelu) => k::fg_bias_gelu_f16,
        (DType::F16, A::GeluTanh) => k::fg_bias_gelu_tanh_f16,
        (DType::F16, A::Silu) => k::fg_bias_silu_f16,
    }
}

fn by_dtype<A>(dtype: DType, f32_: Entry<A>, bf16: Entry<A>, f16: Entry<A>) -> Entry<A> {
    match dtype {
        DType::F32 => f32_,
        DType::Bf16 => bf16,
        DType::F16 => f16,
    }
}

/// Largest N the row kernels ([`layer_norm`], [`rms_norm`], [`rms_scale`]) accept for a storage
/// type: one CTA of 1024 threads holds the row in registers (`ROW_SLOTS` 16-byte units each).
pub fn max_row_len(dtype: DType) -> usize {
    1024 * ROW_SLOTS * (16 / dtype.size())
}

// ---- validation (pure, unit-tested without a GPU) -------------------------------------------

/// An operand as the launcher sees it: device address and length in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    ptr: u64,
    len: usize,
}

fn check_dims(m: usize, n: usize) -> Result<()> {
    if n == 0 || n > i32::MAX as usize {
        return Err(Error::invalid("n", "1..=2^31-1 columns", n));
    }
    if m > i32::MAX as usize {
        return Err(Error::invalid("m", "0..=2^31-1 rows", m));
    }
    Ok(())
}

/// An M×N row-major operand with leading dimension `ld` must fit its buffer.
fn check_matrix(
    name: &'static str,
    ld_name: &'static str,
    s: Span,
    m: usize,
    n: usize,
    ld: usize,
) -> Result<()> {
    if ld < n || ld > u32::MAX as usize {
        return Err(Error::invalid(
            ld_name,
            format!("a leading dimension in {n}..=2^32-1 elements (N = {n})"),
            ld,
        ));
    }
    if m == 0 {
        return Ok(());
    }
    let need = (m - 1)
        .checked_mul(ld)
        .and_then(|v| v.checked_add(n))
        .ok_or_else(|| Error::invalid(name, "an extent that fits in memory", "overflow"))?;
    if s.len < need {
        return Err(Error::invalid(
            name,
            format!("at least {need} elements ({m}×{n}, leading dimension {ld})"),
            format!("{} elements", s.len),
        ));
    }
    Ok(())
}

fn check_vector(name: &'static str, s: Span, n: usize) -> Result<()> {
    if s.len < n {
        return Err(Error::invalid(
            name,
            format!("at least {n} elements (one per column)"),
            format!("{} elements", s.len),
        ));
    }
    Ok(())
}

fn check_eps(eps: f32) -> Result<()> {
    if !eps.is_finite() || eps < 0.0 {
        return Err(Error::invalid("eps", "a finite value ≥ 0", eps));
    }
    Ok(())
}

/// Whether 16-byte accesses are legal for every `(address, leading dimension)` pair: each
/// address a multiple of `align` bytes and each leading dimension (elements of `elem` bytes) a
/// multiple of `align` bytes. Pass `ld = 0` for vectors.
pub fn vectorizable(elem: usize, align: u64, operands: &[(u64, usize)]) -> bool {
    operands
        .iter()
        .all(|&(p, ld)| p.is_multiple_of(align) && (ld as u64 * elem as u64).is_multiple_of(align))
}

/// Launch shape of [`bias_act`]/[`swiglu`]: `2^lanes_log2` threads per row across `units`
/// 16-byte units, 256 threads per CTA, rows over `gridDim.y` (capped; the kernel strides).
/// The lanes per row are the power of two (32 to 256) that leaves the fewest threads idle
/// (N = 3072 bf16: 384 units, 128 lanes, none idle), or the next power of two ≥ `units` for
/// rows of fewer than 32 units.
fn elementwise_shape(m: usize, units: usize, max_grid_y: u32) -> (LaunchShape, u32) {
    let lanes = if units <= 32 {
        units.next_power_of_two()
    } else {
        [256usize, 128, 64, 32]
            .into_iter()
            .min_by_key(|&l| l * units.div_ceil(l) - units)
            .expect("candidates are not empty")
    };
    let lanes_log2 = lanes.trailing_zeros();
    let rows_per_cta = 256 / lanes;
    let grid_x = units.div_ceil(lanes) as u32;
    let grid_y = m
        .div_ceil(rows_per_cta)
        .clamp(1, max_grid_y.max(1) as usize) as u32;
    (
        LaunchShape {
            grid: (grid_x, grid_y, 1),
            block: (256, 1, 1),
            smem_bytes: 0,
        },
        lanes_log2,
    )
}

/// Launch shape of the row kernels: a group of `group` threads per row (one warp when the row
/// fits 32 threads' registers, else a multiple of 32 up to 1024), about 256 threads per CTA,
/// 16 bytes of shared memory per warp for cross-warp statistics.
fn row_shape(m: usize, n: usize, dtype: DType) -> Result<(LaunchShape, u32)> {
    let vec = 16 / dtype.size();
    if n > max_row_len(dtype) {
        return Err(Error::invalid(
            "n",
            format!(
                "at most {} columns for {} row kernels",
                max_row_len(dtype),
                dtype.name()
            ),
            n,
        ));
    }
    let units = n.div_ceil(vec);
    let group = if units <= 32 * ROW_SLOTS {
        32
    } else {
        units.div_ceil(ROW_SLOTS).div_ceil(32) * 32
    };
    let rows_per_cta = (256 / group).max(1);
    let block = group * rows_per_cta;
    let grid = m.div_ceil(rows_per_cta).max(1);
    Ok((
        LaunchShape {
            grid: (grid as u32, 1, 1),
            block: (block as u32, 1, 1),
            smem_bytes: if group > 32 {
                (block / 32 * 16) as u32
            } else {
                0
            },
        },
        group as u32,
    ))
}

// ---- operand access ---------------------------------------------------------------------------

fn same_device<T, B: DeviceSlice<T> + ?Sized>(gpu: &Gpu, name: &'static str, b: &B) -> Result<()> {
    if b.stream().context().cu_ctx() != gpu.context().cu_ctx() {
        return Err(Error::invalid(
            name,
            format!("a buffer on this device ({})", gpu.name()),
            "a buffer from another CUDA context",
        ));
    }
    Ok(())
}

macro_rules! read_ptr {
    ($gpu:expr, $name:literal, $buf:expr) => {{
        let b = $buf;
        same_device($gpu, $name, b)?;
        let len = b.len();
        let (ptr, guard) = b.device_ptr($gpu.stream());
        (Span { ptr, len }, guard)
    }};
}

macro_rules! write_ptr {
    ($gpu:expr, $name:literal, $buf:expr) => {{
        let b = $buf;
        same_device($gpu, $name, &*b)?;
        let len = b.len();
        let (ptr, guard) = b.device_ptr_mut($gpu.stream());
        (Span { ptr, len }, guard)
    }};
}

fn u32_of(v: usize) -> u32 {
    // Every value passed here was checked to be ≤ u32::MAX (dimensions ≤ 2^31 − 1, leading
    // dimensions ≤ 2^32 − 1).
    v as u32
}

// ---- bias + activation ----------------------------------------------------------------------

/// `y[r, c] = act(x[r, c] + bias[c])` over an M×N matrix, out of place. `bias` (length ≥ N,
/// one value per column) may be `None`.
///
/// # Errors
/// See the [module docs](self).
#[allow(clippy::too_many_arguments)]
pub fn bias_act<T: RowElement>(
    gpu: &Gpu,
    m: usize,
    n: usize,
    x: &dyn DevicePtr<T>,
    ldx: usize,
    bias: Option<&dyn DevicePtr<T>>,
    act: Activation,
    y: &mut dyn DevicePtrMut<T>,
    ldy: usize,
) -> Result<()> {
    let (xs, _gx) = read_ptr!(gpu, "x", x);
    let b = match bias {
        Some(b) => Some(read_ptr!(gpu, "bias", b)),
        None => None,
    };
    let (ys, _gy) = write_ptr!(gpu, "y", y);
    launch_bias_act::<T>(gpu, m, n, xs, ldx, b.as_ref().map(|b| b.0), act, ys, ldy)
}

/// [`bias_act`] in place: `x[r, c] ← act(x[r, c] + bias[c])`.
///
/// # Errors
/// See the [module docs](self).
pub fn bias_act_in_place<T: RowElement>(
    gpu: &Gpu,
    m: usize,
    n: usize,
    x: &mut dyn DevicePtrMut<T>,
    ld: usize,
    bias: Option<&dyn DevicePtr<T>>,
    act: Activation,
) -> Result<()> {
    let b = match bias {
        Some(b) => Some(read_ptr!(gpu, "bias", b)),
        None => None,
    };
    let (xs, _gx) = write_ptr!(gpu, "x", x);
    launch_bias_act::<T>(gpu, m, n, xs, ld, b.as_ref().map(|b| b.0), act, xs, ld)
}

#[allow(clippy::too_many_arguments)]
fn launch_bias_act<T: RowElement>(
    gpu: &Gpu,
    m: usize,
    n: usize,
    x: Span,
    ldx: usize,
    bias: Option<Span>,
    act: Activation,
    y: Span,
    ldy: usize,
) -> Result<()> {
    check_dims(m, n)?;
    check_matrix("x", "ldx", x, m, n, ldx)?;
    check_matrix("y", "ldy", y, m, n, ldy)?;
    if let Some(b) = bias {
        check_vector("bias", b, n)?;
    }
    if m == 0 {
        return Ok(());
    }
    let es = T::DTYPE.size();
    let bias_ptr = bias.map_or(0, |b| b.ptr);
    let vec = vectorizable(es, 16, &[(x.ptr, ldx), (y.ptr, ldy), (bias_ptr, 0)]);
    let units = n.div_ceil(16 / es);
    let (shape, lanes_log2) = elementwise_shape(m, units, gpu.props().max_grid_y);
    let kernel = gpu.kernel(&BUILTIN, bias_act_kernel(T::DTYPE, act))?;
    let cfg = shape.prepare(&kernel, gpu.props())?;
    let args = BiasActArgs {
        m: u32_of(m),
        n: u32_of(n),
        x: x.ptr,
        ldx: u32_of(ldx),
        bias: bias_ptr,
        y: y.ptr,
        ldy: u32_of(ldy),
        lanes_log2,
        vec: vec as u32,
    };
    // SAFETY: every operand's extent was checked against its shape, and `vec` is set only when
    // every access it enables is aligned.
    unsafe { kernel.launch(gpu, cfg, &args) }?;
    Ok(())
}

// ---- SwiGLU ---------------------------------------------------------------------------------

/// SwiGLU on interleaved columns: `y[r, j] = silu(x[r, 2j])·x[r, 2j + 1]` for `j < n_in/2`.
/// `x` is M×`n_in` (gate and up columns interleaved `[g0, u0, g1, u1, …]`, `n_in` even), `y` is
/// M×`n_in/2`.
///
/// # Errors
/// [`Error::InvalidArgument`] for an odd `n_in`; otherwise see the [module docs](self).
pub fn swiglu<T: RowElement>(
    gpu: &Gpu,
    m: usize,
    n_in: usize,
    x: &dyn DevicePtr<T>,
    ldx: usize,
    y: &mut dyn DevicePtrMut<T>,
    ldy: usize,
) -> Result<()> {
    let (xs, _gx) = read_ptr!(gpu, "x", x);
    let (ys, _gy) = write_ptr!(gpu, "y", y);
    check_dims(m, n_in)?;
    if !n_in.is_multiple_of(2) {
        return Err(Error::invalid(
            "n_in",
            "an even number of columns (gate/up pairs)",
            n_in,
        ));
    }
    let n_out = n_in / 2;
    check_matrix("x", "ldx", xs, m, n_in, ldx)?;
    check_matrix("y", "ldy", ys, m, n_out, ldy)?;
    if m == 0 {
        return Ok(());
    }
    let es = T::DTYPE.size();
    let vec = vectorizable(es, 16, &[(xs.ptr, ldx)]) && vectorizable(es, 8, &[(ys.ptr, ldy)]);
    let units = n_in.div_ceil(16 / es);
    let (shape, lanes_log2) = elementwise_shape(m, units, gpu.props().max_grid_y);
    let kernel = gpu.kernel(
        &BUILTIN,
        by_dtype(
            T::DTYPE,
            k::fg_swiglu_f32,
            k::fg_swiglu_bf16,
            k::fg_swiglu_f16,
        ),
    )?;
    let cfg = shape.prepare(&kernel, gpu.props())?;
    let args = SwigluArgs {
        m: u32_of(m),
        n_in: u32_of(n_in),
        x: xs.ptr,
        ldx: u32_of(ldx),
        y: ys.ptr,
        ldy: u32_of(ldy),
        lanes_log2,
        vec: vec as u32,
    };
    // SAFETY: extents checked above; x and y are distinct buffers (one shared and one exclusive
    // borrow).
    unsafe { kernel.launch(gpu, cfg, &args) }?;
    Ok(())
}

// ---- row norms ------------------------------------------------------------------------------

/// Everything the row kernel takes, as spans.
struct RowOperands {
    x: Span,
    ldx: usize,
    bias: Option<Span>,
    res: Option<(Span, usize)>,
    gamma: Option<Span>,
    beta: Option<Span>,
    eps: f32,
    y: Option<(Span, usize)>,
    rstd: Option<Span>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RowOp {
    LayerNorm,
    RmsNorm,
    RmsScale,
}

fn launch_row<T: RowElement>(
    gpu: &Gpu,
    op: RowOp,
    m: usize,
    n: usize,
    o: RowOperands,
) -> Result<()> {
    check_dims(m, n)?;
    check_eps(o.eps)?;
    check_matrix("x", "ldx", o.x, m, n, o.ldx)?;
    if let Some(b) = o.bias {
        check_vector("bias", b, n)?;
    }
    if let Some((r, ldr)) = o.res {
        check_matrix("residual", "ldr", r, m, n, ldr)?;
    }
    if let Some(g) = o.gamma {
        check_vector("gamma", g, n)?;
    }
    if let Some(b) = o.beta {
        check_vector("beta", b, n)?;
    }
    if let Some((y, ldy)) = o.y {
        check_matrix("y", "ldy", y, m, n, ldy)?;
    }
    if let Some(r) = o.rstd
        && r.len < m
    {
        return Err(Error::invalid(
            "rstd",
            format!("at least {m} f32 values (one per row)"),
            format!("{} values", r.len),
        ));
    }
    let (shape, group) = row_shape(m, n, T::DTYPE)?;
    if m == 0 {
        return Ok(());
    }
    let es = T::DTYPE.size();
    let p = |s: Option<Span>| s.map_or(0, |s| s.ptr);
    let (res, ldr) = o.res.map_or((0, 0), |(s, ld)| (s.ptr, ld));
    let (y, ldy) = o.y.map_or((0, 0), |(s, ld)| (s.ptr, ld));
    let vec = vectorizable(
        es,
        16,
        &[
            (o.x.ptr, o.ldx),
            (p(o.bias), 0),
            (res, ldr),
            (p(o.gamma), 0),
            (p(o.beta), 0),
            (y, ldy),
        ],
    ) as u32;
    let (m, n, x, ldx) = (u32_of(m), u32_of(n), o.x.ptr, u32_of(o.ldx));
    let (ldr, ldy, eps, dt) = (u32_of(ldr), u32_of(ldy), o.eps, T::DTYPE);
    /// Loads `entry` and launches it with `args` on `shape`.
    ///
    /// # Safety
    /// As [`fused_gemm_host::launch::Kernel::launch`].
    unsafe fn launch<A: ParamLayout>(
        gpu: &Gpu,
        shape: LaunchShape,
        entry: Entry<A>,
        args: &A,
    ) -> Result<()> {
        let kernel = gpu.kernel(&BUILTIN, entry)?;
        let cfg = shape.prepare(&kernel, gpu.props())?;
        // SAFETY: the caller's.
        unsafe { kernel.launch(gpu, cfg, args) }
    }
    // SAFETY (the three launches): every operand's extent was checked; the shape's group covers
    // N.
    match op {
        RowOp::LayerNorm => {
            let entry = by_dtype(
                dt,
                k::fg_layer_norm_f32,
                k::fg_layer_norm_bf16,
                k::fg_layer_norm_f16,
            );
            let args = LayerNormArgs {
                m,
                n,
                x,
                ldx,
                bias: p(o.bias),
                res,
                ldr,
                gamma: p(o.gamma),
                beta: p(o.beta),
                eps,
                y,
                ldy,
                group,
                vec,
            };
            unsafe { launch(gpu, shape, entry, &args) }
        }
        RowOp::RmsNorm => {
            let entry = by_dtype(
                dt,
                k::fg_rms_norm_f32,
                k::fg_rms_norm_bf16,
                k::fg_rms_norm_f16,
            );
            let args = RmsNormArgs {
                m,
                n,
                x,
                ldx,
                gamma: p(o.gamma),
                eps,
                y,
                ldy,
                group,
                vec,
            };
            unsafe { launch(gpu, shape, entry, &args) }
        }
        RowOp::RmsScale => {
            let entry = by_dtype(
                dt,
                k::fg_rms_scale_f32,
                k::fg_rms_scale_bf16,
                k::fg_rms_scale_f16,
            );
            let args = RmsScaleArgs {
                m,
                n,
                x,
                ldx,
                eps,
                rstd: p(o.rstd),
                group,
                vec,
            };
            unsafe { launch(gpu, shape, entry, &args) }
        }
    }
}

/// LayerNorm of `s = x + bias + residual` over each row of N values, out of place:
/// `y[r, c] = (s[r, c] − μ_r)/√(σ²_r + ε)·γ[c] + β[c]` (biased variance σ², as PyTorch).
/// `bias` (length ≥ N) and `residual` (M×N with its leading dimension) may be `None`.
/// A constant row gives exactly β; with ε = 0 a constant row gives NaN (0/0), as in PyTorch.
/// N ≤ [`max_row_len`].
///
/// # Errors
/// See the [module docs](self).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm<T: RowElement>(
    gpu: &Gpu,
    m: usize,
    n: usize,
    x: &dyn DevicePtr<T>,
    ldx: usize,
    bias: Option<&dyn DevicePtr<T>>,
    residual: Option<(&dyn DevicePtr<T>, usize)>,
    gamma: &dyn DevicePtr<T>,
    beta: &dyn DevicePtr<T>,
    eps: f32,
    y: &mut dyn DevicePtrMut<T>,
    ldy: usize,
) -> Result<()> {
    let (xs, _gx) = read_ptr!(gpu, "x", x);
    let b = match bias {
        Some(b) => Some(read_ptr!(gpu, "bias", b)),
        None => None,
    };
    let r = match residual {
        Some((r, ld)) => Some((read_ptr!(gpu, "residual", r), ld)),
        None => None,
    };
    let (gs, _gg) = read_ptr!(gpu, "gamma", gamma);
    let (bs, _gb) = read_ptr!(gpu, "beta", beta);
    let (ys, _gy) = write_ptr!(gpu, "y", y);
    launch_row::<T>(
        gpu,
        RowOp::LayerNorm,
        m,
        n,
        RowOperands {
            x: xs,
            ldx,
            bias: b.as_ref().map(|b| b.0),
            res: r.as_ref().map(|(r, ld)| (r.0, *ld)),
            gamma: Some(gs),
            beta: Some(bs),
            eps,
            y: Some((ys, ldy)),
            rstd: None,
        },
    )
}

/// [`layer_norm`] in place: `x ← LayerNorm(x + bias + residual)`.
///
/// # Errors
/// See the [module docs](self).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_in_place<T: RowElement>(
    gpu: &Gpu,
    m: usize,
    n: usize,
    x: &mut dyn DevicePtrMut<T>,
    ld: usize,
    bias: Option<&dyn DevicePtr<T>>,
    residual: Option<(&dyn DevicePtr<T>, usize)>,
    gamma: &dyn DevicePtr<T>,
    beta: &dyn DevicePtr<T>,
    eps: f32,
) -> Result<()> {
    let b = match bias {
        Some(b) => Some(read_ptr!(gpu, "bias", b)),
        None => None,
    };
    let r = match residual {
        Some((r, ld)) => Some((read_ptr!(gpu, "residual", r), ld)),
        None => None,
    };
    let (gs, _gg) = read_ptr!(gpu, "gamma", gamma);
    let (bs, _gb) = read_ptr!(gpu, "beta", beta);
    let (xs, _gx) = write_ptr!(gpu, "x", x);
    launch_row::<T>(
        gpu,
        RowOp::LayerNorm,
        m,
        n,
        RowOperands {
            x: xs,
            ldx: ld,
            bias: b.as_ref().map(|b| b.0),
            res: r.as_ref().map(|(r, ld)| (r.0, *ld)),
            gamma: Some(gs),
            beta: Some(bs),
            eps,
            y: Some((xs, ld)),
            rstd: None,
        },
    )
}

/// RMSNorm over each row of N values, out of place: `y[r, c] = x[r, c]/√(mean_c x[r, c]² + ε)·γ[c]`.
/// Squares are summed in f32 whatever the storage type. N ≤ [`max_row_len`].
///
/// # Errors
/// See the [module docs](self).
#[allow(clippy::too_many_arguments)]
pub fn rms_norm<T: RowElement>(
    gpu: &Gpu,
    m: usize,
    n: usize,
    x: &dyn DevicePtr<T>,
    ldx: usize,
    gamma: &dyn DevicePtr<T>,
    eps: f32,
    y: &mut dyn DevicePtrMut<T>,
    ldy: usize,
) -> Result<()> {
    let (xs, _gx) = read_ptr!(gpu, "x", x);
    let (gs, _gg) = read_ptr!(gpu, "gamma", gamma);
    let (ys, _gy) = write_ptr!(gpu, "y", y);
    launch_row::<T>(
        gpu,
        RowOp::RmsNorm,
        m,
        n,
        RowOperands {
            x: xs,
            ldx,
            bias: None,
            res: None,
            gamma: Some(gs),
            beta: None,
            eps,
            y: Some((ys, ldy)),
            rstd: None,
        },
    )
}

/// [`rms_norm`] in place.
///
/// # Errors
/// See the [module docs](self).
pub fn rms_norm_in_place<T: RowElement>(
    gpu: &Gpu,
    m: usize,
    n: usize,
    x: &mut dyn DevicePtrMut<T>,
    ld: usize,
    gamma: &dyn DevicePtr<T>,
    eps: f32,
) -> Result<()> {
    let (gs, _gg) = read_ptr!(gpu, "gamma", gamma);
    let (xs, _gx) = write_ptr!(gpu, "x", x);
    launch_row::<T>(
        gpu,
        RowOp::RmsNorm,
        m,
        n,
        RowOperands {
            x: xs,
            ldx: ld,
            bias: None,
            res: None,
            gamma: Some(gs),
            beta: None,
            eps,
            y: Some((xs, ld)),
            rstd: None,
        },
    )
}

/// The per-row inverse RMS only: `rstd[r] = 1/√(mean_c x[r, c]² + ε)` (f32, length ≥ M),
/// CODA's `diag(r)` that the next GEMM applies as a row scale ("RMSNorm-scale").
/// N ≤ [`max_row_len`].
///
/// # Errors
/// See the [module docs](self).
pub fn rms_scale<T: RowElement>(
    gpu: &Gpu,
    m: usize,
    n: usize,
    x: &dyn DevicePtr<T>,
    ldx: usize,
    eps: f32,
    rstd: &mut dyn DevicePtrMut<f32>,
) -> Result<()> {
    let (xs, _gx) = read_ptr!(gpu, "x", x);
    let (rs, _gr) = write_ptr!(gpu, "rstd", rstd);
    launch_row::<T>(
        gpu,
        RowOp::RmsScale,
        m,
        n,
        RowOperands {
            x: xs,
            ldx,
            bias: None,
            res: None,
            gamma: None,
            beta: None,
            eps,
            y: None,
            rstd: Some(rs),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(ptr: u64, len: usize) -> Span {
        Span { ptr, len }
    }

    fn arg_of(e: Error) -> &'static str {
        match e {
            Error::InvalidArgument { arg, .. } => arg,
            other => panic!("expected InvalidArgument, got {other}"),
        }
    }

    #[test]
    fn matrix_extents_are_checked_exactly() {
        // 3×5 with ld 8 needs 2·8 + 5 = 21 elements.
        assert!(check_matrix("x", "ldx", span(0, 21), 3, 5, 8).is_ok());
        let e = check_matrix("x", "ldx", span(0, 20), 3, 5, 8).unwrap_err();
        assert!(e.to_string().contains("at least 21 elements"), "{e}");
        assert_eq!(arg_of(e), "x");
        assert_eq!(
            arg_of(check_matrix("y", "ldy", span(0, 100), 3, 5, 4).unwrap_err()),
            "ldy"
        );
        assert_eq!(
            arg_of(check_matrix("y", "ldy", span(0, 100), 2, 5, 1 << 33).unwrap_err()),
            "ldy"
        );
        // m = 0 needs nothing; overflow is an error, not a wrap.
        assert!(check_matrix("x", "ldx", span(0, 0), 0, 5, 5).is_ok());
        assert!(check_matrix("x", "ldx", span(0, 10), usize::MAX, 5, 1 << 31).is_err());
    }

    #[test]
    fn dims_vectors_and_eps() {
        assert_eq!(arg_of(check_dims(3, 0).unwrap_err()), "n");
        assert_eq!(arg_of(check_dims(1 << 31, 4).unwrap_err()), "m");
        assert!(check_dims(0, 4).is_ok());
        assert!(check_vector("bias", span(0, 17), 17).is_ok());
        assert_eq!(
            arg_of(check_vector("gamma", span(0, 16), 17).unwrap_err()),
            "gamma"
        );
        for bad in [f32::NAN, f32::INFINITY, -1e-5] {
            assert_eq!(arg_of(check_eps(bad).unwrap_err()), "eps");
        }
        assert!(check_eps(0.0).is_ok() && check_eps(1e-12).is_ok());
    }

    // An operand one element into its buffer is not 16-byte aligned.
    #[test]
    fn vectorization_needs_every_pointer_and_row_aligned() {
        assert!(vectorizable(2, 16, &[(256, 768), (512, 0)]));
        assert!(!vectorizable(2, 16, &[(258, 768), (512, 0)]));
        assert!(!vectorizable(2, 16, &[(256, 768), (514, 0)]));
        // ld = 3073 bf16 elements = 6146 bytes: rows after the first are misaligned.
        assert!(!vectorizable(2, 16, &[(256, 3073)]));
        assert!(vectorizable(4, 16, &[(256, 4), (0, 0)]));
        assert!(vectorizable(2, 8, &[(8, 4)]) && !vectorizable(2, 8, &[(8, 6)]));
    }

    #[test]
    fn elementwise_shapes_cover_every_unit_and_row() {
        for (m, units) in [(1, 1), (7, 3), (4096, 384), (16384, 1), (1 << 20, 3)] {
            let (s, lanes_log2) = elementwise_shape(m, units, 65_535);
            let lanes = 1usize << lanes_log2;
            assert!(lanes >= units.min(32), "{m}×{units}");
            assert!(s.grid.0 as usize * lanes >= units);
            assert_eq!(s.block.0 as usize % lanes, 0);
            assert!(s.grid.1 <= 65_535 && s.grid.1 >= 1);
        }
        // No idle lanes where a power of two divides the units.
        assert_eq!(elementwise_shape(4096, 384, 65_535).1, 7);
        assert_eq!(elementwise_shape(4096, 96, 65_535).1, 5);
        assert_eq!(elementwise_shape(4096, 512, 65_535).1, 8);
        assert_eq!(elementwise_shape(1, 3, 65_535).1, 2);
    }

    #[test]
    fn row_groups_hold_the_row_in_registers() {
        for (n, dtype, group) in [
            (3, DType::F32, 32),
            (384, DType::Bf16, 32),
            (1024, DType::Bf16, 32),
            (1025, DType::Bf16, 64),
            (4096, DType::Bf16, 128),
            (4097, DType::F32, 288),
            (16384, DType::F32, 1024),
        ] {
            let (s, g) = row_shape(5, n, dtype).unwrap();
            assert_eq!(g, group, "n = {n} {dtype:?}");
            let units = n.div_ceil(16 / dtype.size());
            assert!(g as usize * ROW_SLOTS >= units);
            assert_eq!(s.block.0 % g, 0);
            assert!(s.block.0 <= 1024);
            if g > 32 {
                assert_eq!(s.smem_bytes, s.block.0 / 32 * 16);
            }
        }
        assert_eq!(arg_of(row_shape(1, 16385, DType::F32).unwrap_err()), "n");
        assert_eq!(max_row_len(DType::Bf16), 32768);
    }

    /// Simulates every thread of the launch `elementwise_shape` picks, through the kernel's
    /// own coordinate function, and counts how often each (row, unit) is visited.
    #[test]
    fn elementwise_launches_visit_every_unit_once() {
        use fused_gemm_device::kernel::rowwise::elementwise_coords;
        for (m, units, max_grid_y) in [
            (1, 1, 65_535),
            (5, 3, 65_535),
            (7, 96, 65_535),
            (3, 384, 65_535),
            (2, 513, 65_535),
            (300, 40, 4),
        ] {
            let (s, lanes_log2) = elementwise_shape(m, units, max_grid_y);
            let mut seen = vec![0u8; m * units];
            for bx in 0..s.grid.0 {
                for by in 0..s.grid.1 {
                    for tid in 0..s.block.0 {
                        let (unit, first, stride) =
                            elementwise_coords(tid, (bx, by), s.block.0, s.grid.1, lanes_log2);
                        if unit as usize >= units {
                            continue;
                        }
                        let mut r = first as usize;
                        while r < m {
                            seen[r * units + unit as usize] += 1;
                            r += stride as usize;
                        }
                    }
                }
            }
            assert!(
                seen.iter().all(|&c| c == 1),
                "m {m} units {units}: {seen:?}"
            );
        }
    }

    /// Simulates the row kernels' launch: each row is held by one group of whole warps, and
    /// every unit of every row by exactly one thread's slot.
    #[test]
    fn row_launches_visit_every_unit_once_within_whole_warps() {
        use fused_gemm_device::kernel::rowwise::row_coords;
        for (m, n, dtype) in [
            (1, 3, DType::F32),
            (9, 384, DType::Bf16),
            (3, 1025, DType::Bf16),
            (5, 4097, DType::F32),
            (2, 32768, DType::F16),
        ] {
            let (s, group) = row_shape(m, n, dtype).unwrap();
            let units = n.div_ceil(16 / dtype.size());
            let rows_per_cta = (s.block.0 / group) as usize;
            let mut seen = vec![0u8; m * units];
            for bx in 0..s.grid.0 as usize {
                for tid in 0..s.block.0 {
                    let (row_in_cta, t) = row_coords(tid, group);
                    // A warp never spans two rows (its shuffles reduce one row).
                    assert_eq!(row_coords(tid & !31, group).0, row_in_cta);
                    let mut row = bx * rows_per_cta + row_in_cta as usize;
                    while row < m {
                        for slot in 0..ROW_SLOTS {
                            let u = (t + slot as u32 * group) as usize;
                            if u < units {
                                seen[row * units + u] += 1;
                            }
                        }
                        row += s.grid.0 as usize * rows_per_cta;
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "m {m} n {n} {dtype:?}");
        }
    }

    #[test]
    fn every_kernel_name_is_an_entry_point() {
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            for act in Activation::ALL {
                let name = bias_act_kernel(dtype, act).name();
                assert!(k::ALL.contains(&name), "{name}");
                assert!(name.ends_with(dtype.name()), "{name}");
            }
        }
        assert_eq!(
            bias_act_kernel(DType::Bf16, Activation::GeluTanh).name(),
            "fg_bias_gelu_tanh_bf16"
        );
    }
}
