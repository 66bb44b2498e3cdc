//! The Hopper epilogue's chunk store: one consumer warpgroup's 64×64 chunk of C through the
//! stages and out, through a staging buffer in shared memory (a TMA store, or the
//! warpgroup's threads) or per thread (see the [module docs](super), "Storing C").

use super::EPI_FRAGS;
use crate::arch::global::st_u16x8;
use crate::arch::mbarrier::wait_parity;
use crate::arch::shared::{ld_shared_u32x4, shared_addr};
use crate::copy::tma::{
    bulk_read_wait_barrier, fence_proxy_async_shared, store_2d_commit_if, swizzle_128b_offset,
};
use crate::epilogue::stages::Moments;
use crate::epilogue::store::store_tile;
use crate::epilogue::{Acc, NormPass, Stage, TileCtx};
use crate::gemm::GemmArgs;
use crate::gemm::finish::{Cta, tile_ctx};
use crate::types::Element;

/// Where [`finish_chunk`] puts one consumer warpgroup's 64×64 chunk of C.
#[derive(Clone, Copy)]
pub(super) struct Staging {
    /// C's tensor map ([`super::Sm90Args::tmap_c`]).
    pub(super) tmap: u64,
    /// No tensor map of C: the warpgroup's threads copy the chunk out ([`copy_out_staged`]).
    /// A constant `false` in kernels that stage only with C's map.
    pub(super) copy_out: bool,
    /// Byte offset of the staging buffer in dynamic shared memory.
    pub(super) buf: u32,
    /// This thread's warp within its warpgroup (rows `16·warp..` of the chunk).
    pub(super) warp: u32,
    /// This thread within its warpgroup (0..128).
    pub(super) thread: u32,
    /// The warpgroup's named barrier (1 or 2; 0 is the CTA's).
    pub(super) barrier: u32,
    /// Whether this thread issues the warpgroup's bulk stores (thread 0 of the warpgroup).
    pub(super) leader: bool,
    /// The chunk's first column and row in C.
    pub(super) x: u32,
    pub(super) y: u32,
    /// The mbarrier on which the copy of the chunk's residual into `buf` completes
    /// ([`super::Sm90Args::tmap_r`]), or 0 (no staged residual), and the phase to wait for.
    pub(super) residual_bar: u32,
    pub(super) residual_phase: u32,
}

/// The store half of [`finish_chunk`] with a staging buffer: `part` (already through the
/// epilogue) into the buffer, then the warpgroup's bulk tensor store of it, or with
/// [`Staging::copy_out`] its threads' copy ([`copy_out_staged`]).
///
/// # Safety
/// As [`finish_chunk`] with `staged`.
#[inline(always)]
pub(super) unsafe fn store_staged<Out: Element>(
    part: &Acc<1, EPI_FRAGS>,
    ctx: &TileCtx,
    smem: *mut u8,
    out: &Staging,
) {
    for f in 0..EPI_FRAGS {
        for h in 0..2 {
            let row = 16 * out.warp + ctx.g + 8 * h as u32;
            let off = out.buf + swizzle_128b_offset(row, 8 * f as u32 + 2 * ctx.t);
            let v = &part.v[0][f];
            *(smem.add(off as usize) as *mut u32) = Out::pack2(v[2 * h], v[2 * h + 1]);
        }
    }
    let tma = !out.copy_out;
    if tma {
        fence_proxy_async_shared();
    }
    bulk_read_wait_barrier(out.leader && tma, out.barrier, 128);
    let src = shared_addr(smem) + out.buf;
    if tma {
        store_2d_commit_if(out.leader, out.tmap, src, out.x as i32, out.y as i32);
    } else {
        copy_out_staged(ctx, src, out);
    }
}

/// Copies the warpgroup's staged 64×64 chunk of 16-bit C at `.shared` address `src` (128-byte
/// swizzle) to C at row `out.y`, column `out.x`: thread `t` takes the 16-byte pieces
/// `t + 128i`, so 8 neighbouring threads write one row's 128 bytes. A piece wholly inside N at
/// a 16-byte aligned address is one vector store; others are stored element by element up to
/// N (C's start or row stride not 16-byte aligned, the last columns); rows past M are skipped.
/// The next write into this buffer comes two chunks later, after the barrier of the chunk
/// between, which every thread reaches only once it has copied this one.
///
/// # Safety
/// As [`store_staged`]; every thread of the warpgroup has passed the barrier after writing
/// the chunk, and C (`ctx.c`, `ctx.ldc`) is an M × N 16-bit matrix.
#[inline(always)]
unsafe fn copy_out_staged(ctx: &TileCtx, src: u32, out: &Staging) {
    for i in 0..4 {
        let piece = out.thread + 128 * i;
        let (row, col) = (piece / 8, 8 * (piece % 8));
        let (r, c) = (out.y + row, out.x + col);
        let count = if r < ctx.m && c < ctx.n {
            (ctx.n - c).min(8)
        } else {
            0
        };
        let to = ctx.c + 2 * (r as u64 * ctx.ldc as u64 + c as u64);
        let v = ld_shared_u32x4(src + swizzle_128b_offset(row, col));
        st_u16x8(to, v, count == 8 && to % 16 == 0, count);
    }
}

/// [`crate::gemm::finish::finish`] for one consumer warpgroup's 64-column chunk `part`
/// (`split == 1`), with the norm pass `pass`: [`NormPass::Local`], or [`NormPass::Partial`] for
/// a row norm whose rows continue in other tiles (the chunk's row statistics merge into
/// `stats`, this thread's two rows, and the tile's last chunk writes them as partial
/// `cta.tile_n` of `cta.tiles_n` per row; the pre-norm values are stored for the finishing
/// kernel, `kernel::norm_finish`).
///
/// C is stored through `staged`'s buffer with TMA when given, else by each thread. Staged:
/// each thread writes its values (16-bit pairs) to the staging buffer in the 128-byte swizzle
/// (the 8 rows of a warp's store instruction fall in 8 different 16-byte chunks: no bank
/// conflict), fences them to the async proxy, and after the warpgroup's barrier its leader
/// issues one bulk tensor store of the box (CUTLASS's TMA-store epilogue). Before the barrier
/// the leader waits until its earlier stores have read their buffers, so the buffer written
/// next (the other one) is free once the barrier passes. With a staged residual
/// (`Staging::residual_bar`), every thread first waits for its copy into the buffer; the
/// stages read it there, and each thread overwrites only the words it read. `after_apply` runs
/// between the stages and the store (the next chunk's residual copy). `bias`, when not 0, is
/// [`TileCtx::staged_bias`] for the chunk.
///
/// # Safety
/// As [`crate::gemm::finish::finish`]; with [`NormPass::Partial`], the norm's statistics workspace
/// holds `M × cta.tiles_n` entries; with `staged`: `E` has no pair stage ([`super::stages_c`]),
/// all 128 threads of the warpgroup call it together, the CTA was launched with
/// [`super::smem_bytes_staged`] and the leader fenced the tensor map.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn finish_chunk<Out: Element, E: Stage>(
    args: &GemmArgs,
    epi: &E::Params,
    mut part: Acc<1, EPI_FRAGS>,
    cta: &Cta,
    smem: *mut u8,
    pass: NormPass,
    stats: &mut [Moments; 2],
    staged: Option<&Staging>,
    bias: u32,
    after_apply: impl FnOnce(),
) {
    let mut ctx = tile_ctx(args, cta, smem, 0);
    ctx.staged_bias = bias;
    ctx.norm_pass = pass;
    ctx.row_stats = *stats;
    if let Some(out) = staged.filter(|o| o.residual_bar != 0) {
        wait_parity(out.residual_bar, out.residual_phase);
        ctx.staged_residual = out.buf;
        ctx.staged_row = 16 * out.warp;
    }
    E::apply::<Out, 1, EPI_FRAGS>(epi, &mut part, &mut ctx);
    after_apply();
    *stats = ctx.row_stats;
    match staged {
        Some(out) => store_staged::<Out>(&part, &ctx, smem, out),
        None => store_tile::<Out, 1, EPI_FRAGS>(&part, &ctx),
    }
}

/// This thread's column of a tile's bias ([`crate::epilogue::TileCtx::staged_bias`]): the raw
/// 16-bit value of column `n0 + r` of the vector at `ptr` (length `n`), or 0 past N or past
/// the tile (`r ≥ bn`).
///
/// # Safety
/// `ptr` holds `n` 16-bit elements.
#[inline(always)]
pub(super) unsafe fn bias_share(ptr: u64, n: u32, n0: u32, bn: u32, r: u32) -> u16 {
    if r < bn && n0 + r < n {
        crate::arch::global::ld_u16((ptr as *const u16).add((n0 + r) as usize))
    } else {
        0
    }
}
