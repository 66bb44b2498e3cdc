//! The Hopper mainloop collective: a ring of shared-memory stages that one producer thread
//! fills with TMA copies of A and B blocks and the consumer warpgroups drain with `wgmma`
//! (see the [module docs](super) for the roles and the three schedules).
//!
//! Each stage has a `full` mbarrier (one producer arrival with the copies' byte count) and an
//! `empty` one (one arrival per consumer warp that reads the stage, in every CTA whose producer
//! fills it). The ring is consumed in the order the producer fills it in every schedule, so
//! both sides derive a unit's ring position from the units before it.

use super::scheduler::TileScheduler;
use super::{BK, Consumer, SharedMem, Sm90Args, cluster_m, cta_rows, is_pingpong};
use crate::arch::mbarrier::{arrive, arrive_expect_tx, arrive_remote_cta, init, wait_parity};
use crate::copy::tma::{fence_tensormap_acquire, load_2d, load_2d_multicast, prefetch_tensormap};
use crate::epilogue::Acc;
use crate::gemm::TileShape;
use crate::mma::sm90::{
    WgmmaInput, commit_group, fence, fence_operands, smem_desc_offset, smem_desc_sw128, wait_group,
};

/// A ring position: stage index and the parity of its current lap.
#[derive(Clone, Copy)]
pub(super) struct Ring<const STAGES: u32> {
    pub(super) stage: u32,
    pub(super) phase: u32,
}

impl<const STAGES: u32> Ring<STAGES> {
    /// The position of the `pos`-th k-tile through the ring since the kernel started.
    #[inline(always)]
    pub(super) fn at(pos: u64) -> Self {
        Ring {
            stage: (pos % STAGES as u64) as u32,
            phase: ((pos / STAGES as u64) & 1) as u32,
        }
    }

    /// The next position.
    #[inline(always)]
    pub(super) fn advance(&mut self) {
        self.stage += 1;
        if self.stage == STAGES {
            self.stage = 0;
            self.phase ^= 1;
        }
    }
}

/// A mainloop collective: how the producer moves one work unit's A and B blocks into the
/// ring, and how a consumer warpgroup multiplies them into its accumulators (CUTLASS 3's
/// `CollectiveMma`: `load`, `mma`, `mma_tail`).
pub(super) trait Mainloop {
    /// A consumer warpgroup's accumulators of one tile.
    type Acc;
    /// A position in the ring.
    type Pos: Copy;

    /// Producer (one thread): for each k-tile of unit `i` of `sched` not `issued` already
    /// (by a prologue), waits until the stage at `pos` is free and issues its copies; `pos`
    /// moves past every k-tile of the unit. `rank` is this CTA's rank in its 2-CTA cluster.
    ///
    /// # Safety
    /// The ring's barriers are initialized and visible to the cluster; the tensor maps fenced.
    unsafe fn load<S: TileScheduler>(
        &self,
        pos: &mut Self::Pos,
        sched: &S,
        i: u32,
        rank: u32,
        issued: impl Fn(u32) -> bool,
    );

    /// Consumer warpgroup: multiplies the k-tiles `k` (`[first, end)`), the first at ring
    /// position `pos`, into `acc`, keeping one batch in flight and releasing each stage once
    /// the batch after it is issued. Calls `hook` before k-tile `hook_at` (never if outside
    /// `k`). Returns the stage of the last k-tile, for [`Self::mma_tail`].
    ///
    /// # Safety
    /// All 128 threads of the warpgroup call it together, with the producer filling the same
    /// k-tiles in the same order.
    #[allow(clippy::too_many_arguments)]
    unsafe fn mma(
        &self,
        acc: &mut Self::Acc,
        pos: Self::Pos,
        k: (u32, u32),
        rank: u32,
        thread: &Consumer,
        hook_at: u32,
        hook: impl FnMut(),
    ) -> u32;

    /// Consumer warpgroup, after [`Self::mma`]: waits for the last batch and releases its stage
    /// `last`. `acc` then holds the unit's product.
    ///
    /// # Safety
    /// As [`Self::mma`], with the same `k`.
    unsafe fn mma_tail(
        &self,
        acc: &mut Self::Acc,
        k: (u32, u32),
        last: u32,
        rank: u32,
        thread: &Consumer,
    );
}

/// The TMA + `wgmma` mainloop on tiles of shape `tile`: `MI` 64-row halves per consumer
/// warpgroup, `NI` = BN/8, a ring of `STAGES` stages in `smem`, the tensor maps of `sm90`.
pub(super) struct WgmmaTma<'a, In, const MI: usize, const NI: usize, const STAGES: u32> {
    smem: SharedMem<STAGES>,
    sm90: &'a Sm90Args,
    tile: TileShape,
    input: core::marker::PhantomData<In>,
}

impl<'a, In: WgmmaInput, const MI: usize, const NI: usize, const STAGES: u32>
    WgmmaTma<'a, In, MI, NI, STAGES>
{
    /// The mainloop of tiles of shape `tile` with its ring in `smem`.
    #[inline(always)]
    pub(super) fn new(smem: SharedMem<STAGES>, sm90: &'a Sm90Args, tile: TileShape) -> Self {
        WgmmaTma {
            smem,
            sm90,
            tile,
            input: core::marker::PhantomData,
        }
    }

    /// Initializes the ring's `full` and `empty` mbarriers and the ping-pong `turn` pair.
    ///
    /// # Safety
    /// One thread, before any other use of them (then `fence_init` and a CTA or cluster
    /// barrier).
    #[inline(always)]
    pub(super) unsafe fn init_barriers(&self) {
        let smem = &self.smem;
        // One arrival per consumer warp that reads a stage, in every CTA whose producer fills it
        // (with a cluster, each CTA's B half lands in both).
        let releases = if is_pingpong(&self.tile) { 4 } else { 8 } * cluster_m(&self.tile);
        for s in 0..STAGES {
            init(smem.full(s), 1);
            init(smem.empty(s), releases);
        }
        init(smem.turn(0), 4);
        init(smem.turn(1), 4);
    }

    /// Issues the copies of the first k-tiles (at most `STAGES`) of tile `(tm, tn)`, with `k`
    /// the GEMM's K, into the ring's first stages (a prologue: [`Mainloop::load`] then skips
    /// them).
    ///
    /// # Safety
    /// Thread 0, after the barriers' initialization; without a cluster.
    #[inline(always)]
    pub(super) unsafe fn prime(&self, (tm, tn): (u32, u32), k: u32) {
        let (smem, sm90) = (&self.smem, self.sm90);
        let (bm, bn) = (cta_rows(&self.tile), self.tile.bn);
        fence_tensormap_acquire(sm90.tmap_a);
        fence_tensormap_acquire(sm90.tmap_b);
        for kt in 0..k.div_ceil(BK).min(STAGES) {
            arrive_expect_tx(smem.full(kt), smem.stage_bytes);
            load_2d(
                smem.stage_a(kt),
                sm90.tmap_a,
                (kt * BK) as i32,
                (tm * bm) as i32,
                smem.full(kt),
            );
            load_2d(
                smem.stage_b(kt),
                sm90.tmap_b,
                (kt * BK) as i32,
                (tn * bn) as i32,
                smem.full(kt),
            );
        }
    }

    /// The producer's fences and prefetches of A's and B's tensor maps.
    ///
    /// # Safety
    /// The producer thread, before its first [`Mainloop::load`].
    #[inline(always)]
    pub(super) unsafe fn fence_tensor_maps(&self) {
        fence_tensormap_acquire(self.sm90.tmap_a);
        fence_tensormap_acquire(self.sm90.tmap_b);
        prefetch_tensormap(self.sm90.tmap_a);
        prefetch_tensormap(self.sm90.tmap_b);
    }

    /// Producer: waits until the stage at `pos` is free (released by every consumer warp that
    /// reads it).
    ///
    /// # Safety
    /// The producer thread.
    #[inline(always)]
    pub(super) unsafe fn wait_free(&self, pos: Ring<STAGES>) {
        wait_parity(self.smem.empty(pos.stage), pos.phase ^ 1);
    }

    /// Producer with a cluster, after its last copy: stays until every stage is released by
    /// both CTAs' consumers; after that no remote arrival targets this CTA, so it may exit
    /// (CUTLASS's producer tail). Nothing without a cluster.
    ///
    /// # Safety
    /// The producer thread, `pos` past its last copy.
    #[inline(always)]
    pub(super) unsafe fn drain(&self, pos: &mut Ring<STAGES>) {
        if cluster_m(&self.tile) > 1 {
            for _ in 0..STAGES {
                self.wait_free(*pos);
                pos.advance();
            }
        }
    }

    /// Ping-pong: waits until the other warpgroup's mainloop of unit `i - 1` is done (the
    /// `((i - 1) / 2)`-th hand-over to this warpgroup). Nothing for unit 0 or other schedules.
    ///
    /// # Safety
    /// All threads of the consumer warpgroup, before [`Mainloop::mma`] of unit `i`.
    #[inline(always)]
    pub(super) unsafe fn wait_turn(&self, thread: &Consumer, i: u32) {
        if is_pingpong(&self.tile) && i > 0 {
            wait_parity(self.smem.turn(thread.c), ((i - 1) / 2) & 1);
        }
    }

    /// Ping-pong: hands the tensor cores to the other warpgroup once every k-tile is issued
    /// (CUTLASS's ping-pong hands over at the same point), one arrival per warp.
    ///
    /// # Safety
    /// All threads of the consumer warpgroup, between [`Mainloop::mma`] and
    /// [`Mainloop::mma_tail`], when the other warpgroup has a next unit.
    #[inline(always)]
    pub(super) unsafe fn hand_over(&self, thread: &Consumer) {
        if thread.lane == 0 {
            arrive(self.smem.turn(1 - thread.c));
        }
    }

    /// Releases stage `s` (one arrival of this warp, and with a cluster one on the peer CTA's
    /// barrier: its producer filled half of the B block).
    #[inline(always)]
    unsafe fn release(&self, s: u32, rank: u32) {
        arrive(self.smem.empty(s));
        if cluster_m(&self.tile) > 1 {
            arrive_remote_cta(self.smem.empty(s), rank ^ 1);
        }
    }
}

impl<In: WgmmaInput, const MI: usize, const NI: usize, const STAGES: u32> Mainloop
    for WgmmaTma<'_, In, MI, NI, STAGES>
{
    type Acc = Acc<MI, NI>;
    type Pos = Ring<STAGES>;

    #[inline(always)]
    unsafe fn load<S: TileScheduler>(
        &self,
        ring: &mut Ring<STAGES>,
        sched: &S,
        i: u32,
        rank: u32,
        issued: impl Fn(u32) -> bool,
    ) {
        let (smem, sm90) = (&self.smem, self.sm90);
        let cluster = cluster_m(&self.tile);
        let (bm, bn) = (cta_rows(&self.tile), self.tile.bn);
        // With a cluster, this CTA loads its half of the B block for both CTAs.
        let b_rows = bn / cluster;
        let (tm, tn) = sched.coords(i);
        let row_a = (tm * bm) as i32;
        // A row-norm cluster's last CTAs may lie past N: TMA reads zeros there.
        let row_b = (tn * bn + rank * b_rows) as i32;
        let (k_first, k_end) = sched.k_range(i);
        for kt in k_first..k_end {
            let s = ring.stage;
            if issued(kt) {
                ring.advance();
                continue;
            }
            let k0 = (kt * BK) as i32;
            // CTA-scope acquire also with a cluster: the peers' arrivals only say that
            // their wgmma reads of the stage completed, and the copies below are
            // async-proxy writes. A cluster-scope acquire adds an L1 invalidation
            // (`CCTL.IVALL`) per k-tile.
            wait_parity(smem.empty(s), ring.phase ^ 1);
            arrive_expect_tx(smem.full(s), smem.stage_bytes);
            load_2d(smem.stage_a(s), sm90.tmap_a, k0, row_a, smem.full(s));
            if cluster > 1 {
                let dst = smem.stage_b(s) + rank * b_rows * 128;
                load_2d_multicast(dst, sm90.tmap_b, k0, row_b, smem.full(s), 0b11);
            } else {
                load_2d(smem.stage_b(s), sm90.tmap_b, k0, row_b, smem.full(s));
            }
            ring.advance();
        }
    }

    #[inline(always)]
    unsafe fn mma(
        &self,
        acc: &mut Acc<MI, NI>,
        mut ring: Ring<STAGES>,
        (k_first, k_end): (u32, u32),
        rank: u32,
        thread: &Consumer,
        hook_at: u32,
        mut hook: impl FnMut(),
    ) -> u32 {
        let smem = &self.smem;
        let mut prev = 0;
        for kt in k_first..k_end {
            let s = ring.stage;
            if kt == hook_at {
                hook();
            }
            wait_parity(smem.full(s), ring.phase);
            fence();
            // One descriptor per operand and stage; the k-steps and 64-row halves move its
            // start field by constants.
            let (desc_a, desc_b) = (
                smem_desc_sw128(smem.stage_a(s) + thread.row0 * 128),
                smem_desc_sw128(smem.stage_b(s)),
            );
            for kk in 0..BK / 16 {
                let b = smem_desc_offset(desc_b, kk * 32);
                for h in 0..MI {
                    let a = smem_desc_offset(desc_a, 64 * h as u32 * 128 + kk * 32);
                    In::mma::<NI>(&mut acc.v[h], a, b);
                }
            }
            commit_group();
            // The previous k-tile's batch is done: its stage may be refilled.
            wait_group::<1>();
            for h in 0..MI {
                fence_operands(&mut acc.v[h]);
            }
            if kt > k_first && thread.lane == 0 {
                self.release(prev, rank);
            }
            prev = s;
            ring.advance();
        }
        prev
    }

    #[inline(always)]
    unsafe fn mma_tail(
        &self,
        acc: &mut Acc<MI, NI>,
        (k_first, k_end): (u32, u32),
        last: u32,
        rank: u32,
        thread: &Consumer,
    ) {
        wait_group::<0>();
        for h in 0..MI {
            fence_operands(&mut acc.v[h]);
        }
        if k_end > k_first && thread.lane == 0 {
            self.release(last, rank);
        }
    }
}
