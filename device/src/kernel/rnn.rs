//! A weight-stationary LSTM loop: the persistent-RNN idea (Diamos et al., "Persistent RNNs:
//! Stashing Recurrent Weights On-Chip", ICML'16) as a device-side loop. Each warp owns one
//! hidden unit u: its four gate rows of `W = [W_ih | W_hh]` (4 × 2H bf16) stay in shared
//! memory for the whole launch, so a step reads only `[x_t | h_{t−1}]` (B × 2H) from L2. The
//! input half `x_t·W_ihᵀ` does not depend on the recurrence and is computed *before* the step's
//! wait; only `h_{t−1}·W_hhᵀ` (H MACs per gate and row) follows it. Steps are separated by one
//! epoch-indexed counter: step s of a launch waits until every CTA has finished step s − 1.
//!
//! Layout as `fused_gemm::control::LstmLoop`: `x` holds blocks of B rows × 2H bf16, block t is
//! `[x_t | h_{t−1}]`, step t writes h_t into block t + 1's right half; `c` holds f32 slots of
//! B × H, slot t is c_{t−1}; gate rows interleaved per unit (row 4u + q, q = i, f, g, o).
//! The arithmetic of a step does not depend on where the launch started (`t0`), so running T
//! steps in one launch and T launches of one step give the same bits.

use crate::arch::atomic::{atomic_add_acq_rel_u32, load_acquire_u32};
use crate::arch::global;
use crate::arch::shared::dynamic_shared_base;
use crate::arch::sync::{sync_threads, thread_fence};
use crate::arch::thread::{block_idx_x, grid_dim_x, thread_idx_x};
use crate::arch::warp::warp_sum_f32;
use crate::kernel::persistent::SPIN_LIMIT;
use crate::math;
use crate::params::KernelParam;
use crate::types::{Bf16, Element};

/// Hidden units (warps) per CTA.
pub const UNITS_PER_CTA: u32 = 8;
/// Threads per CTA.
pub const THREADS: u32 = UNITS_PER_CTA * 32;
/// Largest hidden size (a CTA's weights then take 64 KB of shared memory).
pub const MAX_HIDDEN: u32 = 512;

/// Dynamic shared memory of a CTA for hidden size `hidden`, bytes: its units' 4 × 2H weights.
pub const fn smem_bytes(hidden: u32) -> u32 {
    UNITS_PER_CTA * 4 * 2 * hidden * 2
}

/// Kernel parameter of [`lstm_stationary`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LstmStationaryArgs {
    /// `[x_t | h_{t−1}]` blocks, bf16 (see the module docs).
    pub x: u64,
    /// Cell-state slots, f32.
    pub c: u64,
    /// W (4H × 2H bf16, gate rows interleaved per unit).
    pub w: u64,
    /// Bias (4H bf16).
    pub bias: u64,
    /// Two `u32`: the step counter and the done counter, zero before the launch (the last CTA
    /// zeroes them again).
    pub counters: u64,
    /// Batch B (≤ the entry point's `B`).
    pub batch: u32,
    /// Hidden size H: a multiple of 64, at most [`MAX_HIDDEN`]; grid = H / [`UNITS_PER_CTA`].
    pub hidden: u32,
    /// First step.
    pub t0: u32,
    /// Steps to run.
    pub trips: u32,
}

unsafe impl KernelParam for LstmStationaryArgs {}

/// `ld.relaxed.gpu.global.b32`: another CTA's h, ordered after the step's acquire and barrier.
#[inline(always)]
unsafe fn ld_relaxed_u32(p: *const u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let v: u32;
        core::arch::asm!("ld.relaxed.gpu.global.b32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p);
        v
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = p;
        unreachable!("device only")
    }
}

/// Two bf16 in a word, widened.
#[inline(always)]
fn unpack(w: u32) -> (f32, f32) {
    (f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000))
}

/// Adds `Σ_k a[k]·W[q][k]` over this lane's k pairs of one half (H columns) to `acc[q]`:
/// `a` the row's half in global memory, `w` this warp's weights for that half (row stride 2H
/// elements), `relaxed` for h written by other CTAs.
#[inline(always)]
unsafe fn dot_half(acc: &mut [f32; 4], a: *const u32, w: *const u32, h: u32, relaxed: bool) {
    let lane = thread_idx_x() % 32;
    let mut k = lane;
    while k < h / 2 {
        let av = if relaxed {
            ld_relaxed_u32(a.add(k as usize))
        } else {
            global::ld_u32(a.add(k as usize))
        };
        let (a0, a1) = unpack(av);
        let mut q = 0;
        while q < 4 {
            let (w0, w1) = unpack(*w.add((q * h + k) as usize));
            acc[q as usize] += a0 * w0 + a1 * w1;
            q += 1;
        }
        k += 32;
    }
}

/// Runs steps `t0 .. t0 + trips` of the LSTM (see the [module docs](self)); `B` is the largest
/// batch the registers hold.
///
/// Launch: grid `H / UNITS_PER_CTA` CTAs (all co-resident), block [`THREADS`], dynamic shared
/// memory [`smem_bytes`]`(H)`.
///
/// # Safety
/// Buffers as described for steps `t0 .. t0 + trips`, `batch ≤ B`, H a multiple of 64 at most
/// [`MAX_HIDDEN`], every CTA co-resident, counters zero.
#[inline(always)]
pub unsafe fn lstm_stationary<const B: usize>(p: &LstmStationaryArgs) {
    let tid = thread_idx_x();
    let (lane, warp) = (tid % 32, tid / 32);
    let h = p.hidden;
    let u = block_idx_x() * UNITS_PER_CTA + warp;
    // This CTA's gate rows are consecutive in W: 4·UNITS_PER_CTA rows of 2H.
    let smem = dynamic_shared_base() as *mut u32;
    let words = UNITS_PER_CTA * 4 * h;
    let src = (p.w as *const u32).add((block_idx_x() * UNITS_PER_CTA * 4 * h) as usize);
    let mut i = tid;
    while i < words {
        *smem.add(i as usize) = global::ld_u32(src.add(i as usize));
        i += THREADS;
    }
    sync_threads();
    // Warp `warp`'s rows q = 0..4, each 2H bf16 = H words: [W_ih row | W_hh row].
    let w = smem.add((warp * 4 * h) as usize) as *const u32;
    let mut bias = [0.0f32; 4];
    let mut c = [0.0f32; B];
    if lane == 0 {
        let mut q = 0;
        while q < 4 {
            bias[q] = Bf16::load_global((p.bias as *const Bf16).add((4 * u) as usize + q));
            q += 1;
        }
        let mut r = 0;
        while r < B {
            if (r as u32) < p.batch {
                let slot = (p.t0 as usize * p.batch as usize + r) * h as usize + u as usize;
                c[r] = global::ld_f32((p.c as *const f32).add(slot));
            }
            r += 1;
        }
    }
    let counters = p.counters as *mut u32;
    let row_words = h as usize; // 2H bf16
    let mut s = 0;
    while s < p.trips {
        let t = (p.t0 + s) as usize;
        let block = (p.x as *const u32).add(t * p.batch as usize * row_words);
        let mut acc = [[0.0f32; 4]; B];
        // The input half first: it does not wait for the previous step.
        let mut r = 0;
        while r < B {
            if (r as u32) < p.batch {
                dot_half(&mut acc[r], block.add(r * row_words), w, h, false);
            }
            r += 1;
        }
        if s > 0 {
            if tid == 0 {
                let target = s * grid_dim_x();
                let mut polls = 0u32;
                while load_acquire_u32(counters) < target {
                    polls += 1;
                    if polls >= SPIN_LIMIT {
                        crate::arch::trap();
                    }
                }
            }
            sync_threads();
        }
        r = 0;
        while r < B {
            if (r as u32) < p.batch {
                let hrow = block.add(r * row_words + (h / 2) as usize);
                dot_half(&mut acc[r], hrow, w.add((h / 2) as usize), h, true);
            }
            r += 1;
        }
        r = 0;
        while r < B {
            if (r as u32) < p.batch {
                let g = [
                    warp_sum_f32(acc[r][0]) + bias[0],
                    warp_sum_f32(acc[r][1]) + bias[1],
                    warp_sum_f32(acc[r][2]) + bias[2],
                    warp_sum_f32(acc[r][3]) + bias[3],
                ];
                if lane == 0 {
                    let (ig, fg, gg, og) = (
                        math::sigmoid(g[0]),
                        math::sigmoid(g[1]),
                        math::tanh(g[2]),
                        math::sigmoid(g[3]),
                    );
                    let cv = fg * c[r] + ig * gg;
                    c[r] = cv;
                    let hv = og * math::tanh(cv);
                    let out = (t + 1) * p.batch as usize + r;
                    global::st_f32((p.c as *mut f32).add(out * h as usize + u as usize), cv);
                    Bf16::store_global(
                        (p.x as *mut Bf16).add(out * 2 * h as usize + (h + u) as usize),
                        hv,
                    );
                }
            }
            r += 1;
        }
        sync_threads();
        if tid == 0 {
            thread_fence();
            atomic_add_acq_rel_u32(counters, 1);
        }
        s += 1;
    }
    if tid == 0 {
        thread_fence();
        if atomic_add_acq_rel_u32(counters.add(1), 1) == grid_dim_x() - 1 {
            global::st_u32(counters, 0);
            global::st_u32(counters.add(1), 0);
        }
    }
}
