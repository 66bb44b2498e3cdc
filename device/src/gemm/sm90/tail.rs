//! The fixup of a split tail tile ([`super::Sm90Args::tail_splits`]): the pieces of a tile
//! that the scheduler split along K ([`super::scheduler::TailSplit`]) meet in a workspace, and
//! the last to arrive sums them and runs the epilogue.

use crate::arch::atomic::leader_arrive_counted;
use crate::arch::shared::shared_addr;
use crate::arch::sync::thread_fence;
use crate::copy::tma::bulk_read_wait_barrier;
use crate::copy::{ld_global_cg_v4, st_global_cg_v4};
use crate::epilogue::Acc;
use crate::gemm::GemmArgs;

/// One consumer warpgroup's piece of a split tail tile ([`super::Sm90Args::tail_splits`]).
pub(super) struct TailPiece {
    /// A shared-memory word of this warpgroup: the leader tells the others there whether the
    /// piece came last.
    pub(super) flag: *mut u32,
    /// The warpgroup's named barrier (1 or 2).
    pub(super) barrier: u32,
    /// Thread index within the warpgroup.
    pub(super) thread: u32,
    /// Tail tile (0-based among the last round's tiles) and piece of it.
    pub(super) tile: u32,
    pub(super) piece: u32,
    pub(super) pieces: u32,
}

/// The fixup of a split tail tile (CUTLASS's serial split-K reduction, as
/// [`crate::gemm::finish`]'s split-K): every piece writes its accumulators to its workspace
/// slot; the last piece to arrive (an acq_rel counter per tail tile, reset to 0 by that piece
/// for the next launch) sums all slots in piece order, so the result does not depend on the
/// arrival order, and returns `true` to run the epilogue. The others return `false`. Slots are
/// laid out fragment-major with the 128 threads innermost: each 16-byte store of a warp covers
/// 512 contiguous bytes.
///
/// # Safety
/// All 128 threads of the warpgroup call it together; `args.workspace` and `args.counters`
/// hold the slots and the zeroed counters [`super::Sm90Args::tail_splits`] describes.
#[inline(always)]
pub(super) unsafe fn tail_fixup<const MI: usize, const NI: usize>(
    args: &GemmArgs,
    acc: &mut Acc<MI, NI>,
    p: &TailPiece,
) -> bool {
    let frags = (MI * NI) as u64;
    let ws = args.workspace as *mut [f32; 4];
    let slot = |s: u32, f: usize| {
        ws.add(
            (((p.tile as u64 * p.pieces as u64 + s as u64) * frags + f as u64) * 128
                + p.thread as u64) as usize,
        )
    };
    for mi in 0..MI {
        for ni in 0..NI {
            st_global_cg_v4(slot(p.piece, mi * NI + ni), acc.v[mi][ni]);
        }
    }
    thread_fence();
    // Aligned `bar.sync`, as the per-chunk barriers: with the non-aligned form here, 128×128
    // ping-pong took 1.68-1.71 ms instead of 1.44-1.45 at LLaMA-3-8B MLP down on an H100.
    // Safe because thread 0's arrival is predicated asm, not a branch LLVM could copy the
    // barrier into.
    bulk_read_wait_barrier(false, p.barrier, 128);
    let counter = (args.counters as *mut u32).add(p.tile as usize);
    leader_arrive_counted(p.thread == 0, counter, p.pieces, shared_addr(p.flag));
    bulk_read_wait_barrier(false, p.barrier, 128);
    if core::ptr::read_volatile(p.flag) == 0 {
        return false;
    }
    thread_fence();
    *acc = Acc::zero();
    // Eight fragments at a time, pieces in a run-time loop inside: at most 32 loaded values
    // are in flight next to the 128 accumulators (all of a slot at once spilled).
    const GROUP: usize = 8;
    const { assert!((MI * NI) % GROUP == 0) };
    for g in 0..MI * NI / GROUP {
        for s in 0..p.pieces {
            for f in g * GROUP..(g + 1) * GROUP {
                let v = ld_global_cg_v4(slot(s, f));
                for e in 0..4 {
                    acc.v[f / NI][f % NI][e] += v[e];
                }
            }
        }
    }
    true
}
