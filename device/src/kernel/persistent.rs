//! The persistent kernel body of the wave scheduler (Rammer: Ma et al., "Rammer: Enabling
//! Holistic Deep Learning Compiler Optimizations with rTasks", OSDI'20).
//!
//! One launch runs a *program*: `gridDim.x` persistent CTAs (Rammer's vEUs), each walking its own
//! list of [`Task`]s in order. A task is one output tile (and K split) of one GEMM operator,
//! computed by the mainloop's `run_tile` of the operator's *arm* (an epilogue kind × tile shape
//! that the entry point was instantiated for; the entry point's `dispatch` closure matches on
//! [`Task::arm`]).
//!
//! # Dependencies
//! Tasks wait for the producer tiles they read through *ready counters* in global memory, one
//! `u32` per (operator, row block of its output): a finished task increments its row block's
//! counter ([`Task::signal`]) with release semantics after a CTA barrier (so every thread's
//! stores of the tile are ordered before it); a task's [`Wait`]s name counter ranges and the
//! count each must reach (the producer's tiles per row block × K splits); lanes of warp 0 spin on
//! them with acquire loads, then the CTA barrier passes the ordering on to every thread (the
//! pattern of CUTLASS's semaphores; PTX ISA §8, memory consistency model: release/acquire
//! patterns and causality order through `bar.sync`). There is no grid-wide barrier.
//!
//! # Why it cannot deadlock
//! The host launches no more CTAs than can be co-resident (checked with the occupancy API), and
//! orders each CTA's list by one global placement order in which every waited-on task comes
//! before the waiting one. The lowest unfinished task in that order therefore has all its
//! producers finished and all earlier tasks of its own CTA finished, and its CTA is resident:
//! it can always run. A wait that is not satisfied after [`SPIN_LIMIT`] polls (seconds) traps
//! instead of hanging: that is a host bug (a malformed table), reported as a launch failure.
//!
//! # Counter reset
//! Each CTA increments a *done* counter (`counters[n_counters]`) when its list is finished; the
//! last one zeroes every ready counter and the done counter, so the next launch of the same
//! program (a benchmark loop, a CUDA-graph replay) starts from zero without a memset.
//!
//! # Task headers
//! A task is 256 bytes ([`TASK_BYTES`]) and carries its operator's [`GemmArgs`] and epilogue
//! parameters (the op table row, copied per task so one transfer brings everything). The next
//! task's header is fetched with `cp.async` into the other half of a two-slot shared-memory
//! buffer (at [`header_offset`], after every arm's pipeline) while the current tile runs.
//!
//! Also here: the [`LstmCell`] epilogue stage (an LSTM cell's pointwise update after the gate
//! GEMM), which the scheduler's LSTM workload uses.

use crate::arch::atomic::{atomic_add_acq_rel_u32, load_acquire_u32};
use crate::arch::global;
use crate::arch::shared::{dynamic_shared_base, shared_addr};
use crate::arch::sync::{nanosleep, sync_threads, sync_warp, thread_fence};
use crate::arch::thread::{block_idx_x, grid_dim_x, thread_idx_x};
use crate::arch::warp::shfl_xor_f32;
use crate::copy::cp_async::{commit_group, cp_async_cg_16, wait_group};
use crate::epilogue::ops::{load, store_one};
use crate::epilogue::{Acc, Stage, TileCtx};
use crate::gemm::{GemmArgs, TileCoord, TileShape};
use crate::math;
use crate::params::KernelParam;
use crate::types::Element;

/// Waits stored in the task itself; more go to [`ProgramArgs::waits`].
pub const INLINE_WAITS: usize = 4;
/// 8-byte words of epilogue parameters a task carries (the largest kind's `Params` must fit).
pub const EPI_WORDS: usize = 10;
/// Bytes per [`Task`].
pub const TASK_BYTES: u32 = 256;
/// [`Task::signal`] of a task nobody waits for.
pub const NO_SIGNAL: u32 = u32::MAX;
/// Polls of one ready counter before the kernel traps (with the back-off below, several
/// seconds: far beyond any legitimate wait).
pub const SPIN_LIMIT: u32 = 1 << 24;
/// Longest back-off between polls, nanoseconds.
const MAX_BACKOFF_NS: u32 = 256;

/// A range of ready counters a task waits on, each until it reaches `target`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wait {
    /// Index of the first counter.
    pub first: u32,
    /// Consecutive counters (the producer's row blocks this task reads).
    pub count: u32,
    /// Value each must reach: the producer's tasks per row block (tiles along N × K splits).
    pub target: u32,
    /// Unused (16-byte entries).
    pub _pad: u32,
}

unsafe impl KernelParam for Wait {}

/// One rTask: an output tile of one operator. 256 bytes, 16-byte aligned (copied with
/// 16-byte `cp.async`).
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Task {
    /// The operator's GEMM arguments (its split-K workspace and counters included).
    pub args: GemmArgs,
    /// Which instantiated (epilogue kind, tile shape) runs it: an index into the entry point's
    /// arm list.
    pub arm: u32,
    /// Tile row (rows `tile_m·BM..`).
    pub tile_m: u32,
    /// Tile column (columns `tile_n·BN..`).
    pub tile_n: u32,
    /// K split.
    pub split: u32,
    /// Tiles per row of tiles, ⌈N/BN⌉.
    pub tiles_n: u32,
    /// Ready counter to increment when the tile is stored, or [`NO_SIGNAL`].
    pub signal: u32,
    /// Number of [`Wait`]s: the first [`INLINE_WAITS`] in `waits`, the rest at
    /// `ProgramArgs::waits[waits_overflow..]`.
    pub n_waits: u32,
    /// Index of the first overflow wait.
    pub waits_overflow: u32,
    /// The first waits.
    pub waits: [Wait; INLINE_WAITS],
    /// The arm's epilogue parameters (`<E as Stage>::Params`, `#[repr(C)]`), zero-padded.
    pub epi: [u64; EPI_WORDS],
    /// Unused (256-byte tasks).
    pub _pad: [u32; 2],
}

const _: () = assert!(core::mem::size_of::<Task>() == TASK_BYTES as usize);
const _: () = assert!(core::mem::size_of::<Wait>() == 16);

/// Kernel parameter of a persistent program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgramArgs {
    /// All tasks, CTA by CTA ([`Task`] array, 16-byte aligned).
    pub tasks: u64,
    /// `gridDim.x + 1` `u32` offsets into `tasks`: CTA `i` runs `tasks[offsets[i]..offsets[i+1]]`.
    pub cta_offsets: u64,
    /// Overflow [`Wait`]s of tasks with more than [`INLINE_WAITS`].
    pub waits: u64,
    /// `n_counters` ready counters then the done counter, `u32`, zero before the first launch.
    pub counters: u64,
    /// Ready counters.
    pub n_counters: u32,
    /// Unused.
    pub _pad: u32,
    /// Address of a `u32`, or 0: when the `u32` is nonzero at launch the whole program returns
    /// at once (a device-side branch over a launch: an early exit decided by an earlier
    /// kernel).
    pub skip_if: u64,
}

unsafe impl KernelParam for ProgramArgs {}

/// Byte offset of the task-header buffer in dynamic shared memory: after the largest pipeline
/// of `tiles` (B stored N×K), rounded up to 16.
pub const fn header_offset(tiles: &[TileShape]) -> u32 {
    let mut max = 0;
    let mut i = 0;
    while i < tiles.len() {
        let s = tiles[i].smem_bytes(true);
        if s > max {
            max = s;
        }
        i += 1;
    }
    max.div_ceil(16) * 16
}

/// Dynamic shared memory of a persistent entry point over `tiles`: the largest pipeline plus
/// two task headers.
pub const fn smem_bytes(tiles: &[TileShape]) -> u32 {
    header_offset(tiles) + 2 * TASK_BYTES
}

/// Spins until the counter at `p` reaches `target` (acquire), or traps after [`SPIN_LIMIT`]
/// polls.
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

/// Starts copying task `idx` into header slot `slot` (16 threads, one 16-byte chunk each).
///
/// # Safety
/// `idx` must index the task array; every thread of the CTA calls it (one commit each).
#[inline(always)]
unsafe fn fetch_task(p: &ProgramArgs, idx: u32, slot: u32, header: u32, tid: u32) {
    if tid < TASK_BYTES / 16 {
        let src = p.tasks + idx as u64 * TASK_BYTES as u64 + tid as u64 * 16;
        let dst = shared_addr(dynamic_shared_base()) + header + slot * TASK_BYTES + tid * 16;
        cp_async_cg_16(dst, src, 16);
    }
    commit_group();
}

/// How an entry point computes one task: `run_tile` of the arm's instantiation. Implemented by
/// a zero-sized type per entry point, with `#[inline(always)]`, so every arm is inlined into
/// the persistent kernel (a closure would be an out-of-line call with its arguments in local
/// memory).
pub trait Dispatch {
    /// Computes `tile` of the operator `args` with arm `arm`; `epi` points at the task's
    /// epilogue parameter words in shared memory (read them as the arm's `Params`, with
    /// [`read_params`], before the mainloop starts). Traps on an unknown arm.
    ///
    /// # Safety
    /// As `sm80::run_tile`; every thread of the CTA calls it.
    unsafe fn tile(arm: u32, args: &GemmArgs, epi: *const u64, tile: TileCoord);
}

/// Runs this CTA's task list (see the [module docs](self)), each task through `D`.
/// `HEADER` is [`header_offset`] of the entry point's tiles.
///
/// Launch: grid `(ctas, 1, 1)` with `ctas` no more than can be co-resident, block as the arms'
/// tiles (all arms of one entry point have the same thread count), dynamic shared memory
/// [`smem_bytes`].
///
/// # Safety
/// The host must have built the tables as described on [`ProgramArgs`] and [`Task`] (validated
/// operands, arms within the entry point's list, waits only on tasks earlier in the global
/// placement order) and zeroed the counters before the first launch.
#[inline(always)]
pub unsafe fn run<const HEADER: u32, D: Dispatch>(p: &ProgramArgs) {
    // Written by an earlier kernel of the stream: every thread reads the same value.
    if p.skip_if != 0 && load_acquire_u32(p.skip_if as *const u32) != 0 {
        return;
    }
    let tid = thread_idx_x();
    let cta = block_idx_x();
    let offsets = p.cta_offsets as *const u32;
    let begin = global::ld_u32(offsets.add(cta as usize));
    let end = global::ld_u32(offsets.add(cta as usize + 1));
    let counters = p.counters as *mut u32;
    let headers = dynamic_shared_base().add(HEADER as usize);

    if begin < end {
        fetch_task(p, begin, 0, HEADER, tid);
    }
    let mut i = begin;
    while i < end {
        let slot = (i - begin) & 1;
        // Task i's header has landed (and is visible to every thread after the barrier); the
        // other slot was last read before the previous tile's first barrier.
        wait_group::<0>();
        sync_threads();
        if i + 1 < end {
            fetch_task(p, i + 1, slot ^ 1, HEADER, tid);
        }
        let hdr = headers.add((slot * TASK_BYTES) as usize) as *const Task;
        let n_waits = (*hdr).n_waits;
        if tid < 32 {
            let mut j = tid;
            while j < n_waits {
                let w = if (j as usize) < INLINE_WAITS {
                    (*hdr).waits[j as usize]
                } else {
                    let o = (p.waits as *const u32)
                        .add(((*hdr).waits_overflow + j - INLINE_WAITS as u32) as usize * 4);
                    Wait {
                        first: global::ld_u32(o),
                        count: global::ld_u32(o.add(1)),
                        target: global::ld_u32(o.add(2)),
                        _pad: 0,
                    }
                };
                let mut c = 0;
                while c < w.count {
                    wait_counter(counters.add((w.first + c) as usize), w.target);
                    c += 1;
                }
                j += 32;
            }
            sync_warp();
        }
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
        // Every producer this task reads is complete (and ordered before us) past this barrier.
        sync_threads();
        D::tile(arm, &args, epi, tile);
        // All threads' stores of the tile precede thread 0's release.
        sync_threads();
        if tid == 0 && signal != NO_SIGNAL {
            thread_fence();
            atomic_add_acq_rel_u32(counters.add(signal as usize), 1);
        }
        i += 1;
    }

    // The last CTA to finish resets the counters for the next launch.
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

/// Reads the epilogue parameters of an arm from a task header (shared memory).
///
/// # Safety
/// `epi` must be the `epi` words of a task whose arm's parameters are `P`
/// (`size_of::<P>() ≤ 8·EPI_WORDS`, checked where the entry point is instantiated).
#[inline(always)]
pub unsafe fn read_params<P: KernelParam>(epi: *const u64) -> P {
    core::ptr::read(epi as *const P)
}

/// Parameters of [`LstmCell`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LstmParams {
    /// Gate bias, length N = 4H, output dtype, interleaved like the weight rows:
    /// `[i₀ f₀ g₀ o₀ i₁ f₁ g₁ o₁ …]`.
    pub bias: u64,
    /// Previous cell state c_{t−1}, f32, M×H (leading dimension `ld_state`); 0 for c = 0.
    pub c_prev: u64,
    /// New cell state c_t, f32, M×H (leading dimension `ld_state`).
    pub c_out: u64,
    /// Leading dimension of `c_prev` and `c_out`, elements.
    pub ld_state: u32,
    /// Unused.
    pub _pad: u32,
}

unsafe impl KernelParam for LstmParams {}

/// `lstm`: the LSTM cell update (Hochreiter & Schmidhuber 1997, PyTorch's `nn.LSTM` gate order
/// i, f, g, o) on the gate pre-activations `x = A·B` of one step, A = `[x_t | h_{t−1}]`
/// (K = input + hidden), B the stacked `[W_ih | W_hh]` with its 4H gate rows interleaved per
/// hidden unit, so output columns `4j..4j+4` are unit j's (i, f, g, o):
///
/// ```text
/// i = σ(x₀ + b₀), f = σ(x₁ + b₁), g = tanh(x₂ + b₂), o = σ(x₃ + b₃)
/// c_t[r, j] = f·c_{t−1}[r, j] + i·g      (f32)
/// h_t[r, j] = o·tanh(c_t[r, j])          (C, output dtype, M × N/4)
/// ```
///
/// A thread holds columns `(2t, 2t+1)` of each 8-column fragment, so lanes `t` and `t ^ 1` hold
/// one unit's four gates; one `shfl.xor 1` exchange gives the even lane all four, and it stores
/// h and c. The stage writes C itself (N/4 columns, which the generic store cannot express)
/// and then marks the tile as stored (`ctx.m = 0`), so it must be the last stage. N must be a
/// multiple of 4 (the host checks).
#[derive(Clone, Copy, Debug, Default)]
pub struct LstmCell;

impl Stage for LstmCell {
    type Params = LstmParams;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &LstmParams,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        let even = ctx.t & 1 == 0;
        for mi in 0..MI {
            for h in 0..2 {
                let row = ctx.row_of(mi, h);
                for ni in 0..NI {
                    let col = ctx.col_of(ni);
                    let ok = row < ctx.m && col < ctx.n;
                    let (mut x0, mut x1) = (acc.v[mi][ni][2 * h], acc.v[mi][ni][2 * h + 1]);
                    if ok {
                        x0 += unsafe { load::<Out>(p.bias, col) };
                        x1 += unsafe { load::<Out>(p.bias, col + 1) };
                    }
                    // Every lane shuffles (uniform control flow); only in-bounds even lanes use it.
                    let y0 = unsafe { shfl_xor_f32(x0, 1) };
                    let y1 = unsafe { shfl_xor_f32(x1, 1) };
                    if ok && even {
                        let unit = col / 4;
                        let (i, f, g, o) = (
                            math::sigmoid(x0),
                            math::sigmoid(x1),
                            math::tanh(y0),
                            math::sigmoid(y1),
                        );
                        let state = row as usize * p.ld_state as usize + unit as usize;
                        let c_prev = if p.c_prev == 0 {
                            0.0
                        } else {
                            unsafe { global::ld_f32((p.c_prev as *const f32).add(state)) }
                        };
                        let c = f * c_prev + i * g;
                        let hv = o * math::tanh(c);
                        unsafe {
                            global::st_f32((p.c_out as *mut f32).add(state), c);
                            store_one::<Out>(ctx.c, ctx.ldc, row, unit, hv);
                        }
                    }
                }
            }
        }
        // The tile is stored: the generic store after the stages writes no rows.
        ctx.m = 0;
    }
}
