//! The stage vocabulary of `#[fused_gemm(epilogue = [...])]`, one type per stage.
//!
//! Vectors and tiles read by stages (bias, residual, gamma, beta) have the kernel's output
//! element type; per-row scale vectors are f32. Formulas are given on each type, with `x` the
//! value entering the stage at output element `(r, c)`.

use super::ops::{load, load_pair, load_pair_aligned};
use super::{Acc, NormPass, Prefetch, Stage, TileCtx};
use crate::arch::sync::sync_threads;
use crate::arch::warp::shfl_xor_f32;
use crate::math;
use crate::params::KernelParam;
use crate::types::Element;

macro_rules! params {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        unsafe impl KernelParam for $name {}
    };
}

/// Parameters of stages that take none.
pub type NoParams = super::Nil;

macro_rules! elementwise {
    ($(#[$m:meta])* $name:ident, $f:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;
        impl Stage for $name {
            type Params = NoParams;
            #[inline(always)]
            fn apply<Out: Element, const MI: usize, const NI: usize>(_: &NoParams, acc: &mut Acc<MI, NI>, _: &mut TileCtx) {
                acc.map($f);
            }
        }
    };
}

elementwise!(
    /// `relu`: max(x, 0). NaN stays NaN.
    Relu,
    |x| if x < 0.0 { 0.0 } else { x }
);
elementwise!(
    /// `gelu`: x·Φ(x) with the exact (erf) normal CDF, as BERT's `"gelu"`.
    Gelu,
    math::gelu_erf
);
elementwise!(
    /// `gelu_tanh`: the tanh approximation (`gelu_new`, `gelu_pytorch_tanh`, cuBLASLt's GELU).
    GeluTanh,
    math::gelu_tanh
);
elementwise!(
    /// `silu`: x·sigmoid(x).
    Silu,
    math::silu
);
elementwise!(
    /// `sigmoid`: 1/(1 + e^−x).
    Sigmoid,
    math::sigmoid
);

params!(
    /// `scale(alpha)`: x·alpha.
    ScaleParams { alpha: f32 }
);

/// `scale(alpha)`: multiplies by a scalar. Written before `bias` it scales only the product;
/// after, it scales both.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scale;
impl Stage for Scale {
    type Params = ScaleParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &ScaleParams,
        acc: &mut Acc<MI, NI>,
        _: &mut TileCtx,
    ) {
        let a = p.alpha;
        acc.map(|x| x * a);
    }
}

params!(
    /// A device vector: `ptr` is the address of its first element.
    VectorParams { ptr: u64 }
);

/// `scale(row)`: `x·s[r]` with `s` an f32 vector of length M (e.g. RMSNorm's 1/rms of the rows
/// of this GEMM's input, CODA's `diag(r)·(X·W)`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ScaleRow;
impl Stage for ScaleRow {
    type Params = VectorParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &VectorParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        acc.for_each(ctx, |r, _, v| *v *= unsafe { load::<f32>(p.ptr, r) });
    }
}

/// `scale(col)`: `x·s[c]` with `s` an f32 vector of length N (output columns).
#[derive(Clone, Copy, Debug, Default)]
pub struct ScaleCol;
impl Stage for ScaleCol {
    type Params = VectorParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &VectorParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        acc.for_each(ctx, |_, c, v| *v *= unsafe { load::<f32>(p.ptr, c) });
    }
}

/// `bias`: `x + b[c]`, `b` of length N (one value per output column, broadcast down the rows:
/// a `Linear` layer's bias).
#[derive(Clone, Copy, Debug, Default)]
pub struct BiasCol;
impl Stage for BiasCol {
    type Params = VectorParams;
    const COLUMN_VECTOR: bool = true;
    #[inline(always)]
    fn column_vector(p: &VectorParams) -> u64 {
        p.ptr
    }
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &VectorParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        if ctx.staged_bias != 0 && !ctx.paired && core::mem::size_of::<Out>() == 2 {
            // The copy in shared memory: no bounds checks (zeros past N), one 4-byte shared read
            // per column pair (the 8 row groups of a warp read the same word).
            for ni in 0..NI {
                let off = ctx.staged_bias + 2 * (8 * ni as u32 + 2 * ctx.t);
                let w = unsafe { *(ctx.scratch.add(off as usize) as *const u32) };
                let (b0, b1) = Out::unpack2(w);
                for mi in 0..MI {
                    for h in 0..2 {
                        acc.v[mi][ni][2 * h] += b0;
                        acc.v[mi][ni][2 * h + 1] += b1;
                    }
                }
            }
            ctx.staged_bias = 0;
            return;
        }
        let aligned = p.ptr % (2 * core::mem::size_of::<Out>() as u64) == 0;
        if !ctx.paired && aligned && acc.interior(ctx) {
            // One pair load per column pair, shared by every row this thread holds.
            for ni in 0..NI {
                let (b0, b1) = unsafe { load_pair_aligned::<Out>(p.ptr, 0, 0, ctx.col_of(ni)) };
                for mi in 0..MI {
                    for h in 0..2 {
                        acc.v[mi][ni][2 * h] += b0;
                        acc.v[mi][ni][2 * h + 1] += b1;
                    }
                }
            }
        } else {
            acc.for_each(ctx, |_, c, v| *v += unsafe { load::<Out>(p.ptr, c) });
        }
    }
}

/// `bias(row)`: `x + b[r]`, `b` of length M (one value per row, broadcast along it).
#[derive(Clone, Copy, Debug, Default)]
pub struct BiasRow;
impl Stage for BiasRow {
    type Params = VectorParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &VectorParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        acc.for_each(ctx, |r, _, v| *v += unsafe { load::<Out>(p.ptr, r) });
    }
}

params!(
    /// A device matrix, row-major: `ptr` and leading dimension `ld` in elements.
    MatrixParams { ptr: u64, ld: u32, _pad: u32 }
);

/// `residual`: x + R[r, c], R an M × N matrix (output shape). Reads R's tile from shared memory
/// when the mainloop copied it there ([`TileCtx::staged_residual`]), else from global memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct Residual;
impl Stage for Residual {
    type Params = MatrixParams;
    const READS_MATRIX: bool = true;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &MatrixParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        if ctx.staged_residual != 0 && MI == 1 && !ctx.paired {
            // The copy's swizzle puts each of this thread's pairs in one word: no bounds
            // checks (zeros past M and N) and conflict-free 4-byte reads.
            for ni in 0..NI {
                for h in 0..2 {
                    let row = ctx.staged_row + ctx.g + 8 * h as u32;
                    let off = ctx.staged_residual
                        + crate::copy::tma::swizzle_128b_offset(row, 8 * ni as u32 + 2 * ctx.t);
                    let w = unsafe { *(ctx.scratch.add(off as usize) as *const u32) };
                    let (a, b) = Out::unpack2(w);
                    acc.v[0][ni][2 * h] += a;
                    acc.v[0][ni][2 * h + 1] += b;
                }
            }
            return;
        }
        add_matrix::<Out, MI, NI>(p.ptr, p.ld, acc, ctx);
    }
    #[inline(always)]
    fn prefetch<Out: Element>(p: &MatrixParams, region: &Prefetch) {
        region.matrix(p.ptr, p.ld, core::mem::size_of::<Out>() as u32);
    }
}

/// `accumulate`: C[r, c] + x, reading the output buffer's current contents (residual into the
/// output buffer, gradient accumulation). Must be the last stage.
#[derive(Clone, Copy, Debug, Default)]
pub struct Accumulate;
impl Stage for Accumulate {
    type Params = NoParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        _: &NoParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        let (c, ldc) = (ctx.c, ctx.ldc);
        add_matrix::<Out, MI, NI>(c, ldc, acc, ctx);
    }
}

#[inline(always)]
fn add_matrix<Out: Element, const MI: usize, const NI: usize>(
    ptr: u64,
    ld: u32,
    acc: &mut Acc<MI, NI>,
    ctx: &mut TileCtx,
) {
    if ctx.paired {
        acc.for_each(ctx, |r, c, v| {
            *v += unsafe {
                load::<Out>(
                    ptr + (r as u64 * ld as u64) * core::mem::size_of::<Out>() as u64,
                    c,
                )
            }
        });
    } else {
        let n = ctx.n;
        let aligned = ptr % (2 * core::mem::size_of::<Out>() as u64) == 0 && ld % 2 == 0;
        if aligned && acc.interior(ctx) {
            acc.each_pair::<false>(ctx, |r, c, v0, v1| {
                let (a, b) = unsafe { load_pair_aligned::<Out>(ptr, ld, r, c) };
                *v0 += a;
                *v1 += b;
            });
        } else {
            acc.for_each_pair(ctx, |r, c, v0, v1| {
                let (a, b) = unsafe { load_pair::<Out>(ptr, ld, r, c, n) };
                *v0 += a;
                *v1 += b;
            });
        }
    }
}

/// `cast(dtype)`: rounds x to `E`'s precision and back (PyTorch's rounding of an intermediate
/// stored in a narrower type).
#[derive(Clone, Copy, Debug, Default)]
pub struct Cast<E>(core::marker::PhantomData<E>);
impl<E: Element> Stage for Cast<E> {
    type Params = NoParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        _: &NoParams,
        acc: &mut Acc<MI, NI>,
        _: &mut TileCtx,
    ) {
        acc.map(|x| E::from_f32(x).to_f32());
    }
}

/// A user element-wise function `fn(f32) -> f32`, wrapped by `#[fused_gemm]` in a zero-sized
/// type.
pub trait UserFn {
    /// The function.
    fn call(x: f32) -> f32;
}

/// A user stage: x ↦ `F::call(x)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct User<F>(core::marker::PhantomData<F>);
impl<F: UserFn> Stage for User<F> {
    type Params = NoParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        _: &NoParams,
        acc: &mut Acc<MI, NI>,
        _: &mut TileCtx,
    ) {
        acc.map(F::call);
    }
}

/// `swiglu`: on interleaved gate/up columns `[g0, u0, g1, u1, …]` (weight rows interleaved the
/// same way), out[r, c/2] = silu(g)·u. Output width N/2.
#[derive(Clone, Copy, Debug, Default)]
pub struct SwiGlu;
impl Stage for SwiGlu {
    type Params = NoParams;
    const PAIRS: bool = true;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        _: &NoParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        glu(acc, ctx, math::silu);
    }
}

/// `geglu`: as [`SwiGlu`] with erf-GELU as the gate: out[r, c/2] = gelu(g)·u. Output width N/2.
#[derive(Clone, Copy, Debug, Default)]
pub struct GeGlu;
impl Stage for GeGlu {
    type Params = NoParams;
    const PAIRS: bool = true;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        _: &NoParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        glu(acc, ctx, math::gelu_erf);
    }
}

#[inline(always)]
fn glu<const MI: usize, const NI: usize>(
    acc: &mut Acc<MI, NI>,
    ctx: &mut TileCtx,
    act: impl Fn(f32) -> f32,
) {
    for mi in 0..MI {
        for ni in 0..NI {
            for h in 0..2 {
                let v = &mut acc.v[mi][ni];
                v[2 * h] = crate::arch::fence_value(act(v[2 * h]) * v[2 * h + 1]);
            }
        }
    }
    ctx.paired = true;
}

params!(
    /// `rope(theta)`: rotary embedding of column pairs.
    RopeParams {
        /// Base θ of the frequencies (10000 for LLaMA-2, 500000 for LLaMA-3).
        theta: f32,
        /// Columns per head; even.
        head_dim: u32,
        /// Rotated columns at the start of each head (≤ head_dim, even); the rest pass through.
        rotary_dim: u32,
        /// Tokens per sequence: row r is at position `r % seq_len + pos_offset`.
        seq_len: u32,
        /// Position of each sequence's first row (KV-cache offset).
        pos_offset: u32,
        /// Unused; keeps the struct 8-byte sized.
        _pad: u32,
    }
);

/// `rope(theta)`: rotates interleaved pairs `(2i, 2i+1)` of each head by angle p·θ^(−2i/d),
/// p the row's position and d the rotary dimension, LLaMA/NeoX sign convention:
/// `x' = x cos − y sin`, `y' = y cos + x sin`. Checkpoints store the half-split layout
/// `(i, i + d/2)`; interleave those weight rows on the host first
/// (`fused_gemm::host::weights::interleave_halves`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Rope;
impl Stage for Rope {
    type Params = RopeParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &RopeParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        let log2_theta = math::log2(p.theta);
        let inv_rot = math::div(1.0, p.rotary_dim as f32);
        acc.for_each_pair(ctx, |r, c, x, y| {
            let j = c % p.head_dim;
            if j < p.rotary_dim {
                let pos = (r % p.seq_len + p.pos_offset) as f32;
                let inv_freq = math::exp2(-(j as f32) * inv_rot * log2_theta);
                let (s, co) = math::sincos(pos * inv_freq);
                let (x0, y0) = (*x, *y);
                *x = x0 * co - y0 * s;
                *y = y0 * co + x0 * s;
            }
        });
    }
}

/// Row statistics as a (count, mean, M2) triple: Welford's update per value and Chan et al.'s
/// pairwise merge ("Algorithms for computing the sample variance", 1979). A constant row has
/// M2 = 0 exactly and its mean equals the constant exactly, even at ±8.5e37 where a plain f32 sum
/// overflows, so a constant row's LayerNorm is exactly β.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    /// Values seen.
    pub n: f32,
    /// Their mean.
    pub mean: f32,
    /// Sum of squared deviations from the mean.
    pub m2: f32,
}

impl Moments {
    /// Adds one value.
    #[inline(always)]
    pub fn push(&mut self, x: f32) {
        self.n += 1.0;
        let d = x - self.mean;
        self.mean += math::div(d, self.n);
        self.m2 += d * (x - self.mean);
    }

    /// Statistics of the `2·NI` values of row half `h` of `frags` (element `2h` and `2h + 1` of
    /// each m16n8 fragment), or of their squares: two passes with pairwise sums, the mean as a sum
    /// of `x/(2·NI)`. With `NI` a power of two the scaling is exact and a constant row gives
    /// its constant as the mean and M2 = 0 exactly, even where a plain sum overflows (a constant
    /// row's LayerNorm is then exactly β); callers use it only then. No division and no
    /// dependency chain through all values, unlike [`Self::push`]. Without `with_m2` the second
    /// pass is skipped and M2 is 0 (RMSNorm needs only the mean square).
    #[inline(always)]
    pub fn of_row_half<const NI: usize>(
        frags: &[[f32; 4]; NI],
        h: usize,
        squares: bool,
        with_m2: bool,
    ) -> Moments {
        let inv = 1.0 / (2 * NI) as f32;
        let val = |x: f32| if squares { x * x } else { x };
        let mut s = [0f32; NI];
        for ni in 0..NI {
            // Explicit FMAs: Rust never contracts `a·b + c`, and this runs per output value.
            s[ni] = math::fma(val(frags[ni][2 * h]), inv, val(frags[ni][2 * h + 1]) * inv);
        }
        let mean = pairwise_sum(s);
        if !with_m2 {
            return Moments {
                n: (2 * NI) as f32,
                mean,
                m2: 0.0,
            };
        }
        let mut q = [0f32; NI];
        for ni in 0..NI {
            let (a, b) = (
                val(frags[ni][2 * h]) - mean,
                val(frags[ni][2 * h + 1]) - mean,
            );
            q[ni] = math::fma(a, a, b * b);
        }
        Moments {
            n: (2 * NI) as f32,
            mean,
            m2: pairwise_sum(q),
        }
    }

    /// Merges two sets of statistics.
    #[inline(always)]
    pub fn merge(self, o: Moments) -> Moments {
        let n = self.n + o.n;
        if o.n == 0.0 {
            return self;
        }
        if self.n == 0.0 {
            return o;
        }
        let d = o.mean - self.mean;
        let w = math::div(o.n, n);
        Moments {
            n,
            mean: math::fma(d, w, self.mean),
            m2: math::fma(d * d * self.n, w, self.m2 + o.m2),
        }
    }

    /// The same statistics from lane `lane ^ mask` of the warp.
    ///
    /// # Safety
    /// All 32 lanes must call it together.
    #[inline(always)]
    pub unsafe fn shfl_xor(self, mask: u32) -> Moments {
        Moments {
            n: shfl_xor_f32(self.n, mask),
            mean: shfl_xor_f32(self.mean, mask),
            m2: shfl_xor_f32(self.m2, mask),
        }
    }
}

/// Sum of `v` as a balanced tree of adjacent pairs: sums of equal values stay exact at every
/// level. Adjacent pairs let each sum start as soon as its two leaves exist, so a caller
/// computing the leaves in order keeps about log2(NI) partial sums live, not NI/2.
#[inline(always)]
fn pairwise_sum<const NI: usize>(mut v: [f32; NI]) -> f32 {
    let mut n = NI;
    while n > 1 {
        let half = n / 2;
        for i in 0..half {
            v[i] = v[2 * i] + v[2 * i + 1];
        }
        if n % 2 == 1 {
            v[half] = v[n - 1];
        }
        n -= half;
    }
    v[0]
}

/// What a row-norm stage computes from a row's [`Moments`] and applies per element.
pub trait RowNorm {
    /// Launch parameters (gamma, beta, eps, partial-statistics workspace).
    type Params: KernelParam;
    /// Whether the statistics are of x (LayerNorm) or of x² (RMSNorm).
    const OF_SQUARES: bool;
    /// Whether [`Self::row_factors`] reads M2 (LayerNorm's variance); without it the epilogue
    /// may leave M2 at 0 in statistics it computes pairwise.
    const NEEDS_M2: bool;
    /// The partial-statistics workspace (`ceil(N/BN)` entries of 16 bytes per row), or 0.
    fn stats(p: &Self::Params) -> u64;
    /// Per-row factors `(shift, scale)` from the row's full statistics, so that the normalized
    /// value is `(x − shift)·scale`.
    fn row_factors(p: &Self::Params, row: &Moments) -> RowFactors;
    /// The normalized value of `x` at column `c`: `(x − shift)·scale·γ[c] (+ β[c])`.
    ///
    /// # Safety
    /// The gamma/beta vectors must hold column `c`.
    unsafe fn normalize<Out: Element>(p: &Self::Params, row: &RowFactors, c: u32, x: f32) -> f32;
    /// Whether γ (and β) allow two-element loads at even columns.
    fn pair_aligned<Out: Element>(p: &Self::Params) -> bool;
    /// `(γ[c], γ[c + 1])` and `(β[c], β[c + 1])` (zeros without β), `c` even, with two-element
    /// loads; [`Self::normalize`] equals `(x − shift)·scale·γ + β` with these.
    ///
    /// # Safety
    /// [`Self::pair_aligned`], and the vectors hold column `c + 1`.
    unsafe fn affine_pair<Out: Element>(p: &Self::Params, c: u32) -> ([f32; 2], [f32; 2]);
    /// Global addresses of γ and β (0 without β), for wide loads; each holds N values of the
    /// output dtype.
    fn affine_ptrs(p: &Self::Params) -> (u64, u64);
}

/// A row's normalization: `(x − shift)·scale`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RowFactors {
    /// Subtracted first (the mean for LayerNorm, 0 for RMSNorm).
    pub shift: f32,
    /// Then multiplied (1/√(var + ε) or 1/√(mean(x²) + ε)).
    pub scale: f32,
}

impl RowFactors {
    /// `(x − shift)·scale·γ + β`: the normalized value of `x` with the affine factors of its
    /// column (the contract of [`RowNorm::affine_pair`]; β = 0 without one). One expression for
    /// every path, so they agree bitwise.
    #[inline(always)]
    pub fn affine(&self, x: f32, gamma: f32, beta: f32) -> f32 {
        math::fma((x - self.shift) * self.scale, gamma, beta)
    }
}

params!(
    /// `layer_norm(eps)`.
    LayerNormParams {
        /// Scale γ, length N, output dtype.
        gamma: u64,
        /// Shift β, length N, output dtype.
        beta: u64,
        /// Partial-statistics workspace for rows wider than one CTA tile, else 0.
        stats: u64,
        /// ε added to the variance.
        eps: f32,
        /// Unused.
        _pad: u32,
    }
);

params!(
    /// `rms_norm(eps)`.
    RmsNormParams {
        /// Scale γ, length N, output dtype.
        gamma: u64,
        /// Partial-statistics workspace for rows wider than one CTA tile, else 0.
        stats: u64,
        /// ε added to the mean square.
        eps: f32,
        /// Unused.
        _pad: u32,
    }
);

/// `layer_norm(eps)`: `(x − μ)/√(σ² + ε)·γ[c] + β[c]` over each row's N values (biased
/// variance).
#[derive(Clone, Copy, Debug, Default)]
pub struct LayerNorm;
impl RowNorm for LayerNorm {
    type Params = LayerNormParams;
    const OF_SQUARES: bool = false;
    const NEEDS_M2: bool = true;
    #[inline(always)]
    fn stats(p: &LayerNormParams) -> u64 {
        p.stats
    }
    #[inline(always)]
    fn row_factors(p: &LayerNormParams, row: &Moments) -> RowFactors {
        let var = math::div(row.m2, row.n);
        RowFactors {
            shift: row.mean,
            scale: math::rsqrt(var + p.eps),
        }
    }
    #[inline(always)]
    unsafe fn normalize<Out: Element>(
        p: &LayerNormParams,
        row: &RowFactors,
        c: u32,
        x: f32,
    ) -> f32 {
        row.affine(x, load::<Out>(p.gamma, c), load::<Out>(p.beta, c))
    }
    #[inline(always)]
    fn pair_aligned<Out: Element>(p: &LayerNormParams) -> bool {
        let pair = 2 * core::mem::size_of::<Out>() as u64;
        p.gamma % pair == 0 && p.beta % pair == 0
    }
    #[inline(always)]
    unsafe fn affine_pair<Out: Element>(p: &LayerNormParams, c: u32) -> ([f32; 2], [f32; 2]) {
        let (g0, g1) = load_pair_aligned::<Out>(p.gamma, 0, 0, c);
        let (b0, b1) = load_pair_aligned::<Out>(p.beta, 0, 0, c);
        ([g0, g1], [b0, b1])
    }
    #[inline(always)]
    fn affine_ptrs(p: &LayerNormParams) -> (u64, u64) {
        (p.gamma, p.beta)
    }
}

/// `rms_norm(eps)`: `x/√(mean(x²) + ε)·γ[c]` over each row's N values. Squares are accumulated
/// in f32 whatever the output type, so f16 values cannot overflow them.
#[derive(Clone, Copy, Debug, Default)]
pub struct RmsNorm;
impl RowNorm for RmsNorm {
    type Params = RmsNormParams;
    const OF_SQUARES: bool = true;
    const NEEDS_M2: bool = false;
    #[inline(always)]
    fn stats(p: &RmsNormParams) -> u64 {
        p.stats
    }
    #[inline(always)]
    fn row_factors(p: &RmsNormParams, row: &Moments) -> RowFactors {
        RowFactors {
            shift: 0.0,
            scale: math::rsqrt(row.mean + p.eps),
        }
    }
    #[inline(always)]
    unsafe fn normalize<Out: Element>(p: &RmsNormParams, row: &RowFactors, c: u32, x: f32) -> f32 {
        x * row.scale * load::<Out>(p.gamma, c)
    }
    #[inline(always)]
    fn pair_aligned<Out: Element>(p: &RmsNormParams) -> bool {
        p.gamma % (2 * core::mem::size_of::<Out>() as u64) == 0
    }
    #[inline(always)]
    unsafe fn affine_pair<Out: Element>(p: &RmsNormParams, c: u32) -> ([f32; 2], [f32; 2]) {
        let (g0, g1) = load_pair_aligned::<Out>(p.gamma, 0, 0, c);
        ([g0, g1], [0.0; 2])
    }
    #[inline(always)]
    fn affine_ptrs(p: &RmsNormParams) -> (u64, u64) {
        (p.gamma, 0)
    }
}

/// A row-norm stage. With [`NormPass::Local`]: finished in the CTA when the CTA tile spans the
/// row (N ≤ BN); otherwise it writes this CTA's partial statistics (CODA's per-tile partials) to
/// `stats` and defers itself and every later stage to the finishing kernel
/// (`kernel::norm_finish`). A row-complete mainloop (`gemm::sm90`) makes three passes:
/// [`NormPass::Pre`] per chunk (the norm only defers itself), [`NormPass::Stats`] over all of
/// the tile's columns (merges their row statistics into `ctx.row_stats`), and after the
/// exchange [`NormPass::Apply`] per chunk (normalizes with them). With [`NormPass::Partial`]:
/// merges the chunk's statistics and writes one partial per tile.
#[derive(Clone, Copy, Debug, Default)]
pub struct Norm<K>(core::marker::PhantomData<K>);

impl<K: RowNorm> Stage for Norm<K> {
    type Params = K::Params;
    const ROW_REDUCTION: bool = true;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &K::Params,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        match ctx.norm_pass {
            NormPass::Pre => {
                ctx.deferred = true;
                return;
            }
            NormPass::Stats => {
                if MI != 1 {
                    // Row-complete mainloops hand over one m16 fragment row per call.
                    crate::arch::trap();
                }
                let rows = unsafe { cta_row_moments::<K, MI, NI>(acc, ctx) };
                for h in 0..2 {
                    ctx.row_stats[h] = ctx.row_stats[h].merge(rows[h]);
                }
                ctx.deferred = true;
                return;
            }
            NormPass::Apply => {
                if MI != 1 {
                    crate::arch::trap();
                }
                let f = [
                    K::row_factors(p, &ctx.row_stats[0]),
                    K::row_factors(p, &ctx.row_stats[1]),
                ];
                normalize_rows::<K, Out, MI, NI>(p, acc, ctx, |_, h| f[h]);
                ctx.norm_pass = NormPass::Local;
                return;
            }
            NormPass::Partial { last } => {
                if MI != 1 {
                    crate::arch::trap();
                }
                let rows = unsafe { cta_row_moments::<K, MI, NI>(acc, ctx) };
                for h in 0..2 {
                    ctx.row_stats[h] = ctx.row_stats[h].merge(rows[h]);
                }
                if last {
                    let merged = ctx.row_stats;
                    store_partials::<K>(p, ctx, &merged);
                }
                ctx.deferred = true;
                return;
            }
            NormPass::Local => {}
        }
        let rows = unsafe { cta_row_moments::<K, MI, NI>(acc, ctx) };
        if ctx.spans_row() {
            normalize_rows::<K, Out, MI, NI>(p, acc, ctx, |mi, h| {
                K::row_factors(p, &rows[2 * mi + h])
            });
        } else {
            store_partials::<K>(p, ctx, &rows[..2 * MI]);
            ctx.deferred = true;
        }
    }
}

/// Writes the statistics of this thread's rows (`rows[2·mi + h]` for fragment row `mi`, half
/// `h`) as partial `ctx.tile_n` of `ctx.tiles_n` per row in the norm's workspace: one lane per
/// row (warp column 0, `t = 0`), rows ≥ M skipped.
#[inline(always)]
fn store_partials<K: RowNorm>(p: &K::Params, ctx: &TileCtx, rows: &[Moments]) {
    let stats = K::stats(p);
    if stats == 0 {
        // The launcher must provide the workspace when N > BN; never continue wrongly.
        crate::arch::trap();
    }
    if ctx.warp_n != 0 || ctx.t != 0 {
        return;
    }
    for (k, st) in rows.iter().enumerate() {
        let r = ctx.row_of(k / 2, k % 2);
        if r < ctx.m {
            let slot = (stats as *mut [f32; 4])
                .wrapping_add(r as usize * ctx.tiles_n as usize + ctx.tile_n as usize);
            unsafe { crate::arch::global::st_f32x4(slot, [st.n, st.mean, st.m2, 0.0]) };
        }
    }
}

/// `(x − shift)·scale·γ (+ β)` for every in-bounds value, with the factors of fragment row
/// `mi`, half `h` from `factors(mi, h)`. Interior tiles load γ and β once per column pair.
#[inline(always)]
fn normalize_rows<K: RowNorm, Out: Element, const MI: usize, const NI: usize>(
    p: &K::Params,
    acc: &mut Acc<MI, NI>,
    ctx: &TileCtx,
    factors: impl Fn(usize, usize) -> RowFactors,
) {
    if !ctx.paired && K::pair_aligned::<Out>(p) && acc.interior(ctx) {
        for ni in 0..NI {
            let (g, b) = unsafe { K::affine_pair::<Out>(p, ctx.col_of(ni)) };
            for mi in 0..MI {
                for h in 0..2 {
                    let st = factors(mi, h);
                    for e in 0..2 {
                        let x = acc.v[mi][ni][2 * h + e];
                        acc.v[mi][ni][2 * h + e] = st.affine(x, g[e], b[e]);
                    }
                }
            }
        }
        return;
    }
    for mi in 0..MI {
        for h in 0..2 {
            let st = factors(mi, h);
            for ni in 0..NI {
                let c = ctx.col_of(ni);
                for e in 0..2 {
                    let x = acc.v[mi][ni][2 * h + e];
                    let cc = c + e as u32;
                    acc.v[mi][ni][2 * h + e] = if cc < ctx.n {
                        unsafe { K::normalize::<Out>(p, &st, cc, x) }
                    } else {
                        x
                    };
                }
            }
        }
    }
}

/// Statistics of each of this thread's `2·MI` rows over the CTA's columns, identical in every
/// thread holding the row. Lanes sharing a row merge by shuffles; warps along N through shared
/// memory, in warp order (deterministic).
#[inline(always)]
unsafe fn cta_row_moments<K: RowNorm, const MI: usize, const NI: usize>(
    acc: &Acc<MI, NI>,
    ctx: &TileCtx,
) -> [Moments; 16] {
    // 16 ≥ 2·MI for every tile shape we instantiate (MI ≤ 8); checked at compile time below.
    const {
        assert!(
            MI <= 8,
            "row reductions support at most 8 m16 fragments per warp"
        )
    };
    let mut rows = [Moments::default(); 16];
    let mut k = 0;
    let pairwise = NI.is_power_of_two() && acc.interior(ctx);
    for mi in 0..MI {
        for h in 0..2 {
            let mut st = Moments::default();
            if pairwise {
                st = Moments::of_row_half::<NI>(&acc.v[mi], h, K::OF_SQUARES, K::NEEDS_M2);
            } else if ctx.row_of(mi, h) < ctx.m {
                for ni in 0..NI {
                    let c = ctx.col_of(ni);
                    for e in 0..2 {
                        if c + (e as u32) < ctx.n {
                            let x = acc.v[mi][ni][2 * h + e];
                            st.push(if K::OF_SQUARES { x * x } else { x });
                        }
                    }
                }
            }
            st = st.merge(st.shfl_xor(1));
            st = st.merge(st.shfl_xor(2));
            rows[k] = st;
            k += 1;
        }
    }
    if ctx.warps_n > 1 {
        // scratch: [warps_n][bm] × (n, mean, m2)
        let base = ctx.scratch as *mut [f32; 4];
        sync_threads();
        if ctx.t == 0 {
            let mut k = 0;
            for mi in 0..MI {
                for h in 0..2 {
                    let local_row = ctx.row_of(mi, h) - ctx.cta_row;
                    let st = rows[k];
                    k += 1;
                    *base.add((ctx.warp_n * ctx.bm + local_row) as usize) =
                        [st.n, st.mean, st.m2, 0.0];
                }
            }
        }
        sync_threads();
        let mut k = 0;
        for mi in 0..MI {
            for h in 0..2 {
                let local_row = ctx.row_of(mi, h) - ctx.cta_row;
                let mut st = Moments::default();
                for w in 0..ctx.warps_n {
                    let v = *base.add((w * ctx.bm + local_row) as usize);
                    st = st.merge(Moments {
                        n: v[0],
                        mean: v[1],
                        m2: v[2],
                    });
                }
                rows[k] = st;
                k += 1;
            }
        }
    }
    rows
}

/// Columns per group of [`RowMoments`] statistics: the Hopper epilogue's chunk width, and a
/// divisor of every built-in tile's BN (the macro refuses other tiles with `row_moments`), so
/// that a group never spans two CTAs.
pub const MOMENT_GROUP_COLS: u32 = 64;

params!(
    /// `row_moments(stats)`.
    RowMomentsParams {
        /// Row statistics, f32 `(count, mean, M2, shift)` per row and group of
        /// [`MOMENT_GROUP_COLS`] columns: row `r`, group `g` at byte `ptr + 16·(r·ld + g)`.
        ptr: u64,
        /// Groups per row of the statistics matrix (at least `ceil(N / 64)`).
        ld: u32,
        /// Unused.
        _pad: u32,
    }
);

/// `row_moments(stats)`: the producer half of a deferred LayerNorm (CODA's
/// reparameterisation), whose consumers ([`FoldedLayerNorm`], [`NormedResidual`]) merge a
/// row's groups. It stores each row of its tile less the tile's row mean `t` (the shift, f32),
/// `h′ = h − t`, and writes, per group of [`MOMENT_GROUP_COLS`] columns, the statistics of
/// what it stored, `(count, mean, M2, t)` (Welford/Chan, as [`Moments`]). Centred values keep
/// 16-bit precision relative to the row's spread rather than its mean, so rows whose mean
/// dwarfs their spread survive storage. A CTA whose tile spans several groups writes the
/// tile's statistics in its first group and zero counts (with the shift) in the others. No
/// group spans CTAs, so there is no exchange and no finishing kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct RowMoments;
impl Stage for RowMoments {
    type Params = RowMomentsParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &RowMomentsParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        if ctx.cta_col % MOMENT_GROUP_COLS != 0 {
            // A tile not starting on a group would share it with another CTA.
            crate::arch::trap();
        }
        let rows = unsafe { cta_row_moments::<LayerNorm, MI, NI>(acc, ctx) };
        for mi in 0..MI {
            for h in 0..2 {
                let t = rows[2 * mi + h].mean;
                for ni in 0..NI {
                    acc.v[mi][ni][2 * h] -= t;
                    acc.v[mi][ni][2 * h + 1] -= t;
                }
            }
        }
        if ctx.warp_n != 0 || ctx.t != 0 {
            return;
        }
        let first = ctx.cta_col / MOMENT_GROUP_COLS;
        let end = (ctx.cta_col + ctx.bn)
            .min(ctx.n)
            .div_ceil(MOMENT_GROUP_COLS)
            .max(first + 1);
        for (k, st) in rows[..2 * MI].iter().enumerate() {
            let r = ctx.row_of(k / 2, k % 2);
            if r >= ctx.m {
                continue;
            }
            let row = (p.ptr as *mut [f32; 4]).wrapping_add(r as usize * p.ld as usize);
            unsafe {
                crate::arch::global::st_f32x4(
                    row.wrapping_add(first as usize),
                    [st.n, 0.0, st.m2, st.mean],
                );
                for g in first + 1..end {
                    crate::arch::global::st_f32x4(
                        row.wrapping_add(g as usize),
                        [0.0, 0.0, 0.0, st.mean],
                    );
                }
            }
        }
    }
}

params!(
    /// `folded_layer_norm(eps)`.
    FoldedLayerNormParams {
        /// Statistics of A's rows as [`RowMoments`] wrote them.
        stats: u64,
        /// `Σ_{k ∈ g} γ[k]·W[k, c]`, f32, one row of N per group g of 64 K columns.
        colsum: u64,
        /// `Σ_k β[k]·W[k, c] + b[c]`, f32, one per output column.
        offset: u64,
        /// Groups per row of the statistics matrix.
        ld: u32,
        /// Groups a row's statistics merge: `ceil(K / 64)`.
        groups: u32,
        /// ε added to the variance.
        eps: f32,
        /// Leading dimension of `colsum`, elements.
        colsum_ld: u32,
    }
);

/// `folded_layer_norm(eps)`: the consumer half of a deferred LayerNorm. A holds the stored
/// `h′ = h − t_g` ([`RowMoments`]: each group g of a row less its tile's shift) and B is
/// `diag(γ)·W`, so the accumulator is `Σ_k h′[k]·γ[k]·W[k, c]`, and
/// `LayerNorm(h)·W + b = rstd·(acc + Σ_g ((t_g − t_0) − μ)·colsum_g[c]) + offset[c]`, with μ
/// (relative to the row's first shift t_0) and `rstd = 1/√(σ² + ε)` merged from the row's
/// groups (biased variance). Every term is of the size of the row's spread, not its mean, so
/// nothing cancels (the reference's module docs, `folded_norm`, give the derivation). The
/// first stage of a list: it reads the raw product.
#[derive(Clone, Copy, Debug, Default)]
pub struct FoldedLayerNorm;
impl Stage for FoldedLayerNorm {
    type Params = FoldedLayerNormParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &FoldedLayerNormParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        let f = unsafe { tile_row_factors::<MI>(ctx, p.stats, p.ld, p.groups, p.eps) };
        let interior = acc.interior(ctx);
        for g in 0..p.groups {
            // (t_g − t_0) − μ per row: the group's shift back, less the mean.
            let mut back = [0f32; 16];
            for mi in 0..MI {
                for h in 0..2 {
                    let r = ctx.row_of(mi, h);
                    if r < ctx.m {
                        let t = unsafe { group_shift(p.stats, p.ld, r, g) };
                        let st = f[2 * mi + h];
                        back[2 * mi + h] = (t - st.origin) - st.mean;
                    }
                }
            }
            for ni in 0..NI {
                let c = ctx.col_of(ni);
                if !interior && c >= ctx.n {
                    continue;
                }
                let (c0, c1) = unsafe { load_pair::<f32>(p.colsum, p.colsum_ld, g, c, ctx.n) };
                for mi in 0..MI {
                    for h in 0..2 {
                        let v = &mut acc.v[mi][ni];
                        v[2 * h] = math::fma(back[2 * mi + h], c0, v[2 * h]);
                        v[2 * h + 1] = math::fma(back[2 * mi + h], c1, v[2 * h + 1]);
                    }
                }
            }
        }
        for ni in 0..NI {
            let c = ctx.col_of(ni);
            if !interior && c >= ctx.n {
                continue;
            }
            let (d0, d1) = unsafe { load_pair::<f32>(p.offset, 0, 0, c, ctx.n) };
            for mi in 0..MI {
                for h in 0..2 {
                    let s = f[2 * mi + h].scale;
                    let v = &mut acc.v[mi][ni];
                    v[2 * h] = math::fma(s, v[2 * h], d0);
                    v[2 * h + 1] = math::fma(s, v[2 * h + 1], d1);
                }
            }
        }
    }
}

params!(
    /// `normed_residual(eps)`.
    NormedResidualParams {
        /// The stored (shifted) pre-norm h′, output dtype, M × N.
        ptr: u64,
        /// Its rows' statistics as [`RowMoments`] wrote them.
        stats: u64,
        /// The norm's γ, output dtype, length N.
        gamma: u64,
        /// The norm's β, output dtype, length N.
        beta: u64,
        /// Leading dimension of h, elements.
        ld: u32,
        /// Groups per row of the statistics matrix.
        stats_ld: u32,
        /// Groups a row's statistics merge: `ceil(N / 64)`.
        groups: u32,
        /// ε added to the variance.
        eps: f32,
    }
);

/// `normed_residual(eps)`: `x + LayerNorm(h)[r, c]`, normalizing a deferred LayerNorm's
/// stored `h′ = h − t_g` as it is read: `((h′ + (t_g − t_0)) − μ)·rstd·γ[c] + β[c]`, with g the
/// group of column c and μ, rstd merged from the row's [`RowMoments`] groups: the residual of a
/// post-norm layer whose input norm was deferred.
#[derive(Clone, Copy, Debug, Default)]
pub struct NormedResidual;
impl Stage for NormedResidual {
    type Params = NormedResidualParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &NormedResidualParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        let f = unsafe { tile_row_factors::<MI>(ctx, p.stats, p.stats_ld, p.groups, p.eps) };
        let n = ctx.n;
        for ni in 0..NI {
            let c = ctx.col_of(ni);
            if c >= n {
                continue;
            }
            // A column pair never straddles a group (c is even, groups are 64 wide).
            let g = c / MOMENT_GROUP_COLS;
            let (g0, g1) = unsafe { load_pair::<Out>(p.gamma, 0, 0, c, n) };
            let (b0, b1) = unsafe { load_pair::<Out>(p.beta, 0, 0, c, n) };
            for mi in 0..MI {
                for h in 0..2 {
                    let r = ctx.row_of(mi, h);
                    if r >= ctx.m {
                        continue;
                    }
                    let (x0, x1) = unsafe { load_pair::<Out>(p.ptr, p.ld, r, c, n) };
                    let st = f[2 * mi + h];
                    let back = unsafe { group_shift(p.stats, p.stats_ld, r, g) } - st.origin;
                    let norm = RowFactors {
                        shift: st.mean,
                        scale: st.scale,
                    };
                    let v = &mut acc.v[mi][ni];
                    v[2 * h] += norm.affine(x0 + back, g0, b0);
                    v[2 * h + 1] += norm.affine(x1 + back, g1, b1);
                }
            }
        }
    }
}

/// A row's deferred-LayerNorm factors, merged from its [`RowMoments`] groups.
#[derive(Clone, Copy, Debug, Default)]
struct DeferredRow {
    /// The row's first shift t_0: the origin of `mean` and of the other groups' shifts.
    origin: f32,
    /// The row's mean less `origin`.
    mean: f32,
    /// `1/√(σ² + ε)`.
    scale: f32,
}

/// [`merged_row_factors`] of each of this thread's `2·MI` rows (index `2·mi + h`; rows ≥ M
/// keep zero factors and read nothing).
///
/// # Safety
/// `stats` holds the groups of every row below M.
#[inline(always)]
unsafe fn tile_row_factors<const MI: usize>(
    ctx: &TileCtx,
    stats: u64,
    ld: u32,
    groups: u32,
    eps: f32,
) -> [DeferredRow; 16] {
    let mut f = [DeferredRow::default(); 16];
    for mi in 0..MI {
        for h in 0..2 {
            let r = ctx.row_of(mi, h);
            if r < ctx.m {
                f[2 * mi + h] = unsafe { merged_row_factors(stats, ld, groups, eps, r) };
            }
        }
    }
    f
}

/// The shift group `g` of row `r` was stored less (`ld` groups per row).
///
/// # Safety
/// `stats` holds row `r`'s group `g`.
#[inline(always)]
unsafe fn group_shift(stats: u64, ld: u32, r: u32, g: u32) -> f32 {
    let at = (stats as *const [f32; 4]).wrapping_add(r as usize * ld as usize + g as usize);
    let v = unsafe { crate::arch::global::ld_f32x4(at) };
    v[3]
}

/// Row `r`'s [`DeferredRow`] from its `groups` statistics groups (`ld` per row): each group's
/// mean moved to the row's first shift (`(t_g − t_0) + mean_g`, where nearby shifts subtract
/// exactly), then merged.
///
/// # Safety
/// `stats` holds row `r`'s groups.
#[inline(always)]
unsafe fn merged_row_factors(stats: u64, ld: u32, groups: u32, eps: f32, r: u32) -> DeferredRow {
    let row = (stats as *const [f32; 4]).wrapping_add(r as usize * ld as usize);
    let origin = unsafe { crate::arch::global::ld_f32x4(row) }[3];
    let mut st = Moments::default();
    for g in 0..groups {
        let v = unsafe { crate::arch::global::ld_f32x4(row.wrapping_add(g as usize)) };
        st = st.merge(Moments {
            n: v[0],
            mean: (v[3] - origin) + v[1],
            m2: v[2],
        });
    }
    DeferredRow {
        origin,
        mean: st.mean,
        scale: math::rsqrt(math::div(st.m2, st.n) + eps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn frags_of<const NI: usize>(rows: [&[f32]; 2]) -> [[f32; 4]; NI] {
        let mut f = [[0f32; 4]; NI];
        for (h, row) in rows.iter().enumerate() {
            for ni in 0..NI {
                f[ni][2 * h] = row[2 * ni];
                f[ni][2 * h + 1] = row[2 * ni + 1];
            }
        }
        f
    }

    #[test]
    fn pairwise_row_statistics_are_exact_on_constants_and_close_to_f64() {
        let big = [8.5e37f32; 16];
        let small = [-1234.5f32; 16];
        let f = frags_of::<8>([&big, &small]);
        let (a, b) = (
            Moments::of_row_half(&f, 0, false, true),
            Moments::of_row_half(&f, 1, false, true),
        );
        assert_eq!((a.n, a.mean, a.m2), (16.0, 8.5e37, 0.0));
        assert_eq!((b.n, b.mean, b.m2), (16.0, -1234.5, 0.0));
        let mut x = 0.37f64;
        let row: Vec<f32> = (0..32)
            .map(|i| {
                x = (x * 3.9 * (1.0 - x)).clamp(0.01, 0.99);
                (x * 10.0 - 5.0 + i as f64 * 0.1) as f32
            })
            .collect();
        let f = frags_of::<16>([&row, &row]);
        for squares in [false, true] {
            let vals: Vec<f64> = row
                .iter()
                .map(|&v| if squares { (v * v) as f64 } else { v as f64 })
                .collect();
            let mean = vals.iter().sum::<f64>() / 32.0;
            let m2 = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>();
            let st = Moments::of_row_half(&f, 1, squares, true);
            assert!(
                (st.mean as f64 - mean).abs() < 1e-5 * mean.abs().max(1.0),
                "{squares}"
            );
            assert!((st.m2 as f64 - m2).abs() < 1e-5 * m2, "{squares}");
            let w = moments_of(
                &row.iter()
                    .map(|&v| if squares { v * v } else { v })
                    .collect::<Vec<_>>(),
            );
            assert!((st.m2 - w.m2).abs() <= 1e-5 * w.m2);
            let mean_only = Moments::of_row_half(&f, 1, squares, false);
            assert_eq!(
                (mean_only.n, mean_only.mean, mean_only.m2),
                (32.0, st.mean, 0.0)
            );
        }
        let mut nan_row = [1.0f32; 16];
        nan_row[5] = f32::NAN;
        assert!(
            Moments::of_row_half(&frags_of::<8>([&nan_row, &nan_row]), 0, false, true)
                .mean
                .is_nan()
        );
        assert_eq!(pairwise_sum([1.0f32, 2.0, 3.0]), 6.0);
        assert_eq!(pairwise_sum([1.0f32; 12]), 12.0);
    }

    fn moments_of(xs: &[f32]) -> Moments {
        let mut m = Moments::default();
        for &x in xs {
            m.push(x);
        }
        m
    }

    // Constant rows give exact mean and zero variance (so LayerNorm outputs exactly β),
    // also where a plain f32 sum overflows; merging keeps that.
    #[test]
    fn constant_rows_have_exact_mean_and_zero_m2() {
        for &c in &[1234.0f32, 0.0, 8.5e37, -8.5e37] {
            let a = moments_of(&[c; 100]);
            let b = moments_of(&[c; 284]);
            let m = a.merge(b);
            assert_eq!((m.n, m.mean, m.m2), (384.0, c, 0.0), "constant {c}");
        }
    }

    #[test]
    fn merge_matches_float64_two_pass() {
        let xs: Vec<f32> = (0..997)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.01 - 3.0)
            .collect();
        let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        let m = xs
            .chunks(61)
            .map(moments_of)
            .fold(Moments::default(), Moments::merge);
        assert!((m.mean as f64 - mean).abs() < 1e-5);
        assert!(((m.m2 / m.n) as f64 - var).abs() / var < 1e-5);
    }

    #[test]
    fn nan_poisons_only_its_statistics() {
        let m = moments_of(&[1.0, f32::NAN, 2.0]);
        assert!(m.mean.is_nan());
        let ok = moments_of(&[1.0, 2.0]);
        assert_eq!(ok.mean, 1.5);
    }
}
