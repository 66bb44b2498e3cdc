//! The finishing step of a row norm whose rows span several CTA tiles (CODA's partial
//! statistics): merges each row's per-tile [`Moments`], normalizes the pre-norm values the GEMM
//! stored in C, runs the stages written after the norm, and stores C again.

use crate::arch::thread::{block_idx_x, block_idx_y, thread_idx_x};
use crate::epilogue::ops::{load_pair, load_pair_aligned};
use crate::epilogue::stages::{Moments, RowFactors, RowNorm};
use crate::epilogue::store::store_tile;
use crate::epilogue::{Acc, NormPass, Stage, TileCtx};
use crate::params::KernelParam;
use crate::types::Element;

/// Arguments of the finishing kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NormFinishArgs {
    /// C: M×N, holding the pre-norm values; overwritten with the result.
    pub c: u64,
    /// Rows.
    pub m: u32,
    /// Columns (the norm's width).
    pub n: u32,
    /// Leading dimension of C (elements).
    pub ldc: u32,
    /// Partial statistics per row (the GEMM's `ceil(N/BN)`).
    pub tiles_n: u32,
    /// Columns per CTA, a multiple of 64: grid y covers N in blocks of this many (the host picks
    /// it so that enough warps are in flight, see `fused_gemm_host::launch::norm_finish::norm_finish_cols`).
    pub cols_per_cta: u32,
    /// Padding.
    pub _pad: u32,
}

unsafe impl KernelParam for NormFinishArgs {}

/// Threads per CTA of the finishing kernel (4 warps, 16 rows each).
pub const THREADS: u32 = 128;
/// Rows per CTA.
pub const ROWS_PER_CTA: u32 = 64;
/// Most columns per CTA: the grid's y dimension splits rows into column blocks, so a memory-bound
/// pass over C has thousands of warps in flight (each re-merges its rows' partials).
pub const MAX_COLS_PER_CTA: u32 = 512;

/// Partials per row half a lane loads before merging them.
const MERGE_BATCH: usize = 4;

/// Columns a warp handles per step (`NI = 8` fragments of 8).
pub const COLS_PER_STEP: u32 = 64;

/// Launch: block `(128, 1, 1)`, grid `(ceil(M/64), ceil(N/args.cols_per_cta), 1)`, no shared
/// memory. `norm` must carry the statistics workspace the GEMM wrote. An entry point launched
/// as the GEMM's programmatic dependent (sm_90+) calls `arch::sync::grid_dependency_wait`
/// before this.
///
/// # Safety
/// As the GEMM that produced C: validated pointers and extents; `Post` holds no row reductions.
#[inline(always)]
pub unsafe fn run<K: RowNorm, Post: Stage, Out: Element>(
    args: &NormFinishArgs,
    norm: &K::Params,
    post: &Post::Params,
) {
    let tid = thread_idx_x();
    let lane = tid & 31;
    let row0 = block_idx_x() * ROWS_PER_CTA + (tid >> 5) * 16;
    if row0 >= args.m {
        return;
    }
    let (g, t) = (lane >> 2, lane & 3);
    let col_end = args.n.min((block_idx_y() + 1) * args.cols_per_cta);
    let first = block_idx_y() * args.cols_per_cta;
    let (gamma, beta) = K::affine_ptrs(norm);
    // 16-byte accesses of 8 values (see `WideStep`): a 16-bit C with 16-byte aligned rows, γ
    // and β, and no stage after the norm (those take the fragment layout below).
    let wide = Post::IS_EMPTY
        && core::mem::size_of::<Out>() == 2
        && args.c % 16 == 0
        && args.ldc % 8 == 0
        && gamma % 16 == 0
        && beta % 16 == 0;
    let interior = |col0: u32| row0 + 16 <= args.m && col0 + COLS_PER_STEP <= col_end;
    let load = |col0: u32| {
        if wide && col0 < col_end && interior(col0) {
            Some(WideStep::load(args, row0, col0, g, t, gamma, beta))
        } else {
            None
        }
    };
    // The first step's loads go out before the statistics are merged: the two round trips
    // overlap (a CTA often has one step, and waiting for both in turn left DRAM 83 % idle).
    let mut pending = load(first);
    let stats = K::stats(norm) as *const [f32; 4];
    let row = |h: usize| row0 + g + 8 * h as u32;
    // The four lanes of a row merge every fourth partial each (j = t, t + 4, …), then combine,
    // lower lane first, so all four hold the same bits. Loads go out MERGE_BATCH per row half
    // before any merge: one round trip per batch, not one per partial (at N = 8192 a row has 128
    // partials, and waiting on them one by one cost more than the pass over C).
    let mut st = [Moments::default(); 2];
    let mut base = t;
    while base < args.tiles_n {
        let mut v = [[[0f32; 4]; MERGE_BATCH]; 2];
        for (h, vh) in v.iter_mut().enumerate() {
            for (i, x) in vh.iter_mut().enumerate() {
                let j = base + 4 * i as u32;
                if row(h) < args.m && j < args.tiles_n {
                    *x = crate::arch::global::ld_f32x4(
                        stats.add(row(h) as usize * args.tiles_n as usize + j as usize),
                    );
                }
            }
        }
        // A partial not loaded has count 0, which `merge` passes over.
        for (sh, vh) in st.iter_mut().zip(&v) {
            for x in vh {
                *sh = sh.merge(Moments {
                    n: x[0],
                    mean: x[1],
                    m2: x[2],
                });
            }
        }
        base += 4 * MERGE_BATCH as u32;
    }
    let mut rows = [RowFactors::default(); 2];
    for (h, f) in rows.iter_mut().enumerate() {
        let mut s = st[h];
        // A range, not `[1, 2]`: LLVM left the array's iterator rolled and the array in local
        // memory.
        for i in 0..2 {
            let mask = 1 << i;
            let o = s.shfl_xor(mask);
            s = if t & mask == 0 {
                s.merge(o)
            } else {
                o.merge(s)
            };
        }
        if row(h) < args.m {
            *f = K::row_factors(norm, &s);
        }
    }
    let mut col0 = first;
    let aligned = args.c % (2 * core::mem::size_of::<Out>() as u64) == 0 && args.ldc % 2 == 0;
    let affine_pairs = aligned && K::pair_aligned::<Out>(norm);
    while col0 < col_end {
        if let Some(step) = pending.take() {
            // The next step's loads go out before this one's arithmetic and stores: a warp keeps
            // a step of C in flight while it works, so few warps can stream a long row block.
            pending = load(col0 + COLS_PER_STEP);
            step.finish::<Out>(args, row0, col0, g, t, &rows);
            col0 += COLS_PER_STEP;
            continue;
        }
        let mut ctx = TileCtx {
            m: args.m,
            n: args.n,
            warp_row: row0,
            warp_col: col0,
            cta_row: row0,
            cta_col: col0,
            bm: 16,
            bn: COLS_PER_STEP,
            g,
            t,
            warp_n: 0,
            warps_n: 1,
            warp_m: 0,
            tile_n: 0,
            tiles_n: 1,
            paired: false,
            deferred: false,
            norm_pass: NormPass::Local,
            row_stats: Default::default(),
            c: args.c,
            ldc: args.ldc,
            scratch: core::ptr::null_mut(),
            scratch_bytes: 0,
            staged_residual: 0,
            staged_row: 0,
            staged_bias: 0,
        };
        let mut acc = Acc::<1, 8>::zero();
        if affine_pairs && acc.interior(&ctx) {
            // No check per value: the loads of the whole step can be in flight at once. γ and
            // β come as pairs, once per column pair for both rows (a quarter of the loads).
            for ni in 0..8 {
                let c = ctx.col_of(ni);
                let (gm, bt) = K::affine_pair::<Out>(norm, c);
                for h in 0..2 {
                    let (a, b) = load_pair_aligned::<Out>(args.c, args.ldc, ctx.row_of(0, h), c);
                    let f = &rows[h];
                    acc.v[0][ni][2 * h] = f.affine(a, gm[0], bt[0]);
                    acc.v[0][ni][2 * h + 1] = f.affine(b, gm[1], bt[1]);
                }
            }
        } else {
            for ni in 0..8 {
                for h in 0..2 {
                    let (r, c) = (ctx.row_of(0, h), ctx.col_of(ni));
                    if r < args.m && c < args.n {
                        let (a, b) = load_pair::<Out>(args.c, args.ldc, r, c, args.n);
                        let st = &rows[h];
                        acc.v[0][ni][2 * h] = K::normalize::<Out>(norm, st, c, a);
                        if c + 1 < args.n {
                            acc.v[0][ni][2 * h + 1] = K::normalize::<Out>(norm, st, c + 1, b);
                        }
                    }
                }
            }
        }
        Post::apply::<Out, 1, 8>(post, &mut acc, &mut ctx);
        store_tile::<Out, 1, 8>(&acc, &ctx);
        col0 += COLS_PER_STEP;
    }
}

/// One warp's interior 16×64 step of [`run`] with 16-byte accesses, loaded ([`Self::load`])
/// apart from its arithmetic and stores ([`Self::finish`]) so that the loads can be in flight
/// while the row statistics are merged. Lane `(g, t)` holds rows `row0 + g` and `row0 + g + 8`,
/// columns `col0 + 32v + 8t..+8` for `v` in 0..2: the four lanes of a row read and write 64
/// contiguous bytes per access (every sector whole; the fragment layout's 4-byte pairs use half
/// of each sector). Values are 16-bit bit patterns carried in f32 registers.
#[derive(Clone, Copy)]
struct WideStep {
    /// C at `[v][h]`, γ and β at `[v]` (β zeros without one).
    x: [[[f32; 4]; 2]; 2],
    gamma: [[f32; 4]; 2],
    beta: [[f32; 4]; 2],
}

impl WideStep {
    /// Address of the 8 values at column `c` of the row at `base` (16-bit elements).
    #[inline(always)]
    fn at(base: u64, c: u32) -> *const [f32; 4] {
        (base + 2 * c as u64) as *const [f32; 4]
    }

    /// Issues the step's loads.
    ///
    /// # Safety
    /// As [`run`], with a 16-bit `Out`, C's address and row stride and `gamma`/`beta` 16-byte
    /// aligned (`beta` may be 0: no β), and the step inside M and N.
    #[inline(always)]
    unsafe fn load(
        args: &NormFinishArgs,
        row0: u32,
        col0: u32,
        g: u32,
        t: u32,
        gamma: u64,
        beta: u64,
    ) -> Self {
        use crate::arch::global::ld_f32x4;
        let mut s = WideStep {
            x: [[[0.0; 4]; 2]; 2],
            gamma: [[0.0; 4]; 2],
            beta: [[0.0; 4]; 2],
        };
        for v in 0..2 {
            let c = col0 + 32 * v as u32 + 8 * t;
            s.gamma[v] = ld_f32x4(Self::at(gamma, c));
            if beta != 0 {
                s.beta[v] = ld_f32x4(Self::at(beta, c));
            }
            for h in 0..2 {
                let r = row0 + g + 8 * h as u32;
                s.x[v][h] = ld_f32x4(Self::at(args.c + 2 * r as u64 * args.ldc as u64, c));
            }
        }
        s
    }

    /// [`RowFactors::affine`] (as the fragment path) and the 16-byte stores.
    ///
    /// # Safety
    /// As [`Self::load`], for the same step.
    #[inline(always)]
    unsafe fn finish<Out: Element>(
        &self,
        args: &NormFinishArgs,
        row0: u32,
        col0: u32,
        g: u32,
        t: u32,
        rows: &[RowFactors; 2],
    ) {
        let unpack8 = |w: &[f32; 4]| {
            let mut x = [0f32; 8];
            for i in 0..4 {
                let (lo, hi) = Out::unpack2(w[i].to_bits());
                x[2 * i] = lo;
                x[2 * i + 1] = hi;
            }
            x
        };
        for v in 0..2 {
            let c = col0 + 32 * v as u32 + 8 * t;
            let (gm, bt) = (unpack8(&self.gamma[v]), unpack8(&self.beta[v]));
            for (h, f) in rows.iter().enumerate() {
                let x = unpack8(&self.x[v][h]);
                let mut y = [0f32; 4];
                for i in 0..4 {
                    let a = f.affine(x[2 * i], gm[2 * i], bt[2 * i]);
                    let b = f.affine(x[2 * i + 1], gm[2 * i + 1], bt[2 * i + 1]);
                    y[i] = f32::from_bits(Out::pack2(a, b));
                }
                let r = row0 + g + 8 * h as u32;
                let p = Self::at(args.c + 2 * r as u64 * args.ldc as u64, c);
                crate::arch::global::st_f32x4(p as *mut [f32; 4], y);
            }
        }
    }
}
