//! The persistent tile scheduler of the Hopper kernel: which output tiles a CTA (or a 2-CTA
//! cluster, or a row-norm group) computes, in which order, and over which k-tiles.
//!
//! The grid is persistent: CTA (or cluster, or group) `u` of `G` takes the work units
//! `u, u + G, u + 2G, …` of a grouped raster order ([`tile_coords`]); a unit is a tile, two
//! tiles along M for a 2-CTA cluster (rank `r` takes the `r`-th), or `cn` tiles along N for a
//! row-norm group of `cn` CTAs. With [`Sm90Args::tail_splits`] the last, partial round's tiles
//! are split along K ([`TailSplit`]).
//!
//! Everything derived from the CTA index, the grid or the problem shape is computed again at
//! each use from volatile reads ([`block_and_grid_x_uncached`], [`uncached`]): the unit loops'
//! epilogues need every register, and kept live those values spilled.

use super::{BK, Sm90Args};
use crate::arch::thread::{block_and_grid_x_uncached, block_idx_x, grid_dim_x, uncached};
use crate::gemm::GemmArgs;

/// The work units of one CTA of a persistent grid, `0..count()`, each an output tile (or a K
/// range of one) the CTA's producer loads and its consumers multiply and finish in that order.
pub(super) trait TileScheduler {
    /// Units this CTA runs.
    fn count(&self) -> u32;
    /// The output tile `(tile_m, tile_n)` of unit `i`, in tiles of this CTA's rows × BN.
    fn coords(&self, i: u32) -> (u32, u32);
    /// The k-tiles `[first, end)` of unit `i`: all of the tile's, or a piece's share.
    fn k_range(&self, i: u32) -> (u32, u32);
    /// The piece of a split tile that unit `i` is, or `None` (a whole tile).
    fn piece(&self, i: u32) -> Option<TailSplit>;
    /// The k-tiles of a whole tile, ⌈K / [`BK`]⌉.
    fn k_tiles(&self) -> u32;
}

/// The grouped-raster persistent scheduler of [`super::run`] on tiles of `WM` consumer warps
/// along M (4: ping-pong, 8: cooperative, 16: 2-CTA cluster), with cluster units (2-CTA
/// clusters along M, row-norm groups along N) and tail splits on ping-pong tiles.
///
/// `coords`, `k_range` and the tail split carry no inline attribute (see the
/// [module docs](super), "Collectives").
pub(super) struct GroupedRaster<'a, const WM: u32> {
    args: &'a GemmArgs,
    sm90: &'a Sm90Args,
    /// CTAs per unit along N (a row-norm group).
    cn: u32,
    /// This CTA's rows and columns of a tile.
    bm: u32,
    bn: u32,
    /// This CTA's rank in its unit along M and along N (one of them is 0).
    rank_m: u32,
    rank_n: u32,
    /// Units of the whole problem.
    units: u32,
    /// Tile rows per raster group ([`Sm90Args::group_m`], at least 1).
    group: u32,
    /// Units of this CTA.
    count: u32,
}

impl<'a, const WM: u32> GroupedRaster<'a, WM> {
    /// Ping-pong tiles: only they split the tail.
    const PINGPONG: bool = WM == 4;
    /// CTAs per unit along M (a 2-CTA cluster).
    const CLUSTER: u32 = if WM == 16 { 2 } else { 1 };

    /// The scheduler of this CTA for tiles of `bm` rows (this CTA's) and `bn` columns, `cn`
    /// CTAs per unit along N and this CTA's ranks. Traps on a tail split the launch cannot
    /// hold ([`Sm90Args::tail_splits`]).
    ///
    /// # Safety
    /// `args` and `sm90` are the kernel's validated arguments.
    #[inline(always)]
    pub(super) unsafe fn new(
        args: &'a GemmArgs,
        sm90: &'a Sm90Args,
        bm: u32,
        bn: u32,
        cn: u32,
        rank_m: u32,
        rank_n: u32,
    ) -> Self {
        let (pingpong, cluster) = (Self::PINGPONG, Self::CLUSTER);
        // Work units: tiles, or with a cluster pairs of tiles along M (rank r takes the r-th).
        let tiles_m = args.m.div_ceil(bm);
        let tiles_n = args.n.div_ceil(bn);
        let units_m = tiles_m.div_ceil(cluster);
        let units_n = tiles_n.div_ceil(cn);
        let units = units_m * units_n;
        let n_units = grid_dim_x() / (cluster * cn);
        let unit = block_idx_x() / (cluster * cn);
        let count = if unit < units {
            (units - unit).div_ceil(n_units)
        } else {
            0
        };
        let mut s = GroupedRaster {
            args,
            sm90,
            cn,
            bm,
            bn,
            rank_m,
            rank_n,
            units,
            group: 1,
            count,
        };
        // The last round's tiles in K pieces (`Sm90Args::tail_splits`, ping-pong only): this
        // CTA's piece, if any, follows its whole tiles.
        s.count = if !pingpong {
            count
        } else if let Some(t) = s.tail() {
            if t.tiles * t.pieces > n_units
                || t.pieces > s.k_tiles()
                || args.workspace == 0
                || args.counters == 0
            {
                crate::arch::trap();
            }
            t.full_rounds + t.has_piece() as u32
        } else {
            count
        };
        s.group = if sm90.group_m == 0 { 1 } else { sm90.group_m };
        s
    }

    /// The tail split as this CTA sees it, or `None` (none, or not ping-pong).
    fn tail(&self) -> Option<TailSplit> {
        if Self::PINGPONG {
            TailSplit::of(self.sm90.tail_splits, self.units, self.k_tiles())
        } else {
            None
        }
    }
}

impl<const WM: u32> TileScheduler for GroupedRaster<'_, WM> {
    #[inline(always)]
    fn count(&self) -> u32 {
        self.count
    }

    // The unit loops' epilogues need every register: the grid's shape is read again for each
    // unit rather than kept live (ptxas spilled it with the tail split's code).
    fn coords(&self, i: u32) -> (u32, u32) {
        let (cluster, cn) = (Self::CLUSTER, self.cn);
        let (b, g) = block_and_grid_x_uncached();
        let (unit, n_units) = (b / (cluster * cn), g / (cluster * cn));
        let units_m = uncached(self.args.m).div_ceil(self.bm).div_ceil(cluster);
        let units_n = uncached(self.args.n).div_ceil(self.bn).div_ceil(cn);
        let l = match self.piece(i) {
            Some(t) => t.full_rounds * n_units + t.tile(),
            None => unit + i * n_units,
        };
        let (um, un) = tile_coords(l, units_m, units_n, self.group);
        (um * cluster + self.rank_m, un * cn + self.rank_n)
    }

    fn k_range(&self, i: u32) -> (u32, u32) {
        match self.piece(i) {
            Some(t) => t.k_tiles(),
            None => (0, self.k_tiles()),
        }
    }

    #[inline(always)]
    fn piece(&self, i: u32) -> Option<TailSplit> {
        self.tail().filter(|t| t.has_piece() && i == t.full_rounds)
    }

    // Read again at each use, like the grid in `coords`: kept live, ptxas spilled it.
    #[inline(always)]
    fn k_tiles(&self) -> u32 {
        uncached(self.args.k).div_ceil(BK)
    }
}

/// Calls `f` with this CTA's first tile, if it has one, computed with plain reads of the
/// shape: for a mainloop prologue issued before the scheduler exists, on schedules without
/// clusters, row-norm groups or tail splits (one tile per unit, CTA `u` starts at unit `u`).
#[inline(always)]
pub(super) fn with_first_tile(
    args: &GemmArgs,
    sm90: &Sm90Args,
    bm: u32,
    bn: u32,
    f: impl FnOnce((u32, u32)),
) {
    let (tm_count, tn_count) = (args.m.div_ceil(bm), args.n.div_ceil(bn));
    let unit0 = block_idx_x();
    if unit0 < tm_count * tn_count {
        let group0 = if sm90.group_m == 0 { 1 } else { sm90.group_m };
        f(tile_coords(unit0, tm_count, tn_count, group0));
    }
}

/// The output tile `(tile_m, tile_n)` of linear tile index `l` in grouped raster order: groups
/// of `group` tile rows, column-major inside a group.
#[inline(always)]
pub const fn tile_coords(l: u32, tiles_m: u32, tiles_n: u32, group: u32) -> (u32, u32) {
    let per_group = group * tiles_n;
    let g = l / per_group;
    let first_m = g * group;
    let rows = if tiles_m - first_m < group {
        tiles_m - first_m
    } else {
        group
    };
    let r = l - g * per_group;
    (first_m + r % rows, r / rows)
}

/// The split of the last round ([`Sm90Args::tail_splits`]) as this CTA sees it.
#[derive(Clone, Copy)]
pub(super) struct TailSplit {
    /// This CTA and the grid (one CTA per unit on ping-pong tiles).
    unit: u32,
    /// Pieces per tail tile, ≥ 2.
    pub(super) pieces: u32,
    /// Rounds of whole tiles, and the tiles left (≥ 1).
    full_rounds: u32,
    tiles: u32,
    k_tiles: u32,
}

impl TailSplit {
    /// The split of `units` tiles of `k_tiles` k-tiles into `pieces` pieces per tail tile, or
    /// `None` (no split: fewer than two pieces, or no tail). The CTA index and the grid are
    /// read anew (volatile): called at each use, nothing derived from them stays live in a
    /// register through the unit loops, whose epilogue needs every register (`pieces`, a
    /// kernel parameter, lives in the constant bank).
    #[inline(always)]
    fn of(pieces: u32, units: u32, k_tiles: u32) -> Option<TailSplit> {
        // Launches without a split stop at the parameter: no division per unit.
        if pieces <= 1 {
            return None;
        }
        let (unit, n_units) = block_and_grid_x_uncached();
        let tiles = units % n_units;
        if tiles == 0 {
            return None;
        }
        Some(TailSplit {
            unit,
            pieces,
            full_rounds: units / n_units,
            tiles,
            k_tiles,
        })
    }

    /// Whether this CTA computes a piece (the first `pieces · tiles` CTAs do).
    #[inline(always)]
    fn has_piece(&self) -> bool {
        self.unit < self.tiles * self.pieces
    }

    /// This CTA's tail tile (0-based among the tail tiles) and piece of it.
    #[inline(always)]
    pub(super) fn tile(&self) -> u32 {
        self.unit / self.pieces
    }

    /// This CTA's piece of its tail tile, `0..pieces`.
    #[inline(always)]
    pub(super) fn piece(&self) -> u32 {
        self.unit % self.pieces
    }

    /// The piece's k-tiles, `[first, end)`: the tile's k-tiles in `pieces` near-equal ranges.
    #[inline(always)]
    pub(super) fn k_tiles(&self) -> (u32, u32) {
        let p = self.piece();
        (
            p * self.k_tiles / self.pieces,
            (p + 1) * self.k_tiles / self.pieces,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn tail_pieces_cover_the_k_tiles_once_and_none_is_empty() {
        for k_tiles in 2..200 {
            for pieces in 2..=k_tiles.min(33) {
                let mut next = 0;
                for unit in 0..pieces {
                    let t = TailSplit {
                        unit,
                        pieces,
                        full_rounds: 1,
                        tiles: 1,
                        k_tiles,
                    };
                    let (first, end) = t.k_tiles();
                    assert_eq!(first, next, "k_tiles {k_tiles}, pieces {pieces}");
                    assert!(
                        end > first,
                        "k_tiles {k_tiles}, pieces {pieces}: empty piece"
                    );
                    assert_eq!((t.tile(), t.piece()), (0, unit));
                    next = end;
                }
                assert_eq!(next, k_tiles);
            }
        }
    }

    #[test]
    fn grouped_raster_visits_every_tile_once() {
        for &(tm, tn, g) in &[
            (5u32, 7u32, 2u32),
            (64, 32, 8),
            (3, 1, 8),
            (1, 9, 1),
            (17, 5, 4),
        ] {
            let mut seen = vec![false; (tm * tn) as usize];
            for l in 0..tm * tn {
                let (m, n) = tile_coords(l, tm, tn, g);
                assert!(m < tm && n < tn, "{l} -> ({m}, {n})");
                assert!(!seen[(m * tn + n) as usize], "({m}, {n}) twice");
                seen[(m * tn + n) as usize] = true;
            }
        }
        // Inside a group, consecutive tiles walk down the group's rows first.
        assert_eq!(tile_coords(0, 64, 32, 8), (0, 0));
        assert_eq!(tile_coords(1, 64, 32, 8), (1, 0));
        assert_eq!(tile_coords(8, 64, 32, 8), (0, 1));
        assert_eq!(tile_coords(8 * 32, 64, 32, 8), (8, 0));
    }
}
