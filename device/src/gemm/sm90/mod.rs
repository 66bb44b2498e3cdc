//! The Hopper mainloop (sm_90a): TMA loads into a shared-memory ring guarded by mbarriers, a
//! producer warp, two consumer warpgroups issuing `wgmma`, a persistent CTA per SM walking the
//! output tiles in grouped order (the mainloop shape of CODA, Guo et al., arXiv 2605.19269; the same split into
//! producer / consumers / tile scheduler as CUTLASS 3's warp-specialized kernels).
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
//! with a row norm or a stage heavy per value ([`Stage::HEAVY_PER_VALUE`], erf GELU): eight
//! copies of a row norm's chain outgrew the instruction cache, and erf GELU ran 5-11 % faster
//! in a loop, so those run the chunks in a loop (one copy of the chain). Short chains (bias,
//! tanh GELU, SiLU) were 1-4 % slower in a loop on the H200. [`PREFETCH_K_TILES`] before the
//! end of a tile's k-loop the warpgroup prefetches the tiles its stages will read into L2
//! ([`Stage::prefetch`]: the residual), so the epilogue's loads need not wait on DRAM.
//!
//! A list whose first stage reading a column vector is `bias` ([`Stage::COLUMN_VECTOR`]; 16-bit
//! C, no row norm, no stage heavy per value) reads the tile's bias from shared memory: each
//! consumer thread loads one column when the tile's mainloop starts and stores it after, in a
//! buffer in the padding before the staging buffers ([`bias_offset`]). Loaded per chunk from
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
//! protocol error traps instead of hanging the GPU.
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
mod row_norm;
mod scheduler;
mod tail;

pub use scheduler::tile_coords;

use self::epilogue::{Staging, bias_share, finish_chunk};
use self::row_norm::{RowNormCta, row_norm_epilogue};
use self::scheduler::TailSplit;
use self::tail::{TailPiece, tail_fixup};
use crate::arch::mbarrier::{
    arrive, arrive_expect_tx, arrive_remote_cta, cluster_ctarank, cluster_sync, fence_init, init,
    wait_parity,
};
use crate::arch::shared::{dynamic_shared_base, dynamic_shared_size, shared_addr};
use crate::arch::sync::sync_threads;
use crate::arch::thread::{
    block_and_grid_x_uncached, block_idx_x, grid_dim_x, thread_idx_x, uncached,
};
use crate::copy::tma::{
    bulk_read_wait_barrier, bulk_wait_group, bulk_wait_group_read, fence_tensormap_acquire,
    load_2d, load_2d_multicast, prefetch_tensormap,
};
use crate::epilogue::stages::Moments;
use crate::epilogue::{Acc, NormPass, Prefetch, Stage};
use crate::gemm::finish::Cta;
use crate::gemm::{GemmArgs, TileShape};
use crate::mma::sm90::{
    WgmmaInput, commit_group, fence, fence_operands, smem_desc_offset, smem_desc_sw128, wait_group,
};
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
    bias_offset(t.stages * stage_bytes(t), t.stages) + BIAS_BYTES
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

/// Dynamic shared memory of a CTA of a row-norm cluster, bytes: [`smem_bytes`] (whose last 16
/// bytes hold the two exchange mbarriers), then the [`NORM_XCHG_BYTES`] exchange (16-byte
/// aligned).
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

/// A ring position: stage index and the parity of its current lap.
#[derive(Clone, Copy)]
struct Ring<const STAGES: u32> {
    stage: u32,
    phase: u32,
}

impl<const STAGES: u32> Ring<STAGES> {
    #[inline(always)]
    fn at(pos: u64) -> Self {
        Ring {
            stage: (pos % STAGES as u64) as u32,
            phase: ((pos / STAGES as u64) & 1) as u32,
        }
    }

    #[inline(always)]
    fn advance(&mut self) {
        self.stage += 1;
        if self.stage == STAGES {
            self.stage = 0;
            self.phase ^= 1;
        }
    }
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
    let smem = dynamic_shared_base();
    let base = shared_addr(smem);
    let ring_bytes = STAGES * stage_bytes;
    let full = |s: u32| base + ring_bytes + 8 * s;
    let empty = |s: u32| base + ring_bytes + 8 * (STAGES + s);
    // Ping-pong: `turn[c]` completes a phase when the other warpgroup has issued its last
    // k-tile (one arrival per warp), handing the tensor cores to warpgroup `c`.
    let turn = |c: u32| base + ring_bytes + 8 * (2 * STAGES + c);
    let s_a = |s: u32| base + s * stage_bytes;
    let s_b = |s: u32| base + s * stage_bytes + a_bytes;
    // One arrival per consumer warp that reads a stage, in every CTA whose producer fills it
    // (with a cluster, each CTA's B half lands in both).
    let releases = if pingpong { 4 } else { 8 } * cluster;
    // Row norms on cooperative 128-row tiles with `norm_cluster = cn`: the cluster's CTAs
    // compute `cn` adjacent tiles of one row block and swap row statistics (see `row_norm_epilogue`).
    let row_norm = E::ROW_REDUCTION && WM == 8 && MI == 1 && sm90.norm_cluster > 0;
    let cn = if row_norm { sm90.norm_cluster } else { 1 };
    // A row wider than the cluster would be normalized over part of its columns: a broken
    // launch contract, stopped here rather than answered wrongly.
    // Row statistics through global memory: CTAs `cn·u .. cn·u + cn` form the group.
    let global_x = row_norm && sm90.norm_exchange != 0;
    if cn > MAX_NORM_CLUSTER
        || (row_norm && args.n.div_ceil(bn) > cn)
        || (global_x && (args.workspace == 0 || args.counters == 0))
    {
        crate::arch::trap();
    }
    // The exchange's two mbarriers (`cn` CTAs × 64 writer lanes arrive per phase) and buffers.
    let xbar = |p: u32| base + ring_bytes + 8 * (2 * STAGES + 2 + p);
    let xbuf = ring_bytes + 16 * STAGES + 32;
    // C through shared memory (see `stages_c`): with C's tensor map thread 0 of each consumer
    // warpgroup stores a staged chunk with TMA, and the residual (`Sm90Args::tmap_r`) comes in
    // the same way; without it the warpgroup's threads copy the chunk out. Kernels without a
    // row norm always stage (a compile-time choice: the per-thread stores of the accumulators,
    // written out for every chunk, are not in them); a row norm's cluster has no staging
    // buffers, so its kernels stage only when given C's map.
    let (out_bytes, traits) = (core::mem::size_of::<Out>(), EpilogueTraits::of::<E>());
    let always_staged = always_stages_c(out_bytes, traits);
    let tma_c = stages_c(out_bytes, traits) && sm90.tmap_c != 0 && !row_norm;
    let staged = always_staged || tma_c;
    if always_staged && dynamic_shared_size() < smem_bytes_staged(&tile) {
        crate::arch::trap();
    }
    let staged_residual = E::READS_MATRIX && tma_c && sm90.tmap_r != 0;
    let rbar = |c: u32, b: u32| base + ring_bytes + residual_bar(STAGES, c, b);
    // A row-norm group has no staging buffers: each CTA's last tile reads its residual and
    // stages C in the ring instead (`ring_epilogue_offset`), which the producer hands over
    // (with the residual in it) on barrier `rbar(c, 0)` of each consumer warpgroup `c`. Earlier
    // tiles (rows wider than one round) read global memory and store C per thread.
    let ring_residual = row_norm && E::READS_MATRIX && sm90.tmap_r != 0;
    let ring_store = row_norm && stages_c(out_bytes, traits) && sm90.tmap_c != 0;
    let ring_epilogue = (ring_residual || ring_store) && ring_epilogue_fits(&tile);
    let (ring_residual, ring_store) = (ring_residual && ring_epilogue, ring_store && ring_epilogue);
    let per_half = (NI / EPI_FRAGS) as u32;
    // The tile's column bias, copied into shared memory by the consumer warpgroups that run
    // the epilogue: each thread loads one column when the tile's mainloop starts and stores
    // it after the mainloop, so no chunk of the epilogue waits on a global load of the bias
    // (loaded per chunk, it was the epilogue's top stall). 16-bit C; no row norm (their
    // kernels spilled with more live values) and no stage heavy per value (erf GELU: its chunk
    // loop was then written out three times, ptxas of sm_90a).
    let stage_bias = E::COLUMN_VECTOR
        && !E::ROW_REDUCTION
        && !E::HEAVY_PER_VALUE
        && core::mem::size_of::<Out>() == 2
        && (!pingpong || bn <= 128);
    // Ping-pong warpgroups run different tiles: a buffer each, and their own named barrier
    // (`1 + c`, as the staged stores). Cooperative ones share the tile's columns: one buffer,
    // each of the 256 consumer threads copies one column, barrier 3 spans both.
    let bias_buf = |c: u32| bias_offset(ring_bytes, STAGES) + if pingpong { c * 2 * bn } else { 0 };
    let bias_barrier = |c: u32| if pingpong { (1 + c, 128) } else { (3, 256) };

    if tid == 0 {
        for s in 0..STAGES {
            init(full(s), 1);
            init(empty(s), releases);
        }
        init(turn(0), 4);
        init(turn(1), 4);
        if row_norm && !global_x {
            init(xbar(0), 64 * cn);
            init(xbar(1), 64 * cn);
        }
        if staged_residual || ring_epilogue {
            for q in 0..4 {
                init(rbar(q / 2, q % 2), 1);
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
        let (tm_count, tn_count) = (args.m.div_ceil(bm), args.n.div_ceil(bn));
        let unit0 = block_idx_x();
        if unit0 < tm_count * tn_count {
            let group0 = if sm90.group_m == 0 { 1 } else { sm90.group_m };
            let (tm, tn) = tile_coords(unit0, tm_count, tn_count, group0);
            fence_tensormap_acquire(sm90.tmap_a);
            fence_tensormap_acquire(sm90.tmap_b);
            for kt in 0..args.k.div_ceil(BK).min(STAGES) {
                arrive_expect_tx(full(kt), stage_bytes);
                load_2d(
                    s_a(kt),
                    sm90.tmap_a,
                    (kt * BK) as i32,
                    (tm * bm) as i32,
                    full(kt),
                );
                load_2d(
                    s_b(kt),
                    sm90.tmap_b,
                    (kt * BK) as i32,
                    (tn * bn) as i32,
                    full(kt),
                );
            }
        }
    }
    let rank = if global_x {
        sync_threads();
        block_idx_x() % cn
    } else if cluster > 1 || cn > 1 {
        // The peers' arrivals, multicast copies and statistics target these barriers.
        cluster_sync();
        cluster_ctarank()
    } else {
        sync_threads();
        0
    };
    // Along M (2×1 cluster tiles) or along N (row-norm clusters); the other is 0.
    let (rank_m, rank_n) = if cn > 1 { (0, rank) } else { (rank, 0) };

    // Work units: tiles, or with a cluster pairs of tiles along M (rank r takes the r-th).
    let tiles_m = args.m.div_ceil(bm);
    let tiles_n = args.n.div_ceil(bn);
    let units_m = tiles_m.div_ceil(cluster);
    let units_n = tiles_n.div_ceil(cn);
    let units = units_m * units_n;
    // Read again at each use, like the grid in `coords`: kept live, ptxas spilled it.
    let k_tiles = || uncached(args.k).div_ceil(BK);
    let n_units = grid_dim_x() / (cluster * cn);
    let unit = block_idx_x() / (cluster * cn);
    let my_tiles = if unit < units {
        (units - unit).div_ceil(n_units)
    } else {
        0
    };
    // The last round's tiles in K pieces (`Sm90Args::tail_splits`, ping-pong only): this CTA's
    // piece, if any, follows its whole tiles.
    let tail = || {
        if pingpong {
            TailSplit::of(sm90.tail_splits, units, k_tiles())
        } else {
            None
        }
    };
    let my_tiles = if !pingpong {
        my_tiles
    } else if let Some(t) = tail() {
        if t.tiles * t.pieces > n_units
            || t.pieces > k_tiles()
            || args.workspace == 0
            || args.counters == 0
        {
            crate::arch::trap();
        }
        t.full_rounds + t.has_piece() as u32
    } else {
        my_tiles
    };
    // The piece, when unit `i` is one.
    let piece_at = |i: u32| tail().filter(|t| t.has_piece() && i == t.full_rounds);
    let group = if sm90.group_m == 0 { 1 } else { sm90.group_m };
    // The unit loops' epilogues need every register: the grid's shape is read again for each
    // unit rather than kept live (ptxas spilled it with the tail split's code).
    let coords = |i: u32| {
        let (b, g) = block_and_grid_x_uncached();
        let (unit, n_units) = (b / (cluster * cn), g / (cluster * cn));
        let units_m = uncached(args.m).div_ceil(bm).div_ceil(cluster);
        let units_n = uncached(args.n).div_ceil(bn).div_ceil(cn);
        let l = match piece_at(i) {
            Some(t) => t.full_rounds * n_units + t.tile(),
            None => unit + i * n_units,
        };
        let (um, un) = tile_coords(l, units_m, units_n, group);
        (um * cluster + rank_m, un * cn + rank_n)
    };
    // The k-tiles of this CTA's `i`-th unit: all, or its piece's share.
    let k_range = |i: u32| match piece_at(i) {
        Some(t) => t.k_tiles(),
        None => (0, k_tiles()),
    };
    // With a cluster, this CTA loads its half of the B block for both CTAs.
    let b_rows = bn / cluster;

    if wg == 0 {
        release_registers();
        if tid == 0 {
            fence_tensormap_acquire(sm90.tmap_a);
            fence_tensormap_acquire(sm90.tmap_b);
            prefetch_tensormap(sm90.tmap_a);
            prefetch_tensormap(sm90.tmap_b);
            if ring_residual {
                fence_tensormap_acquire(sm90.tmap_r);
                prefetch_tensormap(sm90.tmap_r);
            }
            let mut ring = Ring::<STAGES>::at(0);
            for i in 0..my_tiles {
                let (tm, tn) = coords(i);
                let row_a = (tm * bm) as i32;
                // A row-norm cluster's last CTAs may lie past N: TMA reads zeros there.
                let row_b = (tn * bn + rank_m * b_rows) as i32;
                let (k_first, k_end) = k_range(i);
                for kt in k_first..k_end {
                    let s = ring.stage;
                    if early && i == 0 && kt < STAGES {
                        ring.advance();
                        continue;
                    }
                    let k0 = (kt * BK) as i32;
                    // CTA-scope acquire also with a cluster: the peers' arrivals only say that
                    // their wgmma reads of the stage completed, and the copies below are
                    // async-proxy writes. A cluster-scope acquire adds an L1 invalidation
                    // (`CCTL.IVALL`) per k-tile.
                    wait_parity(empty(s), ring.phase ^ 1);
                    arrive_expect_tx(full(s), stage_bytes);
                    load_2d(s_a(s), sm90.tmap_a, k0, row_a, full(s));
                    if cluster > 1 {
                        let dst = s_b(s) + rank_m * b_rows * 128;
                        load_2d_multicast(dst, sm90.tmap_b, k0, row_b, full(s), 0b11);
                    } else {
                        load_2d(s_b(s), sm90.tmap_b, k0, row_b, full(s));
                    }
                    ring.advance();
                }
            }
            if ring_epilogue && my_tiles > 0 {
                let (tm, tn) = coords(my_tiles - 1);
                let pos = my_tiles as u64 * k_tiles() as u64;
                for c in 0..2 {
                    // The stage's last k-tile is consumed (TMA fills boxes past M and N with
                    // zeros and counts their bytes).
                    wait_parity(empty(ring.stage), ring.phase ^ 1);
                    let bytes = if ring_residual {
                        per_half * STAGING_BYTES
                    } else {
                        0
                    };
                    arrive_expect_tx(rbar(c, 0), bytes);
                    let dst = base + ring_epilogue_offset(&tile, pos, c);
                    for j in 0..per_half * ring_residual as u32 {
                        load_2d(
                            dst + j * STAGING_BYTES,
                            sm90.tmap_r,
                            (tn * bn + j * EPI_COLS) as i32,
                            (tm * bm + 64 * c) as i32,
                            rbar(c, 0),
                        );
                    }
                    ring.advance();
                }
            }
            if cluster > 1 {
                // Stay until every stage is released by both CTAs' consumers: after that no
                // remote arrival targets this CTA, so it may exit (CUTLASS's producer tail).
                for _ in 0..STAGES {
                    wait_parity(empty(ring.stage), ring.phase ^ 1);
                    ring.advance();
                }
            }
        }
    } else {
        claim_registers();
        let c = wg - 1;
        let lane = tid & 31;
        let w = (tid / 32) % 4;
        let leader = tid % 128 == 0;
        if (tma_c || ring_store) && leader {
            fence_tensormap_acquire(sm90.tmap_c);
            prefetch_tensormap(sm90.tmap_c);
        }
        if staged_residual && leader {
            fence_tensormap_acquire(sm90.tmap_r);
            prefetch_tensormap(sm90.tmap_r);
        }
        // Chunks this warpgroup has staged: they alternate between its two buffers.
        let mut staged_chunks = 0u32;
        // First row of this warpgroup's first half within the tile.
        let wg_row0 = if pingpong { 0 } else { c * 64 * MI as u32 };
        let (first, step) = if pingpong { (c, 2) } else { (0, 1) };
        let mut i = first;
        while i < my_tiles {
            let (tm, tn) = coords(i);
            // The epilogue's residual tile travels to L2 during the last PREFETCH_K_TILES
            // k-tiles of the mainloop, so its loads do not expose a DRAM round trip per chunk.
            // Issued at the start of a long mainloop, the lines were evicted again by its A
            // and B traffic (LayerNorm at 8192³ got slower).
            // A piece of a split tile does not know yet whether it runs the epilogue.
            let piece = piece_at(i).is_some();
            let prefetch_at = if piece {
                u32::MAX
            } else {
                k_tiles().saturating_sub(PREFETCH_K_TILES)
            };
            let prefetch = || {
                if !E::PAIRS {
                    E::prefetch::<Out>(
                        epi,
                        &Prefetch {
                            m: args.m,
                            n: args.n,
                            row0: tm * bm + wg_row0,
                            col0: tn * bn,
                            rows: 64 * MI as u32,
                            cols: bn,
                            thread: tid % 128,
                            threads: 128,
                        },
                    );
                }
            };
            let (m0, n0) = (tm * bm, tn * bn);
            let bias_col = if pingpong { tid % 128 } else { tid - 128 };
            let bias_value = if stage_bias {
                bias_share(E::column_vector(epi), args.n, n0, bn, bias_col)
            } else {
                0
            };
            // The epilogue's chunks: `chunks` per 64-row half (those past N skipped), half by
            // half; `staged_chunks` counts them over this warpgroup's tiles.
            let chunks = (args.n - n0).div_ceil(EPI_COLS).min(per_half);
            let tile_chunks = MI as u32 * chunks;
            let first_chunk = staged_chunks;
            // Copies the residual of the tile's chunk `q` into the staging buffer that chunk
            // will use (`first_chunk + q` alternates them), completing on its mbarrier.
            let load_residual = |q: u32| {
                let (h, j) = (q / chunks, q % chunks);
                let b = (first_chunk + q) & 1;
                arrive_expect_tx(rbar(c, b), STAGING_BYTES);
                load_2d(
                    base + staging_offset(&tile) + (2 * c + b) * STAGING_BYTES,
                    sm90.tmap_r,
                    (n0 + j * EPI_COLS) as i32,
                    (m0 + wg_row0 + 64 * h) as i32,
                    rbar(c, b),
                );
            };
            if pingpong && i > 0 {
                // The other warpgroup's mainloop of tile i - 1 is done: this is the
                // ((i - 1) / 2)-th hand-over to warpgroup c.
                wait_parity(turn(c), ((i - 1) / 2) & 1);
            }
            let mut acc = Acc::<MI, NI>::zero();
            // Every unit before a piece is whole: the ring position counts whole tiles.
            let mut ring = Ring::<STAGES>::at(i as u64 * k_tiles() as u64);
            let mut prev = 0;
            let (k_first, k_end) = k_range(i);
            for kt in k_first..k_end {
                let s = ring.stage;
                if kt == prefetch_at {
                    prefetch();
                    if staged_residual && leader {
                        // Both buffers are free once this warpgroup's earlier stores have read
                        // them: the first two chunks' residual arrives during the mainloop.
                        bulk_wait_group_read::<0>();
                        load_residual(0);
                        if tile_chunks > 1 {
                            load_residual(1);
                        }
                    }
                }
                wait_parity(full(s), ring.phase);
                fence();
                // One descriptor per operand and stage; the k-steps and 64-row halves move its
                // start field by constants.
                let (desc_a, desc_b) = (
                    smem_desc_sw128(s_a(s) + wg_row0 * 128),
                    smem_desc_sw128(s_b(s)),
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
                if kt > k_first && lane == 0 {
                    arrive(empty(prev));
                    if cluster > 1 {
                        arrive_remote_cta(empty(prev), rank_m ^ 1);
                    }
                }
                prev = s;
                ring.advance();
            }
            // Every k-tile is issued: the other warpgroup may start its mainloop while this
            // one's last batch completes (CUTLASS's ping-pong hands over at the same point).
            if pingpong && i + 1 < my_tiles && lane == 0 {
                arrive(turn(1 - c));
            }
            wait_group::<0>();
            for h in 0..MI {
                fence_operands(&mut acc.v[h]);
            }
            if k_end > k_first && lane == 0 {
                arrive(empty(prev));
                if cluster > 1 {
                    arrive_remote_cta(empty(prev), rank_m ^ 1);
                }
            }
            if let Some(t) = if piece { piece_at(i) } else { None } {
                let flag = smem.add((ring_bytes + 8 * (2 * STAGES + 2) + 4 * c) as usize);
                let last = tail_fixup(
                    args,
                    &mut acc,
                    &TailPiece {
                        flag: flag as *mut u32,
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
                    if tma_c && leader {
                        bulk_wait_group::<0>();
                    }
                    i += step;
                    continue;
                }
                if staged_residual && leader {
                    bulk_wait_group_read::<0>();
                    load_residual(0);
                    if tile_chunks > 1 {
                        load_residual(1);
                    }
                }
            }

            if row_norm {
                // The CTA's last tile runs its epilogue through the ring (`ring_epilogue`).
                let (residual, stage_c) = if ring_epilogue && i + 1 == my_tiles {
                    wait_parity(rbar(c, 0), 0);
                    let buf = ring_epilogue_offset(&tile, my_tiles as u64 * k_tiles() as u64, c);
                    (
                        if ring_residual { buf } else { 0 },
                        if ring_store { buf } else { 0 },
                    )
                } else {
                    (0, 0)
                };
                row_norm_epilogue::<Out, NI, E>(
                    args,
                    epi,
                    &acc.v[0],
                    &RowNormCta {
                        tid: tid - 128,
                        lane,
                        row: wg_row0 + 16 * w,
                        tile_m: tm,
                        m0,
                        n0,
                        bm,
                        bn,
                        rank: rank_n,
                        cn,
                        iter: i,
                        global: global_x,
                    },
                    smem,
                    xbuf,
                    xbar(i & 1),
                    residual,
                    stage_c,
                    sm90.tmap_c,
                );
                i += step;
                continue;
            }
            if stage_bias {
                let (id, threads) = bias_barrier(c);
                // The buffer's readers of the previous tile are past it: on ping-pong tiles
                // with staged C the chunks' barriers ordered that already.
                if !(pingpong && staged) {
                    bulk_read_wait_barrier(false, id, threads);
                }
                if bias_col < bn {
                    *(smem.add((bias_buf(c) + 2 * bias_col) as usize) as *mut u16) = bias_value;
                }
                bulk_read_wait_barrier(false, id, threads);
            }
            // A row norm over rows wider than one chunk (and no cluster): the chunks of each
            // 64-row half merge their row statistics and the last writes one partial per tile
            // (slot `tn` of ⌈N/BN⌉) for the finishing kernel.
            let partials = E::ROW_REDUCTION && args.n > EPI_COLS;
            // Row statistics of the current 64-row half: its chunks run one after another.
            let mut stats = [Moments::default(); 2];
            // Chunk `j` of half `h` (columns `64j..` of rows `64h..`): the epilogue and the
            // store of C. The epilogue runs on 64-column chunks: fewer values live at once, so
            // the stages do not spill next to the 128 accumulator registers.
            macro_rules! chunk_body {
                ($h:expr, $j:expr, $part:expr) => {{
                    let (h, j): (u32, u32) = ($h, $j);
                    let col0 = n0 + j * EPI_COLS;
                    let half_row = wg_row0 + 64 * h;
                    let ctx = Cta {
                        tid: tid - 128,
                        threads: 256,
                        lane,
                        warp_m: half_row / 16 + w,
                        warp_n: 0,
                        warps_n: 1,
                        tile_m: tm,
                        tile_n: tn * (bn / EPI_COLS) + j,
                        split: 0,
                        tiles_n: args.n.div_ceil(EPI_COLS),
                        m0,
                        n0: col0,
                        bm,
                        bn: EPI_COLS,
                        warp_row: m0 + half_row + 16 * w,
                        warp_col: col0,
                    };
                    let q = staged_chunks - first_chunk;
                    let out = Staging {
                        tmap: sm90.tmap_c,
                        copy_out: always_staged && !tma_c,
                        buf: staging_offset(&tile) + (2 * c + (staged_chunks & 1)) * STAGING_BYTES,
                        warp: w,
                        thread: tid % 128,
                        barrier: 1 + c,
                        leader,
                        x: col0,
                        y: m0 + half_row,
                        residual_bar: if staged_residual {
                            rbar(c, staged_chunks & 1)
                        } else {
                            0
                        },
                        residual_phase: (staged_chunks >> 1) & 1,
                    };
                    // Once the stages have read this chunk's residual: the next chunk's goes
                    // into the other buffer when the store of the chunk before has read it
                    // (chunks 0 and 1 were copied during the mainloop).
                    let load_next = || {
                        if staged_residual && leader && q >= 1 && q + 1 < tile_chunks {
                            bulk_wait_group_read::<0>();
                            load_residual(q + 1);
                        }
                    };
                    if j == 0 {
                        stats = [Moments::default(); 2];
                    }
                    let (ctx, pass) = if partials {
                        let ctx = Cta {
                            tile_n: tn,
                            tiles_n: args.n.div_ceil(bn),
                            ..ctx
                        };
                        (
                            ctx,
                            NormPass::Partial {
                                last: j + 1 == chunks,
                            },
                        )
                    } else {
                        (ctx, NormPass::Local)
                    };
                    let out = if staged { Some(&out) } else { None };
                    let bias = if stage_bias {
                        bias_buf(c) + 2 * j * EPI_COLS
                    } else {
                        0
                    };
                    finish_chunk::<Out, E>(
                        args, epi, $part, &ctx, smem, pass, &mut stats, out, bias, load_next,
                    );
                    staged_chunks += staged as u32;
                }};
            }
            if E::ROW_REDUCTION || E::HEAVY_PER_VALUE {
                // Written out per chunk, a row norm's chain (its statistics, the partials, both
                // norm passes) outgrew the instruction cache, and erf GELU ran 5-11 % slower
                // than in a loop. A loop keeps one copy. Each turn takes the first chunk and
                // shifts the others down (moves between constant indices, so the accumulators
                // stay in registers, and the chunk in hand is not a copy: picking chunk q by
                // selects kept 32 more values live and spilled the ping-pong kernels, ptxas -v
                // of sm_90a).
                // The trip count is a run-time value (chunks past N are skipped, the last
                // half's not visited): the builder's high unroll threshold would otherwise
                // write the loop out again.
                let mut rest = acc;
                let mut q = 0;
                while q < (MI as u32 - 1) * per_half + chunks {
                    let (h, j) = (q / per_half, q % per_half);
                    let part = rest.first_chunk::<EPI_FRAGS>();
                    rest.shift_chunks::<EPI_FRAGS>();
                    if j < chunks {
                        chunk_body!(h, j, part);
                    }
                    q += 1;
                }
            } else {
                // Written out (not a loop) so every accumulator index is a constant and the
                // array stays in registers without selects: short chains ran 1-4 % faster so.
                macro_rules! chunk {
                    ($h:literal, $j:literal) => {
                        if $h < MI && $j < NI / EPI_FRAGS && $j < chunks {
                            let mut part = Acc::<1, EPI_FRAGS>::zero();
                            for f in 0..EPI_FRAGS {
                                part.v[0][f] = acc.v[$h][$j * EPI_FRAGS + f];
                            }
                            chunk_body!($h, $j, part);
                        }
                    };
                }
                chunk!(0, 0);
                chunk!(0, 1);
                chunk!(0, 2);
                chunk!(0, 3);
                chunk!(1, 0);
                chunk!(1, 1);
                chunk!(1, 2);
                chunk!(1, 3);
            }
            i += step;
            if tma_c && leader && i >= my_tiles {
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
