//! The persistent tile scheduler of the Hopper kernel: the grouped raster order of the output
//! tiles ([`tile_coords`]) and the split of the last, partial round along K ([`TailSplit`],
//! [`super::Sm90Args::tail_splits`]).

use crate::arch::thread::block_and_grid_x_uncached;

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
    pub(super) unit: u32,
    /// Pieces per tail tile, ≥ 2.
    pub(super) pieces: u32,
    /// Rounds of whole tiles, and the tiles left (≥ 1).
    pub(super) full_rounds: u32,
    pub(super) tiles: u32,
    pub(super) k_tiles: u32,
}

impl TailSplit {
    /// The split of `units` tiles of `k_tiles` k-tiles into `pieces` pieces per tail tile, or
    /// `None` (no split: fewer than two pieces, or no tail). The CTA index and the grid are
    /// read anew (volatile): called at each use, nothing derived from them stays live in a
    /// register through the unit loops, whose epilogue needs every register (`pieces`, a
    /// kernel parameter, lives in the constant bank).
    #[inline(always)]
    pub(super) fn of(pieces: u32, units: u32, k_tiles: u32) -> Option<TailSplit> {
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
    pub(super) fn has_piece(&self) -> bool {
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
