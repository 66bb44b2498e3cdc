//! The row-norm epilogue of the Hopper kernel: a row-norm group's CTAs ([`Sm90Args::norm_cluster`])
//! each compute a tile of the same row block, swap the rows' statistics through distributed
//! shared memory or global memory, and normalize and store in the same kernel (see the
//! [module docs](super), "Row-norm clusters"). A group's last tile may run its epilogue
//! through the ring ([`ring_epilogue_offset`]).

use super::epilogue::{Epilogue, EpilogueTile, Staging, store_staged};
use super::scheduler::TileScheduler;
use super::{
    Consumer, EPI_COLS, EPI_FRAGS, EpilogueTraits, MAX_NORM_CLUSTER, STAGING_BYTES, SharedMem,
    Sm90Args, cta_rows, ring_epilogue_fits, ring_epilogue_offset, row_norm_cluster_tile, stages_c,
};
use crate::arch::atomic::{atomic_add_acq_rel_u32, load_acquire_u32};
use crate::arch::global::st_u32;
use crate::arch::mbarrier::{
    arrive_expect_tx, arrive_remote, init, wait_parity, wait_parity_cluster,
};
use crate::arch::shared::{shared_addr, st_cluster_f32x4};
use crate::arch::sync::{named_barrier, nanosleep, sync_warp, thread_fence};
use crate::arch::thread::uncached;
use crate::copy::tma::{bulk_wait_group, fence_tensormap_acquire, load_2d, prefetch_tensormap};
use crate::copy::{ld_global_cg_v4, st_global_cg_v4};
use crate::epilogue::stages::Moments;
use crate::epilogue::store::store_tile;
use crate::epilogue::{Acc, NormPass, Stage};
use crate::gemm::finish::{Cta, tile_ctx};
use crate::gemm::{GemmArgs, TileShape};
use crate::types::Element;

/// How a kernel finishes row norms in a row-norm group: decided once per launch.
#[derive(Clone, Copy)]
pub(super) struct RowNorm {
    /// The kernel runs as a row-norm group: a row norm on a cooperative 128-row tile with
    /// [`Sm90Args::norm_cluster`] > 0.
    pub(super) active: bool,
    /// CTAs per group (1 when not active).
    pub(super) cn: u32,
    /// The group is not a cluster: statistics go through global memory
    /// ([`Sm90Args::norm_exchange`]).
    pub(super) global: bool,
    /// Each CTA's last tile reads its residual from the ring, copied there by the producer.
    pub(super) ring_residual: bool,
    /// Each CTA's last tile stages C in the ring and stores it with TMA.
    pub(super) ring_store: bool,
    /// One of the two: the last tile's epilogue goes through the ring.
    pub(super) ring_epilogue: bool,
}

impl RowNorm {
    /// The row-norm group of the stage list `E` on tiles of shape `tile`, without the ring
    /// epilogue ([`Self::with_ring`]). Traps on a launch whose rows are wider than the group,
    /// or whose global exchange lacks its workspace.
    ///
    /// # Safety
    /// Reads the kernel's parameters; every thread may call it.
    #[inline(always)]
    pub(super) unsafe fn new<E: Stage>(args: &GemmArgs, sm90: &Sm90Args, tile: &TileShape) -> Self {
        // Row norms on cooperative 128-row tiles with `norm_cluster = cn`: the cluster's CTAs
        // compute `cn` adjacent tiles of one row block and swap row statistics (see `row_norm_epilogue`).
        let row_norm = E::ROW_REDUCTION && row_norm_cluster_tile(tile) && sm90.norm_cluster > 0;
        let cn = if row_norm { sm90.norm_cluster } else { 1 };
        // A row wider than the cluster would be normalized over part of its columns: a broken
        // launch contract, stopped here rather than answered wrongly.
        // Row statistics through global memory: CTAs `cn·u .. cn·u + cn` form the group.
        let global_x = row_norm && sm90.norm_exchange != 0;
        if cn > MAX_NORM_CLUSTER
            || (row_norm && args.n.div_ceil(tile.bn) > cn)
            || (global_x && (args.workspace == 0 || args.counters == 0))
        {
            crate::arch::trap();
        }
        RowNorm {
            active: row_norm,
            cn,
            global: global_x,
            ring_residual: false,
            ring_store: false,
            ring_epilogue: false,
        }
    }

    /// With the ring epilogue of a group writing `Out` through the stage list `E`.
    #[inline(always)]
    pub(super) fn with_ring<Out: Element, E: Stage>(
        self,
        sm90: &Sm90Args,
        tile: &TileShape,
    ) -> Self {
        let row_norm = self.active;
        let (out_bytes, traits) = (core::mem::size_of::<Out>(), EpilogueTraits::of::<E>());
        // A row-norm group has no staging buffers: each CTA's last tile reads its residual and
        // stages C in the ring instead (`ring_epilogue_offset`), which the producer hands over
        // (with the residual in it) on barrier `rbar(c, 0)` of each consumer warpgroup `c`. Earlier
        // tiles (rows wider than one round) read global memory and store C per thread.
        let ring_residual = row_norm && E::READS_MATRIX && sm90.tmap_r != 0;
        let ring_store = row_norm && stages_c(out_bytes, traits) && sm90.tmap_c != 0;
        let ring_epilogue = (ring_residual || ring_store) && ring_epilogue_fits(tile);
        let (ring_residual, ring_store) =
            (ring_residual && ring_epilogue, ring_store && ring_epilogue);
        RowNorm {
            ring_residual,
            ring_store,
            ring_epilogue,
            ..self
        }
    }

    /// Initializes the cluster exchange's two mbarriers (`cn` CTAs × 64 writer lanes arrive
    /// per phase).
    ///
    /// # Safety
    /// One thread, before the cluster's barrier.
    #[inline(always)]
    pub(super) unsafe fn init_barriers<const STAGES: u32>(&self, smem: &SharedMem<STAGES>) {
        if self.active && !self.global {
            init(smem.xchg_bar(0), 64 * self.cn);
            init(smem.xchg_bar(1), 64 * self.cn);
        }
    }

    /// The producer's fence and prefetch of the residual's tensor map, for the ring epilogue.
    ///
    /// # Safety
    /// The producer thread, before [`Self::fill_ring`].
    #[inline(always)]
    pub(super) unsafe fn fence_tensor_maps(&self, sm90: &Sm90Args) {
        if self.ring_residual {
            fence_tensormap_acquire(sm90.tmap_r);
            prefetch_tensormap(sm90.tmap_r);
        }
    }

    /// Producer, after the CTA's last k-tile, for consumer warpgroup `c`, once the ring stage
    /// it gets is free: copies the residual of the CTA's last tile `(tm, tn)` into the
    /// warpgroup's epilogue buffers ([`ring_epilogue_offset`] of ring position `pos`), or
    /// just hands the stage over, on the warpgroup's residual barrier 0.
    ///
    /// # Safety
    /// The producer thread, [`Self::ring_epilogue`].
    #[inline(always)]
    pub(super) unsafe fn fill_ring<const STAGES: u32>(
        &self,
        smem: &SharedMem<STAGES>,
        sm90: &Sm90Args,
        tile: &TileShape,
        c: u32,
        (tm, tn): (u32, u32),
        pos: u64,
    ) {
        let (bm, bn) = (cta_rows(tile), tile.bn);
        let per_half = bn / EPI_COLS;
        // TMA fills boxes past M and N with zeros and counts their bytes.
        let bytes = if self.ring_residual {
            per_half * STAGING_BYTES
        } else {
            0
        };
        arrive_expect_tx(smem.residual_bar(c, 0), bytes);
        let dst = smem.base + ring_epilogue_offset(tile, pos, c);
        for j in 0..per_half * self.ring_residual as u32 {
            load_2d(
                dst + j * STAGING_BYTES,
                sm90.tmap_r,
                (tn * bn + j * EPI_COLS) as i32,
                (tm * bm + 64 * c) as i32,
                smem.residual_bar(c, 0),
            );
        }
    }
}

impl<Out: Element, const MI: usize, const NI: usize, const STAGES: u32, E: Stage>
    Epilogue<'_, Out, MI, NI, STAGES, E>
{
    /// The epilogue of tile `t` (unit `i` of `sched`) in a row-norm group `rn`, where this CTA
    /// has rank `rank`: [`row_norm_epilogue`], through the ring on the CTA's last tile.
    ///
    /// # Safety
    /// All 256 consumer threads call it together, after the tile's mainloop.
    #[inline(always)]
    pub(super) unsafe fn row_norm_tile<S: TileScheduler>(
        &self,
        t: &EpilogueTile,
        acc: &Acc<MI, NI>,
        rn: &RowNorm,
        rank: u32,
        i: u32,
        sched: &S,
    ) {
        let Consumer {
            tid,
            c,
            w,
            lane,
            row0,
            ..
        } = self.thread;
        let my_tiles = sched.count();
        // The CTA's last tile runs its epilogue through the ring (`ring_epilogue`).
        let (residual, stage_c) = if rn.ring_epilogue && i + 1 == my_tiles {
            wait_parity(self.smem.residual_bar(c, 0), 0);
            let buf = ring_epilogue_offset(&self.tile, my_tiles as u64 * sched.k_tiles() as u64, c);
            (
                if rn.ring_residual { buf } else { 0 },
                if rn.ring_store { buf } else { 0 },
            )
        } else {
            (0, 0)
        };
        row_norm_epilogue::<Out, NI, E>(
            self.args,
            self.epi,
            &acc.v[0],
            &RowNormCta {
                tid: tid - 128,
                lane,
                row: row0 + 16 * w,
                tile_m: t.tm,
                m0: t.m0,
                n0: t.n0,
                bm: cta_rows(&self.tile),
                bn: self.tile.bn,
                rank,
                cn: rn.cn,
                iter: i,
                global: rn.global,
            },
            self.smem.ptr,
            self.smem.xchg_buf(),
            self.smem.xchg_bar(i & 1),
            residual,
            stage_c,
            self.sm90.tmap_c,
        );
    }
}

/// Where one consumer warp's accumulators sit, for [`row_norm_epilogue`].
#[derive(Clone, Copy)]
struct RowNormCta {
    /// Thread index among the 256 consumer threads.
    tid: u32,
    lane: u32,
    /// First of the warp's 16 rows within the tile.
    row: u32,
    tile_m: u32,
    m0: u32,
    n0: u32,
    bm: u32,
    bn: u32,
    /// This CTA's rank in the row-norm cluster and the cluster's size.
    rank: u32,
    cn: u32,
    /// The tile's index in this CTA's sequence (the same in every CTA of the cluster).
    iter: u32,
    /// The CTAs are not a cluster: statistics go through global memory ([`exchange_global`]).
    global: bool,
}

/// The epilogue of a row-norm cluster ([`super::Sm90Args::norm_cluster`]) for one tile and one
/// consumer warp's 16 rows (`frags`, BN/8 m16n8 fragments):
///
/// 1. every 64-column chunk runs the stages before the norm ([`NormPass::Pre`]) and keeps the
///    values; then the norm takes the row statistics of all of them ([`NormPass::Stats`]);
/// 2. the lanes holding column pair 0 of a row (`lane % 4 == 0`) store its (count, mean, M2) in
///    slot `rank` of exchange buffer `iter % 2` of every CTA of the cluster (distributed shared
///    memory) and arrive on that CTA's exchange barrier `xbar` (`64·cn` arrivals per phase);
/// 3. once this CTA's barrier completes the phase, every thread merges its rows' `cn` slots in
///    rank order: the same order in every CTA, so all of a row's CTAs normalize it with
///    bitwise-identical statistics;
/// 4. every chunk runs the norm and the later stages ([`NormPass::Apply`]) and is stored.
///
/// Steps 2 and 3 are [`exchange_cluster`]; CTAs that are not a cluster ([`RowNormCta::global`])
/// swap the statistics through global memory instead ([`exchange_global`]).
///
/// `residual`, when not 0, is the byte offset in dynamic shared memory of the warpgroup's
/// 64-row residual tile, one 64×64 box per chunk [`STAGING_BYTES`] apart, copied there by TMA
/// and complete ([`super::ring_epilogue_offset`]): step 1's `residual` stage reads it there
/// instead of global memory. With `stage_c` not 0 (the same buffers), step 4 stages each chunk in
/// its box and stores it with TMA (C's tensor map `tmap_c`), and the warpgroup's leader waits for
/// the stores (the tile is the CTA's last); else each thread stores its values.
///
/// Two buffers suffice: a CTA writes buffer `b` again (tile `iter + 2`) only after every CTA
/// arrived for tile `iter + 1`, which each does after reading buffer `b` for tile `iter`.
///
/// # Safety
/// The kernel's launch contract with `norm_cluster = cn` (and [`super::Sm90Args::norm_exchange`]);
/// without [`RowNormCta::global`], `xbuf` is the byte offset of the
/// exchange in dynamic shared memory and `xbar` the barrier of buffer `iter % 2`, initialised
/// for `64·cn` arrivals and made visible to the cluster.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn row_norm_epilogue<Out: Element, const NI: usize, E: Stage>(
    args: &GemmArgs,
    epi: &E::Params,
    frags: &[[f32; 4]; NI],
    w: &RowNormCta,
    smem: *mut u8,
    xbuf: u32,
    xbar: u32,
    residual: u32,
    stage_c: u32,
    tmap_c: u64,
) {
    // The context of `cols` columns from `col0`: one 64-column chunk, or the whole tile.
    let cta = |col0: u32, cols: u32| Cta {
        tid: w.tid,
        threads: 256,
        lane: w.lane,
        warp_m: w.row / 16,
        warp_n: 0,
        warps_n: 1,
        tile_m: w.tile_m,
        tile_n: col0 / cols,
        split: 0,
        tiles_n: args.n.div_ceil(cols),
        m0: w.m0,
        n0: col0,
        bm: w.bm,
        bn: cols,
        warp_row: w.m0 + w.row,
        warp_col: col0,
    };
    // Step 1a, the stages before the norm, written out per chunk (constant accumulator
    // indices; as a rotating loop like the apply pass below, ptxas spilled 140 words): each
    // chunk's values go back into `all`, in place.
    let mut all = Acc::<1, NI> { v: [*frags] };
    macro_rules! pre {
        ($j:literal) => {
            if $j < NI / EPI_FRAGS && w.n0 + $j * EPI_COLS < args.n {
                let mut ctx = tile_ctx(args, &cta(w.n0 + $j * EPI_COLS, EPI_COLS), smem, 0);
                ctx.norm_pass = NormPass::Pre;
                if residual != 0 {
                    ctx.staged_residual = residual + $j * STAGING_BYTES;
                    ctx.staged_row = w.row % 64;
                }
                let mut part = Acc::<1, EPI_FRAGS>::zero();
                for f in 0..EPI_FRAGS {
                    part.v[0][f] = all.v[0][$j * EPI_FRAGS + f];
                }
                E::apply::<Out, 1, EPI_FRAGS>(epi, &mut part, &mut ctx);
                for f in 0..EPI_FRAGS {
                    all.v[0][$j * EPI_FRAGS + f] = part.v[0][f];
                }
            }
        };
    }
    pre!(0);
    pre!(1);
    pre!(2);
    pre!(3);
    // Step 1b, the rows' statistics over all BN columns at once: one pairwise sum per row half
    // instead of one per chunk and a merge (with a division) after each.
    let stats = {
        let mut ctx = tile_ctx(args, &cta(w.n0, w.bn), smem, 0);
        ctx.norm_pass = NormPass::Stats;
        E::apply::<Out, 1, NI>(epi, &mut all, &mut ctx);
        ctx.row_stats
    };

    let row = if w.global {
        exchange_global(args, w, stats)
    } else {
        exchange_cluster(w, stats, smem, xbuf, xbar)
    };

    // Apply, as a loop over the chunks inside N: one copy of the chain (written out, the eight
    // chains made an 18.7 K-instruction kernel whose epilogue waited on the instruction cache
    // for half of its samples). Each turn takes the first chunk and shifts the others down
    // (moves between constant indices). The counter goes through `uncached` each turn, so LLVM
    // cannot write the loop out by its bound (NI/8 turns).
    let chunks = (args.n - w.n0)
        .div_ceil(EPI_COLS)
        .min((NI / EPI_FRAGS) as u32);
    let mut rest = all;
    let mut j = 0;
    while j < chunks {
        let mut part = rest.first_chunk::<EPI_FRAGS>();
        rest.shift_chunks::<EPI_FRAGS>();
        let mut ctx = tile_ctx(args, &cta(w.n0 + j * EPI_COLS, EPI_COLS), smem, 0);
        ctx.norm_pass = NormPass::Apply;
        ctx.row_stats = row;
        E::apply::<Out, 1, EPI_FRAGS>(epi, &mut part, &mut ctx);
        if stage_c != 0 {
            // Built here from what the loop keeps live anyway rather than carried through the
            // collect pass and the exchange.
            let leader = w.tid % 128 == 0;
            let out = Staging {
                tmap: tmap_c,
                copy_out: false,
                buf: stage_c + j * STAGING_BYTES,
                warp: (w.row % 64) / 16,
                thread: w.tid % 128,
                barrier: 1 + w.tid / 128,
                leader,
                x: w.n0 + j * EPI_COLS,
                y: w.m0 + w.row / 64 * 64,
                residual_bar: 0,
                residual_phase: 0,
            };
            store_staged::<Out>(&part, &ctx, smem, &out);
            if leader && j + 1 == chunks {
                // The bulk stores read shared memory and write C after they are issued: both
                // must be done before the CTA exits (the tile is its last).
                bulk_wait_group::<0>();
            }
        } else {
            store_tile::<Out, 1, EPI_FRAGS>(&part, &ctx);
        }
        // Rotated to the back (its values are spent): after a plain shift the last chunks
        // stop changing, and LLVM peeled three turns to make them loop-invariant, which wrote
        // the chain out four times again.
        rest.set_last_chunk(&part);
        j = uncached(j + 1);
    }
}

/// Row-statistics exchange of a row-norm cluster: step 2 and 3 of [`row_norm_epilogue`].
/// `stats`: this CTA's (count, mean, M2) of the calling thread's two rows; returns the rows'
/// statistics merged over the cluster's `w.cn` tiles.
///
/// # Safety
/// As [`row_norm_epilogue`] without [`RowNormCta::global`].
#[inline(always)]
unsafe fn exchange_cluster(
    w: &RowNormCta,
    stats: [Moments; 2],
    smem: *mut u8,
    xbuf: u32,
    xbar: u32,
) -> [Moments; 2] {
    let buf = w.iter & 1;
    // Computed here, not hoisted to the kernel's start: held through the mainloop and the
    // epilogue, these addresses spilled.
    let row = uncached(w.row + (w.lane >> 2));
    let slot =
        |rank: u32, h: u32| xbuf + ((buf * MAX_NORM_CLUSTER + rank) * 128 + row + 8 * h) * 16;
    // Lanes 1-3 of each quad read the slots of the previous tile in this buffer too: the warp
    // barrier orders their reads before lane 0's release arrival that lets peers overwrite them.
    sync_warp();
    if w.lane & 3 == 0 {
        let base = shared_addr(smem);
        for r in 0..w.cn {
            for h in 0..2 {
                let st = stats[h as usize];
                st_cluster_f32x4(base + slot(w.rank, h), r, [st.n, st.mean, st.m2, 0.0]);
            }
            arrive_remote(xbar, r);
        }
    }
    wait_parity_cluster(xbar, (w.iter >> 1) & 1);
    let mut row = [Moments::default(); 2];
    for r in 0..w.cn {
        for h in 0..2 {
            let v = *(smem.add(slot(r, h) as usize) as *const [f32; 4]);
            row[h as usize] = row[h as usize].merge(Moments {
                n: v[0],
                mean: v[1],
                m2: v[2],
            });
        }
    }
    row
}

/// The named barrier of the 256 consumer threads around [`exchange_global`] (0 is the CTA's,
/// 1 and 2 the ping-pong warpgroups', 3 the cooperative bias copy's).
const EXCHANGE_BARRIER: u32 = 4;

/// Row-statistics exchange of `w.cn` CTAs that are not a cluster
/// ([`super::Sm90Args::norm_exchange`] = 1), through global memory, as the serial fixup of
/// split-K (CUTLASS's semaphore):
///
/// 1. the lanes holding column pair 0 of a row store its (count, mean, M2) in slot
///    `(tile_m·cn + rank)·128 + row` of [`GemmArgs::workspace`] (L2 only);
/// 2. after the consumers' barrier, thread 0 makes them visible GPU-wide (fence, then an
///    acquire-release add on the row block's counter in [`GemmArgs::counters`]) and spins
///    until all `cn` CTAs have arrived;
/// 3. then it adds once more: the last of the `2·cn` adds finds `2·cn − 1` and zeroes the
///    counter for the next launch (every CTA has passed its wait by then);
/// 4. after a second barrier every thread merges its rows' `cn` slots in rank order (L2
///    reads), as [`exchange_cluster`] does: every CTA gets bitwise-identical statistics.
///
/// Slots and counters are used once per launch (one tile per row block and CTA group), so
/// nothing waits for readers. The spin needs every CTA of the group resident together: the
/// launch is cooperative, and a CTA's later tiles never hold up a group's earlier ones.
///
/// # Safety
/// All 256 consumer threads call it together; the workspace and counters are as
/// [`super::Sm90Args::norm_exchange`] describes; all CTAs of the grid are resident at once.
#[inline(always)]
unsafe fn exchange_global(args: &GemmArgs, w: &RowNormCta, stats: [Moments; 2]) -> [Moments; 2] {
    let slots = args.workspace as *mut [f32; 4];
    // As in [`exchange_cluster`]: not hoisted.
    let row = uncached(w.row + (w.lane >> 2));
    let slot =
        |rank: u32, h: u32| slots.add(((w.tile_m * w.cn + rank) * 128 + row + 8 * h) as usize);
    if w.lane & 3 == 0 {
        for h in 0..2 {
            let st = stats[h as usize];
            st_global_cg_v4(slot(w.rank, h), [st.n, st.mean, st.m2, 0.0]);
        }
    }
    named_barrier(EXCHANGE_BARRIER, 256);
    if w.tid == 0 {
        let count = (args.counters as *mut u32).add(w.tile_m as usize);
        thread_fence();
        atomic_add_acq_rel_u32(count, 1);
        // A peer that never arrives (a broken launch contract) traps after seconds, not hangs.
        let mut spins = 0u32;
        while load_acquire_u32(count) < w.cn {
            spins += 1;
            if spins == 1 << 24 {
                crate::arch::trap();
            }
            nanosleep(32);
        }
        if atomic_add_acq_rel_u32(count, 1) == 2 * w.cn - 1 {
            st_u32(count, 0);
        }
    }
    named_barrier(EXCHANGE_BARRIER, 256);
    let mut row = [Moments::default(); 2];
    for r in 0..w.cn {
        for h in 0..2 {
            let v = ld_global_cg_v4(slot(r, h));
            row[h as usize] = row[h as usize].merge(Moments {
                n: v[0],
                mean: v[1],
                m2: v[2],
            });
        }
    }
    row
}
