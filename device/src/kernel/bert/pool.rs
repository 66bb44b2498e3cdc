//! Masked mean pooling + L2 normalization (sentence-transformers' `Pooling(mean)` then
//! `Normalize`): `e_b = m_b / max(‖m_b‖₂, 1e-12)` with `m_b = (1/len_b)·Σ_{t < len_b} h[b·T + t]`.
//!
//! One CTA of [`POOL_THREADS`] threads per sequence. With `nc = ceil(d/4)` column chunks, thread
//! `tid` sums chunk `tid % nc` over the rows `t ≡ tid / nc (mod G)`, `G = 512 / nc`: every thread has
//! work even for small d, consecutive threads read consecutive chunks of a row, and each
//! thread keeps four row loads in flight. Group sums
//! are combined in shared memory in group order. The normalization divides by `a = max|m_i|`
//! first (two CTA reductions: butterfly shuffles per warp, then warps in order through shared
//! memory), so neither the squares nor the norm overflow, and results are deterministic.

use super::{Exec, chunk_aligned, fma, load4};
use crate::math;
use crate::types::Element;

/// Threads per CTA.
pub const POOL_THREADS: u32 = 512;
/// Largest hidden size: one 4-element chunk per thread (2048).
pub const POOL_MAX_HIDDEN: u32 = 4 * POOL_THREADS;
/// Warps per CTA.
const POOL_WARPS: u32 = POOL_THREADS / 32;
/// Dynamic shared memory per CTA, bytes: one f32x4 partial sum per thread, then two f32 per
/// warp (max and sum-of-squares reductions).
pub const POOL_SMEM_BYTES: u32 = POOL_THREADS * 16 + 2 * POOL_WARPS * 4;
/// The norm's lower bound (`torch.nn.functional.normalize`'s default eps).
pub const POOL_NORM_EPS: f32 = 1e-12;

/// f32x4 in shared memory, 16-byte aligned.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct F4([f32; 4]);

crate::param_list! {
    /// Arguments of [`mean_pool_l2`], and the parameters of its entry points (one per storage
    /// type).
    #[derive(Clone, Copy)]
    pub struct PoolArgs<E> {
        /// Hidden states, `[B·T, d]` row-major.
        pub hidden: *const E,
        /// Sequence lengths, `[B]`, each in `1..=T`.
        pub lengths: *const u32,
        /// B.
        pub batch: u32,
        /// T.
        pub seq_len: u32,
        /// d, `1..=POOL_MAX_HIDDEN`.
        pub hidden_size: u32,
        /// Sentence embeddings, `[B, d]` f32.
        pub out: *mut f32,
    }
}

/// The pooling kernel body; see the [module docs](self). Launch: grid `B`, block
/// [`POOL_THREADS`], [`POOL_SMEM_BYTES`] of dynamic shared memory.
///
/// # Safety
/// Pointers valid for the extents in [`PoolArgs`]; `hidden_size ≤ POOL_MAX_HIDDEN`; the launch
/// shape above.
#[inline(always)]
pub unsafe fn mean_pool_l2<E: Element, X: Exec>(a: &PoolArgs<E>) {
    let b = X::block_idx_x();
    let d = a.hidden_size;
    if b >= a.batch || d == 0 || d > POOL_MAX_HIDDEN {
        return;
    }
    let nc = d.div_ceil(4);
    if nc == 0 {
        // Unreachable (d ≥ 1); lets the compiler drop the division-by-zero checks below.
        return;
    }
    let len = (*a.lengths.add(b as usize)).min(a.seq_len);
    let tid = X::thread_idx_x();
    let groups = POOL_THREADS / nc;
    let cc = tid % nc;
    let g = tid / nc;
    let c = 4 * cc;
    let vector = d.is_multiple_of(4) && chunk_aligned(a.hidden);
    let base = a
        .hidden
        .add(b as usize * a.seq_len as usize * d as usize + c as usize);

    let mut sum = [0.0f32; 4];
    if g < groups {
        // Rows t, t + G, t + 2G, t + 3G per step: four independent loads in flight.
        let mut t = g;
        while t < len {
            let mut v = [[0.0f32; 4]; 4];
            unrolled!(u in [0, 1, 2, 3] {
                let tu = t + u as u32 * groups;
                if tu < len {
                    v[u] = load4(base.add(tu as usize * d as usize), vector, d - c);
                }
            });
            unrolled!(u in [0, 1, 2, 3] {
                for e in 0..4 {
                    sum[e] += v[u][e];
                }
            });
            t += 4 * groups;
        }
    }
    let part = X::dynamic_shared_base() as *mut F4;
    let red = part.add(POOL_THREADS as usize) as *mut f32;
    *part.add(tid as usize) = F4(sum);
    X::sync_threads();

    let mut mean = [0.0f32; 4];
    let mut amax = 0.0f32;
    if tid < nc {
        let mut total = [0.0f32; 4];
        for gg in 0..groups {
            let v = (*part.add((gg * nc + cc) as usize)).0;
            for e in 0..4 {
                total[e] += v[e];
            }
        }
        let inv_len = if len > 0 { 1.0 / len as f32 } else { 0.0 };
        for e in 0..4 {
            if c + (e as u32) < d {
                mean[e] = total[e] * inv_len;
                amax = amax.max(mean[e].abs());
            }
        }
    }
    // m/‖m‖ = u/‖u‖ with u = m/a, a = max|m_i|: neither the squares nor the norm can overflow
    // (‖m‖ itself may exceed f32's range when every |m_i| ≤ a does not). The ε guard becomes
    // max(‖u‖, ε/a); a = 0 gives u = 0 and ε/a = ∞, so a zero output, not NaN.
    let amax = cta_reduce::<X>(amax, red, |x, y| x.max(y));
    let mut u = [0.0f32; 4];
    let mut sq = 0.0f32;
    if amax > 0.0 {
        for e in 0..4 {
            u[e] = mean[e] / amax;
            sq = fma(u[e], u[e], sq);
        }
    }
    let norm_u = math::sqrt(cta_reduce::<X>(sq, red.add(POOL_WARPS as usize), |x, y| {
        x + y
    }));
    let denom = norm_u.max(POOL_NORM_EPS / amax);
    if tid < nc {
        let out = a.out.add(b as usize * d as usize + c as usize);
        for (e, &x) in u.iter().enumerate() {
            if c + (e as u32) < d {
                *out.add(e) = x / denom;
            }
        }
    }
}

/// Reduces `v` over the CTA with the associative, commutative `op`: butterfly within each warp,
/// then warp results through `scratch` (`POOL_WARPS` f32) in warp order. Every thread gets the
/// result.
///
/// # Safety
/// All threads of the CTA must call it; `scratch` must be shared memory used by no one else.
#[inline(always)]
unsafe fn cta_reduce<X: Exec>(mut v: f32, scratch: *mut f32, op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v = op(v, X::shfl_xor_f32(v, m));
        m >>= 1;
    }
    let tid = X::thread_idx_x();
    if tid % 32 == 0 {
        *scratch.add((tid / 32) as usize) = v;
    }
    X::sync_threads();
    let mut r = *scratch;
    for w in 1..POOL_WARPS {
        r = op(r, *scratch.add(w as usize));
    }
    r
}
