//! Device-side control flow for persistent programs (Grinder/Cocktailer: Zhang et al.,
//! "Cocktailer: Analyzing and Optimizing Dynamic Control Flow in Deep Learning", OSDI'23):
//! loops and data-dependent branches inside one launch of the wave scheduler's task tables
//! ([`super::persistent`]).
//!
//! # Loops
//! A *loop program* is a persistent program (one iteration's tasks, CTA by CTA, in the wave
//! scheduler's global placement order) that every CTA walks `trips` times. The trip count is a
//! launch parameter or, when [`LoopArgs::trips_ptr`] is not 0, a `u32` read from device memory
//! at kernel start (clamped to [`LoopArgs::max_trips`], the iterations the buffers were built
//! for). Iteration `it` of an operator addresses its A, C and epilogue pointers as
//! `base + it·stride` ([`OpLoop`]): per-step inputs and outputs (h_t feeding step t + 1).
//!
//! Ready counters are *epoch-indexed* and never reset between iterations: the counter of
//! (operator, row block) counts its finished tasks over all iterations, and a [`LoopWait`] at
//! iteration `it` waits for `target + it·step` (`step` = the producer's tasks per row block;
//! `target = step` for a producer of the same iteration, 0 for one of the previous iteration,
//! a loop-carried dependency). Every task of iteration `it` also waits for its own row block's
//! counter to reach `it·step` (the host adds that *self-wait*), so no task of iteration `it`
//! starts before its operator's row block finished iteration `it − 1`: the first time a counter
//! reaches `(it + 1)·step`, every increment came from iterations ≤ `it`, all of them done.
//!
//! Deadlock freedom is the persistent kernel's argument over the order (iteration, global
//! placement index): same-iteration waits name earlier tasks (the scheduler's property),
//! loop-carried and self-waits name tasks of the previous iteration, and every CTA walks its
//! list in that order with no more CTAs than are co-resident.
//!
//! # Branches
//! A *gate* task ([`gate_tile`]) reduces its A operand against a gate vector and writes a
//! predicate (`u32` 1 = run, 0 = skip) and the gate value into device memory. An operator
//! guarded by a gate ([`OpLoop::gate`]) does not wait for that task: it waits for the gate's
//! *inputs* (the host makes them regions the guarded operator reads) and each of its tasks
//! evaluates the same gate itself ([`gate_value`]: the gate task's reduction order, so the same
//! bits). That takes a dependency hand-off (fence, atomic, a counter poll: microseconds) off
//! each guarded block's critical path, for a reduction of one row block per task. A true gate
//! runs the tile; a false one skips it and, when [`OpLoop::copy`] is set, copies the tile of a
//! residual input to C instead, so consumers read fixed addresses whatever the branch. Either
//! way the task signals its ready counter: waiters never hang.
//!
//! At the end, the last CTA zeroes every ready counter (as [`super::persistent`] does), so the
//! next launch starts from zero.

use crate::arch::atomic::{atomic_add_acq_rel_u32, load_acquire_u32};
use crate::arch::global;
use crate::arch::shared::{dynamic_shared_base, shared_addr};
use crate::arch::sync::{nanosleep, sync_threads, sync_warp, thread_fence};
use crate::arch::thread::{block_dim_x, block_idx_x, grid_dim_x, thread_idx_x};
use crate::arch::warp::warp_sum_f32;
use crate::copy::cp_async::{commit_group, cp_async_cg_16, wait_group};
use crate::gemm::{GemmArgs, TileCoord};
use crate::kernel::persistent::{
    Dispatch, EPI_WORDS, INLINE_WAITS, NO_SIGNAL, SPIN_LIMIT, TASK_BYTES,
};
use crate::params::KernelParam;
use crate::types::{Bf16, Element};

/// Longest back-off between polls, nanoseconds.
const MAX_BACKOFF_NS: u32 = 256;

/// A range of ready counters a loop task waits on; at iteration `it` each must reach
/// `target + it·step`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopWait {
    /// Index of the first counter.
    pub first: u32,
    /// Consecutive counters.
    pub count: u32,
    /// Value at iteration 0.
    pub target: u32,
    /// Increase per iteration (the producer's tasks per row block).
    pub step: u32,
}

unsafe impl KernelParam for LoopWait {}

/// One task of a loop program: [`super::persistent::Task`]'s layout, with [`LoopWait`]s and the
/// operator's index into [`LoopArgs::ops`].
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoopTask {
    /// The operator's GEMM arguments at iteration 0.
    pub args: GemmArgs,
    /// Arm index of the entry point.
    pub arm: u32,
    /// Tile row.
    pub tile_m: u32,
    /// Tile column.
    pub tile_n: u32,
    /// K split.
    pub split: u32,
    /// ⌈N/BN⌉.
    pub tiles_n: u32,
    /// Ready counter to increment when done (every iteration), or [`NO_SIGNAL`].
    pub signal: u32,
    /// Number of waits (the first [`INLINE_WAITS`] inline, the rest at
    /// `LoopArgs::waits[waits_overflow..]`).
    pub n_waits: u32,
    /// Index of the first overflow wait.
    pub waits_overflow: u32,
    /// The first waits.
    pub waits: [LoopWait; INLINE_WAITS],
    /// Epilogue parameter words at iteration 0.
    pub epi: [u64; EPI_WORDS],
    /// Index into [`LoopArgs::ops`].
    pub op: u32,
    /// Unused.
    pub _pad: u32,
}

const _: () = assert!(core::mem::size_of::<LoopTask>() == TASK_BYTES as usize);
const _: () = assert!(core::mem::size_of::<LoopWait>() == 16);

/// Byte offset of `args.a` in a [`LoopTask`].
const OFF_A: usize = core::mem::offset_of!(GemmArgs, a);
/// Byte offset of `args.c`.
const OFF_C: usize = core::mem::offset_of!(GemmArgs, c);
/// Byte offset of the epilogue words.
const OFF_EPI: usize = core::mem::offset_of!(LoopTask, epi);

/// Per operator: how its addresses advance per iteration, and its branch guard.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpLoop {
    /// Bytes added to A per iteration.
    pub a_stride: i64,
    /// Bytes added to C per iteration.
    pub c_stride: i64,
    /// Added to each epilogue word per iteration (0 for words that are not addresses).
    pub epi_stride: [i64; EPI_WORDS],
    /// The guarding gate's operands at iteration 0 (`gate.a` = 0: unguarded): A, the gate
    /// vector B, M, K and lda, as [`gate_tile`] reads them.
    pub gate: GemmArgs,
    /// Bytes added to `gate.a` per iteration.
    pub gate_a_stride: i64,
    /// The gate's threshold (the operator runs when `gate > threshold`).
    pub gate_threshold: f32,
    /// Unused.
    pub _pad: u32,
    /// Residual tile source copied to C when the guard skips (`copy` = 1), same dtype as C
    /// (bf16), leading dimension `copy_ld`.
    pub copy_src: u64,
    /// Bytes added to `copy_src` per iteration.
    pub copy_stride: i64,
    /// Leading dimension of `copy_src`, elements.
    pub copy_ld: u32,
    /// 1: copy `copy_src`'s tile to C when skipped; 0: do nothing when skipped.
    pub copy: u32,
    /// Tile rows BM of the operator's arm (for the copy).
    pub bm: u32,
    /// Tile columns BN.
    pub bn: u32,
}

unsafe impl KernelParam for OpLoop {}

/// Kernel parameter of a loop program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopArgs {
    /// All tasks, CTA by CTA ([`LoopTask`] array, 16-byte aligned).
    pub tasks: u64,
    /// `gridDim.x + 1` `u32` offsets into `tasks`.
    pub cta_offsets: u64,
    /// Overflow [`LoopWait`]s.
    pub waits: u64,
    /// `n_counters` ready counters then the done counter, `u32`, zero before the first launch.
    pub counters: u64,
    /// [`OpLoop`] per operator.
    pub ops: u64,
    /// Address of a `u32` trip count, or 0 to use `trips`.
    pub trips_ptr: u64,
    /// Ready counters.
    pub n_counters: u32,
    /// Trip count when `trips_ptr` is 0.
    pub trips: u32,
    /// Iterations the buffers hold: larger trip counts are clamped to it.
    pub max_trips: u32,
    /// Unused.
    pub _pad: u32,
}

unsafe impl KernelParam for LoopArgs {}

/// Dynamic shared memory [`gate_tile`] and [`gate_value`] use, bytes (33 `f32` words, rounded
/// up).
pub const GATE_SMEM_BYTES: u32 = 256;

/// Parameters of a gate task ([`gate_tile`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GateParams {
    /// The predicate is `gate > threshold`.
    pub threshold: f32,
    /// Unused.
    pub _pad: u32,
}

unsafe impl KernelParam for GateParams {}

/// Largest `rows × labels` of an [`exit_head`] (its logits live in shared memory).
pub const MAX_EXIT_LOGITS: u32 = 1024;

/// Kernel parameter of an early-exit head ([`exit_head`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ExitHeadArgs {
    /// Hidden states, bf16: row `r`'s head input is the `d` elements at `x + r·ldx` (the first
    /// token of sequence `r`).
    pub x: u64,
    /// Head weight, `labels × d` bf16 row-major (an `nn.Linear` weight).
    pub w: u64,
    /// Head bias, `labels` bf16.
    pub bias: u64,
    /// Logits out, `rows × labels` f32 row-major.
    pub logits: u64,
    /// Exit state, two `u32`: `[0]` nonzero once a head has exited, `[1]` its layer.
    pub state: u64,
    /// Rows (sequences).
    pub rows: u32,
    /// Hidden size d.
    pub d: u32,
    /// Row stride of `x`, elements.
    pub ldx: u32,
    /// Classes.
    pub labels: u32,
    /// This head's layer.
    pub layer: u32,
    /// 1: exit whatever the confidence (the last layer's head).
    pub last: u32,
    /// Exit when every row's largest softmax probability is ≥ this.
    pub threshold: f32,
    /// Unused.
    pub _pad: u32,
}

unsafe impl KernelParam for ExitHeadArgs {}

/// An early-exit head (DeeBERT: Xin et al., ACL'20): `logits = x_rows·Wᵀ + b`, then per row the
/// largest softmax probability `1 / Σ_j exp(l_j − max_j l)`; when every row's reaches the
/// threshold (or `last`), the exit state becomes `[1, layer]`. Returns at once when a head has
/// already exited, so the logits stay those of the exiting layer. A small GEMM (rows × labels
/// × d) with a row-reduction epilogue: warps take (row, class) pairs in turn, each a dot
/// product over d by lanes then a butterfly sum, so the result has fixed bits. One CTA;
/// `rows·labels·4` bytes of dynamic shared memory.
///
/// # Safety
/// Valid operands as described, `rows·labels ≤ MAX_EXIT_LOGITS`, blockDim.x a multiple of 32;
/// every thread of the only CTA calls it.
#[inline(always)]
pub unsafe fn exit_head(p: &ExitHeadArgs) {
    let state = p.state as *mut u32;
    if load_acquire_u32(state) != 0 {
        return;
    }
    let tid = thread_idx_x();
    let (lane, warp, warps) = (tid % 32, tid / 32, block_dim_x() / 32);
    let logits = dynamic_shared_base() as *mut f32;
    let (x, w, b) = (
        p.x as *const Bf16,
        p.w as *const Bf16,
        p.bias as *const Bf16,
    );
    let pairs = p.rows * p.labels;
    let mut pair = warp;
    while pair < pairs {
        let (r, j) = (pair / p.labels, pair % p.labels);
        let mut acc = 0.0f32;
        let mut k = lane;
        while k < p.d {
            let xv = Bf16::load_global(x.add(r as usize * p.ldx as usize + k as usize));
            let wv = Bf16::load_global(w.add(j as usize * p.d as usize + k as usize));
            acc += xv * wv;
            k += 32;
        }
        let v = warp_sum_f32(acc) + Bf16::load_global(b.add(j as usize));
        if lane == 0 {
            *logits.add(pair as usize) = v;
            global::st_f32((p.logits as *mut f32).add(pair as usize), v);
        }
        pair += warps;
    }
    sync_threads();
    if tid == 0 {
        let mut all = true;
        let mut r = 0;
        while r < p.rows {
            let row = logits.add((r * p.labels) as usize);
            let mut m = *row;
            let mut j = 1;
            while j < p.labels {
                m = m.max(*row.add(j as usize));
                j += 1;
            }
            let mut s = 0.0f32;
            j = 0;
            while j < p.labels {
                s += crate::math::exp(*row.add(j as usize) - m);
                j += 1;
            }
            // NaN logits never count as confident: the negated `>=` is true for NaN.
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            if !(1.0 / s >= p.threshold) {
                all = false;
            }
            r += 1;
        }
        if all || p.last != 0 {
            global::st_u32(state.add(1), p.layer);
            global::st_u32(state, 1);
        }
    }
}

/// Spins until the counter at `p` reaches `target` (acquire); traps after [`SPIN_LIMIT`] polls.
///
/// # Safety
/// `p` must be a valid global `u32`.
#[inline(always)]
unsafe fn wait_counter(p: *const u32, target: u32) {
    let mut polls = 0u32;
    let mut backoff = 8u32;
    while load_acquire_u32(p) < target {
        polls += 1;
        if polls >= SPIN_LIMIT {
            crate::arch::trap();
        }
        nanosleep(backoff);
        if backoff < MAX_BACKOFF_NS {
            backoff *= 2;
        }
    }
}

/// A signed 64-bit global load as two 32-bit loads (8-byte aligned `p`).
///
/// # Safety
/// `p` must be a valid, 8-byte aligned global address.
#[inline(always)]
unsafe fn ld_i64(p: *const i64) -> i64 {
    let q = p as *const u32;
    let lo = global::ld_u32(q) as u64;
    let hi = global::ld_u32(q.add(1)) as u64;
    (lo | (hi << 32)) as i64
}

/// Starts copying task `idx` into header slot `slot` (16 threads, one 16-byte chunk each).
///
/// # Safety
/// `idx` must index the task array; every thread of the CTA calls it.
#[inline(always)]
unsafe fn fetch_task(p: &LoopArgs, idx: u32, slot: u32, header: u32, tid: u32) {
    if tid < TASK_BYTES / 16 {
        let src = p.tasks + idx as u64 * TASK_BYTES as u64 + tid as u64 * 16;
        let dst = shared_addr(dynamic_shared_base()) + header + slot * TASK_BYTES + tid * 16;
        cp_async_cg_16(dst, src, 16);
    }
    commit_group();
}

/// Copies tile (`tile.m`, `tile.n`) of the bf16 matrix at `src` (leading dimension `ld`) to the
/// same tile of C (`args.c`, `args.ldc`), clipped to M × N; split 0 only.
///
/// # Safety
/// Both matrices must be valid M × N bf16 matrices; every thread of the CTA calls it.
#[inline(always)]
unsafe fn copy_tile(args: &GemmArgs, tile: TileCoord, src: u64, ld: u32, bm: u32, bn: u32) {
    if tile.split != 0 {
        return;
    }
    let (r0, c0) = (tile.m * bm, tile.n * bn);
    let mut e = thread_idx_x();
    while e < bm * bn {
        let (r, c) = (r0 + e / bn, c0 + e % bn);
        if r < args.m && c < args.n {
            let v = global::ld_u16((src as *const u16).add(r as usize * ld as usize + c as usize));
            global::st_u16(
                (args.c as *mut u16).add(r as usize * args.ldc as usize + c as usize),
                v,
            );
        }
        e += block_dim_x();
    }
}

/// The gate: `gate = (1/M)·Σ_r Σ_k A[r, k]·B[0, k]` (A M×K bf16 with leading dimension
/// `args.lda`, B the gate vector, 1×K bf16), accumulated in f32 in a fixed order (per thread
/// over k ≡ thread mod blockDim, rows in order; then warps by butterfly; then warps in order),
/// so a grid launch and a persistent task compute the same bits. Thread 0 stores
/// `C[0] = (gate > threshold) as u32` and `C[1] = gate`'s f32 bits (`args.c`: two `u32`).
/// Uses [`GATE_SMEM_BYTES`] of dynamic shared memory at offset 0.
///
/// SkipNet's gates (Wang et al., ECCV'18) are such a linear function of the block input
/// followed by a hard threshold at inference.
///
/// # Safety
/// Valid operands as described; every thread of the CTA calls it (blockDim.x ≤ 1024, a
/// multiple of 32).
#[inline(always)]
pub unsafe fn gate_tile(args: &GemmArgs, p: &GateParams) {
    let gate = gate_value(args);
    if thread_idx_x() == 0 {
        let out = args.c as *mut u32;
        global::st_u32(out, (gate > p.threshold) as u32);
        global::st_u32(out.add(1), gate.to_bits());
    }
}

/// The gate value of [`gate_tile`] (from `args.a`, `args.b`, M, K, lda), returned to every
/// thread of the CTA. Uses [`GATE_SMEM_BYTES`] of dynamic shared memory at offset 0 and ends
/// with a barrier, so the next tile may reuse them.
///
/// # Safety
/// As [`gate_tile`].
#[inline(always)]
pub unsafe fn gate_value(args: &GemmArgs) -> f32 {
    let tid = thread_idx_x();
    let nt = block_dim_x();
    let a = args.a as *const Bf16;
    let b = args.b as *const Bf16;
    let mut acc = 0.0f32;
    let mut r = 0;
    while r < args.m {
        let mut k = tid;
        while k < args.k {
            let x = Bf16::load_global(a.add(r as usize * args.lda as usize + k as usize));
            let g = Bf16::load_global(b.add(k as usize));
            acc += x * g;
            k += nt;
        }
        r += 1;
    }
    let acc = warp_sum_f32(acc);
    let scratch = dynamic_shared_base() as *mut f32;
    if tid.is_multiple_of(32) {
        *scratch.add((tid / 32) as usize) = acc;
    }
    sync_threads();
    if tid == 0 {
        let mut s = 0.0f32;
        let mut w = 0;
        while w < nt / 32 {
            s += *scratch.add(w as usize);
            w += 1;
        }
        *scratch.add(32) = s / args.m.max(1) as f32;
    }
    sync_threads();
    let gate = *scratch.add(32);
    // The scratch is free again for the next task's pipeline.
    sync_threads();
    gate
}

/// Runs this CTA's task list `trips` times (see the [module docs](self)), each task through
/// `D`. `HEADER` is [`super::persistent::header_offset`] of the entry point's tiles.
///
/// Launch: as [`super::persistent::run`] (grid no larger than the co-resident CTAs, dynamic
/// shared memory [`super::persistent::smem_bytes`]).
///
/// # Safety
/// Tables built by the host as described on [`LoopArgs`], [`LoopTask`] and [`OpLoop`]
/// (validated operands at every iteration up to `max_trips`, waits only on earlier tasks of
/// the order (iteration, placement), a self-wait on every signalled task), counters zeroed
/// before the first launch.
#[inline(always)]
pub unsafe fn run_loop<const HEADER: u32, D: Dispatch>(p: &LoopArgs) {
    let tid = thread_idx_x();
    let cta = block_idx_x();
    let offsets = p.cta_offsets as *const u32;
    let begin = global::ld_u32(offsets.add(cta as usize));
    let end = global::ld_u32(offsets.add(cta as usize + 1));
    let counters = p.counters as *mut u32;
    let headers = dynamic_shared_base().add(HEADER as usize);
    let trips = if p.trips_ptr != 0 {
        global::ld_u32(p.trips_ptr as *const u32)
    } else {
        p.trips
    };
    let trips = if trips > p.max_trips {
        p.max_trips
    } else {
        trips
    };
    let per_iter = end - begin;
    // The host keeps tasks × max_trips within u32.
    let total = per_iter * trips;

    if total > 0 {
        fetch_task(p, begin, 0, HEADER, tid);
    }
    let mut q = 0u32;
    let mut i = begin;
    let mut it = 0u32;
    while q < total {
        let slot = q & 1;
        wait_group::<0>();
        sync_threads();
        if q + 1 < total {
            let next = if i + 1 < end { i + 1 } else { begin };
            fetch_task(p, next, slot ^ 1, HEADER, tid);
        }
        let base = headers.add((slot * TASK_BYTES) as usize);
        let hdr = base as *const LoopTask;
        let op = (p.ops as *const OpLoop).add((*hdr).op as usize);
        // Warp 1 moves the addresses to iteration `it` in the header (warp 0 spins meanwhile).
        if it > 0 && tid >= 32 && tid < 32 + 2 + EPI_WORDS as u32 {
            let w = tid - 32;
            let (off, stride) = if w == 0 {
                (OFF_A, ld_i64(&raw const (*op).a_stride))
            } else if w == 1 {
                (OFF_C, ld_i64(&raw const (*op).c_stride))
            } else {
                let e = (w - 2) as usize;
                (
                    OFF_EPI + 8 * e,
                    ld_i64((&raw const (*op).epi_stride as *const i64).add(e)),
                )
            };
            if stride != 0 {
                let word = base.add(off) as *mut u64;
                *word = (*word).wrapping_add((it as i64).wrapping_mul(stride) as u64);
            }
        }
        // The operator's gate operands are immutable: read them before the waits, off the
        // critical path.
        let gate_a = ld_i64(&raw const (*op).gate.a as *const i64) as u64;
        let gate = if gate_a == 0 {
            None
        } else {
            let gs = ld_i64(&raw const (*op).gate_a_stride);
            let args = GemmArgs {
                a: gate_a.wrapping_add((it as i64).wrapping_mul(gs) as u64),
                b: ld_i64(&raw const (*op).gate.b as *const i64) as u64,
                m: global::ld_u32(&raw const (*op).gate.m),
                k: global::ld_u32(&raw const (*op).gate.k),
                lda: global::ld_u32(&raw const (*op).gate.lda),
                ..GemmArgs::default()
            };
            let threshold = f32::from_bits(global::ld_u32(
                &raw const (*op).gate_threshold as *const u32,
            ));
            Some((args, threshold))
        };
        let n_waits = (*hdr).n_waits;
        if tid < 32 {
            let mut j = tid;
            while j < n_waits {
                let w = if (j as usize) < INLINE_WAITS {
                    (*hdr).waits[j as usize]
                } else {
                    let o = (p.waits as *const u32)
                        .add(((*hdr).waits_overflow + j - INLINE_WAITS as u32) as usize * 4);
                    LoopWait {
                        first: global::ld_u32(o),
                        count: global::ld_u32(o.add(1)),
                        target: global::ld_u32(o.add(2)),
                        step: global::ld_u32(o.add(3)),
                    }
                };
                let target = w.target.wrapping_add(it.wrapping_mul(w.step));
                let mut c = 0;
                while c < w.count {
                    wait_counter(counters.add((w.first + c) as usize), target);
                    c += 1;
                }
                j += 32;
            }
            sync_warp();
        }
        // Producers done and ordered before us, header patched, past this barrier.
        sync_threads();
        let args = core::ptr::read(&(*hdr).args);
        let tile = TileCoord {
            m: (*hdr).tile_m,
            n: (*hdr).tile_n,
            split: (*hdr).split,
            tiles_n: (*hdr).tiles_n,
        };
        let arm = (*hdr).arm;
        let signal = (*hdr).signal;
        let epi = (*hdr).epi.as_ptr();
        let run = match gate {
            None => true,
            Some((args, threshold)) => gate_value(&args) > threshold,
        };
        if run {
            D::tile(arm, &args, epi, tile);
        } else if global::ld_u32(&raw const (*op).copy) != 0 {
            let src = (ld_i64(&raw const (*op).copy_src as *const i64) as u64).wrapping_add(
                (it as i64).wrapping_mul(ld_i64(&raw const (*op).copy_stride)) as u64,
            );
            copy_tile(
                &args,
                tile,
                src,
                global::ld_u32(&raw const (*op).copy_ld),
                global::ld_u32(&raw const (*op).bm),
                global::ld_u32(&raw const (*op).bn),
            );
        }
        sync_threads();
        if tid == 0 && signal != NO_SIGNAL {
            thread_fence();
            atomic_add_acq_rel_u32(counters.add(signal as usize), 1);
        }
        q += 1;
        i += 1;
        if i == end {
            i = begin;
            it += 1;
        }
    }

    if tid == 0 {
        thread_fence();
        let done = counters.add(p.n_counters as usize);
        if atomic_add_acq_rel_u32(done, 1) == grid_dim_x() - 1 {
            let mut c = 0;
            while c < p.n_counters {
                global::st_u32(counters.add(c as usize), 0);
                c += 1;
            }
            global::st_u32(done, 0);
        }
    }
}
