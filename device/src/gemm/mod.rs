//! GEMM kernel bodies: `C = epilogue(A·B)`.
//!
//! Layouts: A is M×K row-major (leading dimension `lda` ≥ K). B is either K×N row-major
//! (`B_COL = false`, `ldb` ≥ N) or N×K row-major (`B_COL = true`, `ldb` ≥ K: a PyTorch/safetensors
//! `Linear` weight, i.e. Bᵀ stored). C is M×N_out row-major (`ldc` ≥ N_out, N_out = N or N/2
//! after a pair-reducing stage). All leading dimensions are in elements.
//!
//! The mainloop ([`sm80`]: `cp.async` + `ldmatrix` + `mma.sync`) leaves an [`Acc`](crate::epilogue::Acc)
//! in registers; the epilogue stages and the store ([`crate::epilogue`]) never know which
//! mainloop produced it. [`sm80`] and the f32 [`simt`] mainloop share one CTA driver (`cta`: the
//! `cp.async` ring, the k-loop, split-K and the epilogue hand-off) and differ only in how a
//! k-tile is addressed in shared memory and accumulated.

use crate::params::KernelParam;

mod cta;
mod finish;
pub mod simt;
pub mod sm80;
pub mod sm90;

/// Launch arguments common to every GEMM kernel, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemmArgs {
    /// A, M×K row-major.
    pub a: u64,
    /// B, K×N row-major or N×K row-major (see module docs).
    pub b: u64,
    /// C, the output.
    pub c: u64,
    /// Split-K partial tiles (f32), `tiles · splits · THREADS · MI·NI·4` values, or 0 when
    /// `splits == 1` (the Hopper mainloop keeps its split tail tiles' partials here,
    /// `sm90::Sm90Args::tail_splits`).
    pub workspace: u64,
    /// Split-K arrival counters, one zeroed `u32` per output tile (the last CTA of a tile resets
    /// its counter to 0), or 0 when `splits == 1` (on the Hopper mainloop: one per split tail
    /// tile).
    pub counters: u64,
    /// Rows of A and C.
    pub m: u32,
    /// Columns of the product (before any pair reduction).
    pub n: u32,
    /// Inner dimension.
    pub k: u32,
    /// Leading dimension of A (elements).
    pub lda: u32,
    /// Leading dimension of B (elements).
    pub ldb: u32,
    /// Leading dimension of C (elements).
    pub ldc: u32,
    /// K splits (`gridDim.z`); 1 for none.
    pub splits: u32,
    /// K elements per split, a multiple of BK.
    pub k_per_split: u32,
}

unsafe impl KernelParam for GemmArgs {}

/// Which output tile (and K split) a CTA computes. Grid launches take it from the block index
/// ([`TileCoord::from_grid`]); persistent kernels (the wave scheduler) from their task tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TileCoord {
    /// Tile row: rows `m·BM..`.
    pub m: u32,
    /// Tile column: columns `n·BN..`.
    pub n: u32,
    /// K split.
    pub split: u32,
    /// Tiles per row of tiles (⌈N/BN⌉): indexes split-K and row-statistics workspaces.
    pub tiles_n: u32,
}

impl TileCoord {
    /// `(blockIdx.y, blockIdx.x, blockIdx.z)` of a grid `(⌈N/BN⌉, ⌈M/BM⌉, splits)`.
    #[inline(always)]
    pub fn from_grid() -> Self {
        use crate::arch::thread::{block_idx_x, block_idx_y, block_idx_z, grid_dim_x};
        TileCoord {
            m: block_idx_y(),
            n: block_idx_x(),
            split: block_idx_z(),
            tiles_n: grid_dim_x(),
        }
    }
}

/// A CTA tile: BM×BN outputs, BK-deep k-steps, a WARPS_M×WARPS_N grid of warps, STAGES
/// shared-memory pipeline stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileShape {
    /// Rows of C per CTA.
    pub bm: u32,
    /// Columns of C per CTA.
    pub bn: u32,
    /// K per pipeline stage.
    pub bk: u32,
    /// Warps along M.
    pub warps_m: u32,
    /// Warps along N.
    pub warps_n: u32,
    /// Shared-memory stages.
    pub stages: u32,
}

/// Shared-memory row padding, elements: 16 bytes, which makes `ldmatrix` rows of 8 lanes hit
/// 8 distinct 4-bank groups (conflict-free) for the strides used here.
pub const SMEM_PAD: u32 = 8;

impl TileShape {
    /// A tile shape (no checks; see [`TileShape::check`]).
    pub const fn new(bm: u32, bn: u32, bk: u32, warps_m: u32, warps_n: u32, stages: u32) -> Self {
        TileShape {
            bm,
            bn,
            bk,
            warps_m,
            warps_n,
            stages,
        }
    }

    /// Threads per CTA.
    pub const fn threads(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    /// m16 fragments per warp along M.
    pub const fn mi(&self) -> u32 {
        self.bm / self.warps_m / 16
    }

    /// n8 fragments per warp along N.
    pub const fn ni(&self) -> u32 {
        self.bn / self.warps_n / 8
    }

    /// Bytes of A tile per stage (16-bit elements).
    pub const fn smem_a_bytes(&self) -> u32 {
        self.bm * (self.bk + SMEM_PAD) * 2
    }

    /// Bytes of B tile per stage (16-bit elements), for B stored N×K (`b_col`) or K×N.
    pub const fn smem_b_bytes(&self, b_col: bool) -> u32 {
        if b_col {
            self.bn * (self.bk + SMEM_PAD) * 2
        } else {
            self.bk * (self.bn + SMEM_PAD) * 2
        }
    }

    /// Dynamic shared memory per CTA, bytes: the pipeline, which the epilogue reuses as scratch
    /// (at least 16 bytes per row per warp along N, for row reductions).
    pub const fn smem_bytes(&self, b_col: bool) -> u32 {
        let pipe = self.stages * (self.smem_a_bytes() + self.smem_b_bytes(b_col));
        let scratch = self.warps_n * self.bm * 16 + 16;
        if pipe > scratch { pipe } else { scratch }
    }

    /// Accumulator registers per thread.
    pub const fn acc_registers(&self) -> u32 {
        self.mi() * self.ni() * 4
    }

    /// CTAs per SM the kernel is compiled for (PTX `.minnctapersm`): as many as 64K registers
    /// allow at `acc_registers() + 64` registers per thread (at least 128), so ptxas caps its
    /// register use there instead of trading occupancy for epilogue ILP.
    pub const fn min_ctas_per_sm(&self) -> u32 {
        let mut regs = self.acc_registers() + 64;
        if regs < 128 {
            regs = 128;
        }
        let n = 65536 / (self.threads() * regs);
        if n == 0 { 1 } else { n }
    }

    /// Why this shape cannot be instantiated, or `None`.
    pub const fn check(&self) -> Option<&'static str> {
        if self.warps_m == 0 || self.warps_n == 0 || self.stages < 2 {
            return Some("needs at least one warp in each direction and two stages");
        }
        // Bounded before any product of them is taken (a tile read from a cache file may hold
        // anything): 32 × 32 warps of 32 threads, 1024-wide tiles and 32 stages fit u32 sums.
        if self.warps_m > 32 || self.warps_n > 32 || self.threads() > 1024 {
            return Some("more than 1024 threads per CTA");
        }
        if self.bm == 0 || self.bn == 0 || self.bm > 1024 || self.bn > 1024 || self.bk > 1024 {
            return Some("BM, BN and BK must be 1 to 1024");
        }
        if self.stages > 32 {
            return Some("at most 32 stages");
        }
        if self.bm % (16 * self.warps_m) != 0 {
            return Some("BM must be a multiple of 16 × warps along M (m16n8k16 fragments)");
        }
        if self.bn % (16 * self.warps_n) != 0 {
            return Some(
                "BN must be a multiple of 16 × warps along N (ldmatrix.x4 loads two n8 fragments)",
            );
        }
        if self.bk % 16 != 0 || self.bk == 0 {
            return Some("BK must be a positive multiple of 16 (the MMA's k)");
        }
        if self.mi() > 8 {
            return Some("at most 8 m16 fragments per warp (row-reduction scratch)");
        }
        if self.acc_registers() > 128 {
            return Some("more than 128 accumulator registers per thread would spill");
        }
        None
    }
}

/// The tile shapes instantiated for the sm_80 mainloop, largest first. `#[fused_gemm]` emits
/// one entry point per shape (or only the one its `tile = (BM, BN, BK)` option names), plus the
/// row-spanning shapes of [`ROW_TILES_SM80`] for kernels with a row-norm stage.
pub const TILES_SM80: &[TileShape] = &[
    TileShape::new(128, 128, 32, 2, 4, 4),
    TileShape::new(128, 64, 32, 2, 2, 4),
    TileShape::new(64, 64, 32, 2, 2, 4),
    TileShape::new(32, 64, 64, 1, 2, 3),
    // 64×64 warp tiles (twice the MMAs per ldmatrix) and BK = 64 (half the barriers per FLOP).
    TileShape::new(128, 256, 32, 2, 4, 3),
    TileShape::new(256, 128, 32, 4, 2, 3),
    TileShape::new(128, 128, 64, 2, 2, 3),
    TileShape::new(128, 64, 64, 2, 2, 4),
    TileShape::new(64, 64, 64, 2, 2, 4),
];

/// The tiles `#[fused_gemm]` compiles by default for 16-bit inputs (the fastest on the H200 by
/// `bench/src/bin/tile_probe.rs`: 64×64 warp tiles and BK = 64 beat 64×32 warp tiles with
/// BK = 32 by 8-15 %), largest first.
pub const DEFAULT_TILES_SM80: &[TileShape] = &[
    TileShape::new(128, 128, 64, 2, 2, 3),
    TileShape::new(128, 64, 64, 2, 2, 4),
    TileShape::new(64, 64, 64, 2, 2, 4),
];

/// The tile of the bounds-checked (unaligned operands) variant `#[fused_gemm]` compiles.
pub const SCALAR_TILE_SM80: TileShape = TileShape::new(64, 64, 32, 2, 2, 4);

/// Row-spanning tiles: one CTA holds whole rows of up to BN columns, so a row norm finishes in
/// the epilogue (BERT-base N = 768, MiniLM N = 384).
pub const ROW_TILES_SM80: &[TileShape] = &[
    TileShape::new(32, 256, 32, 1, 4, 3),
    TileShape::new(32, 384, 32, 1, 4, 3),
    TileShape::new(32, 512, 32, 1, 8, 3),
    TileShape::new(32, 768, 32, 1, 8, 3),
    TileShape::new(16, 1024, 32, 1, 8, 2),
];

/// Tile shapes of the f32 CUDA-core mainloop ([`simt`]); BK = 16 keeps f32 stages small.
pub const TILES_F32: &[TileShape] = &[
    TileShape::new(128, 128, 16, 2, 4, 3),
    TileShape::new(128, 64, 16, 2, 2, 3),
    TileShape::new(64, 64, 16, 2, 2, 3),
];

/// Row-spanning tiles of the f32 mainloop (in-CTA row norms up to N = 768).
pub const ROW_TILES_F32: &[TileShape] = &[
    TileShape::new(32, 384, 16, 1, 4, 2),
    TileShape::new(32, 768, 16, 1, 8, 2),
];

/// Whether `t` is one of the row-spanning tiles (the planner prefers them for row norms).
pub fn is_row_tile(t: &TileShape) -> bool {
    ROW_TILES_SM80.contains(t) || ROW_TILES_F32.contains(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instantiated_shapes_are_valid_and_fit_h200_shared_memory() {
        for t in TILES_SM80
            .iter()
            .chain(ROW_TILES_SM80)
            .chain(TILES_F32)
            .chain(ROW_TILES_F32)
        {
            assert_eq!(t.check(), None, "{t:?}");
            for b_col in [false, true] {
                assert!(
                    t.smem_bytes(b_col) <= 227 * 1024,
                    "{t:?} needs {} B",
                    t.smem_bytes(b_col)
                );
            }
            assert_eq!(t.ni() % 2, 0, "{t:?}: ldmatrix.x4 needs an even NI");
        }
    }

    #[test]
    fn bad_shapes_say_why() {
        // Zero or absurd fields, as a corrupt cache file may hold: an error, never a division by
        // zero or an overflow.
        for t in [
            TileShape::new(0, 64, 32, 2, 2, 4),
            TileShape::new(64, 0, 32, 2, 2, 4),
            TileShape::new(64, 64, 0, 2, 2, 4),
            TileShape::new(64, 64, 32, 0, 2, 4),
            TileShape::new(u32::MAX, 64, 32, 2, 2, 4),
            TileShape::new(64, u32::MAX - 15, 32, 1, 1, 4),
            TileShape::new(64, 64, 32, u32::MAX, u32::MAX, 4),
            TileShape::new(64, 64, 32, 1 << 30, 4, 4),
            TileShape::new(64, 64, 32, 2, 2, u32::MAX),
        ] {
            assert!(t.check().is_some(), "{t:?}");
            assert!(super::sm90::check(&t).is_some(), "{t:?}");
        }
        assert!(
            TileShape::new(100, 128, 32, 2, 4, 3)
                .check()
                .unwrap()
                .contains("BM")
        );
        assert!(
            TileShape::new(128, 128, 24, 2, 4, 3)
                .check()
                .unwrap()
                .contains("BK")
        );
        assert!(
            TileShape::new(256, 256, 32, 2, 2, 3)
                .check()
                .unwrap()
                .contains("accumulator")
        );
        assert!(
            TileShape::new(128, 128, 32, 8, 8, 3)
                .check()
                .unwrap()
                .contains("1024")
        );
    }
}
