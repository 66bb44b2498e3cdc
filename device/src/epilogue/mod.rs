//! Epilogue stages: what runs on the fp32 accumulator tile after the mainloop, before the store.
//!
//! # Model
//!
//! After the mainloop every thread holds an [`Acc`]: `MI × NI` `mma.sync` m16n8 accumulator
//! fragments. Fragment `(mi, ni)` element `2h + e` (h, e ∈ {0, 1}) is the output element at
//!
//! ```text
//! row = ctx.warp_row + 16·mi + lane/4 + 8·h
//! col = ctx.warp_col +  8·ni + 2·(lane%4) + e
//! ```
//!
//! so each thread holds pairs of adjacent columns `(col, col + 1)`, `col` even (PTX ISA §9.7.14.5.8,
//! "Matrix Fragments for mma.m16n8k16"). Pairwise stages (SwiGLU, GeGLU, RoPE) work on these
//! register pairs. The mainloop that fed the tile does not matter to a stage.
//!
//! A stage is a type implementing [`Stage`]; its launch-time inputs are its `Params` (a
//! `#[repr(C)]` struct of device addresses and scalars, filled by the host launcher). Stages are
//! composed statically with [`Cons`], applied head first, in the order written in
//! `#[fused_gemm(epilogue = [...])]`.
//!
//! # Invariants a stage may assume
//! - every thread of the CTA calls `apply` (stages with cross-thread reductions rely on it);
//! - values at rows ≥ M or columns ≥ N are present but meaningless; stages must not read memory
//!   there and reductions must not count them ([`Acc::for_each_pair`] skips them);
//! - shared memory (`ctx.scratch`, `ctx.scratch_bytes` bytes) is free to use: the mainloop is done;
//! - after a pair-reducing stage (`ctx.paired`), element `2h` holds the value of output column
//!   `col / 2` and element `2h + 1` is dead.

pub mod ops;
pub mod stages;
pub mod store;

use crate::arch::fence_value;
use crate::params::KernelParam;

use crate::types::Element;

/// The per-thread accumulator tile: `MI × NI` m16n8 fragments of 4 f32 each.
#[derive(Clone, Copy)]
pub struct Acc<const MI: usize, const NI: usize> {
    /// `v[mi][ni][2h + e]`, see the [module docs](self) for coordinates.
    pub v: [[[f32; 4]; NI]; MI],
}

impl<const MI: usize, const NI: usize> Acc<MI, NI> {
    /// All zeros.
    #[inline(always)]
    pub const fn zero() -> Self {
        Acc {
            v: [[[0.0; 4]; NI]; MI],
        }
    }

    /// Whether every value this thread holds is in bounds (`row < M`, `col + 1 < N` for all
    /// its rows and column pairs). Interior tiles then run the stages' loops without a bounds
    /// check: no branch per value, so the loads and math of many values can overlap.
    #[inline(always)]
    pub fn interior(&self, ctx: &TileCtx) -> bool {
        ctx.warp_row + 16 * MI as u32 <= ctx.m && ctx.warp_col + 8 * NI as u32 <= ctx.n
    }

    /// The first `F` fragments of fragment row 0, as one fragment row: chunk 0 in (mi, ni)
    /// order. A loop over chunks takes it and then calls [`Self::shift_chunks`]: every index is
    /// a constant, so the accumulators stay in registers and the chunk is not a copy (picking
    /// chunk q by run-time selects kept 32 more values live and spilled).
    #[inline(always)]
    pub fn first_chunk<const F: usize>(&self) -> Acc<1, F> {
        const { assert!(F > 0 && NI % F == 0, "NI is a multiple of the chunk width") };
        let mut out = Acc::<1, F>::zero();
        for f in 0..F {
            out.v[0][f] = self.v[0][f];
        }
        out
    }

    /// Moves every fragment `F` places toward the front in (mi, ni) order (chunk q + 1 of `F`
    /// fragments becomes chunk q); the last chunk keeps its values. All indices are constants.
    #[inline(always)]
    pub fn shift_chunks<const F: usize>(&mut self) {
        const { assert!(F > 0 && NI % F == 0, "NI is a multiple of the chunk width") };
        for i in 0..MI * NI - F {
            let j = i + F;
            self.v[i / NI][i % NI] = self.v[j / NI][j % NI];
        }
    }

    /// Writes `chunk` over the last `F` fragments (in (mi, ni) order). After
    /// [`Self::first_chunk`] and [`Self::shift_chunks`] this rotates the spent chunk to the
    /// back, so no fragment stays unchanged over a loop's turns (which LLVM would peel turns
    /// to hoist). All indices are constants.
    #[inline(always)]
    pub fn set_last_chunk<const F: usize>(&mut self, chunk: &Acc<1, F>) {
        const { assert!(F > 0 && NI % F == 0, "NI is a multiple of the chunk width") };
        for f in 0..F {
            let i = MI * NI - F + f;
            self.v[i / NI][i % NI] = chunk.v[0][f];
        }
    }

    /// Calls `f(row, col, &mut v0, &mut v1)` for every in-bounds pair this thread holds
    /// (`row < M`, `col < N`; `v1` belongs to `col + 1`, which may be ≥ N: check `ctx.n`).
    /// Before a pair-reducing stage only.
    #[inline(always)]
    pub fn for_each_pair(&mut self, ctx: &TileCtx, f: impl FnMut(u32, u32, &mut f32, &mut f32)) {
        if self.interior(ctx) {
            self.each_pair::<false>(ctx, f);
        } else {
            self.each_pair::<true>(ctx, f);
        }
    }

    /// [`Self::for_each_pair`] with (`CHECK`) or without the bounds checks; without them only
    /// when [`Self::interior`].
    #[inline(always)]
    pub(crate) fn each_pair<const CHECK: bool>(
        &mut self,
        ctx: &TileCtx,
        mut f: impl FnMut(u32, u32, &mut f32, &mut f32),
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
                    let [a, b] = self.v[mi][ni].get_disjoint_mut([2 * h, 2 * h + 1]).unwrap();
                    f(row, col, a, b);
                    *a = fence_value(*a);
                    *b = fence_value(*b);
                }
            }
        }
    }

    /// Calls `f(row, col, &mut v)` for every in-bounds value, with `col` the *output* column
    /// (halved after a pair-reducing stage).
    #[inline(always)]
    pub fn for_each(&mut self, ctx: &TileCtx, f: impl FnMut(u32, u32, &mut f32)) {
        if self.interior(ctx) {
            self.each::<false>(ctx, f);
        } else {
            self.each::<true>(ctx, f);
        }
    }

    #[inline(always)]
    fn each<const CHECK: bool>(&mut self, ctx: &TileCtx, mut f: impl FnMut(u32, u32, &mut f32)) {
        for mi in 0..MI {
            for h in 0..2 {
                let row = ctx.row_of(mi, h);
                if CHECK && row >= ctx.m {
                    continue;
                }
                for ni in 0..NI {
                    let col = ctx.col_of(ni);
                    if ctx.paired {
                        if !CHECK || col < ctx.n {
                            f(row, col / 2, &mut self.v[mi][ni][2 * h]);
                            self.v[mi][ni][2 * h] = fence_value(self.v[mi][ni][2 * h]);
                        }
                    } else {
                        for e in 0..2 {
                            if !CHECK || col + (e as u32) < ctx.n {
                                f(row, col + e as u32, &mut self.v[mi][ni][2 * h + e]);
                                self.v[mi][ni][2 * h + e] = fence_value(self.v[mi][ni][2 * h + e]);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Applies `f` to every value, in bounds or not (cheapest form for pure functions).
    #[inline(always)]
    pub fn map(&mut self, f: impl Fn(f32) -> f32) {
        for mi in 0..MI {
            for ni in 0..NI {
                for e in 0..4 {
                    self.v[mi][ni][e] = fence_value(f(self.v[mi][ni][e]));
                }
            }
        }
    }
}

/// Where this thread's tile sits in the problem, and what the kernel shares with stages.
#[derive(Clone, Copy)]
pub struct TileCtx {
    /// Rows of the GEMM output (M).
    pub m: u32,
    /// Columns of the GEMM output (N), before any pair reduction.
    pub n: u32,
    /// First row of this warp's tile.
    pub warp_row: u32,
    /// First column of this warp's tile.
    pub warp_col: u32,
    /// First row of the CTA's tile.
    pub cta_row: u32,
    /// First column of the CTA's tile.
    pub cta_col: u32,
    /// Rows of the CTA tile (BM).
    pub bm: u32,
    /// Columns of the CTA tile (BN).
    pub bn: u32,
    /// `lane / 4`: row within an m16n8 fragment half.
    pub g: u32,
    /// `lane % 4`: column pair within an m16n8 fragment.
    pub t: u32,
    /// Warp index along N within the CTA, and warps along N.
    pub warp_n: u32,
    /// Warps along N in the CTA.
    pub warps_n: u32,
    /// Warp index along M within the CTA.
    pub warp_m: u32,
    /// Index of the N tile (CTA column) in the grid, and the number of N tiles.
    pub tile_n: u32,
    /// Number of N tiles.
    pub tiles_n: u32,
    /// True once a pair-reducing stage ran: the output has N/2 columns.
    pub paired: bool,
    /// True once a row-norm stage deferred itself to the finishing kernel (its CTA does not span
    /// the row): the remaining stages do not run here, and the store writes the pre-norm values.
    pub deferred: bool,
    /// Which part of a row norm this call runs.
    pub norm_pass: NormPass,
    /// With [`NormPass::Stats`] / [`NormPass::Apply`]: the statistics of this thread's two rows
    /// (`row_of(0, h)`, h = 0, 1; one m16 fragment row per call) over the columns seen so far,
    /// respectively over the whole row.
    pub row_stats: [stages::Moments; 2],
    /// Output pointer (C) and its leading dimension, elements; read by `accumulate`.
    pub c: u64,
    /// Leading dimension of C (elements).
    pub ldc: u32,
    /// Free shared memory for cross-warp reductions (generic pointer) and its size in bytes.
    pub scratch: *mut u8,
    /// Bytes available at `scratch`.
    pub scratch_bytes: u32,
    /// Byte offset from `scratch` of a copy of the operand of a [`Stage::READS_MATRIX`] stage
    /// in shared memory: 64 rows × 64 columns (16-bit elements, 128-byte rows in the 128-byte
    /// swizzle, [`crate::copy::tma::swizzle_128b_offset`]; zeros past M and N) covering this
    /// call's columns `warp_col..warp_col + 64`; or 0: the stage reads global memory. Set only
    /// for one-fragment-row (`MI = 1`) calls, by mainloops that copy the operand ahead.
    pub staged_residual: u32,
    /// The row of the `staged_residual` copy that holds this warp's first fragment row.
    pub staged_row: u32,
    /// Byte offset from `scratch` of a copy of the vector of a [`Stage::COLUMN_VECTOR`] stage
    /// in shared memory: the value of column `warp_col` (16-bit elements, one per column,
    /// contiguous over this call's columns, zeros past N), or 0: the stage reads global memory.
    /// The first stage of the list that reads it takes it and sets it to 0.
    pub staged_bias: u32,
}

/// How a row-norm stage runs in one epilogue call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPass {
    /// In one call: the norm finishes when the CTA tile spans the row, else it writes partial
    /// statistics and defers itself and the later stages to the finishing kernel.
    Local,
    /// First pass of a row-complete mainloop over a chunk of a row: only the stages before the
    /// norm run (the norm defers itself and the rest); the caller keeps the values for
    /// [`NormPass::Stats`] and [`NormPass::Apply`].
    Pre,
    /// Over the values [`NormPass::Pre`] left, all of the tile's columns in one call: the
    /// stages before the norm are skipped, and the norm merges the values' row statistics into
    /// `row_stats` and defers the rest.
    Stats,
    /// Last pass over the same values: the stages before the norm are skipped
    /// ([`NormPass::Pre`] applied them), the norm normalizes with the complete `row_stats`, and the
    /// later stages run.
    Apply,
    /// One chunk of a tile whose rows continue in other tiles (mainloops that run the epilogue
    /// per chunk, `gemm::sm90`): the stages before the norm run, the norm merges the chunk's
    /// row statistics into `row_stats` and defers the rest, and the caller stores the pre-norm
    /// values for the finishing kernel. On the tile's `last` chunk the merged `row_stats` are
    /// written as the tile's partial statistics (slot `tile_n` of `tiles_n` per row): one
    /// partial per tile, not one per chunk, so the finishing kernel merges fewer.
    Partial {
        /// Whether this is the tile's last chunk of these rows.
        last: bool,
    },
}

impl TileCtx {
    /// Row of fragment row-block `mi`, half `h`.
    #[inline(always)]
    pub fn row_of(&self, mi: usize, h: usize) -> u32 {
        self.warp_row + 16 * mi as u32 + self.g + 8 * h as u32
    }

    /// First (even) column of fragment column-block `ni`.
    #[inline(always)]
    pub fn col_of(&self, ni: usize) -> u32 {
        self.warp_col + 8 * ni as u32 + 2 * self.t
    }

    /// Output columns after the stages so far.
    #[inline(always)]
    pub fn out_n(&self) -> u32 {
        if self.paired { self.n / 2 } else { self.n }
    }

    /// True when this CTA's tile covers every column of the row (in-CTA row reductions are
    /// possible).
    #[inline(always)]
    pub fn spans_row(&self) -> bool {
        self.cta_col == 0 && self.bn >= self.n
    }
}

/// Bytes per cache line, the unit of [`Prefetch`].
const LINE: u64 = 128;

/// The part of C whose epilogue a thread will run soon, for [`Stage::prefetch`]: rows
/// `row0..row0 + rows` and columns `col0..col0 + cols` of the M×N output (GEMM coordinates;
/// the helpers clip to M and N), shared by `threads` threads of which this one is `thread`
/// (each issues every `threads`-th prefetch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefetch {
    /// Rows of C (M).
    pub m: u32,
    /// Columns of C (N).
    pub n: u32,
    /// First row of the region.
    pub row0: u32,
    /// First column of the region.
    pub col0: u32,
    /// Rows of the region.
    pub rows: u32,
    /// Columns of the region.
    pub cols: u32,
    /// This thread's index among `threads`.
    pub thread: u32,
    /// Threads that share the region's prefetches (at least 1).
    pub threads: u32,
}

impl Prefetch {
    /// Into L2: the region of a row-major M×N matrix of `esize`-byte elements with leading
    /// dimension `ld` elements (`residual`).
    #[inline(always)]
    pub fn matrix(&self, ptr: u64, ld: u32, esize: u32) {
        self.matrix_lines(ptr, ld, esize, |a| unsafe {
            crate::arch::global::prefetch_l2(a)
        });
    }

    /// Calls `f` with one address in every line the region's rows of the matrix occupy (clipped
    /// to M×N), this thread's share of them; every address is one of the region's elements'.
    #[inline(always)]
    fn matrix_lines(&self, ptr: u64, ld: u32, esize: u32, f: impl Fn(u64)) {
        let (r_end, c_end) = (
            self.row0.saturating_add(self.rows).min(self.m),
            self.col0.saturating_add(self.cols).min(self.n),
        );
        if self.row0 >= r_end || self.col0 >= c_end {
            return;
        }
        // A row's span may start mid-line: one line more than its bytes fill.
        let per_row = ((c_end - self.col0) as u64 * esize as u64).div_ceil(LINE) as u32 + 1;
        let total = (r_end - self.row0) * per_row;
        let mut i = self.thread;
        while i < total {
            let r = self.row0 + i / per_row;
            let row = ptr + r as u64 * ld as u64 * esize as u64;
            let lo = row + self.col0 as u64 * esize as u64;
            let hi = row + (c_end - 1) as u64 * esize as u64;
            f((lo + (i % per_row) as u64 * LINE).min(hi));
            i += self.threads;
        }
    }
}

/// One epilogue stage. See the [module docs](self) for what `apply` may assume.
pub trait Stage {
    /// Launch-time parameters, passed by value inside the kernel's parameter struct.
    type Params: KernelParam;
    /// Whether the stage turns column pairs into single values (output width N/2).
    const PAIRS: bool = false;
    /// Whether the stage reduces over whole rows (and so needs the row in one CTA, or the
    /// partial-statistics path).
    const ROW_REDUCTION: bool = false;
    /// Whether this is the empty stage list ([`Nil`]): a kernel may then skip the fragment
    /// layout the stages see (the norm finishing kernel's wide loads and stores).
    const IS_EMPTY: bool = false;
    /// Whether the stage reads an M×N operand of its own at each value's coordinates (the
    /// `residual` matrix; not C, which `accumulate` reads), whose tiles a mainloop may copy
    /// into shared memory ahead of the epilogue ([`TileCtx::staged_residual`]). For a list:
    /// whether any stage does; lists without one compile no such copies.
    const READS_MATRIX: bool = false;
    /// Whether the stage's first operation reads one value of the output type per output column
    /// from a vector of length N ([`Self::column_vector`]; `bias`): a mainloop may copy the
    /// tile's values of it into shared memory ([`TileCtx::staged_bias`]). For a list: whether a
    /// stage before any pair stage does (the first such stage's vector).
    const COLUMN_VECTOR: bool = false;

    /// The address of the vector of [`Self::COLUMN_VECTOR`], or 0.
    #[inline(always)]
    fn column_vector(p: &Self::Params) -> u64 {
        let _ = p;
        0
    }

    /// Transforms the tile in registers. `Out` is the kernel's output element type.
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &Self::Params,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    );

    /// Starts moving the tiles [`Self::apply`] will read for `region` into L2 (prefetches: no
    /// effect on any value), so that the epilogue's loads do not wait on DRAM once per chunk.
    /// Mainloops call it a few k-tiles before the end of a tile's k-loop (early enough to hide
    /// DRAM latency, late enough that the mainloop's own traffic does not evict the lines), for
    /// stage lists without a pair stage (whose later stages see halved columns). Default:
    /// nothing; `residual` prefetches its tile.
    /// Vectors (bias, scales) are left alone: they are small and stay in L2, and an L1
    /// prefetch of them showed no gain on the H200.
    #[inline(always)]
    fn prefetch<Out: Element>(p: &Self::Params, region: &Prefetch) {
        let _ = (p, region);
    }
}

/// The empty stage list.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Nil;

unsafe impl KernelParam for Nil {}

/// A stage list: `H` first, then the list `T`. Also the `#[repr(C)]` pair of their parameters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Cons<H, T> {
    /// Parameters of the first stage.
    pub head: H,
    /// Parameters of the rest.
    pub tail: T,
}

unsafe impl<H: KernelParam, T: KernelParam> KernelParam for Cons<H, T> {}

impl Stage for Nil {
    type Params = Nil;
    const IS_EMPTY: bool = true;
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        _: &Nil,
        _: &mut Acc<MI, NI>,
        _: &mut TileCtx,
    ) {
    }
}

impl<H: Stage, T: Stage> Stage for Cons<H, T> {
    type Params = Cons<H::Params, T::Params>;
    const PAIRS: bool = H::PAIRS || T::PAIRS;
    const ROW_REDUCTION: bool = H::ROW_REDUCTION || T::ROW_REDUCTION;
    const READS_MATRIX: bool = H::READS_MATRIX || T::READS_MATRIX;
    const COLUMN_VECTOR: bool = H::COLUMN_VECTOR || (!H::PAIRS && T::COLUMN_VECTOR);
    #[inline(always)]
    fn column_vector(p: &Self::Params) -> u64 {
        if H::COLUMN_VECTOR {
            H::column_vector(&p.head)
        } else if H::PAIRS {
            0
        } else {
            T::column_vector(&p.tail)
        }
    }
    #[inline(always)]
    fn apply<Out: Element, const MI: usize, const NI: usize>(
        p: &Self::Params,
        acc: &mut Acc<MI, NI>,
        ctx: &mut TileCtx,
    ) {
        if !matches!(ctx.norm_pass, NormPass::Apply | NormPass::Stats) || H::ROW_REDUCTION {
            H::apply::<Out, MI, NI>(&p.head, acc, ctx);
        }
        if !ctx.deferred {
            T::apply::<Out, MI, NI>(&p.tail, acc, ctx);
        }
    }
    #[inline(always)]
    fn prefetch<Out: Element>(p: &Self::Params, region: &Prefetch) {
        H::prefetch::<Out>(&p.head, region);
        T::prefetch::<Out>(&p.tail, region);
    }
}

#[cfg(test)]
mod tests {
    use super::{Acc, LINE, Prefetch};
    use std::vec::Vec;

    #[test]
    fn shifting_visits_the_chunks_in_row_major_order() {
        let mut acc = Acc::<2, 16>::zero();
        for mi in 0..2 {
            for ni in 0..16 {
                for e in 0..4 {
                    acc.v[mi][ni][e] = (1000 * mi + 10 * ni + e) as f32;
                }
            }
        }
        let mut rest = acc;
        for q in 0..4 {
            let part = rest.first_chunk::<8>();
            let (mi, ni0) = (q / 2, 8 * (q % 2));
            for f in 0..8 {
                assert_eq!(part.v[0][f], acc.v[mi][ni0 + f], "chunk {q}, fragment {f}");
            }
            rest.shift_chunks::<8>();
        }
        let one = Acc::<1, 8>::zero();
        assert_eq!(one.first_chunk::<8>().v, one.v);
    }

    /// Every address `each` gives over all `threads` threads, sorted.
    fn addresses(p: Prefetch, each: impl Fn(&Prefetch, &dyn Fn(u64))) -> Vec<u64> {
        let got = core::cell::RefCell::new(Vec::new());
        for thread in 0..p.threads {
            each(&Prefetch { thread, ..p }, &|a| got.borrow_mut().push(a));
        }
        let mut v = got.into_inner();
        v.sort();
        v
    }

    #[test]
    fn matrix_prefetch_touches_every_line_of_the_clipped_region_and_nothing_outside() {
        // Awkward sizes: a region past M and N, an unaligned base and leading dimension.
        for (m, n, row0, col0, rows, cols, ld, base, threads) in [
            (
                4095u32,
                4097u32,
                3968u32,
                3968u32,
                128u32,
                256u32,
                4097u32,
                0x1000_0002u64,
                128u32,
            ),
            (17, 1, 0, 0, 64, 64, 1, 0x2000, 128),
            (300, 200, 256, 128, 128, 128, 200, 0x3006, 96),
        ] {
            let p = Prefetch {
                m,
                n,
                row0,
                col0,
                rows,
                cols,
                thread: 0,
                threads,
            };
            let esize = 2u64;
            let got = addresses(p, |q, f| q.matrix_lines(base, ld, 2, f));
            let mut want = std::collections::BTreeSet::new();
            for r in row0..(row0 + rows).min(m) {
                for c in col0..(col0 + cols).min(n) {
                    want.insert((base + (r as u64 * ld as u64 + c as u64) * esize) / LINE);
                }
            }
            let lines: std::collections::BTreeSet<u64> = got.iter().map(|a| a / LINE).collect();
            assert_eq!(lines, want, "lines of {m}x{n} region at ({row0}, {col0})");
            for a in &got {
                let e = (a - base) / esize;
                let (r, c) = ((e / ld as u64) as u32, (e % ld as u64) as u32);
                assert!(
                    r >= row0 && r < m && c >= col0 && c < n,
                    "address {a:#x} outside"
                );
            }
        }
    }
}
