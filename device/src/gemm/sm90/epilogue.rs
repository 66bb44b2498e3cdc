//! The Hopper epilogue collective: each consumer warpgroup runs the stages on its tile's
//! accumulators in 64-column chunks ([`EPI_COLS`]) and stores C, either through shared
//! memory (two staging buffers per warpgroup, emptied by TMA stores or by the warpgroup's
//! threads) or per thread; it copies each chunk's residual into the staging buffer that
//! chunk's C will leave through, and the tile's column bias into shared memory (see the
//! [module docs](super), "Storing C" and "Epilogue").

use super::{
    Consumer, EPI_COLS, EPI_FRAGS, EpilogueTraits, STAGING_BYTES, SharedMem, Sm90Args,
    always_stages_c, bias_offset, cta_rows, is_pingpong, smem_bytes_staged, stages_c,
    staging_offset,
};
use crate::arch::global::st_u16x8;
use crate::arch::mbarrier::{arrive_expect_tx, wait_parity};
use crate::arch::shared::{dynamic_shared_size, ld_shared_u32x4, shared_addr};
use crate::copy::tma::{
    bulk_read_wait_barrier, bulk_wait_group_read, fence_proxy_async_shared,
    fence_tensormap_acquire, load_2d, prefetch_tensormap, store_2d_commit_if, swizzle_128b_offset,
};
use crate::epilogue::stages::Moments;
use crate::epilogue::store::store_tile;
use crate::epilogue::{Acc, NormPass, Prefetch, Stage, TileCtx};
use crate::gemm::finish::{Cta, tile_ctx};
use crate::gemm::{GemmArgs, TileShape};
use crate::types::Element;

/// How a kernel's epilogue moves C, the residual and the column bias: decided once, from
/// the stage list, C's element type and the launch's tensor maps.
#[derive(Clone, Copy)]
pub(super) struct EpiloguePlan {
    /// C goes through the staging buffers even without C's tensor map ([`always_stages_c`]: a
    /// compile-time fact).
    always_staged: bool,
    /// C goes through the staging buffers and out with TMA ([`Sm90Args::tmap_c`]).
    pub(super) tma_c: bool,
    /// C goes through the staging buffers (one of the two above).
    staged: bool,
    /// Each chunk's residual comes into its staging buffer with TMA ([`Sm90Args::tmap_r`]).
    pub(super) staged_residual: bool,
    /// The tile's column bias is copied into shared memory ([`bias_offset`]).
    stage_bias: bool,
}

impl EpiloguePlan {
    /// The plan of the stage list `E` writing `Out` on tiles of shape `tile`, where `row_norm`
    /// says whether the kernel runs as a row-norm group ([`Sm90Args::norm_cluster`] > 0).
    /// Traps when a kernel that always stages C was given too little shared memory.
    ///
    /// # Safety
    /// Reads the kernel's parameters; every thread may call it.
    #[inline(always)]
    pub(super) unsafe fn new<Out: Element, E: Stage>(
        sm90: &Sm90Args,
        tile: &TileShape,
        row_norm: bool,
    ) -> Self {
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
        if always_staged && dynamic_shared_size() < smem_bytes_staged(tile) {
            crate::arch::trap();
        }
        let staged_residual = E::READS_MATRIX && tma_c && sm90.tmap_r != 0;
        // The tile's column bias, copied into shared memory by the consumer warpgroups that run
        // the epilogue: each thread loads one column when the tile's mainloop starts and stores
        // it after the mainloop, so no chunk of the epilogue waits on a global load of the bias
        // (loaded per chunk, it was the epilogue's top stall). 16-bit C; no row norm (their
        // kernels spilled with more live values).
        let stage_bias = E::COLUMN_VECTOR
            && !E::ROW_REDUCTION
            && core::mem::size_of::<Out>() == 2
            && (!is_pingpong(tile) || tile.bn <= 128);
        EpiloguePlan {
            always_staged,
            tma_c,
            staged,
            staged_residual,
            stage_bias,
        }
    }

    /// A consumer warpgroup's leader fences and prefetches the tensor maps its epilogue uses:
    /// C's when it stores C with TMA here or (`ring_store`) in a row-norm group's ring, the
    /// residual's when it stages the residual.
    ///
    /// # Safety
    /// Before the first TMA copy that uses them.
    #[inline(always)]
    pub(super) unsafe fn fence_tensor_maps(&self, sm90: &Sm90Args, ring_store: bool, leader: bool) {
        if (self.tma_c || ring_store) && leader {
            fence_tensormap_acquire(sm90.tmap_c);
            prefetch_tensormap(sm90.tmap_c);
        }
        if self.staged_residual && leader {
            fence_tensormap_acquire(sm90.tmap_r);
            prefetch_tensormap(sm90.tmap_r);
        }
    }
}

/// The epilogue collective of one consumer warpgroup: the stage list `E` writing `Out` from
/// `Acc<MI, NI>` accumulators, over the tiles of the warpgroup in order.
pub(super) struct Epilogue<'a, Out, const MI: usize, const NI: usize, const STAGES: u32, E: Stage> {
    pub(super) plan: EpiloguePlan,
    pub(super) args: &'a GemmArgs,
    pub(super) epi: &'a E::Params,
    pub(super) sm90: &'a Sm90Args,
    pub(super) smem: SharedMem<STAGES>,
    pub(super) tile: TileShape,
    pub(super) thread: Consumer,
    /// Chunks this warpgroup has staged: they alternate between its two buffers.
    staged_chunks: u32,
    out: core::marker::PhantomData<Out>,
}

/// One tile of a warpgroup's epilogue, from [`Epilogue::begin`].
#[derive(Clone, Copy)]
pub(super) struct EpilogueTile {
    /// The tile, in tiles of this CTA's rows × BN, and its first row and column in C.
    pub(super) tm: u32,
    pub(super) tn: u32,
    pub(super) m0: u32,
    pub(super) n0: u32,
    /// This thread's column of the tile's bias and its raw 16-bit value (staged bias).
    bias_col: u32,
    bias_value: u16,
    /// The epilogue's chunks: `chunks` per 64-row half (those past N skipped), half by half;
    /// `first_chunk` counts the warpgroup's staged chunks before this tile.
    chunks: u32,
    tile_chunks: u32,
    first_chunk: u32,
}

impl<'a, Out: Element, const MI: usize, const NI: usize, const STAGES: u32, E: Stage>
    Epilogue<'a, Out, MI, NI, STAGES, E>
{
    /// The epilogue of consumer thread `thread` under `plan`, before its warpgroup's first tile.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn new(
        plan: EpiloguePlan,
        args: &'a GemmArgs,
        epi: &'a E::Params,
        sm90: &'a Sm90Args,
        smem: SharedMem<STAGES>,
        tile: TileShape,
        thread: Consumer,
    ) -> Self {
        Epilogue {
            plan,
            args,
            epi,
            sm90,
            smem,
            tile,
            thread,
            staged_chunks: 0,
            out: core::marker::PhantomData,
        }
    }

    /// Whether this thread has bulk stores of C to wait for before the CTA exits.
    #[inline(always)]
    pub(super) fn waits_for_stores(&self) -> bool {
        self.plan.tma_c && self.thread.leader
    }

    /// The epilogue of tile `(tm, tn)` begins (before its mainloop): this thread loads its
    /// column of the tile's bias (staged bias), and the tile's chunks are counted.
    ///
    /// # Safety
    /// As [`super::run`]'s.
    #[inline(always)]
    pub(super) unsafe fn begin(&self, tm: u32, tn: u32) -> EpilogueTile {
        let (args, tid) = (self.args, self.thread.tid);
        let (bm, bn) = (cta_rows(&self.tile), self.tile.bn);
        let per_half = (NI / EPI_FRAGS) as u32;
        let (m0, n0) = (tm * bm, tn * bn);
        let bias_col = if is_pingpong(&self.tile) {
            tid % 128
        } else {
            tid - 128
        };
        let bias_value = if self.plan.stage_bias {
            bias_share(E::column_vector(self.epi), args.n, n0, bn, bias_col)
        } else {
            0
        };
        // The epilogue's chunks: `chunks` per 64-row half (those past N skipped), half by
        // half; `staged_chunks` counts them over this warpgroup's tiles.
        let chunks = (args.n - n0).div_ceil(EPI_COLS).min(per_half);
        let tile_chunks = MI as u32 * chunks;
        let first_chunk = self.staged_chunks;
        EpilogueTile {
            tm,
            tn,
            m0,
            n0,
            bias_col,
            bias_value,
            chunks,
            tile_chunks,
            first_chunk,
        }
    }

    /// Called [`super::PREFETCH_K_TILES`] before the end of the tile's k-loop: the tiles the
    /// stages will read move into L2 ([`Self::prefetch`]), and the first two chunks'
    /// residual into the staging buffers ([`Self::residual_ahead`]).
    ///
    /// # Safety
    /// All threads of the warpgroup, during the tile's mainloop.
    #[inline(always)]
    pub(super) unsafe fn at_prefetch(&self, t: &EpilogueTile) {
        self.prefetch(t);
        self.residual_ahead(t);
    }

    /// Starts moving the tiles the stages will read for tile `t` into L2 ([`Stage::prefetch`]).
    /// The epilogue's residual tile travels to L2 during the last PREFETCH_K_TILES k-tiles of
    /// the mainloop, so its loads do not expose a DRAM round trip per chunk. Issued at the
    /// start of a long mainloop, the lines were evicted again by its A and B traffic (LayerNorm
    /// at 8192³ got slower). No inline attribute (see the [module docs](super), "Collectives").
    fn prefetch(&self, t: &EpilogueTile) {
        if !E::PAIRS {
            let bn = self.tile.bn;
            E::prefetch::<Out>(
                self.epi,
                &Prefetch {
                    m: self.args.m,
                    n: self.args.n,
                    row0: t.tm * cta_rows(&self.tile) + self.thread.row0,
                    col0: t.tn * bn,
                    rows: 64 * MI as u32,
                    cols: bn,
                    thread: self.thread.tid % 128,
                    threads: 128,
                },
            );
        }
    }

    /// With a staged residual, the leader copies the first two chunks' residual into the
    /// staging buffers: both are free once this warpgroup's earlier stores have read them.
    ///
    /// # Safety
    /// All threads of the warpgroup (the leader issues), before [`Self::tile`].
    #[inline(always)]
    pub(super) unsafe fn residual_ahead(&self, t: &EpilogueTile) {
        if self.plan.staged_residual && self.thread.leader {
            bulk_wait_group_read::<0>();
            self.load_residual(t, 0);
            if t.tile_chunks > 1 {
                self.load_residual(t, 1);
            }
        }
    }

    /// Copies the residual of the tile's chunk `q` into the staging buffer that chunk will
    /// use (`first_chunk + q` alternates them), completing on its mbarrier. No inline
    /// attribute (see the [module docs](super), "Collectives").
    unsafe fn load_residual(&self, t: &EpilogueTile, q: u32) {
        let (c, smem) = (self.thread.c, &self.smem);
        let (h, j) = (q / t.chunks, q % t.chunks);
        let b = (t.first_chunk + q) & 1;
        arrive_expect_tx(smem.residual_bar(c, b), STAGING_BYTES);
        load_2d(
            smem.base + staging_offset(&self.tile) + (2 * c + b) * STAGING_BYTES,
            self.sm90.tmap_r,
            (t.n0 + j * EPI_COLS) as i32,
            (t.m0 + self.thread.row0 + 64 * h) as i32,
            smem.residual_bar(c, b),
        );
    }

    /// Byte offset of this warpgroup's column bias buffer. Ping-pong warpgroups run different
    /// tiles: a buffer each. Cooperative ones share the tile's columns: one buffer.
    #[inline(always)]
    fn bias_buf(&self) -> u32 {
        let bn = self.tile.bn;
        bias_offset(self.smem.ring_bytes(), STAGES)
            + if is_pingpong(&self.tile) {
                self.thread.c * 2 * bn
            } else {
                0
            }
    }

    /// The named barrier (id, threads) around the bias copy: a ping-pong warpgroup's own (`1 +
    /// c`, as the staged stores); barrier 3 spans both cooperative warpgroups, each of whose
    /// 256 threads copies one column.
    #[inline(always)]
    fn bias_barrier(&self) -> (u32, u32) {
        if is_pingpong(&self.tile) {
            (1 + self.thread.c, 128)
        } else {
            (3, 256)
        }
    }

    /// The epilogue of tile `t` with accumulators `acc` (after its mainloop): the stages on
    /// each 64-column chunk and the store of C.
    ///
    /// # Safety
    /// All threads of the warpgroup call it together, after [`Self::begin`] of `t` and the
    /// tile's mainloop.
    #[inline(always)]
    pub(super) unsafe fn tile(&mut self, t: &EpilogueTile, acc: Acc<MI, NI>) {
        let (args, epi, sm90) = (self.args, self.epi, self.sm90);
        let (tile, smem) = (self.tile, self.smem.ptr);
        let Consumer {
            tid,
            c,
            w,
            lane,
            leader,
            row0: wg_row0,
        } = self.thread;
        let EpiloguePlan {
            always_staged,
            tma_c,
            staged,
            staged_residual,
            stage_bias,
        } = self.plan;
        let (pingpong, bm, bn) = (is_pingpong(&tile), cta_rows(&tile), tile.bn);
        let per_half = (NI / EPI_FRAGS) as u32;
        let EpilogueTile {
            tm,
            tn,
            m0,
            n0,
            bias_col,
            bias_value,
            chunks,
            tile_chunks,
            first_chunk,
        } = *t;
        if stage_bias {
            let (id, threads) = self.bias_barrier();
            // The buffer's readers of the previous tile are past it: on ping-pong tiles
            // with staged C the chunks' barriers ordered that already.
            if !(pingpong && staged) {
                bulk_read_wait_barrier(false, id, threads);
            }
            if bias_col < bn {
                *(smem.add((self.bias_buf() + 2 * bias_col) as usize) as *mut u16) = bias_value;
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
                let q = self.staged_chunks - first_chunk;
                let out = Staging {
                    tmap: sm90.tmap_c,
                    copy_out: always_staged && !tma_c,
                    buf: staging_offset(&tile) + (2 * c + (self.staged_chunks & 1)) * STAGING_BYTES,
                    warp: w,
                    thread: tid % 128,
                    barrier: 1 + c,
                    leader,
                    x: col0,
                    y: m0 + half_row,
                    residual_bar: if staged_residual {
                        self.smem.residual_bar(c, self.staged_chunks & 1)
                    } else {
                        0
                    },
                    residual_phase: (self.staged_chunks >> 1) & 1,
                };
                // Once the stages have read this chunk's residual: the next chunk's goes
                // into the other buffer when the store of the chunk before has read it
                // (chunks 0 and 1 were copied during the mainloop).
                let load_next = || {
                    if staged_residual && leader && q >= 1 && q + 1 < tile_chunks {
                        bulk_wait_group_read::<0>();
                        self.load_residual(t, q + 1);
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
                    self.bias_buf() + 2 * j * EPI_COLS
                } else {
                    0
                };
                finish_chunk::<Out, E>(
                    args, epi, $part, &ctx, smem, pass, &mut stats, out, bias, load_next,
                );
                self.staged_chunks += staged as u32;
            }};
        }
        if E::ROW_REDUCTION {
            // Written out per chunk, a row norm's chain (its statistics, the partials, both
            // norm passes) outgrew the instruction cache. A loop keeps one copy. Each turn
            // takes the first chunk and shifts the others down (moves between constant
            // indices, so the accumulators stay in registers, and the chunk in hand is not a
            // copy: picking chunk q by selects kept 32 more values live and spilled the
            // ping-pong kernels, ptxas -v of sm_90a).
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
    }
}

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
unsafe fn finish_chunk<Out: Element, E: Stage>(
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
unsafe fn bias_share(ptr: u64, n: u32, n0: u32, bn: u32, r: u32) -> u16 {
    if r < bn && n0 + r < n {
        crate::arch::global::ld_u16((ptr as *const u16).add((n0 + r) as usize))
    } else {
        0
    }
}
