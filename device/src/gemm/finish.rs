//! What every mainloop does after its last k-tile: the split-K reduction, the epilogue stages
//! and the store. Mainloops differ in how they fill the [`Acc`]; this part never knows which
//! one did.

use crate::arch::atomic::atomic_add_acq_rel_u32;
use crate::arch::sync::{sync_threads, thread_fence};
use crate::copy::{ld_global_cg_v4, st_global_cg_v4};
use crate::epilogue::store::store_tile;
use crate::epilogue::{Acc, NormPass, Stage, TileCtx};
use crate::gemm::GemmArgs;
use crate::types::Element;

/// Where this thread's accumulators sit in the problem.
#[derive(Clone, Copy)]
pub(crate) struct Cta {
    pub tid: u32,
    pub threads: u32,
    pub lane: u32,
    pub warp_m: u32,
    pub warp_n: u32,
    pub warps_n: u32,
    pub tile_m: u32,
    pub tile_n: u32,
    pub split: u32,
    pub tiles_n: u32,
    pub m0: u32,
    pub n0: u32,
    pub bm: u32,
    pub bn: u32,
    /// First row of this warp's accumulators.
    pub warp_row: u32,
    /// First column of this warp's accumulators.
    pub warp_col: u32,
}

/// Split-K reduction (when `args.splits > 1`), then the epilogue `E` and the store of C.
/// `smem` is free shared memory of `scratch_bytes` bytes (the mainloop is done with it).
///
/// # Safety
/// As the mainloop's: validated arguments; every thread of the CTA calls it.
#[inline(always)]
pub(crate) unsafe fn finish<Out: Element, const MI: usize, const NI: usize, E: Stage>(
    args: &GemmArgs,
    epi: &E::Params,
    mut acc: Acc<MI, NI>,
    cta: &Cta,
    smem: *mut u8,
    scratch_bytes: u32,
) {
    if args.splits > 1 && !split_k_fixup::<MI, NI>(args, &mut acc, smem, cta) {
        return;
    }
    let mut ctx = tile_ctx(args, cta, smem, scratch_bytes);
    E::apply::<Out, MI, NI>(epi, &mut acc, &mut ctx);
    store_tile::<Out, MI, NI>(&acc, &ctx);
}

/// The [`TileCtx`] of `cta`'s accumulators, for a [`NormPass::Local`] epilogue.
#[inline(always)]
pub(crate) fn tile_ctx(args: &GemmArgs, cta: &Cta, smem: *mut u8, scratch_bytes: u32) -> TileCtx {
    TileCtx {
        m: args.m,
        n: args.n,
        warp_row: cta.warp_row,
        warp_col: cta.warp_col,
        cta_row: cta.m0,
        cta_col: cta.n0,
        bm: cta.bm,
        bn: cta.bn,
        g: cta.lane >> 2,
        t: cta.lane & 3,
        warp_n: cta.warp_n,
        warps_n: cta.warps_n,
        warp_m: cta.warp_m,
        tile_n: cta.tile_n,
        tiles_n: cta.tiles_n,
        paired: false,
        deferred: false,
        norm_pass: NormPass::Local,
        row_stats: Default::default(),
        c: args.c,
        ldc: args.ldc,
        scratch: smem,
        scratch_bytes,
        staged_residual: 0,
        staged_row: 0,
        staged_bias: 0,
    }
}

/// Serial split-K: every CTA of an output tile writes its partial accumulators to the
/// workspace; the last to arrive (an acq_rel counter per tile) sums all partials in split order
/// (deterministic whatever the arrival order), resets the counter, and returns `true` to run the
/// epilogue once. Others return `false`.
#[inline(always)]
unsafe fn split_k_fixup<const MI: usize, const NI: usize>(
    args: &GemmArgs,
    acc: &mut Acc<MI, NI>,
    smem: *mut u8,
    cta: &Cta,
) -> bool {
    let (tid, threads, tile_m, tile_n) = (cta.tid, cta.threads, cta.tile_m, cta.tile_n);
    let splits = args.splits;
    let tile = tile_m * cta.tiles_n + tile_n;
    let frags = (MI * NI) as u64;
    let ws = args.workspace as *mut [f32; 4];
    let slot = |s: u32, f: u64| {
        ws.add(
            (((tile as u64 * splits as u64 + s as u64) * frags + f) * threads as u64 + tid as u64)
                as usize,
        )
    };
    let own = cta.split;
    for mi in 0..MI {
        for ni in 0..NI {
            st_global_cg_v4(slot(own, (mi * NI + ni) as u64), acc.v[mi][ni]);
        }
    }
    thread_fence();
    sync_threads();
    let flag = smem as *mut u32;
    if tid == 0 {
        let counter = (args.counters as *mut u32).add(tile as usize);
        let arrived = atomic_add_acq_rel_u32(counter, 1);
        let last = arrived == splits - 1;
        if last {
            // Nobody else touches this counter again in this launch; the next launch starts at 0.
            crate::arch::global::st_u32(counter, 0);
        }
        *flag = last as u32;
    }
    sync_threads();
    let last = *flag != 0;
    if !last {
        return false;
    }
    thread_fence();
    *acc = Acc::zero();
    for s in 0..splits {
        for mi in 0..MI {
            for ni in 0..NI {
                let p = ld_global_cg_v4(slot(s, (mi * NI + ni) as u64));
                for e in 0..4 {
                    acc.v[mi][ni][e] += p[e];
                }
            }
        }
    }
    // The flag word lives in the epilogue's scratch.
    sync_threads();
    true
}
