//! The Hopper mainloop (sm_90a): TMA loads into a shared-memory ring guarded by mbarriers, a
//! producer warp, two consumer warpgroups issuing `wgmma`, a persistent CTA per SM walking the
//! output tiles in grouped order (the mainloop shape of CODA, Guo et al., arXiv 2605.19269; the same split into
//! producer / consumers / tile scheduler as CUTLASS 3's warp-specialized kernels).
//!
//! # Collectives
//!
//! [`run`] sets up the barriers and composes one piece per file (CUTLASS 3's collectives):
//! - `scheduler`: the persistent tile scheduler (trait `TileScheduler`): which tiles a CTA
//!   computes, in which order, over which k-tiles (grouped raster, cluster units, tail splits);
//! - `mainloop`: the ring (trait `Mainloop`): the producer's TMA loads and the consumers'
//!   `wgmma` k-loop into an `Acc`;
//! - `epilogue`: the consumers' chunked epilogue and store of C (staging buffers, TMA or
//!   threads' stores, the staged residual and bias), with `row_norm` for row-norm groups and
//!   `tail` for the fixup of split tail tiles.
//!
//! Every piece is inlined into the kernel, most with `#[inline(always)]`. The scheduler's
//! `coords`, `k_range` and tail split and the epilogue's `prefetch` and `load_residual` carry
//! no inline attribute: the compiler then inlines them only after optimizing each alone (as it
//! did when they were closures of one kernel function), and the kernels' code depends on that
//! order.
//!
//! # Roles (384 threads, three warpgroups)
//!
//! - Warpgroup 0, the **producer**, gives registers back (`setmaxnreg.dec` to
//!   [`PRODUCER_REGS`]); its thread 0 walks this CTA's tiles and, for each k-tile, waits until
//!   ring stage `s` is free (`empty[s]`), announces the bytes (`arrive.expect_tx` on `full[s]`)
//!   and issues two TMA copies: the BM×64 block of A and the BN×64 block of B, both K-major with
//!   128-byte swizzle.
//! - Warpgroups 1 and 2, the **consumers** (`setmaxnreg.inc` to [`CONSUMER_REGS`]), wait on
//!   `full[s]`, issue four m64nNk16 `wgmma`s per 64-row half they own, keep one batch in
//!   flight and release the previous stage (one `empty` arrival per warp), then run the
//!   epilogue (`super::finish`) from registers.
//!
//! Three schedules, chosen by the tile's warps along M (see [`TILES_SM90`]):
//! - **cooperative** (`WM = 8`): both warpgroups work on every tile, warpgroup `c` on rows
//!   `c·BM/2..`; their epilogues run at the same time;
//! - **ping-pong** (`WM = 4`): warpgroup `c` owns the CTA's tiles `c, c+2, …` whole; a pair
//!   of mbarriers hands the tensor cores over after each mainloop, so one warpgroup's epilogue
//!   overlaps the other's mainloop;
//! - **cluster** (`WM = 16`): two cooperative CTAs of a 2×1 cluster compute the two halves
//!   (along M) of a 256-row tile; each loads its own A block and half of the shared B block,
//!   multicast into both CTAs' rings, so B crosses L2 once per pair. A stage is free again once
//!   the consumers of both CTAs released it (remote `mbarrier` arrivals), and a producer waits
//!   for that after its last copy so that no CTA exits while its peer may still signal it.
//!
//! The ring is consumed in the order the producer fills it in every schedule.
//!
//! # The last round
//!
//! When the tiles do not divide evenly over the CTAs, the last round leaves most SMs idle for a
//! whole tile's mainloop (8192³ on 128×128 tiles: 4096 tiles on 132 SMs, 4 tiles in the last
//! round, about 3 % of the kernel). With [`Sm90Args::tail_splits`] = `s` on ping-pong tiles,
//! each of those tiles is computed in `s` K ranges by `s` CTAs; the last to finish sums the
//! partials and runs the epilogue (`tail_fixup`).
//!
//! # Storing C
//!
//! Where [`stages_c`] allows it, each consumer warpgroup writes its finished 64×64 chunks into
//! one of two 128-byte-swizzled staging buffers in shared memory. With a tensor map of C
//! ([`Sm90Args::tmap_c`]) its thread 0 stores each chunk with one bulk tensor copy
//! (`finish_chunk`, the TMA-store epilogue of CUTLASS 3): a few conflict-free `st.shared`
//! per thread instead of 16 scattered 4-byte global stores, and the copy overlaps the next
//! chunk's epilogue. Without one (C's start or row stride not 16-byte aligned) the
//! warpgroup's threads copy the chunk out row by row (`copy_out_staged`). Kernels without a
//! row norm always stage, so they carry no per-thread stores of the accumulators, which were
//! written out for every chunk and skipped whenever C had a map: the ping-pong
//! bias+GELU(tanh) kernel went from 5 432 to 4 136 SASS instructions, and ran 2.6 % faster at
//! 4096×3072×768. A row norm that writes partial statistics stages its pre-norm C only with
//! C's map. Otherwise threads store C themselves (f32 C, a pair stage's N/2-wide output,
//! row-norm clusters).
//!
//! A staged epilogue with a `residual` ([`Sm90Args::tmap_r`]) also reads it through the
//! staging buffers: thread 0 copies each chunk's residual into the buffer that chunk's C will
//! leave through (the first two chunks' during the mainloop, each later one while the chunk
//! before runs its stages), and the stage reads its pairs where the thread then writes C. One
//! bulk copy per chunk replaces 16 four-byte loads per thread that each used half of a sector.
//!
//! # Epilogue
//!
//! Each consumer warpgroup hands its accumulators to the stages in 64-column chunks
//! ([`EPI_COLS`]), one `finish_chunk` call per chunk: fewer values live at once next to the
//! 128 accumulator registers. Chunks are written out one after another, except for stage lists
//! with a row norm: eight copies of a row norm's chain outgrew the instruction cache, so those
//! run the chunks in a loop (one copy of the chain). Chains of elementwise stages (bias, GELU,
//! SiLU) were 1-4 % slower in a loop on the H200. [`PREFETCH_K_TILES`] before the end of a
//! tile's k-loop the warpgroup prefetches the tiles its stages will read into L2
//! ([`Stage::prefetch`]: the residual), so the epilogue's loads need not wait on DRAM.
//!
//! A list whose first stage reading a column vector is `bias` ([`Stage::COLUMN_VECTOR`]; 16-bit
//! C, no row norm) reads the tile's bias from shared memory: each consumer thread loads one
//! column when the tile's mainloop starts and stores it after, in a buffer in the padding
//! before the staging buffers ([`bias_offset`]). Loaded per chunk from
//! global memory, the bias was the GELU epilogue's top wait.
//!
//! # Row-norm clusters
//!
//! An epilogue with a row norm on a cooperative 128-row tile may run with
//! [`Sm90Args::norm_cluster`] = `cn` ≥ 1: clusters of `cn` CTAs along N, rank `r` computing
//! tile column `cn·u + r` of the same row block, so a cluster spans whole rows when
//! `cn·BN ≥ N`. The epilogue (`row_norm_epilogue`) runs the stages before the norm on every
//! chunk, swaps each row's (count, mean, M2) with the other CTAs through distributed shared
//! memory, and normalizes and stores in the same kernel: no partial-statistics workspace and no
//! second pass over C (CODA's partial statistics, exchanged on chip instead of through DRAM).
//!
//! A cluster's CTAs must sit in one GPC, so fewer clusters fit at once than SMs ÷ `cn`: 30
//! of 4 on an H200, which ran BERT-large's 32 row blocks (M = 4096, N = 1024) in two waves.
//! With [`Sm90Args::norm_exchange`] the `cn` CTAs of a row block are consecutive CTAs of a
//! cooperative launch instead (33 groups of 4), and swap the statistics through global
//! memory (`exchange_global`): a few hundred bytes per row block through L2.
//!
//! # Fragments
//!
//! Warp `w` of a consumer warpgroup holds, for each 64-row half `h` it owns, rows
//! `16w..16w+16` of that half in the `mma.sync` m16n8 layout ([`crate::mma::sm90`]): an
//! `Acc<1, BN/8>` with `warp_row = tile_row + half_row + 16w`, given to `super::finish` as is.
//! Stages see one warp along N (`warps_n = 1`), so none needs shared memory or a CTA barrier.
//!
//! # Launch
//!
//! Every wait is on an mbarrier with a timeout ([`crate::arch::mbarrier::wait_parity`]): a
//! protocol error traps instead of hanging the GPU. The exceptions are the cluster barriers
//! (`barrier.cluster`, no timeout) after the barriers' initialisation and at the end of a
//! row-norm cluster CTA's last tile, which every thread of the cluster reaches or exits past.
//!
//! Block (384, 1, 1), grid (min(tiles, SMs), 1, 1) (with a cluster: clusters of (2, 1, 1),
//! grid 2·min(tile pairs, SMs/2)), [`smem_bytes`] of dynamic shared memory,
//! `args.splits == 1` (with [`Sm90Args::tail_splits`], `args.workspace` and `args.counters`
//! hold the split tail's partials; with [`Sm90Args::norm_exchange`], the row-statistics
//! slots and counters, and the launch is cooperative), K ≥ 1, and the tensor maps of [`Sm90Args`] (B's box has BN/2 rows with a
//! cluster). [`smem_bytes_staged`] with C's map, and always where [`stages_c`] holds and the
//! epilogue has no row norm (the kernel traps with less). Edge tiles need no special case: TMA
//! writes zeros for rows and K columns outside the tensor, a bulk store skips elements past M
//! and N, and the threads' stores are predicated on M and N.

mod epilogue;
mod mainloop;
mod row_norm;
mod scheduler;
mod tail;

pub use scheduler::tile_coords;

use self::epilogue::{Epilogue, EpiloguePlan};
use self::mainloop::{Mainloop, Ring, WgmmaTma};
use self::row_norm::RowNorm;
use self::scheduler::{GroupedRaster, TileScheduler, with_first_tile};
use self::tail::{TailPiece, tail_fixup};
use crate::arch::mbarrier::{cluster_ctarank, cluster_sync, fence_init, init};
use crate::arch::shared::{dynamic_shared_base, shared_addr};
use crate::arch::sync::sync_threads;
use crate::arch::thread::{block_idx_x, thread_idx_x};
use crate::copy::tma::bulk_wait_group;
use crate::epilogue::{Acc, Stage};
use crate::gemm::{GemmArgs, TileShape};
use crate::mma::sm90::WgmmaInput;
use crate::params::KernelParam;
use crate::types::Element;

/// K-tiles before the end of a tile's mainloop at which its consumer warpgroup prefetches the
/// tile's residual into L2 ([`Stage::prefetch`]): about 2 µs of lead on 128×128 ping-pong
/// tiles (a k-tile takes about 0.25 µs there).
pub const PREFETCH_K_TILES: u32 = 8;

/// Threads per CTA: the producer warpgroup and two consumer warpgroups.
pub const THREADS: u32 = 384;
/// K per ring stage (elements): one 128-byte swizzle row of 16-bit elements.
pub const BK: u32 = 64;
/// Registers per thread the producer warpgroup keeps (`setmaxnreg.dec`).
pub const PRODUCER_REGS: u32 = 24;
/// Registers per thread of the consumer warpgroups (`setmaxnreg.inc`):
/// 128·24 + 256·240 ≤ 65536.
pub const CONSUMER_REGS: u32 = 240;
/// Columns of C one epilogue pass covers: each consumer warp hands its accumulators to the
/// epilogue in chunks of this many columns (8 n8 fragments, 16 values per thread). Row-norm
/// statistics are therefore kept per 64-column chunk: the statistics workspace has
/// `⌈N/64⌉` entries per row, and a norm finishes in the epilogue only when N ≤ 64.
pub const EPI_COLS: u32 = 64;
const EPI_FRAGS: usize = (EPI_COLS / 8) as usize;

/// The tile shapes of this mainloop, as [`TileShape`]s: BM×BN outputs of one tile,
/// `bk` = [`BK`], `warps_m` = the consumer warps that share one tile (4: ping-pong, one
/// warpgroup per tile; 8: cooperative, two warpgroups of one CTA; 16: a cluster of two
/// cooperative CTAs along M, each BM/2 rows, that multicast the shared B block to each other),
/// `warps_n` = 1, `stages` = ring depth. `mi()` is the number of 64-row halves each consumer
/// warpgroup owns, `ni()` = BN/8.
///
/// 256×128 is the cooperative tile with two 64-row halves per warpgroup (each warpgroup
/// 128×128, the same 128 accumulator registers as 128×256): cuBLAS's choice at the BERT-large
/// and LLaMA-3-8B projection shapes on the H200.
/// Per k-tile its warpgroups read 256 rows of shared memory each, against 320 on 128×256.
pub const TILES_SM90: &[TileShape] = &[
    TileShape::new(128, 256, 64, 8, 1, 4),
    TileShape::new(128, 128, 64, 4, 1, 6),
    TileShape::new(128, 128, 64, 8, 1, 6),
    TileShape::new(256, 256, 64, 16, 1, 4),
    TileShape::new(256, 128, 64, 8, 1, 4),
];

/// CTAs per cluster (along M) of tile shape `t`: 2 for `warps_m` = 16, else 1.
pub const fn cluster_m(t: &TileShape) -> u32 {
    if t.warps_m == 16 { 2 } else { 1 }
}

/// Rows of C one CTA computes per tile of shape `t`.
pub const fn cta_rows(t: &TileShape) -> u32 {
    t.bm / cluster_m(t)
}

/// Whether `t` is one of [`TILES_SM90`].
pub fn is_sm90_tile(t: &TileShape) -> bool {
    TILES_SM90.contains(t)
}

/// Whether tiles of shape `t` are computed by one consumer warpgroup each (ping-pong).
pub const fn is_pingpong(t: &TileShape) -> bool {
    t.warps_m == 4
}

/// Bytes of one ring stage: the CTA's A block ([`cta_rows`]) and the B block (BN rows), 128
/// bytes a row.
pub const fn stage_bytes(t: &TileShape) -> u32 {
    (cta_rows(t) + t.bn) * BK * 2
}

/// Dynamic shared memory of a CTA, bytes: the ring, then a `full` and an `empty` mbarrier per
/// stage, the two ping-pong `turn` mbarriers, 16 bytes that hold a row-norm cluster's two
/// exchange mbarriers or the consumer warpgroups' flags of a split tail tile (`tail_fixup`),
/// the four residual mbarriers ([`residual_bar`]), then the column bias buffers
/// ([`bias_offset`]).
pub const fn smem_bytes(t: &TileShape) -> u32 {
    norm_xchg_offset(t.stages * stage_bytes(t), t.stages)
}

/// Bytes of the column bias buffers ([`crate::epilogue::TileCtx::staged_bias`]), 16-bit
/// values: the BN ≤ 256 columns of a cooperative tile (its two consumer warpgroups share
/// them), or BN ≤ 128 per consumer warpgroup on ping-pong tiles. They sit in the padding before
/// [`staging_offset`], which therefore does not move.
pub const BIAS_BYTES: u32 = 512;

/// Byte offset of the column bias buffers in dynamic shared memory, after a ring of
/// `ring_bytes` and its `stages` and the mbarriers that follow it.
pub const fn bias_offset(ring_bytes: u32, stages: u32) -> u32 {
    ring_bytes + 16 * stages + 64
}

/// Byte offset of a row-norm cluster's statistics exchange ([`NORM_XCHG_BYTES`]) in dynamic
/// shared memory: after the column bias buffers, where [`smem_bytes`] ends.
pub const fn norm_xchg_offset(ring_bytes: u32, stages: u32) -> u32 {
    bias_offset(ring_bytes, stages) + BIAS_BYTES
}

/// Bytes of one output staging buffer: a consumer warpgroup's 64 rows × [`EPI_COLS`] columns
/// of 16-bit C, 128-byte rows in the 128-byte swizzle the C tensor map uses.
pub const STAGING_BYTES: u32 = 64 * EPI_COLS * 2;

/// Byte offset of the output staging buffers in dynamic shared memory: after the ring and the
/// mbarriers, 1024-byte aligned (the 128-byte swizzle's atom).
pub const fn staging_offset(t: &TileShape) -> u32 {
    smem_bytes(t).next_multiple_of(1024)
}

/// Whether a kernel stores C through shared memory with TMA when it is given C's tensor map
/// ([`Sm90Args::tmap_c`]): a 16-bit C (`out_bytes`) and an epilogue with no pair stage (its
/// output is N/2 wide), on any tile. A row norm stages C when it finishes in one chunk or
/// writes partial statistics (the pre-norm C goes out the same way); a row-norm group
/// ([`Sm90Args::norm_cluster`] > 0) has no staging buffers and stages only its last tile's C,
/// in the ring ([`ring_epilogue_offset`]).
pub const fn stages_c(out_bytes: usize, e: EpilogueTraits) -> bool {
    out_bytes == 2 && !e.pairs
}

/// Whether a kernel stages C in shared memory even without C's tensor map: [`stages_c`] and no
/// row norm. Such a kernel must be launched with [`smem_bytes_staged`]; its threads copy the
/// staged chunks to C when [`Sm90Args::tmap_c`] is 0.
pub const fn always_stages_c(out_bytes: usize, e: EpilogueTraits) -> bool {
    stages_c(out_bytes, e) && !e.row_reduction
}

/// The [`Stage`] constants of an epilogue that its launcher needs ([`stages_c`] reads `pairs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpilogueTraits {
    /// [`Stage::PAIRS`].
    pub pairs: bool,
    /// [`Stage::ROW_REDUCTION`].
    pub row_reduction: bool,
}

impl EpilogueTraits {
    /// The constants of the stage list `E`.
    pub const fn of<E: Stage>() -> Self {
        EpilogueTraits {
            pairs: E::PAIRS,
            row_reduction: E::ROW_REDUCTION,
        }
    }
}

/// Dynamic shared memory of a CTA that stores C with TMA ([`Sm90Args::tmap_c`] ≠ 0), bytes:
/// [`smem_bytes`] and, from [`staging_offset`], two [`STAGING_BYTES`] buffers per consumer
/// warpgroup (a chunk's bulk store reads one while the next chunk is written to the other).
pub const fn smem_bytes_staged(t: &TileShape) -> u32 {
    staging_offset(t) + 4 * STAGING_BYTES
}

/// Most CTAs of a row-norm cluster ([`Sm90Args::norm_cluster`]): the portable cluster size.
pub const MAX_NORM_CLUSTER: u32 = 8;

/// Bytes of the row-statistics exchange of a row-norm cluster: two buffers (tiles alternate)
/// of [`MAX_NORM_CLUSTER`] × 128 rows × (count, mean, M2, pad) f32.
pub const NORM_XCHG_BYTES: u32 = 2 * MAX_NORM_CLUSTER * 128 * 16;

/// Byte offset, from the end of the ring, of the mbarrier on which stage `s`'s copies
/// complete (`SharedMem`'s `full`).
pub const fn full_bar(s: u32) -> u32 {
    8 * s
}

/// Byte offset, from the end of the ring, of the mbarrier on which the consumers release stage
/// `s` of a ring of `stages`.
pub const fn empty_bar(stages: u32, s: u32) -> u32 {
    8 * (stages + s)
}

/// Byte offset, from the end of the ring, of ping-pong warpgroup `c`'s turn mbarrier.
pub const fn turn_bar(stages: u32, c: u32) -> u32 {
    8 * (2 * stages + c)
}

/// Byte offset, from the end of the ring, of a row-norm cluster's exchange mbarrier `p` (0 or
/// 1); a split tail keeps its two consumer warpgroups' `u32` flags there instead.
pub const fn xchg_bar(stages: u32, p: u32) -> u32 {
    8 * (2 * stages + 2 + p)
}

/// Byte offset, from the end of the ring, of the mbarrier on which residual chunk copies into
/// staging buffer `b` (0 or 1) of consumer warpgroup `c` complete ([`Sm90Args::tmap_r`]): after
/// the full, empty, turn and exchange barriers, in the padding before [`staging_offset`].
pub const fn residual_bar(stages: u32, c: u32, b: u32) -> u32 {
    8 * (2 * stages + 4 + 2 * c + b)
}

/// Whether a row-norm group's kernel ([`Sm90Args::norm_cluster`] > 0) can run the epilogue of
/// each CTA's last tile through its ring ([`ring_epilogue_offset`]): two stages, each with room
/// for a consumer warpgroup's BN/64 boxes of 64×64 16-bit values and more (so that no box sits
/// at offset 0, which [`crate::epilogue::TileCtx::staged_residual`] reads as none).
pub const fn ring_epilogue_fits(t: &TileShape) -> bool {
    t.stages >= 2 && stage_bytes(t) > (t.bn / EPI_COLS) * STAGING_BYTES
}

/// Byte offset in dynamic shared memory of consumer warpgroup `c`'s epilogue buffers (its 64
/// rows, BN/64 boxes of 64 × 64 16-bit values [`STAGING_BYTES`] apart, 128-byte swizzle) for
/// the last tile of a row-norm group's CTA, where `pos` is the ring position after that tile's
/// last k-tile: at the end of the stages at ring positions `pos` and `pos + 1` (one per
/// warpgroup), which the producer hands over as soon as their last k-tiles are consumed
/// (nothing else needs the ring afterwards). The producer copies the residual there with TMA
/// ([`Sm90Args::tmap_r`]), overlapping the mainloop's last k-tiles; each thread reads its
/// residual values where it then writes its C values, which go out with TMA
/// ([`Sm90Args::tmap_c`]).
pub const fn ring_epilogue_offset(t: &TileShape, pos: u64, c: u32) -> u32 {
    let stage = ((pos + c as u64) % t.stages as u64) as u32;
    (stage + 1) * stage_bytes(t) - (t.bn / EPI_COLS) * STAGING_BYTES
}

/// Whether tiles of shape `t` can finish row norms in a cluster along N: cooperative tiles of
/// 128 rows (each consumer warp holds one m16 fragment row).
pub const fn row_norm_cluster_tile(t: &TileShape) -> bool {
    t.warps_m == 8 && t.bm == 128
}

/// Dynamic shared memory of a CTA of a row-norm cluster, bytes: [`smem_bytes`], then the
/// [`NORM_XCHG_BYTES`] exchange ([`norm_xchg_offset`], 16-byte aligned). A row-norm group has
/// no staging buffers, so the exchange may take their place.
pub const fn smem_bytes_row_norm(t: &TileShape) -> u32 {
    smem_bytes(t) + NORM_XCHG_BYTES
}

/// Why `t` cannot be instantiated on this mainloop, or `None`.
pub const fn check(t: &TileShape) -> Option<&'static str> {
    if t.bk != BK {
        return Some("BK must be 64 (one 128-byte swizzle row of 16-bit elements)");
    }
    if t.warps_n != 1 || (t.warps_m != 4 && t.warps_m != 8 && t.warps_m != 16) {
        return Some(
            "warps_m must be 4 (ping-pong), 8 (cooperative) or 16 (2-CTA cluster) with warps_n = 1",
        );
    }
    if t.bn != 64 && t.bn != 128 && t.bn != 256 {
        return Some("BN must be 64, 128 or 256 (wgmma m64nNk16)");
    }
    if t.bm % (16 * t.warps_m) != 0 || t.mi() == 0 || t.mi() > 2 {
        return Some("each consumer warpgroup owns one or two 64-row halves");
    }
    if cta_rows(t) > 256 {
        return Some("a CTA's rows must be at most 256 (a TMA box has at most 256 rows)");
    }
    if t.acc_registers() > 128 {
        return Some("more than 128 accumulator registers per thread");
    }
    if t.stages < 2 || t.stages > 32 || smem_bytes(t) > 227 * 1024 {
        return Some("the ring needs two to as many stages as 227 KB of shared memory hold");
    }
    None
}

/// The Hopper kernel's third parameter.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sm90Args {
    /// Generic address of A's tensor map in global memory (K innermost, box 64 × [`cta_rows`],
    /// 128-byte swizzle).
    pub tmap_a: u64,
    /// Generic address of B's tensor map (B stored N×K; box 64 × BN, or 64 × BN/2 with a
    /// cluster; 128-byte swizzle).
    pub tmap_b: u64,
    /// Tile rows per raster group: consecutive tiles walk down `group_m` tile rows before the
    /// next tile column, so CTAs running together share A and B panels in L2. At least 1.
    pub group_m: u32,
    /// Row norms on cooperative tiles: 0 when the norm (if any) finishes per tile or through
    /// partial statistics; `c` in 1..=[`MAX_NORM_CLUSTER`] when the kernel runs in clusters of
    /// `c` CTAs along N (grid a multiple of `c`) whose tiles together span every row
    /// (`c·BN ≥ N`): they exchange row statistics through distributed shared memory and finish
    /// the norm in the epilogue ([`smem_bytes_row_norm`] of shared memory).
    pub norm_cluster: u32,
    /// Generic address of C's tensor map (16-bit C, dimensions (N, M), box 64 × 64, 128-byte
    /// swizzle), or 0. When set and [`stages_c`] holds, each consumer warpgroup stages its
    /// 64×64 chunks in shared memory and stores them with TMA (rows and columns past M and N
    /// are clipped by the copy): launched with [`smem_bytes_staged`], except a row-norm group
    /// ([`Sm90Args::norm_cluster`] > 0), which stages its CTA's last tile in the ring
    /// ([`ring_epilogue_offset`]) and stores earlier tiles per thread. With 0, kernels without
    /// a row norm still stage the chunks and their threads copy them to C; others, and every
    /// kernel where [`stages_c`] does not hold, store C directly from the accumulators.
    pub tmap_c: u64,
    /// Generic address of the `residual` matrix's tensor map (16-bit, dimensions (N, M), box
    /// 64 × 64, 128-byte swizzle, like C's), or 0. With [`Sm90Args::tmap_c`], for an
    /// epilogue whose one `residual` stage runs in this kernel: each consumer warpgroup then
    /// copies the residual of each 64×64 chunk into the staging buffer that chunk's C goes
    /// out through, and the stage reads it there ([`crate::epilogue::TileCtx::staged_residual`]):
    /// one bulk copy per chunk instead of 16 half-sector loads per thread. A row-norm group
    /// ([`Sm90Args::norm_cluster`] > 0) takes it with or without C's map: the producer copies
    /// each CTA's last tile's residual into the ring ([`ring_epilogue_offset`]).
    pub tmap_r: u64,
    /// K pieces of each tile of the last, partial round on ping-pong tiles (0 or 1: none).
    /// With `s` ≥ 2 and `T` tiles on `G` CTAs (grid), every CTA first computes its
    /// ⌊T/G⌋ whole tiles; then the `T mod G` tiles left are each split into `s` ranges of
    /// k-tiles, CTA `b < s·(T mod G)` computing piece `b mod s` of tail tile `b / s`, so the
    /// last round keeps `s` times as many SMs busy (the data-parallel + stream-K hybrid of
    /// Osama et al., "Stream-K", PPoPP 2023, with CUTLASS's serial fixup). Needs `s ≤ ⌈K/64⌉`,
    /// `s·(T mod G) ≤ G`, and in [`GemmArgs::workspace`] / [`GemmArgs::counters`]
    /// `(T mod G)·s` partial tiles (f32, 128 threads × MI·NI fragments of 16 bytes each) and
    /// `T mod G` zeroed `u32` counters (`tail_fixup`); ignored on other schedules.
    pub tail_splits: u32,
    /// With [`Sm90Args::norm_cluster`] = `c` > 0: 0 when the `c` CTAs of a row block are a
    /// cluster that swaps row statistics through distributed shared memory; 1 when they are
    /// `c` consecutive CTAs of a grid launched without clusters but cooperatively (all CTAs
    /// resident at once), which swap them through global memory: [`GemmArgs::workspace`]
    /// holds `⌈M/128⌉·c·128` slots of 16 bytes and [`GemmArgs::counters`] `⌈M/128⌉` zeroed
    /// `u32` counters, left zeroed again (`exchange_global`). A cluster's CTAs must sit in
    /// one GPC, so fewer such groups fit at once than SMs ÷ `c` (30 of 4 on an H200).
    pub norm_exchange: u32,
}

unsafe impl KernelParam for Sm90Args {}

/// `setmaxnreg.dec.sync.aligned.u32 40`.
#[inline(always)]
unsafe fn release_registers() {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const PRODUCER_REGS, options(nostack));
}

/// `setmaxnreg.inc.sync.aligned.u32 232`.
#[inline(always)]
unsafe fn claim_registers() {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const CONSUMER_REGS, options(nostack));
}

/// The CTA's dynamic shared memory: the ring of `STAGES` stages (each the A block, then the B
/// block), then a `full` and an `empty` mbarrier per stage, the two ping-pong `turn`
/// mbarriers, 16 bytes for a row-norm cluster's two exchange mbarriers or a split tail's two
/// flags, the four residual mbarriers ([`residual_bar`]), the column bias buffers
/// ([`bias_offset`]), and from [`staging_offset`] the staging buffers; a row-norm cluster's
/// exchange follows [`smem_bytes`].
#[derive(Clone, Copy)]
struct SharedMem<const STAGES: u32> {
    /// Generic address of its first byte.
    ptr: *mut u8,
    /// Its `.shared` address.
    base: u32,
    /// Bytes of a ring stage, and of its A block.
    stage_bytes: u32,
    a_bytes: u32,
}

impl<const STAGES: u32> SharedMem<STAGES> {
    /// Bytes of the ring.
    #[inline(always)]
    fn ring_bytes(&self) -> u32 {
        STAGES * self.stage_bytes
    }

    /// `.shared` address of stage `s`'s A block.
    #[inline(always)]
    fn stage_a(&self, s: u32) -> u32 {
        self.base + s * self.stage_bytes
    }

    /// `.shared` address of stage `s`'s B block.
    #[inline(always)]
    fn stage_b(&self, s: u32) -> u32 {
        self.base + s * self.stage_bytes + self.a_bytes
    }

    /// The mbarrier on which stage `s`'s copies complete.
    #[inline(always)]
    fn full(&self, s: u32) -> u32 {
        self.base + self.ring_bytes() + full_bar(s)
    }

    /// The mbarrier on which the consumers release stage `s`.
    #[inline(always)]
    fn empty(&self, s: u32) -> u32 {
        self.base + self.ring_bytes() + empty_bar(STAGES, s)
    }

    /// Ping-pong: `turn[c]` completes a phase when the other warpgroup has issued its last
    /// k-tile (one arrival per warp), handing the tensor cores to warpgroup `c`.
    #[inline(always)]
    fn turn(&self, c: u32) -> u32 {
        self.base + self.ring_bytes() + turn_bar(STAGES, c)
    }

    /// A row-norm cluster's exchange mbarrier of buffer `p` (0 or 1).
    #[inline(always)]
    fn xchg_bar(&self, p: u32) -> u32 {
        self.base + self.ring_bytes() + xchg_bar(STAGES, p)
    }

    /// Byte offset of a row-norm cluster's exchange buffers ([`norm_xchg_offset`]).
    #[inline(always)]
    fn xchg_buf(&self) -> u32 {
        norm_xchg_offset(self.ring_bytes(), STAGES)
    }

    /// Consumer warpgroup `c`'s flag of a split tail tile (where the exchange mbarriers of a
    /// row-norm cluster would be).
    ///
    /// # Safety
    /// `ptr` is the dynamic shared memory of a kernel launched with [`smem_bytes`].
    #[inline(always)]
    unsafe fn tail_flag(&self, c: u32) -> *mut u32 {
        let flag = self
            .ptr
            .add((self.ring_bytes() + xchg_bar(STAGES, 0) + 4 * c) as usize);
        flag as *mut u32
    }

    /// The mbarrier of consumer warpgroup `c`'s residual copies into its staging buffer `b`
    /// ([`residual_bar`]).
    #[inline(always)]
    fn residual_bar(&self, c: u32, b: u32) -> u32 {
        self.base + self.ring_bytes() + residual_bar(STAGES, c, b)
    }
}

/// A consumer thread's place: its warpgroup among the consumers, its warp in it and its lane.
#[derive(Clone, Copy)]
struct Consumer {
    /// Thread index in the CTA (128..384).
    tid: u32,
    /// Consumer warpgroup, 0 or 1.
    c: u32,
    /// Warp within the warpgroup.
    w: u32,
    lane: u32,
    /// Thread 0 of the warpgroup: it issues the warpgroup's bulk copies.
    leader: bool,
    /// First row of the warpgroup's first 64-row half within the CTA's tile.
    row0: u32,
}

/// `C = epilogue(A·B)` with this CTA (or cluster) persistent over tiles (tile pairs)
/// `u + i·units` in grouped raster order. See the [module docs](self) and [`crate::gemm`] for
/// layouts.
///
/// Type and const parameters: `In` the 16-bit input type; `Out` the element type of C; `MI`
/// the 64-row halves each consumer warpgroup owns; `NI` = BN/8; `WM` 4 (ping-pong), 8
/// (cooperative) or 16 (2-CTA cluster); `STAGES` the ring depth; `E` the epilogue. A CTA's
/// tile has `min(WM, 8)·16·MI` rows.
///
/// # Safety
/// The launcher validated every operand (host `validate`), built the tensor maps from the same
/// A and B (B stored N×K) with the boxes [`Sm90Args`] documents, passed `args.splits == 1` and
/// `args.k ≥ 1`, and launched [`THREADS`] threads with [`smem_bytes`] of shared memory (in
/// clusters of two along x for `WM = 16`).
#[inline(always)]
pub unsafe fn run<
    In: WgmmaInput,
    Out: Element,
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const STAGES: u32,
    E: Stage,
>(
    args: &GemmArgs,
    epi: &E::Params,
    sm90: &Sm90Args,
) {
    let pingpong = WM == 4;
    // Cluster of two CTAs along M (WM = 16): each CTA is a cooperative 8-warp consumer pair.
    let cluster = if WM == 16 { 2 } else { 1 };
    let bm = (WM / cluster) * 16 * MI as u32;
    let bn = NI as u32 * 8;
    let tile = TileShape::new(bm * cluster, bn, BK, WM, 1, STAGES);
    const {
        assert!(
            WM == 4 || WM == 8 || WM == 16,
            "WM is 4 (ping-pong), 8 (cooperative) or 16 (2-CTA cluster)"
        );
        assert!(MI == 1 || MI == 2, "one or two 64-row halves per warpgroup");
        assert!(NI == 8 || NI == 16 || NI == 32, "BN is 64, 128 or 256");
        assert!(STAGES >= 2, "at least two ring stages");
        assert!(
            residual_bar(STAGES, 1, 2) <= 1024,
            "the barriers fit in the padding before the staging buffers"
        );
        assert!(
            bias_offset(0, STAGES) + BIAS_BYTES <= 1024,
            "the bias buffers fit there too"
        );
    };
    let a_bytes = bm * BK * 2;
    // No split-K here: a constant `splits` lets the epilogue drop its split-K path.
    let args = &GemmArgs { splits: 1, ..*args };
    let stage_bytes = stage_bytes(&tile);
    // A norm's finishing kernel, launched as this grid's programmatic dependent, may then take
    // each SM this grid leaves; it waits for the whole grid before it reads C. The grid is
    // persistent (every CTA resident from the start), so nothing of it waits behind that one.
    crate::arch::sync::launch_dependent_grids();

    let tid = thread_idx_x();
    let wg = tid / 128;
    let ptr = dynamic_shared_base();
    let smem = SharedMem::<STAGES> {
        ptr,
        base: shared_addr(ptr),
        stage_bytes,
        a_bytes,
    };
    let mainloop = WgmmaTma::<In, MI, NI, STAGES>::new(smem, sm90, tile);
    let rn = RowNorm::new::<E>(args, sm90, &tile);
    let plan = EpiloguePlan::new::<Out, E>(sm90, &tile, rn.active);
    let rn = rn.with_ring::<Out, E>(sm90, &tile);

    if tid == 0 {
        mainloop.init_barriers();
        rn.init_barriers(&smem);
        if plan.staged_residual || rn.ring_epilogue {
            for q in 0..4 {
                init(smem.residual_bar(q / 2, q % 2), 1);
            }
        }
        fence_init();
    }
    // The first tile's first stages, issued by thread 0 (the producer) before the CTA's
    // barrier, `setmaxnreg` and the scheduler's reads of the constant bank, whose first use
    // stalled about 3 µs: the loads' DRAM latency overlaps that; the producer below skips
    // these k-tiles of unit 0. Cooperative tiles without a cluster (a peer's barriers may not
    // exist yet) and without row norms only: the ping-pong kernels gained nothing (their fused
    // epilogues measured up to 4 % slower at 8192 rows) and in the LayerNorm kernels ptxas
    // spilled.
    let early = !pingpong && cluster == 1 && !E::ROW_REDUCTION;
    if tid == 0 && early {
        // Plain reads, which LLVM hoists for every thread: all warps then take their first
        // constant-bank reads before `setmaxnreg`. With `uncached` reads here (thread 0 only)
        // the gain was gone.
        with_first_tile(args, sm90, bm, bn, |first| mainloop.prime(first, args.k));
    }
    let rank = if rn.global {
        sync_threads();
        block_idx_x() % rn.cn
    } else if cluster > 1 || rn.cn > 1 {
        // The peers' arrivals, multicast copies and statistics target these barriers.
        cluster_sync();
        cluster_ctarank()
    } else {
        sync_threads();
        0
    };
    // Along M (2×1 cluster tiles) or along N (row-norm clusters); the other is 0.
    let (rank_m, rank_n) = if rn.cn > 1 { (0, rank) } else { (rank, 0) };
    let sched = GroupedRaster::<WM>::new(args, sm90, bm, bn, rn.cn, rank_m, rank_n);
    let my_tiles = sched.count();

    if wg == 0 {
        release_registers();
        if tid == 0 {
            mainloop.fence_tensor_maps();
            rn.fence_tensor_maps(sm90);
            let mut ring = Ring::<STAGES>::at(0);
            for i in 0..my_tiles {
                mainloop.load(&mut ring, &sched, i, rank_m, |kt| {
                    early && i == 0 && kt < STAGES
                });
            }
            if rn.ring_epilogue && my_tiles > 0 {
                let last = sched.coords(my_tiles - 1);
                let pos = my_tiles as u64 * sched.k_tiles() as u64;
                for c in 0..2 {
                    // The stage's last k-tile is consumed.
                    mainloop.wait_free(ring);
                    rn.fill_ring(&smem, sm90, &tile, c, last, pos);
                    ring.advance();
                }
            }
            mainloop.drain(&mut ring);
        }
    } else {
        claim_registers();
        let c = wg - 1;
        let lane = tid & 31;
        let w = (tid / 32) % 4;
        let leader = tid % 128 == 0;
        plan.fence_tensor_maps(sm90, rn.ring_store, leader);
        let thread = Consumer {
            tid,
            c,
            w,
            lane,
            leader,
            row0: if pingpong { 0 } else { c * 64 * MI as u32 },
        };
        let mut epilogue =
            Epilogue::<Out, MI, NI, STAGES, E>::new(plan, args, epi, sm90, smem, tile, thread);
        let (first, step) = if pingpong { (c, 2) } else { (0, 1) };
        let mut i = first;
        while i < my_tiles {
            let (tm, tn) = sched.coords(i);
            // A piece of a split tile does not know yet whether it runs the epilogue.
            let piece = sched.piece(i).is_some();
            let prefetch_at = if piece {
                u32::MAX
            } else {
                sched.k_tiles().saturating_sub(PREFETCH_K_TILES)
            };
            let out = epilogue.begin(tm, tn);
            mainloop.wait_turn(&thread, i);
            let mut acc = Acc::<MI, NI>::zero();
            // Every unit before a piece is whole: the ring position counts whole tiles.
            let ring = Ring::<STAGES>::at(i as u64 * sched.k_tiles() as u64);
            let k = sched.k_range(i);
            let last = mainloop.mma(&mut acc, ring, k, rank_m, &thread, prefetch_at, || {
                epilogue.at_prefetch(&out)
            });
            if pingpong && i + 1 < my_tiles {
                mainloop.hand_over(&thread);
            }
            mainloop.mma_tail(&mut acc, k, last, rank_m, &thread);
            if let Some(t) = if piece { sched.piece(i) } else { None } {
                let last = tail_fixup(
                    args,
                    &mut acc,
                    &TailPiece {
                        flag: smem.tail_flag(c),
                        barrier: 1 + c,
                        thread: tid % 128,
                        tile: t.tile(),
                        piece: t.piece(),
                        pieces: t.pieces,
                    },
                );
                if !last {
                    // A piece is a CTA's last unit: its earlier tiles' bulk stores must be done
                    // before it exits.
                    if epilogue.waits_for_stores() {
                        bulk_wait_group::<0>();
                    }
                    i += step;
                    continue;
                }
                epilogue.residual_ahead(&out);
            }
            if rn.active {
                epilogue.row_norm_tile(&out, &acc, &rn, rank_n, i, &sched);
                i += step;
                if rn.cn > 1 && !rn.global && i >= my_tiles {
                    // Peers write their statistics into this CTA's shared memory. The
                    // exchange barrier already orders those writes before this CTA reads them;
                    // this cluster barrier makes the exit order explicit, as distributed
                    // shared memory asks (exited threads count as arrived).
                    cluster_sync();
                }
                continue;
            }
            epilogue.tile(&out, acc);
            i += step;
            if epilogue.waits_for_stores() && i >= my_tiles {
                // The bulk stores read shared memory and write C after they are issued: both
                // must be done before the CTA exits. Waiting here, not after the loop: any
                // instruction after the loop makes ptxas keep the consumer code within the
                // launch's 168 registers.
                bulk_wait_group::<0>();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instantiated_tiles_are_valid() {
        for t in TILES_SM90 {
            assert_eq!(check(t), None, "{t:?}");
            assert!(smem_bytes(t) <= 232_448 - 1024, "{t:?}");
            assert_eq!(stage_bytes(t) % 1024, 0, "stages keep 1024-byte alignment");
        }
        assert!(is_pingpong(&TILES_SM90[1]) && !is_pingpong(&TILES_SM90[0]));
        assert_eq!(TILES_SM90[0].mi(), 1);
        assert_eq!(TILES_SM90[1].mi(), 2);
        let cluster = TILES_SM90[3];
        assert_eq!(
            (cluster_m(&cluster), cta_rows(&cluster), cluster.mi()),
            (2, 128, 1)
        );
        assert_eq!(stage_bytes(&cluster), stage_bytes(&TILES_SM90[0]));
        let tall = TILES_SM90[4];
        assert_eq!((tall.mi(), tall.ni(), cta_rows(&tall)), (2, 16, 256));
        assert_eq!(tall.acc_registers(), TILES_SM90[0].acc_registers());
        assert!(!row_norm_cluster_tile(&tall));
        // Kernels that always stage C (`always_stages_c`) have no tile to fall back to.
        for t in TILES_SM90 {
            assert!(
                smem_bytes_staged(t) <= 232_448,
                "C staging fits next to the ring of {t:?} on an H100/H200"
            );
        }
    }

    #[test]
    fn bad_tiles_say_why() {
        assert!(
            check(&TileShape::new(128, 256, 32, 8, 1, 4))
                .unwrap()
                .contains("BK")
        );
        assert!(
            check(&TileShape::new(128, 256, 64, 8, 1, 5))
                .unwrap()
                .contains("stages")
        );
        assert!(
            check(&TileShape::new(128, 256, 64, 4, 1, 3))
                .unwrap()
                .contains("accumulator")
        );
    }
}
