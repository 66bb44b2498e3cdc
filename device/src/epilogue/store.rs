//! Writing the finished tile to C.

use super::ops::{store_one, store_pair, store_pair_aligned};
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
    // Interior tiles of a C whose pairs are aligned store without a check per value.
    let pair_bytes = 2 * core::mem::size_of::<Out>() as u64;
    let aligned = ctx.c % pair_bytes == 0 && ctx.ldc % 2 == 0;
    if acc.interior(ctx) && (ctx.paired || aligned) {
        store::<Out, MI, NI, false>(acc, ctx);
    } else {
        store::<Out, MI, NI, true>(acc, ctx);
    }
}

#[inline(always)]
unsafe fn store<Out: Element, const MI: usize, const NI: usize, const CHECK: bool>(
    acc: &Acc<MI, NI>,
    ctx: &TileCtx,
) {
    for mi in 0..MI {
        for h in 0..2 {
            let row = ctx.row_of(mi, h);
            if CHECK && row >= ctx.m {
                continue;
            }
            for ni in 0..NI {
                let col = ctx.col_of(ni);
                if CHECK && col >= ctx.n {
                    continue;
                }
                let v = &acc.v[mi][ni];
                if ctx.paired {
                    store_one::<Out>(ctx.c, ctx.ldc, row, col / 2, v[2 * h]);
                } else if CHECK {
                    store_pair::<Out>(ctx.c, ctx.ldc, row, col, ctx.n, v[2 * h], v[2 * h + 1]);
                } else {
                    store_pair_aligned::<Out>(ctx.c, ctx.ldc, row, col, v[2 * h], v[2 * h + 1]);
                }
            }
        }
    }
}
