//! Writing the finished tile to C.

use super::ops::{store_one, store_pair};
use super::{Acc, TileCtx};
use crate::types::Element;

/// Writes every in-bounds value of `acc` to C (`ctx.c`, leading dimension `ctx.ldc`, element
/// type `Out`): column pairs as one vector store where aligned; after a pair-reducing stage one
/// value per pair at output column `col / 2`.
///
/// # Safety
/// C must be an M × out_n matrix with leading dimension `ctx.ldc` at `ctx.c`.
#[inline(always)]
pub unsafe fn store_tile<Out: Element, const MI: usize, const NI: usize>(
    acc: &Acc<MI, NI>,
    ctx: &TileCtx,
) {
    for mi in 0..MI {
        for h in 0..2 {
            let row = ctx.row_of(mi, h);
            if row >= ctx.m {
                continue;
            }
            for ni in 0..NI {
                let col = ctx.col_of(ni);
                if col >= ctx.n {
                    continue;
                }
                let v = &acc.v[mi][ni];
                if ctx.paired {
                    store_one::<Out>(ctx.c, ctx.ldc, row, col / 2, v[2 * h]);
                } else {
                    store_pair::<Out>(ctx.c, ctx.ldc, row, col, ctx.n, v[2 * h], v[2 * h + 1]);
                }
            }
        }
    }
}
