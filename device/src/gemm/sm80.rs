//! The Ampere-style mainloop (runs on sm_80 and later, including the H200): a `STAGES`-deep
//! `cp.async` ring of A and B tiles in padded shared memory, `ldmatrix` into registers,
//! `mma.sync` m16n8k16 with f32 accumulators; optional serial split-K whose last-arriving CTA
//! reduces the partial tiles and runs the epilogue once (bias and activations are not linear in
//! the partials, so never per split).
//!
//! CTA `(x, y, z)` computes the C tile at rows `y·BM..`, columns `x·BN..` over the K range of
//! split `z`. Warp `w` holds the `(BM/WM) × (BN/WN)` sub-tile at warp coordinates
//! `(w % WM, w / WM)`.

use crate::arch::global::ld_u16;
use crate::arch::shared::{dynamic_shared_base, shared_addr};
use crate::arch::sync::sync_threads;
use crate::arch::thread::thread_idx_x;
use crate::copy::cp_async::{commit_group, cp_async_cg_16, wait_group};
use crate::copy::ldmatrix::{ldsm_x4, ldsm_x4_trans};
use crate::epilogue::{Acc, Stage};
use crate::gemm::finish::{Cta, finish};
use crate::gemm::{GemmArgs, SMEM_PAD, TileCoord};
use crate::mma::sm80::MmaInput;
use crate::types::Element;

/// Compile-time shape of one instantiation (derived from the const generics of [`run`]).
struct Shape<
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const WN: u32,
    const BK: u32,
    const STAGES: u32,
    const B_COL: bool,
>;

impl<
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const WN: u32,
    const BK: u32,
    const STAGES: u32,
    const B_COL: bool,
> Shape<MI, NI, WM, WN, BK, STAGES, B_COL>
{
    const BM: u32 = WM * MI as u32 * 16;
    const BN: u32 = WN * NI as u32 * 8;
    const THREADS: u32 = WM * WN * 32;
    /// Elements per shared row of A (and of B when stored N×K).
    const LDS_K: u32 = BK + SMEM_PAD;
    /// Elements per shared row of B when stored K×N.
    const LDS_N: u32 = Self::BN + SMEM_PAD;
    const A_STAGE_BYTES: u32 = Self::BM * Self::LDS_K * 2;
    const B_STAGE_BYTES: u32 = if B_COL {
        Self::BN * Self::LDS_K * 2
    } else {
        BK * Self::LDS_N * 2
    };
    const CHECK: () = {
        assert!(
            NI % 2 == 0,
            "NI must be even: ldmatrix.x4 loads two n8 fragments of B"
        );
        assert!(BK % 16 == 0 && BK > 0, "BK must be a multiple of 16");
        assert!(STAGES >= 2 && STAGES <= 6, "two to six pipeline stages");
        assert!(Self::THREADS <= 1024, "at most 1024 threads");
    };
}

/// [`run_tile`] for the tile of this CTA's block index (a grid launch).
///
/// # Safety
/// As [`run_tile`].
#[inline(always)]
pub unsafe fn run<
    In: MmaInput,
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
    run_tile::<In, Out, B_COL, MI, NI, WM, WN, BK, STAGES, VEC, E>(
        args,
        epi,
        TileCoord::from_grid(),
    )
}

/// `C = epilogue(A·B)` for one CTA. See [the module docs](self) and [`crate::gemm`] for layouts.
///
/// Type and const parameters: `In` the 16-bit input type of A and B; `Out` the element type of C
/// (and of the epilogue's vectors/tiles); `B_COL` whether B is stored N×K; `MI × NI` m16n8
/// fragments per warp; `WM × WN` warps; `BK` the K step; `STAGES` the pipeline depth; `VEC`
/// whether global loads may be 16-byte `cp.async` (the launcher guarantees 16-byte aligned rows:
/// pointers, leading dimensions and K, or N for B stored K×N, multiples of 8 elements), else
/// bounds-checked 2-byte loads; `E` the epilogue stage list.
///
/// Launch: block `(WM·WN·32, 1, 1)`, grid `(ceil(N/BN), ceil(M/BM), splits)`, dynamic shared
/// memory `TileShape::smem_bytes(B_COL)` bytes.
///
/// # Safety
/// The launcher must have validated every pointer, extent and leading dimension in `args` and
/// `epi` against the shapes above (host `validate`), and provided the split-K workspace and
/// zeroed counters when `args.splits > 1`.
#[inline(always)]
pub unsafe fn run_tile<
    In: MmaInput,
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
    type S<
        const MI: usize,
        const NI: usize,
        const WM: u32,
        const WN: u32,
        const BK: u32,
        const STAGES: u32,
        const B_COL: bool,
    > = Shape<MI, NI, WM, WN, BK, STAGES, B_COL>;
    #[allow(clippy::let_unit_value)]
    let () = S::<MI, NI, WM, WN, BK, STAGES, B_COL>::CHECK;
    let bm = S::<MI, NI, WM, WN, BK, STAGES, B_COL>::BM;
    let bn = S::<MI, NI, WM, WN, BK, STAGES, B_COL>::BN;
    let threads = S::<MI, NI, WM, WN, BK, STAGES, B_COL>::THREADS;
    let a_stage = S::<MI, NI, WM, WN, BK, STAGES, B_COL>::A_STAGE_BYTES;
    let b_stage = S::<MI, NI, WM, WN, BK, STAGES, B_COL>::B_STAGE_BYTES;
    let lds_k = S::<MI, NI, WM, WN, BK, STAGES, B_COL>::LDS_K;
    let lds_n = S::<MI, NI, WM, WN, BK, STAGES, B_COL>::LDS_N;

    let tid = thread_idx_x();
    let lane = tid & 31;
    let warp = tid >> 5;
    let warp_m = warp % WM;
    let warp_n = warp / WM;
    let (tile_n, tile_m, split) = (tile.n, tile.m, tile.split);
    // A persistent CTA's previous tile may still be reading shared memory in its epilogue.
    sync_threads();
    let m0 = tile_m * bm;
    let n0 = tile_n * bn;
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
    let smem_addr = shared_addr(smem);
    let sa = |s: u32| smem_addr + s * a_stage;
    let sb = |s: u32| smem_addr + STAGES * a_stage + s * b_stage;

    // Global → shared copy of k-tile `kt` into stage `s`.
    let load_tile = |kt: u32, s: u32| {
        let k0 = k_begin + kt * BK;
        if VEC {
            // A: BM rows × BK/8 chunks of 16 bytes.
            let cpr = BK / 8;
            let mut i = tid;
            while i < bm * cpr {
                let (row, kc) = (i / cpr, i % cpr);
                let (gr, gk) = (m0 + row, k0 + kc * 8);
                let ok = gr < args.m && gk < k_end;
                let src = if ok {
                    args.a + (gr as u64 * args.lda as u64 + gk as u64) * 2
                } else {
                    args.a
                };
                cp_async_cg_16(
                    sa(s) + (row * lds_k + kc * 8) * 2,
                    src,
                    if ok { 16 } else { 0 },
                );
                i += threads;
            }
            if B_COL {
                let mut i = tid;
                while i < bn * cpr {
                    let (row, kc) = (i / cpr, i % cpr);
                    let (gn, gk) = (n0 + row, k0 + kc * 8);
                    let ok = gn < args.n && gk < k_end;
                    let src = if ok {
                        args.b + (gn as u64 * args.ldb as u64 + gk as u64) * 2
                    } else {
                        args.b
                    };
                    cp_async_cg_16(
                        sb(s) + (row * lds_k + kc * 8) * 2,
                        src,
                        if ok { 16 } else { 0 },
                    );
                    i += threads;
                }
            } else {
                let cpr = bn / 8;
                let mut i = tid;
                while i < BK * cpr {
                    let (row, nc) = (i / cpr, i % cpr);
                    let (gk, gn) = (k0 + row, n0 + nc * 8);
                    let ok = gk < k_end && gn < args.n;
                    let src = if ok {
                        args.b + (gk as u64 * args.ldb as u64 + gn as u64) * 2
                    } else {
                        args.b
                    };
                    cp_async_cg_16(
                        sb(s) + (row * lds_n + nc * 8) * 2,
                        src,
                        if ok { 16 } else { 0 },
                    );
                    i += threads;
                }
            }
        } else {
            // Any alignment: element-wise, bounds-checked, synchronous.
            let sa_ptr = smem.add((s * a_stage) as usize) as *mut u16;
            let mut i = tid;
            while i < bm * BK {
                let (row, kk) = (i / BK, i % BK);
                let (gr, gk) = (m0 + row, k0 + kk);
                let v = if gr < args.m && gk < k_end {
                    ld_u16(
                        (args.a as *const u16).add(gr as usize * args.lda as usize + gk as usize),
                    )
                } else {
                    0
                };
                *sa_ptr.add((row * lds_k + kk) as usize) = v;
                i += threads;
            }
            let sb_ptr = smem.add((STAGES * a_stage + s * b_stage) as usize) as *mut u16;
            if B_COL {
                let mut i = tid;
                while i < bn * BK {
                    let (row, kk) = (i / BK, i % BK);
                    let (gn, gk) = (n0 + row, k0 + kk);
                    let v = if gn < args.n && gk < k_end {
                        ld_u16(
                            (args.b as *const u16)
                                .add(gn as usize * args.ldb as usize + gk as usize),
                        )
                    } else {
                        0
                    };
                    *sb_ptr.add((row * lds_k + kk) as usize) = v;
                    i += threads;
                }
            } else {
                let mut i = tid;
                while i < BK * bn {
                    let (row, nn) = (i / bn, i % bn);
                    let (gk, gn) = (k0 + row, n0 + nn);
                    let v = if gk < k_end && gn < args.n {
                        ld_u16(
                            (args.b as *const u16)
                                .add(gk as usize * args.ldb as usize + gn as usize),
                        )
                    } else {
                        0
                    };
                    *sb_ptr.add((row * lds_n + nn) as usize) = v;
                    i += threads;
                }
            }
        }
    };

    let mut acc = Acc::<MI, NI>::zero();

    // Prologue: fill STAGES-1 stages. One commit per step keeps the group count uniform.
    for s in 0..STAGES - 1 {
        if s < ktiles {
            load_tile(s, s);
        }
        commit_group();
    }

    let a_row0 = warp_m * MI as u32 * 16;
    let b_col0 = warp_n * NI as u32 * 8;
    for kt in 0..ktiles {
        wait_stages_minus_2::<STAGES>();
        sync_threads();
        // Refill the stage consumed in the previous iteration (all warps are past it).
        let next = kt + STAGES - 1;
        if next < ktiles {
            load_tile(next, next % STAGES);
        }
        commit_group();

        let s = kt % STAGES;
        for kk in 0..(BK / 16) {
            let mut fa = [[0u32; 4]; MI];
            for (mi, f) in fa.iter_mut().enumerate() {
                let row = a_row0 + mi as u32 * 16 + (lane & 15);
                let col = kk * 16 + (lane >> 4) * 8;
                *f = ldsm_x4(sa(s) + (row * lds_k + col) * 2);
            }
            let mut fb = [[0u32; 2]; NI];
            for np in 0..NI / 2 {
                let r = if B_COL {
                    let nrow = b_col0 + np as u32 * 16 + (lane & 7) + (lane >> 4) * 8;
                    let kcol = kk * 16 + ((lane >> 3) & 1) * 8;
                    ldsm_x4(sb(s) + (nrow * lds_k + kcol) * 2)
                } else {
                    let krow = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                    let ncol = b_col0 + np as u32 * 16 + (lane >> 4) * 8;
                    ldsm_x4_trans(sb(s) + (krow * lds_n + ncol) * 2)
                };
                fb[2 * np] = [r[0], r[1]];
                fb[2 * np + 1] = [r[2], r[3]];
            }
            for mi in 0..MI {
                for ni in 0..NI {
                    In::mma_16816(&mut acc.v[mi][ni], &fa[mi], &fb[ni]);
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
        warp_row: m0 + a_row0,
        warp_col: n0 + b_col0,
    };
    finish::<Out, MI, NI, E>(args, epi, acc, &cta, smem, STAGES * (a_stage + b_stage));
}

/// `cp.async.wait_group STAGES-2` (the count must be an immediate).
#[inline(always)]
pub(crate) fn wait_stages_minus_2<const STAGES: u32>() {
    match STAGES {
        2 => wait_group::<0>(),
        3 => wait_group::<1>(),
        4 => wait_group::<2>(),
        5 => wait_group::<3>(),
        _ => wait_group::<4>(), // 6
    }
}
