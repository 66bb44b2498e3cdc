//! Masked mean pooling + L2 normalization (sentence-transformers' `Pooling(mean)` then
//! `Normalize`): `e_b = m_b / max(‖m_b‖₂, 1e-12)` with `m_b = (1/len_b)·Σ_{t < len_b} h[b·T + t]`.
//!
//! One CTA of [`POOL_THREADS`] threads per sequence. With `nc = ceil(d/4)` column chunks, thread
//! `tid` sums chunk `tid % nc` over the rows `t ≡ tid / nc (mod 256 / nc)`: every thread has
//! work even for small d, and consecutive threads read consecutive chunks of a row. Group sums
//! are combined in shared memory in group order. The norm is computed as `a·‖m/a‖` with
//! `a = max|m_i|` (two CTA reductions: butterfly shuffles per warp, then warps in order through
//! shared memory), so squares neither overflow nor depend on reduction order across runs.

use super::{chunk_aligned, load4};
use crate::arch::shared::dynamic_shared_base;
use crate::arch::sync::sync_threads;
use crate::arch::thread::{block_idx_x, lane_id, thread_idx_x, warp_id};
use crate::arch::warp::shfl_xor_f32;
use crate::math;
use crate::types::Element;

/// Threads per CTA.
pub const POOL_THREADS: u32 = 256;
/// Largest hidden size: one 4-element chunk per thread.
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

/// Arguments of [`mean_pool_l2`].
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

/// The pooling kernel body; see the [module docs](self). Launch: grid `B`, block
/// [`POOL_THREADS`], [`POOL_SMEM_BYTES`] of dynamic shared memory.
///
/// # Safety
/// Pointers valid for the extents in [`PoolArgs`]; `hidden_size ≤ POOL_MAX_HIDDEN`; the launch
/// shape above.
#[inline(always)]
pub unsafe fn mean_pool_l2<E: Element>(a: &PoolArgs<E>) {
    let b = block_idx_x();
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
    let tid = thread_idx_x();
    let groups = POOL_THREADS / nc;
    let cc = tid % nc;
    let g = tid / nc;
    let c = 4 * cc;
    let vector = d % 4 == 0 && chunk_aligned(a.hidden);
    let base = a
        .hidden
        .add(b as usize * a.seq_len as usize * d as usize + c as usize);

    let mut sum = [0.0f32; 4];
    if g < groups {
        let mut t = g;
        while t < len {
            let v = load4(base.add(t as usize * d as usize), vector, d - c);
            for e in 0..4 {
                sum[e] += v[e];
            }
            t += groups;
        }
    }
    let part = dynamic_shared_base() as *mut F4;
    let red = part.add(POOL_THREADS as usize) as *mut f32;
    *part.add(tid as usize) = F4(sum);
    sync_threads();

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
    // ‖m‖ = a·‖m/a‖ with a = max|m_i|: no overflow of the squares for large hidden values.
    let amax = cta_reduce(amax, red, |x, y| x.max(y));
    let scale = if amax > 0.0 { 1.0 / amax } else { 0.0 };
    let mut sq = 0.0f32;
    for x in mean {
        sq += (x * scale) * (x * scale);
    }
    let norm = amax * math::sqrt(cta_reduce(sq, red.add(POOL_WARPS as usize), |x, y| x + y));
    let inv = 1.0 / norm.max(POOL_NORM_EPS);
    if tid < nc {
        let out = a.out.add(b as usize * d as usize + c as usize);
        for e in 0..4 {
            if c + (e as u32) < d {
                *out.add(e) = mean[e] * inv;
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
unsafe fn cta_reduce(mut v: f32, scratch: *mut f32, op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v = op(v, shfl_xor_f32(v, m));
        m >>= 1;
    }
    if lane_id() == 0 {
        *scratch.add(warp_id() as usize) = v;
    }
    sync_threads();
    let mut r = *scratch;
    for w in 1..POOL_WARPS {
        r = op(r, *scratch.add(w as usize));
    }
    r
}
