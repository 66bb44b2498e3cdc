//! Unfused element-wise and row kernels: what runs after a plain GEMM when the epilogue is not
//! fused (the "unfused" baseline of the benchmarks, and a building block of CPU-free tests).
//!
//! Storage is any [`Element`] (f32, bf16, f16); all arithmetic is f32. Matrices are row-major
//! with a leading dimension in elements; device addresses are passed as `u64` and accessed with
//! explicit `ld.global`/`st.global` (PTX ISA §9.7.9.8, §9.7.9.10), so every access names its
//! state space whatever the caller's pointer provenance.
//!
//! # Work decomposition
//! A row is cut into *units* of [`vec_elems`] elements (16 bytes). A unit is read or written
//! with one 16-byte access when the launcher says every base address and leading dimension
//! involved is 16-byte aligned (`vec != 0`) and the unit lies inside the row; otherwise with
//! one scalar access per element (the last, partial unit of a row always goes that way).
//!
//! - [`bias_act`], [`swiglu`]: `2^lanes_log2` consecutive threads cover consecutive units of
//!   one row (`gridDim.x` covers the units), the rest of the 1-D block covers further rows;
//!   `gridDim.y` strides over rows.
//! - [`layer_norm`], [`rms_norm`], [`rms_scale`]: a *group* of `group` threads (32: one warp per
//!   row; or a multiple of 32 up to 1024: several warps, typically one CTA per row) owns a row.
//!   Thread `t` of a group holds units `t, t + group, …` ([`ROW_SLOTS`] of them) in registers,
//!   so each input element is read from memory once. Statistics are reduced with warp shuffles
//!   and, across warps, through shared memory (16 bytes per warp), in a fixed order.
//!
//! # Row statistics
//! LayerNorm uses per-thread *shifted* sums `S1 = Σ(x − K)`, `S2 = Σ(x − K)²` with `K` the
//! thread's first value (Chan, Golub, LeVeque, "Algorithms for computing the sample variance:
//! analysis and recommendations", 1983), turned into [`Moments`] and merged across threads with
//! Chan's pairwise update. A constant row gives `x − K = 0` everywhere: mean exactly the
//! constant, M2 exactly 0, output exactly β, even at ±8.5e37 where a plain f32 sum overflows.
//! Elements past N are never counted. RMSNorm sums squares in f32 whatever the storage type,
//! so f16 values cannot overflow the sum.

use crate::arch::shared::dynamic_shared_base;
use crate::arch::sync::sync_threads;
use crate::arch::thread::{
    block_dim_x, block_idx_x, block_idx_y, grid_dim_x, grid_dim_y, thread_idx_x,
};
use crate::arch::warp::warp_sum_f32;
use crate::epilogue::stages::Moments;
use crate::math;
use crate::types::Element;
use core::mem::size_of;

/// Activation codes of [`bias_act`] (the const generic `ACT`).
pub mod act {
    /// Identity: bias only.
    pub const NONE: u32 = 0;
    /// max(x, 0).
    pub const RELU: u32 = 1;
    /// GELU with the exact (erf) normal CDF.
    pub const GELU: u32 = 2;
    /// GELU, tanh approximation.
    pub const GELU_TANH: u32 = 3;
    /// x·sigmoid(x).
    pub const SILU: u32 = 4;
}

/// Row operations of [`row_norm`] (the const generic `OP`).
pub mod op {
    /// `y = (s − μ)/√(σ² + ε)·γ + β`, `s = x [+ bias] [+ residual]`.
    pub const LAYER_NORM: u32 = 0;
    /// `y = x/√(mean(x²) + ε)·γ`.
    pub const RMS_NORM: u32 = 1;
    /// `r[row] = 1/√(mean(x²) + ε)` (f32), nothing else written.
    pub const RMS_SCALE: u32 = 2;
}

/// Units a thread of a row group holds in registers: a row of up to `32·ROW_SLOTS` units fits
/// one warp, up to `1024·ROW_SLOTS` units one CTA.
pub const ROW_SLOTS: usize = 4;

/// Elements of `E` in one 16-byte unit (8 for bf16/f16, 4 for f32).
#[inline(always)]
pub const fn vec_elems<E>() -> usize {
    16 / size_of::<E>()
}

/// `act(x)` for an activation code of [`act`].
#[inline(always)]
pub fn activate<const ACT: u32>(x: f32) -> f32 {
    match ACT {
        act::RELU => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        act::GELU => math::gelu_erf(x),
        act::GELU_TANH => math::gelu_tanh(x),
        act::SILU => math::silu(x),
        _ => x,
    }
}

/// Statistics of the first `count` values of `v` by shifted sums (see the module docs):
/// exact mean and zero M2 for constant data, no overflow where the values themselves are finite
/// and their spread is.
#[inline(always)]
pub fn shifted_moments(k: f32, s1: f32, s2: f32, count: f32) -> Moments {
    if count == 0.0 {
        return Moments::default();
    }
    let m2 = s2 - s1 * s1 / count;
    Moments {
        n: count,
        mean: k + s1 / count,
        // Rounding can make S2 − S1²/n slightly negative for nearly constant data.
        m2: if m2 > 0.0 { m2 } else { 0.0 },
    }
}

// ---- work decomposition ----------------------------------------------------------------------

/// Where thread `tid` of CTA `(bx, by)` works in [`bias_act`]/[`swiglu`]: `(unit, first row,
/// row stride)`, for 1-D blocks of `block_dim` threads, `grid_y` CTAs along y and
/// `2^lanes_log2` threads per row.
#[inline(always)]
pub fn elementwise_coords(
    tid: u32,
    (bx, by): (u32, u32),
    block_dim: u32,
    grid_y: u32,
    lanes_log2: u32,
) -> (u32, u32, u32) {
    let lanes = 1u32 << lanes_log2;
    let rows_per_cta = block_dim >> lanes_log2;
    let unit = bx * lanes + (tid & (lanes - 1));
    (
        unit,
        by * rows_per_cta + (tid >> lanes_log2),
        grid_y * rows_per_cta,
    )
}

/// Thread `tid`'s row within its CTA and its index in that row's group of `group` threads, in
/// the row kernels ([`row_norm`]). The thread holds units `t + s·group`, `s < ROW_SLOTS`.
#[inline(always)]
pub fn row_coords(tid: u32, group: u32) -> (u32, u32) {
    let row_in_cta = tid / group;
    (row_in_cta, tid - row_in_cta * group)
}

// ---- global memory -------------------------------------------------------------------------

/// `ld.global.v4.u32`.
#[inline(always)]
unsafe fn ld_v4(addr: u64) -> [u32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b, c, d): (u32, u32, u32, u32);
        core::arch::asm!(
            "ld.global.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            p = in(reg64) addr,
            options(nostack, readonly, preserves_flags)
        );
        [a, b, c, d]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = addr;
        crate::arch::host_unreachable("ld_v4")
    }
}

/// `st.global.v4.u32`.
#[inline(always)]
unsafe fn st_v4(addr: u64, w: [u32; 4]) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!(
        "st.global.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
        p = in(reg64) addr,
        a = in(reg32) w[0], b = in(reg32) w[1], c = in(reg32) w[2], d = in(reg32) w[3],
        options(nostack, preserves_flags)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (addr, w);
        crate::arch::host_unreachable("st_v4")
    }
}

/// `st.global.v2.u32`.
#[inline(always)]
unsafe fn st_v2(addr: u64, w: [u32; 2]) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!(
        "st.global.v2.u32 [{p}], {{{a}, {b}}};",
        p = in(reg64) addr,
        a = in(reg32) w[0], b = in(reg32) w[1],
        options(nostack, preserves_flags)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (addr, w);
        crate::arch::host_unreachable("st_v2")
    }
}

/// Loads one element of `E` at `addr`, widened to f32.
#[inline(always)]
#[cfg_attr(
    not(target_arch = "nvptx64"),
    allow(clippy::extra_unused_type_parameters)
)]
unsafe fn ld_elem<E: Element>(addr: u64) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        if size_of::<E>() == 2 {
            let h: u16;
            core::arch::asm!("ld.global.u16 {h}, [{p}];", h = out(reg16) h, p = in(reg64) addr,
                options(nostack, readonly, preserves_flags));
            E::unpack2(h as u32).0
        } else {
            let x: f32;
            core::arch::asm!("ld.global.f32 {x}, [{p}];", x = out(reg32) x, p = in(reg64) addr,
                options(nostack, readonly, preserves_flags));
            x
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = addr;
        crate::arch::host_unreachable("ld_elem")
    }
}

/// Stores `v` rounded to `E` at `addr`.
#[inline(always)]
#[cfg_attr(
    not(target_arch = "nvptx64"),
    allow(clippy::extra_unused_type_parameters)
)]
unsafe fn st_elem<E: Element>(addr: u64, v: f32) {
    #[cfg(target_arch = "nvptx64")]
    {
        if size_of::<E>() == 2 {
            let h = E::pack2(v, 0.0) as u16;
            core::arch::asm!("st.global.u16 [{p}], {h};", p = in(reg64) addr, h = in(reg16) h,
                options(nostack, preserves_flags));
        } else {
            core::arch::asm!("st.global.f32 [{p}], {x};", p = in(reg64) addr, x = in(reg32) v,
                options(nostack, preserves_flags));
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (addr, v);
        crate::arch::host_unreachable("st_elem")
    }
}

/// `v[i] = f(i, v[i])` for `i < w`, written out so that no loop is left for LLVM to keep rolled:
/// a rolled loop would index the array dynamically and put it in local memory (a stack frame).
#[inline(always)]
fn map_unit(v: &mut [f32; 8], w: usize, f: impl Fn(usize, f32) -> f32) {
    v[0] = f(0, v[0]);
    v[1] = f(1, v[1]);
    v[2] = f(2, v[2]);
    v[3] = f(3, v[3]);
    if w > 4 {
        v[4] = f(4, v[4]);
        v[5] = f(5, v[5]);
        v[6] = f(6, v[6]);
        v[7] = f(7, v[7]);
    }
}

/// `f(i)` for `i < w` (`w` ≤ 8), written out like [`map_unit`].
#[inline(always)]
fn for_unit(w: usize, mut f: impl FnMut(usize)) {
    f(0);
    if w > 1 {
        f(1);
    }
    if w > 2 {
        f(2);
        f(3);
    }
    if w > 4 {
        f(4);
        f(5);
        f(6);
        f(7);
    }
}

/// `f(s)` for each of the [`ROW_SLOTS`] slots, written out like [`map_unit`].
#[inline(always)]
fn for_slots(mut f: impl FnMut(usize)) {
    const { assert!(ROW_SLOTS == 4, "for_slots is written out for 4 slots") };
    f(0);
    f(1);
    f(2);
    f(3);
}

/// Address of element `col` of the row starting at `row`.
#[inline(always)]
fn at<E>(row: u64, col: u32) -> u64 {
    row + col as u64 * size_of::<E>() as u64
}

/// Address of row `r` of a matrix at `base` with leading dimension `ld` (elements).
#[inline(always)]
fn row_addr<E>(base: u64, ld: u32, r: u32) -> u64 {
    base + r as u64 * ld as u64 * size_of::<E>() as u64
}

/// Loads the unit starting at column `col` of the row at address `row` (see the module docs);
/// values at columns ≥ `n` are 0.
#[inline(always)]
unsafe fn load_unit<E: Element>(row: u64, col: u32, n: u32, vec: bool) -> [f32; 8] {
    let w = vec_elems::<E>();
    let mut v = [0.0f32; 8];
    if vec && col + w as u32 <= n {
        let q = ld_v4(at::<E>(row, col));
        if size_of::<E>() == 2 {
            for i in 0..4 {
                let (a, b) = E::unpack2(q[i]);
                v[2 * i] = a;
                v[2 * i + 1] = b;
            }
        } else {
            for i in 0..4 {
                v[i] = f32::from_bits(q[i]);
            }
        }
    } else {
        map_unit(&mut v, w, |i, _| {
            if col + (i as u32) < n {
                ld_elem::<E>(at::<E>(row, col + i as u32))
            } else {
                0.0
            }
        });
    }
    v
}

/// Stores the unit starting at column `col` of the row at address `row`; columns ≥ `n` are not
/// written.
#[inline(always)]
unsafe fn store_unit<E: Element>(row: u64, col: u32, n: u32, vec: bool, v: &[f32; 8]) {
    let w = vec_elems::<E>();
    if vec && col + w as u32 <= n {
        let mut q = [0u32; 4];
        if size_of::<E>() == 2 {
            for i in 0..4 {
                q[i] = E::pack2(v[2 * i], v[2 * i + 1]);
            }
        } else {
            for i in 0..4 {
                q[i] = v[i].to_bits();
            }
        }
        st_v4(at::<E>(row, col), q);
    } else {
        for_unit(w, |i| {
            if col + (i as u32) < n {
                st_elem::<E>(at::<E>(row, col + i as u32), v[i]);
            }
        });
    }
}

// ---- element-wise ---------------------------------------------------------------------------

crate::param_list! {
    /// The parameters of the [`bias_act`] entry points (one per storage type and activation).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct BiasActArgs {
        /// M.
        pub m: u32,
        /// N.
        pub n: u32,
        /// x, M×N (`ldx`).
        pub x: u64,
        /// Leading dimension of x, elements.
        pub ldx: u32,
        /// The bias, N elements, or 0 for none.
        pub bias: u64,
        /// y, M×N (`ldy`); may be `x`.
        pub y: u64,
        /// Leading dimension of y, elements.
        pub ldy: u32,
        /// log2 of the threads that cover one row's units.
        pub lanes_log2: u32,
        /// Nonzero when every access may be 16 bytes wide (see [`bias_act`]).
        pub vec: u32,
    }
}

crate::param_list! {
    /// The parameters of the [`swiglu`] entry points (one per storage type).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct SwigluArgs {
        /// M.
        pub m: u32,
        /// Input columns N (even).
        pub n_in: u32,
        /// x, M×`n_in` (`ldx`), gate and up columns interleaved.
        pub x: u64,
        /// Leading dimension of x, elements.
        pub ldx: u32,
        /// y, M×`n_in/2` (`ldy`).
        pub y: u64,
        /// Leading dimension of y, elements.
        pub ldy: u32,
        /// log2 of the threads that cover one row's units.
        pub lanes_log2: u32,
        /// Nonzero when the wide accesses are allowed (see [`swiglu`]).
        pub vec: u32,
    }
}

/// `y[r, c] = act(x[r, c] + bias[c])` over an M×N matrix; `bias` has length N (one value per
/// column, broadcast down the rows) or is 0 for none. `x` and `y` may be the same matrix
/// (in place: each element is read and written by the same thread).
///
/// Launch: 1-D blocks whose size is a multiple of `2^lanes_log2`; `gridDim.x ≥
/// ceil(units / 2^lanes_log2)` with `units = ceil(N / vec_elems::<E>())`; any `gridDim.y`
/// (rows stride by `gridDim.y · blockDim.x / 2^lanes_log2`).
///
/// # Safety
/// `x` (leading dimension `ldx`) and `y` (`ldy`) must hold M×N elements of `E`, `bias` N of
/// them; `vec != 0` only if `x`, `y`, `bias` are 16-byte aligned and `ldx`, `ldy` are multiples
/// of 16 bytes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn bias_act<E: Element, const ACT: u32>(
    m: u32,
    n: u32,
    x: u64,
    ldx: u32,
    bias: u64,
    y: u64,
    ldy: u32,
    lanes_log2: u32,
    vec: u32,
) {
    let w = vec_elems::<E>();
    let vec = vec != 0;
    let (unit, mut r, stride) = elementwise_coords(
        thread_idx_x(),
        (block_idx_x(), block_idx_y()),
        block_dim_x(),
        grid_dim_y(),
        lanes_log2,
    );
    let units = n.div_ceil(w as u32);
    if unit >= units {
        return;
    }
    let col = unit * w as u32;
    let b = if bias != 0 {
        load_unit::<E>(bias, col, n, vec)
    } else {
        [0.0; 8]
    };
    while r < m {
        let mut v = load_unit::<E>(row_addr::<E>(x, ldx, r), col, n, vec);
        map_unit(&mut v, w, |i, x| activate::<ACT>(x + b[i]));
        store_unit::<E>(row_addr::<E>(y, ldy, r), col, n, vec, &v);
        r += stride;
    }
}

/// SwiGLU on interleaved columns: `y[r, j] = silu(x[r, 2j])·x[r, 2j + 1]` for `j < N/2`, with
/// `x` M×N (`n_in = N`, even) and `y` M×N/2.
///
/// Launch as [`bias_act`], with units counted over the N input columns.
///
/// # Safety
/// `x` must hold M×N elements (leading dimension `ldx`), `y` M×N/2 (`ldy`), not overlapping;
/// `vec != 0` only if `x` and `ldx` are 16-byte aligned and `y` and `ldy` 8-byte aligned.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn swiglu<E: Element>(
    m: u32,
    n_in: u32,
    x: u64,
    ldx: u32,
    y: u64,
    ldy: u32,
    lanes_log2: u32,
    vec: u32,
) {
    let w = vec_elems::<E>();
    let vec = vec != 0;
    let (unit, mut r, stride) = elementwise_coords(
        thread_idx_x(),
        (block_idx_x(), block_idx_y()),
        block_dim_x(),
        grid_dim_y(),
        lanes_log2,
    );
    let units = n_in.div_ceil(w as u32);
    if unit >= units {
        return;
    }
    let col = unit * w as u32;
    let ocol = col / 2;
    while r < m {
        let v = load_unit::<E>(row_addr::<E>(x, ldx, r), col, n_in, vec);
        let mut o = [0.0f32; 4];
        for_unit(w / 2, |j| o[j] = math::silu(v[2 * j]) * v[2 * j + 1]);
        let yr = row_addr::<E>(y, ldy, r);
        if vec && col + w as u32 <= n_in {
            // w/2 outputs = 8 bytes.
            let q = if size_of::<E>() == 2 {
                [E::pack2(o[0], o[1]), E::pack2(o[2], o[3])]
            } else {
                [o[0].to_bits(), o[1].to_bits()]
            };
            st_v2(at::<E>(yr, ocol), q);
        } else {
            for_unit(w / 2, |j| {
                if col + 2 * (j as u32) < n_in {
                    st_elem::<E>(at::<E>(yr, ocol + j as u32), o[j]);
                }
            });
        }
        r += stride;
    }
}

// ---- row reductions -------------------------------------------------------------------------

/// `shfl.sync.idx.b32`: lane `src`'s value.
#[inline(always)]
unsafe fn shfl_idx_f32(v: f32, src: u32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let o: f32;
        core::arch::asm!("shfl.sync.idx.b32 {o}, {v}, {s}, 31, -1;", o = out(reg32) o, v = in(reg32) v, s = in(reg32) src);
        o
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (v, src);
        crate::arch::host_unreachable("shfl_idx_f32")
    }
}

/// The row operation behind [`layer_norm`], [`rms_norm`] and [`rms_scale`]; `OP` is a code of
/// [`op`]. Unused addresses are 0.
///
/// Launch: 1-D blocks of `group · rows_per_cta` threads, `group` a multiple of 32 with
/// `group · ROW_SLOTS ≥ ceil(N / vec_elems::<E>())`; dynamic shared memory of 16 bytes per warp
/// when `group > 32`; any `gridDim.x` (rows stride by `gridDim.x · rows_per_cta`).
///
/// # Safety
/// Every non-zero address must hold its operand: `x` and `y` M×N (leading dimensions `ldx`,
/// `ldy`), `res` M×N (`ldr`), `bias`, `gamma`, `beta` N elements, `rstd` M f32 values. `vec != 0`
/// only if all of them (but `rstd`) and their leading dimensions are 16-byte aligned.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn row_norm<E: Element, const OP: u32>(
    m: u32,
    n: u32,
    x: u64,
    ldx: u32,
    bias: u64,
    res: u64,
    ldr: u32,
    gamma: u64,
    beta: u64,
    eps: f32,
    y: u64,
    ldy: u32,
    rstd_out: u64,
    group: u32,
    vec: u32,
) {
    let w = vec_elems::<E>() as u32;
    let vec = vec != 0;
    let tid = thread_idx_x();
    let lane = tid & 31;
    let warp = tid >> 5;
    let (row_in_cta, t) = row_coords(tid, group);
    let rows_per_cta = block_dim_x() / group;
    let warps_per_group = group >> 5;
    let first_warp = row_in_cta * warps_per_group;
    let scratch = dynamic_shared_base() as *mut [f32; 4];
    let units = n.div_ceil(w);
    let inv_n = 1.0 / n as f32;

    let mut base = block_idx_x() * rows_per_cta;
    let stride = grid_dim_x() * rows_per_cta;
    while base < m {
        let row = base + row_in_cta;
        let live = row < m;
        let mut v = [[0.0f32; 8]; ROW_SLOTS];
        for_slots(|s| {
            let u = t + s as u32 * group;
            if live && u < units {
                let col = u * w;
                v[s] = load_unit::<E>(row_addr::<E>(x, ldx, row), col, n, vec);
                if OP == op::LAYER_NORM {
                    if bias != 0 {
                        let b = load_unit::<E>(bias, col, n, vec);
                        map_unit(&mut v[s], w as usize, |i, x| x + b[i]);
                    }
                    if res != 0 {
                        let rr = load_unit::<E>(row_addr::<E>(res, ldr, row), col, n, vec);
                        map_unit(&mut v[s], w as usize, |i, x| x + rr[i]);
                    }
                }
            }
        });

        if OP == op::LAYER_NORM {
            let k = v[0][0];
            let (mut s1, mut s2, mut cnt) = (0.0f32, 0.0f32, 0.0f32);
            for_slots(|s| {
                let u = t + s as u32 * group;
                for_unit(w as usize, |i| {
                    if live && u < units && u * w + (i as u32) < n {
                        let d = v[s][i] - k;
                        s1 += d;
                        s2 += d * d;
                        cnt += 1.0;
                    }
                });
            });
            let mut st = shifted_moments(k, s1, s2, cnt);
            let mut mask = 16;
            while mask > 0 {
                st = st.merge(st.shfl_xor(mask));
                mask >>= 1;
            }
            // The butterfly merges in a lane-dependent order; take lane 0's result so every
            // element of the row sees the same statistics.
            st = Moments {
                n: shfl_idx_f32(st.n, 0),
                mean: shfl_idx_f32(st.mean, 0),
                m2: shfl_idx_f32(st.m2, 0),
            };
            if warps_per_group > 1 {
                sync_threads();
                if lane == 0 {
                    *scratch.add(warp as usize) = [st.n, st.mean, st.m2, 0.0];
                }
                sync_threads();
                st = Moments::default();
                for wi in 0..warps_per_group {
                    let p = *scratch.add((first_warp + wi) as usize);
                    st = st.merge(Moments {
                        n: p[0],
                        mean: p[1],
                        m2: p[2],
                    });
                }
            }
            let mean = st.mean;
            let rstd = math::rsqrt(st.m2 / st.n + eps);
            if live {
                for_slots(|s| {
                    let u = t + s as u32 * group;
                    if u < units {
                        let col = u * w;
                        let g = load_unit::<E>(gamma, col, n, vec);
                        let b = load_unit::<E>(beta, col, n, vec);
                        let mut o = v[s];
                        map_unit(&mut o, w as usize, |i, x| (x - mean) * rstd * g[i] + b[i]);
                        store_unit::<E>(row_addr::<E>(y, ldy, row), col, n, vec, &o);
                    }
                });
            }
        } else {
            // Elements past N were loaded as 0 and add nothing.
            let mut ss = 0.0f32;
            for_slots(|s| for_unit(w as usize, |i| ss += v[s][i] * v[s][i]));
            ss = warp_sum_f32(ss);
            if warps_per_group > 1 {
                sync_threads();
                if lane == 0 {
                    *scratch.add(warp as usize) = [ss, 0.0, 0.0, 0.0];
                }
                sync_threads();
                ss = 0.0;
                for wi in 0..warps_per_group {
                    ss += (*scratch.add((first_warp + wi) as usize))[0];
                }
            }
            let rstd = math::rsqrt(ss * inv_n + eps);
            if live {
                if OP == op::RMS_SCALE {
                    if t == 0 {
                        st_elem::<f32>(rstd_out + row as u64 * 4, rstd);
                    }
                } else {
                    for_slots(|s| {
                        let u = t + s as u32 * group;
                        if u < units {
                            let col = u * w;
                            let g = load_unit::<E>(gamma, col, n, vec);
                            let mut o = v[s];
                            map_unit(&mut o, w as usize, |i, x| x * rstd * g[i]);
                            store_unit::<E>(row_addr::<E>(y, ldy, row), col, n, vec, &o);
                        }
                    });
                }
            }
        }
        base += stride;
    }
}

crate::param_list! {
    /// The parameters of the [`layer_norm`] entry points (one per storage type).
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    pub struct LayerNormArgs {
        /// M.
        pub m: u32,
        /// N.
        pub n: u32,
        /// x, M×N (`ldx`).
        pub x: u64,
        /// Leading dimension of x, elements.
        pub ldx: u32,
        /// The bias, N elements, or 0 for none.
        pub bias: u64,
        /// The residual, M×N (`ldr`), or 0 for none.
        pub res: u64,
        /// Leading dimension of the residual, elements.
        pub ldr: u32,
        /// γ, N elements.
        pub gamma: u64,
        /// β, N elements.
        pub beta: u64,
        /// ε, added to the variance.
        pub eps: f32,
        /// y, M×N (`ldy`).
        pub y: u64,
        /// Leading dimension of y, elements.
        pub ldy: u32,
        /// Threads per row (a multiple of 32).
        pub group: u32,
        /// Nonzero when every access may be 16 bytes wide (see [`row_norm`]).
        pub vec: u32,
    }
}

crate::param_list! {
    /// The parameters of the [`rms_norm`] entry points (one per storage type).
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    pub struct RmsNormArgs {
        /// M.
        pub m: u32,
        /// N.
        pub n: u32,
        /// x, M×N (`ldx`).
        pub x: u64,
        /// Leading dimension of x, elements.
        pub ldx: u32,
        /// γ, N elements.
        pub gamma: u64,
        /// ε, added to the mean square.
        pub eps: f32,
        /// y, M×N (`ldy`).
        pub y: u64,
        /// Leading dimension of y, elements.
        pub ldy: u32,
        /// Threads per row (a multiple of 32).
        pub group: u32,
        /// Nonzero when every access may be 16 bytes wide (see [`row_norm`]).
        pub vec: u32,
    }
}

crate::param_list! {
    /// The parameters of the [`rms_scale`] entry points (one per storage type).
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    pub struct RmsScaleArgs {
        /// M.
        pub m: u32,
        /// N.
        pub n: u32,
        /// x, M×N (`ldx`).
        pub x: u64,
        /// Leading dimension of x, elements.
        pub ldx: u32,
        /// ε, added to the mean square.
        pub eps: f32,
        /// The per-row inverse RMS, M f32 values.
        pub rstd: u64,
        /// Threads per row (a multiple of 32).
        pub group: u32,
        /// Nonzero when every access may be 16 bytes wide (see [`row_norm`]).
        pub vec: u32,
    }
}

/// LayerNorm over each row of `s = x + bias + residual` (either may be 0 for none):
/// `y[r, c] = (s[r, c] − μ_r)/√(σ²_r + ε)·γ[c] + β[c]`, biased variance. `y` may be `x` or the
/// residual (in place). Launch and safety as [`row_norm`].
///
/// # Safety
/// See [`row_norm`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn layer_norm<E: Element>(
    m: u32,
    n: u32,
    x: u64,
    ldx: u32,
    bias: u64,
    res: u64,
    ldr: u32,
    gamma: u64,
    beta: u64,
    eps: f32,
    y: u64,
    ldy: u32,
    group: u32,
    vec: u32,
) {
    row_norm::<E, { op::LAYER_NORM }>(
        m, n, x, ldx, bias, res, ldr, gamma, beta, eps, y, ldy, 0, group, vec,
    )
}

/// RMSNorm over each row: `y[r, c] = x[r, c]/√(mean_c x[r, c]² + ε)·γ[c]`. `y` may be `x`.
/// Launch and safety as [`row_norm`].
///
/// # Safety
/// See [`row_norm`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn rms_norm<E: Element>(
    m: u32,
    n: u32,
    x: u64,
    ldx: u32,
    gamma: u64,
    eps: f32,
    y: u64,
    ldy: u32,
    group: u32,
    vec: u32,
) {
    row_norm::<E, { op::RMS_NORM }>(m, n, x, ldx, 0, 0, 0, gamma, 0, eps, y, ldy, 0, group, vec)
}

/// Per-row inverse RMS only: `r[row] = 1/√(mean_c x[row, c]² + ε)` as f32 (CODA's
/// `diag(r)` for the next GEMM's row scale). Launch and safety as [`row_norm`].
///
/// # Safety
/// See [`row_norm`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn rms_scale<E: Element>(
    m: u32,
    n: u32,
    x: u64,
    ldx: u32,
    eps: f32,
    rstd: u64,
    group: u32,
    vec: u32,
) {
    row_norm::<E, { op::RMS_SCALE }>(m, n, x, ldx, 0, 0, 0, 0, 0, eps, 0, 0, rstd, group, vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments_by_shifted_sums(xs: &[f32]) -> Moments {
        let k = xs[0];
        let (mut s1, mut s2) = (0.0f32, 0.0f32);
        for &x in xs {
            s1 += x - k;
            s2 += (x - k) * (x - k);
        }
        shifted_moments(k, s1, s2, xs.len() as f32)
    }

    // A constant row's statistics are exact (mean the constant, M2 = 0), per thread and merged.
    #[test]
    fn shifted_sums_are_exact_for_constant_rows() {
        for &c in &[1234.0f32, 0.0, 8.5e37, -8.5e37, 300.0] {
            let a = moments_by_shifted_sums(&[c; 32]);
            let b = moments_by_shifted_sums(&[c; 17]);
            let m = a.merge(b);
            assert_eq!((m.n, m.mean, m.m2), (49.0, c, 0.0), "constant {c}");
        }
        assert_eq!(shifted_moments(5.0, 0.0, 0.0, 0.0), Moments::default());
    }

    #[test]
    fn shifted_sums_match_float64_two_pass() {
        let xs: std::vec::Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 1009) as f32 * 0.013 + 100.0)
            .collect();
        let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / 1000.0;
        let var = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / 1000.0;
        let m = xs
            .chunks(32)
            .map(moments_by_shifted_sums)
            .fold(Moments::default(), Moments::merge);
        assert!((m.mean as f64 - mean).abs() < 1e-4, "{} vs {mean}", m.mean);
        assert!(((m.m2 / m.n) as f64 - var).abs() / var < 1e-4);
    }

    // The codes map to the right GELU variant (erf and tanh differ by up to ~4e-4).
    #[test]
    fn activation_codes_pick_the_named_function() {
        assert_eq!(activate::<{ act::NONE }>(-2.0), -2.0);
        assert_eq!(activate::<{ act::RELU }>(-2.0), 0.0);
        assert_eq!(activate::<{ act::RELU }>(3.0), 3.0);
        assert!((activate::<{ act::GELU }>(-1.5) - -0.100_210_8).abs() < 1e-6);
        assert!((activate::<{ act::GELU_TANH }>(-1.5) - -0.100_428_4).abs() < 1e-6);
        assert!((activate::<{ act::SILU }>(1.0) - 0.731_058_6).abs() < 1e-6);
        assert_eq!(vec_elems::<f32>(), 4);
        assert_eq!(vec_elems::<crate::types::Bf16>(), 8);
    }
}
