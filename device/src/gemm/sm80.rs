//! The Ampere-style mainloop (runs on sm_80 and later, including the H200): a `STAGES`-deep
//! `cp.async` ring of A and B tiles in padded shared memory, `ldmatrix` into registers,
//! `mma.sync` m16n8k16 with f32 accumulators; optional serial split-K whose last-arriving CTA
//! reduces the partial tiles and runs the epilogue once (bias and activations are not linear in
//! the partials, so never per split).
//!
//! CTA `(x, y, z)` computes the C tile at rows `y·BM..`, columns `x·BN..` over the K range of
//! split `z`. Warp `w` holds the `(BM/WM) × (BN/WN)` sub-tile at warp coordinates
//! `(w % WM, w / WM)`. The ring, the k-loop and the epilogue hand-off are `super::cta`'s; this
//! module supplies the `Mainloop`: shared-memory addressing and the `ldmatrix` + `mma.sync`
//! k-tile.

use crate::arch::global::ld_u16;
use crate::arch::shared::shared_addr;
use crate::copy::cp_async::cp_async_cg_16;
use crate::copy::ldmatrix::{ldsm_x4, ldsm_x4_trans};
use crate::epilogue::{Acc, Stage};
use crate::gemm::cta::{self, KRange, Mainloop};
use crate::gemm::finish::Cta;
use crate::gemm::{GemmArgs, SMEM_PAD, TileCoord};
use crate::mma::sm80::MmaInput;
use crate::types::Element;
use core::marker::PhantomData;

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
    cta::run_tile::<Out, MI, NI, Sm80<In, B_COL, MI, NI, WM, WN, BK, STAGES, VEC>, E>(
        args, epi, tile,
    )
}

/// The `ldmatrix` + `mma.sync` m16n8k16 [`Mainloop`] of one instantiation (parameters as
/// [`run_tile`]'s), holding this CTA's shared-memory addresses.
struct Sm80<
    In,
    const B_COL: bool,
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const WN: u32,
    const BK: u32,
    const STAGES: u32,
    const VEC: bool,
> {
    /// Generic pointer to the ring (element-wise stores).
    smem: *mut u8,
    /// `.shared` address of the ring (`cp.async`, `ldmatrix`).
    smem_addr: u32,
    /// The ring's geometry ([`Mainloop::LDS_K`], [`Mainloop::LDS_N`], stage bytes of A and B):
    /// constants once inlined, but values to the loader closure, which LLVM optimises before
    /// inlining it (the kernels were tuned with that order).
    lds_k: u32,
    lds_n: u32,
    a_stage: u32,
    b_stage: u32,
    input: PhantomData<In>,
}

impl<
    In: MmaInput,
    const B_COL: bool,
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const WN: u32,
    const BK: u32,
    const STAGES: u32,
    const VEC: bool,
> Sm80<In, B_COL, MI, NI, WM, WN, BK, STAGES, VEC>
{
    const A_STAGE_BYTES: u32 = <Self as Mainloop<MI, NI>>::A_STAGE * 2;
    const B_STAGE_BYTES: u32 = <Self as Mainloop<MI, NI>>::B_STAGE * 2;

    /// `.shared` address of stage `s`'s A tile.
    #[inline(always)]
    fn sa(&self, s: u32) -> u32 {
        self.smem_addr + s * self.a_stage
    }

    /// `.shared` address of stage `s`'s B tile.
    #[inline(always)]
    fn sb(&self, s: u32) -> u32 {
        self.smem_addr + STAGES * self.a_stage + s * self.b_stage
    }
}

impl<
    In: MmaInput,
    const B_COL: bool,
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const WN: u32,
    const BK: u32,
    const STAGES: u32,
    const VEC: bool,
> Mainloop<MI, NI> for Sm80<In, B_COL, MI, NI, WM, WN, BK, STAGES, VEC>
{
    type Elem = u16;
    /// `(lane, first row of the warp's A fragments, first column of its B fragments)`, relative
    /// to the CTA tile.
    type Frag = (u32, u32, u32);
    const WM: u32 = WM;
    const WN: u32 = WN;
    const BK: u32 = BK;
    const STAGES: u32 = STAGES;
    const B_COL: bool = B_COL;
    const VEC: bool = VEC;
    const PAD: u32 = SMEM_PAD;
    const CHECK: () = {
        assert!(
            NI % 2 == 0,
            "NI must be even: ldmatrix.x4 loads two n8 fragments of B"
        );
        assert!(BK % 16 == 0 && BK > 0, "BK must be a multiple of 16");
    };

    #[inline(always)]
    fn new(_args: &GemmArgs, smem: *mut u8) -> Self {
        Sm80 {
            smem,
            smem_addr: shared_addr(smem),
            lds_k: Self::LDS_K,
            lds_n: Self::LDS_N,
            a_stage: Self::A_STAGE_BYTES,
            b_stage: Self::B_STAGE_BYTES,
            input: PhantomData,
        }
    }

    #[inline(always)]
    unsafe fn loader<'a>(
        &'a self,
        args: &'a GemmArgs,
        cta: &'a Cta,
        k: &'a KRange,
    ) -> impl Fn(u32, u32) + 'a {
        move |kt: u32, s: u32| unsafe {
            let k0 = k.begin + kt * BK;
            if VEC {
                // A: BM rows × BK/8 chunks of 16 bytes.
                let cpr = BK / 8;
                let mut i = cta.tid;
                while i < cta.bm * cpr {
                    let (row, kc) = (i / cpr, i % cpr);
                    let (gr, gk) = (cta.m0 + row, k0 + kc * 8);
                    let ok = gr < args.m && gk < k.end;
                    let src = if ok {
                        args.a + (gr as u64 * args.lda as u64 + gk as u64) * 2
                    } else {
                        args.a
                    };
                    cp_async_cg_16(
                        self.sa(s) + (row * self.lds_k + kc * 8) * 2,
                        src,
                        if ok { 16 } else { 0 },
                    );
                    i += cta.threads;
                }
                if B_COL {
                    let mut i = cta.tid;
                    while i < cta.bn * cpr {
                        let (row, kc) = (i / cpr, i % cpr);
                        let (gn, gk) = (cta.n0 + row, k0 + kc * 8);
                        let ok = gn < args.n && gk < k.end;
                        let src = if ok {
                            args.b + (gn as u64 * args.ldb as u64 + gk as u64) * 2
                        } else {
                            args.b
                        };
                        cp_async_cg_16(
                            self.sb(s) + (row * self.lds_k + kc * 8) * 2,
                            src,
                            if ok { 16 } else { 0 },
                        );
                        i += cta.threads;
                    }
                } else {
                    let cpr = cta.bn / 8;
                    let mut i = cta.tid;
                    while i < BK * cpr {
                        let (row, nc) = (i / cpr, i % cpr);
                        let (gk, gn) = (k0 + row, cta.n0 + nc * 8);
                        let ok = gk < k.end && gn < args.n;
                        let src = if ok {
                            args.b + (gk as u64 * args.ldb as u64 + gn as u64) * 2
                        } else {
                            args.b
                        };
                        cp_async_cg_16(
                            self.sb(s) + (row * self.lds_n + nc * 8) * 2,
                            src,
                            if ok { 16 } else { 0 },
                        );
                        i += cta.threads;
                    }
                }
            } else {
                // Any alignment: element-wise, bounds-checked, synchronous.
                let sa_ptr = self.smem.add((s * self.a_stage) as usize) as *mut u16;
                let mut i = cta.tid;
                while i < cta.bm * BK {
                    let (row, kk) = (i / BK, i % BK);
                    let (gr, gk) = (cta.m0 + row, k0 + kk);
                    let v = if gr < args.m && gk < k.end {
                        ld_u16(
                            (args.a as *const u16)
                                .add(gr as usize * args.lda as usize + gk as usize),
                        )
                    } else {
                        0
                    };
                    *sa_ptr.add((row * self.lds_k + kk) as usize) = v;
                    i += cta.threads;
                }
                let sb_ptr = self
                    .smem
                    .add((STAGES * self.a_stage + s * self.b_stage) as usize)
                    as *mut u16;
                if B_COL {
                    let mut i = cta.tid;
                    while i < cta.bn * BK {
                        let (row, kk) = (i / BK, i % BK);
                        let (gn, gk) = (cta.n0 + row, k0 + kk);
                        let v = if gn < args.n && gk < k.end {
                            ld_u16(
                                (args.b as *const u16)
                                    .add(gn as usize * args.ldb as usize + gk as usize),
                            )
                        } else {
                            0
                        };
                        *sb_ptr.add((row * self.lds_k + kk) as usize) = v;
                        i += cta.threads;
                    }
                } else {
                    let bn = cta.bn;
                    let mut i = cta.tid;
                    while i < BK * bn {
                        let (row, nn) = (i / bn, i % bn);
                        let (gk, gn) = (k0 + row, cta.n0 + nn);
                        let v = if gk < k.end && gn < args.n {
                            ld_u16(
                                (args.b as *const u16)
                                    .add(gk as usize * args.ldb as usize + gn as usize),
                            )
                        } else {
                            0
                        };
                        *sb_ptr.add((row * self.lds_n + nn) as usize) = v;
                        i += cta.threads;
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn frag(cta: &Cta) -> (u32, u32, u32) {
        (
            cta.lane,
            cta.warp_m * MI as u32 * 16,
            cta.warp_n * NI as u32 * 8,
        )
    }

    #[inline(always)]
    unsafe fn mma(&self, frag: (u32, u32, u32), s: u32, acc: &mut Acc<MI, NI>) {
        let (lane, a_row0, b_col0) = frag;
        let (lds_k, lds_n) = (self.lds_k, self.lds_n);
        for kk in 0..(BK / 16) {
            let mut fa = [[0u32; 4]; MI];
            for (mi, f) in fa.iter_mut().enumerate() {
                let row = a_row0 + mi as u32 * 16 + (lane & 15);
                let col = kk * 16 + (lane >> 4) * 8;
                *f = ldsm_x4(self.sa(s) + (row * lds_k + col) * 2);
            }
            let mut fb = [[0u32; 2]; NI];
            for np in 0..NI / 2 {
                let r = if B_COL {
                    let nrow = b_col0 + np as u32 * 16 + (lane & 7) + (lane >> 4) * 8;
                    let kcol = kk * 16 + ((lane >> 3) & 1) * 8;
                    ldsm_x4(self.sb(s) + (nrow * lds_k + kcol) * 2)
                } else {
                    let krow = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                    let ncol = b_col0 + np as u32 * 16 + (lane >> 4) * 8;
                    ldsm_x4_trans(self.sb(s) + (krow * lds_n + ncol) * 2)
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
}
