//! An f32 mainloop on the CUDA cores (FFMA), for `dtype = f32` kernels: the tensor cores take
//! 16-bit inputs, and f32 models (MiniLM's `--dtype f32`) must not be rounded to them.
//!
//! The CTA, warp and shared-memory structure is that of [`super::sm80`] (a `STAGES`-deep
//! `cp.async` ring, padded rows), and each thread accumulates exactly the elements an `mma.sync`
//! m16n8 fragment would give it, so the same [`Acc`] layout, epilogue stages, split-K and store
//! apply unchanged.

use crate::arch::global::ld_f32;
use crate::arch::shared::{dynamic_shared_base, shared_addr};
use crate::arch::sync::sync_threads;
use crate::arch::thread::thread_idx_x;
use crate::copy::cp_async::{commit_group, cp_async_cg_16, wait_group};
use crate::epilogue::{Acc, Stage};
use crate::gemm::finish::{Cta, finish};
use crate::gemm::{GemmArgs, TileCoord};
use crate::math::fma;
use crate::types::Element;

/// Shared-memory row padding for f32 tiles, elements (16 bytes).
pub const SMEM_PAD_F32: u32 = 4;

/// [`run_tile`] for the tile of this CTA's block index (a grid launch).
///
/// # Safety
/// As [`run_tile`].
#[inline(always)]
pub unsafe fn run<
    Out: Element,
    const B_COL: bool,
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const WN: u32,
    const BK: u32,
    const STAGES: u32,
    const VEC: bool,
    E: Stage,
>(
    args: &GemmArgs,
    epi: &E::Params,
) {
    run_tile::<Out, B_COL, MI, NI, WM, WN, BK, STAGES, VEC, E>(args, epi, TileCoord::from_grid())
}

/// `C = epilogue(A·B)` for one CTA with f32 A and B. Parameters and launch as
/// [`super::sm80::run`], except: A and B are f32; `VEC` requires 16-byte aligned rows (pointers
/// and leading dimensions multiples of 4 elements, K — or N for B stored K×N — a multiple of 4);
/// dynamic shared memory `STAGES · ((BM + BN) · (BK + 4)) · 4` bytes for B stored N×K,
/// `STAGES · (BM · (BK + 4) + BK · (BN + 4)) · 4` for K×N.
///
/// # Safety
/// As [`super::sm80::run`].
#[inline(always)]
pub unsafe fn run_tile<
    Out: Element,
    const B_COL: bool,
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const WN: u32,
    const BK: u32,
    const STAGES: u32,
    const VEC: bool,
    E: Stage,
>(
    args: &GemmArgs,
    epi: &E::Params,
    tile: TileCoord,
) {
    let bm = WM * MI as u32 * 16;
    let bn = WN * NI as u32 * 8;
    let threads = WM * WN * 32;
    let lds_k = BK + SMEM_PAD_F32;
    let lds_n = bn + SMEM_PAD_F32;
    let a_stage = bm * lds_k;
    let b_stage = if B_COL { bn * lds_k } else { BK * lds_n };

    let tid = thread_idx_x();
    let lane = tid & 31;
    let warp = tid >> 5;
    let (warp_m, warp_n) = (warp % WM, warp / WM);
    let (g, t) = (lane >> 2, lane & 3);
    let (tile_n, tile_m, split) = (tile.n, tile.m, tile.split);
    // A persistent CTA's previous tile may still be reading shared memory in its epilogue.
    sync_threads();
    let (m0, n0) = (tile_m * bm, tile_n * bn);
    let k_begin = split * args.k_per_split;
    let k_end = if args.splits > 1 {
        args.k.min(k_begin.saturating_add(args.k_per_split))
    } else {
        args.k
    };
    let ktiles = if k_end > k_begin {
        (k_end - k_begin).div_ceil(BK)
    } else {
        0
    };

    let smem = dynamic_shared_base();
    let sm = smem as *mut f32;
    let sa = |s: u32| sm.add((s * a_stage) as usize);
    let sb = |s: u32| sm.add((STAGES * a_stage + s * b_stage) as usize);
    let a = args.a as *const f32;
    let b = args.b as *const f32;

    let load_tile = |kt: u32, s: u32| {
        let k0 = k_begin + kt * BK;
        if VEC {
            let cpr = BK / 4;
            let mut i = tid;
            while i < bm * cpr {
                let (row, kc) = (i / cpr, i % cpr);
                let (gr, gk) = (m0 + row, k0 + kc * 4);
                let ok = gr < args.m && gk < k_end;
                let src = if ok {
                    a.add(gr as usize * args.lda as usize + gk as usize)
                } else {
                    a
                };
                cp_async_cg_16(
                    shared_addr(sa(s).add((row * lds_k + kc * 4) as usize)),
                    src as u64,
                    if ok { 16 } else { 0 },
                );
                i += threads;
            }
            if B_COL {
                let mut i = tid;
                while i < bn * cpr {
                    let (row, kc) = (i / cpr, i % cpr);
                    let (gn, gk) = (n0 + row, k0 + kc * 4);
                    let ok = gn < args.n && gk < k_end;
                    let src = if ok {
                        b.add(gn as usize * args.ldb as usize + gk as usize)
                    } else {
                        b
                    };
                    cp_async_cg_16(
                        shared_addr(sb(s).add((row * lds_k + kc * 4) as usize)),
                        src as u64,
                        if ok { 16 } else { 0 },
                    );
                    i += threads;
                }
            } else {
                let cpr = bn / 4;
                let mut i = tid;
                while i < BK * cpr {
                    let (row, nc) = (i / cpr, i % cpr);
                    let (gk, gn) = (k0 + row, n0 + nc * 4);
                    let ok = gk < k_end && gn < args.n;
                    let src = if ok {
                        b.add(gk as usize * args.ldb as usize + gn as usize)
                    } else {
                        b
                    };
                    cp_async_cg_16(
                        shared_addr(sb(s).add((row * lds_n + nc * 4) as usize)),
                        src as u64,
                        if ok { 16 } else { 0 },
                    );
                    i += threads;
                }
            }
        } else {
            let mut i = tid;
            while i < bm * BK {
                let (row, kk) = (i / BK, i % BK);
                let (gr, gk) = (m0 + row, k0 + kk);
                *sa(s).add((row * lds_k + kk) as usize) = if gr < args.m && gk < k_end {
                    ld_f32(a.add(gr as usize * args.lda as usize + gk as usize))
                } else {
                    0.0
                };
                i += threads;
            }
            if B_COL {
                let mut i = tid;
                while i < bn * BK {
                    let (row, kk) = (i / BK, i % BK);
                    let (gn, gk) = (n0 + row, k0 + kk);
                    *sb(s).add((row * lds_k + kk) as usize) = if gn < args.n && gk < k_end {
                        ld_f32(b.add(gn as usize * args.ldb as usize + gk as usize))
                    } else {
                        0.0
                    };
                    i += threads;
                }
            } else {
                let mut i = tid;
                while i < BK * bn {
                    let (row, nn) = (i / bn, i % bn);
                    let (gk, gn) = (k0 + row, n0 + nn);
                    *sb(s).add((row * lds_n + nn) as usize) = if gk < k_end && gn < args.n {
                        ld_f32(b.add(gk as usize * args.ldb as usize + gn as usize))
                    } else {
                        0.0
                    };
                    i += threads;
                }
            }
        }
    };

    let mut acc = Acc::<MI, NI>::zero();
    for s in 0..STAGES - 1 {
        if s < ktiles {
            load_tile(s, s);
        }
        commit_group();
    }
    // Rows and columns of this thread's fragment elements, relative to the CTA tile.
    let a_row0 = warp_m * MI as u32 * 16 + g;
    let b_col0 = warp_n * NI as u32 * 8 + 2 * t;
    for kt in 0..ktiles {
        super::sm80::wait_stages_minus_2::<STAGES>();
        sync_threads();
        let next = kt + STAGES - 1;
        if next < ktiles {
            load_tile(next, next % STAGES);
        }
        commit_group();
        let s = kt % STAGES;
        for kk in 0..BK {
            let mut fa = [[0.0f32; 2]; MI];
            for (mi, f) in fa.iter_mut().enumerate() {
                for (h, v) in f.iter_mut().enumerate() {
                    *v = *sa(s)
                        .add(((a_row0 + mi as u32 * 16 + 8 * h as u32) * lds_k + kk) as usize);
                }
            }
            let mut fb = [[0.0f32; 2]; NI];
            for (ni, f) in fb.iter_mut().enumerate() {
                for (e, v) in f.iter_mut().enumerate() {
                    let col = b_col0 + ni as u32 * 8 + e as u32;
                    *v = if B_COL {
                        *sb(s).add((col * lds_k + kk) as usize)
                    } else {
                        *sb(s).add((kk * lds_n + col) as usize)
                    };
                }
            }
            for mi in 0..MI {
                for ni in 0..NI {
                    for h in 0..2 {
                        for e in 0..2 {
                            let d = &mut acc.v[mi][ni][2 * h + e];
                            *d = fma(fa[mi][h], fb[ni][e], *d);
                        }
                    }
                }
            }
        }
    }
    wait_group::<0>();
    sync_threads();

    let cta = Cta {
        tid,
        threads,
        lane,
        warp_m,
        warp_n,
        warps_n: WN,
        tile_m,
        tile_n,
        split,
        tiles_n: tile.tiles_n,
        m0,
        n0,
        bm,
        bn,
        warp_row: m0 + warp_m * MI as u32 * 16,
        warp_col: n0 + warp_n * NI as u32 * 8,
    };
    finish::<Out, MI, NI, E>(args, epi, acc, &cta, smem, STAGES * (a_stage + b_stage) * 4);
}
