//! An f32 mainloop on the CUDA cores (FFMA), for `dtype = f32` kernels: the tensor cores take
//! 16-bit inputs, and f32 models (MiniLM's `--dtype f32`) must not be rounded to them.
//!
//! The CTA, warp and shared-memory structure is that of [`super::sm80`] (the same
//! `super::cta` driver: a `STAGES`-deep `cp.async` ring, padded rows), and each thread
//! accumulates exactly the elements an `mma.sync` m16n8 fragment would give it, so the same
//! [`Acc`] layout, epilogue stages, split-K and store apply unchanged.

use crate::arch::global::ld_f32;
use crate::arch::shared::shared_addr;
use crate::copy::cp_async::cp_async_cg_16;
use crate::epilogue::{Acc, Stage};
use crate::gemm::cta::{self, KRange, Mainloop};
use crate::gemm::finish::Cta;
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
    cta::run_tile::<Out, MI, NI, Simt<B_COL, MI, NI, WM, WN, BK, STAGES, VEC>, E>(args, epi, tile)
}

/// The FFMA [`Mainloop`] of one instantiation (parameters as [`run_tile`]'s), holding this CTA's
/// shared-memory ring and A and B.
struct Simt<
    const B_COL: bool,
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const WN: u32,
    const BK: u32,
    const STAGES: u32,
    const VEC: bool,
> {
    /// The ring.
    sm: *mut f32,
    /// A and B.
    a: *const f32,
    b: *const f32,
    /// The ring's geometry in elements ([`Mainloop::LDS_K`], [`Mainloop::LDS_N`],
    /// [`Mainloop::A_STAGE`], [`Mainloop::B_STAGE`]): constants once inlined, but values to the
    /// loader closure, which LLVM optimises before inlining it (the kernels were tuned with that
    /// order).
    lds_k: u32,
    lds_n: u32,
    a_stage: u32,
    b_stage: u32,
}

impl<
    const B_COL: bool,
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const WN: u32,
    const BK: u32,
    const STAGES: u32,
    const VEC: bool,
> Simt<B_COL, MI, NI, WM, WN, BK, STAGES, VEC>
{
    /// Stage `s`'s A tile.
    #[inline(always)]
    unsafe fn sa(&self, s: u32) -> *mut f32 {
        self.sm.add((s * self.a_stage) as usize)
    }

    /// Stage `s`'s B tile.
    #[inline(always)]
    unsafe fn sb(&self, s: u32) -> *mut f32 {
        self.sm
            .add((STAGES * self.a_stage + s * self.b_stage) as usize)
    }
}

impl<
    const B_COL: bool,
    const MI: usize,
    const NI: usize,
    const WM: u32,
    const WN: u32,
    const BK: u32,
    const STAGES: u32,
    const VEC: bool,
> Mainloop<MI, NI> for Simt<B_COL, MI, NI, WM, WN, BK, STAGES, VEC>
{
    type Elem = f32;
    /// `(row of the thread's first A fragment element, column of its first B fragment
    /// element)`, relative to the CTA tile.
    type Frag = (u32, u32);
    const WM: u32 = WM;
    const WN: u32 = WN;
    const BK: u32 = BK;
    const STAGES: u32 = STAGES;
    const B_COL: bool = B_COL;
    const VEC: bool = VEC;
    const PAD: u32 = SMEM_PAD_F32;
    const CHECK: () = ();

    #[inline(always)]
    fn new(args: &GemmArgs, smem: *mut u8) -> Self {
        Simt {
            sm: smem as *mut f32,
            a: args.a as *const f32,
            b: args.b as *const f32,
            lds_k: Self::LDS_K,
            lds_n: Self::LDS_N,
            a_stage: Self::A_STAGE,
            b_stage: Self::B_STAGE,
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
                let cpr = BK / 4;
                let mut i = cta.tid;
                while i < cta.bm * cpr {
                    let (row, kc) = (i / cpr, i % cpr);
                    let (gr, gk) = (cta.m0 + row, k0 + kc * 4);
                    let ok = gr < args.m && gk < k.end;
                    let src = if ok {
                        self.a.add(gr as usize * args.lda as usize + gk as usize)
                    } else {
                        self.a
                    };
                    cp_async_cg_16(
                        shared_addr(self.sa(s).add((row * self.lds_k + kc * 4) as usize)),
                        src as u64,
                        if ok { 16 } else { 0 },
                    );
                    i += cta.threads;
                }
                if B_COL {
                    let mut i = cta.tid;
                    while i < cta.bn * cpr {
                        let (row, kc) = (i / cpr, i % cpr);
                        let (gn, gk) = (cta.n0 + row, k0 + kc * 4);
                        let ok = gn < args.n && gk < k.end;
                        let src = if ok {
                            self.b.add(gn as usize * args.ldb as usize + gk as usize)
                        } else {
                            self.b
                        };
                        cp_async_cg_16(
                            shared_addr(self.sb(s).add((row * self.lds_k + kc * 4) as usize)),
                            src as u64,
                            if ok { 16 } else { 0 },
                        );
                        i += cta.threads;
                    }
                } else {
                    let cpr = cta.bn / 4;
                    let mut i = cta.tid;
                    while i < BK * cpr {
                        let (row, nc) = (i / cpr, i % cpr);
                        let (gk, gn) = (k0 + row, cta.n0 + nc * 4);
                        let ok = gk < k.end && gn < args.n;
                        let src = if ok {
                            self.b.add(gk as usize * args.ldb as usize + gn as usize)
                        } else {
                            self.b
                        };
                        cp_async_cg_16(
                            shared_addr(self.sb(s).add((row * self.lds_n + nc * 4) as usize)),
                            src as u64,
                            if ok { 16 } else { 0 },
                        );
                        i += cta.threads;
                    }
                }
            } else {
                let mut i = cta.tid;
                while i < cta.bm * BK {
                    let (row, kk) = (i / BK, i % BK);
                    let (gr, gk) = (cta.m0 + row, k0 + kk);
                    *self.sa(s).add((row * self.lds_k + kk) as usize) = if gr < args.m && gk < k.end
                    {
                        ld_f32(self.a.add(gr as usize * args.lda as usize + gk as usize))
                    } else {
                        0.0
                    };
                    i += cta.threads;
                }
                if B_COL {
                    let mut i = cta.tid;
                    while i < cta.bn * BK {
                        let (row, kk) = (i / BK, i % BK);
                        let (gn, gk) = (cta.n0 + row, k0 + kk);
                        *self.sb(s).add((row * self.lds_k + kk) as usize) =
                            if gn < args.n && gk < k.end {
                                ld_f32(self.b.add(gn as usize * args.ldb as usize + gk as usize))
                            } else {
                                0.0
                            };
                        i += cta.threads;
                    }
                } else {
                    let bn = cta.bn;
                    let mut i = cta.tid;
                    while i < BK * bn {
                        let (row, nn) = (i / bn, i % bn);
                        let (gk, gn) = (k0 + row, cta.n0 + nn);
                        *self.sb(s).add((row * self.lds_n + nn) as usize) =
                            if gk < k.end && gn < args.n {
                                ld_f32(self.b.add(gk as usize * args.ldb as usize + gn as usize))
                            } else {
                                0.0
                            };
                        i += cta.threads;
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn frag(cta: &Cta) -> (u32, u32) {
        let (g, t) = (cta.lane >> 2, cta.lane & 3);
        (
            cta.warp_m * MI as u32 * 16 + g,
            cta.warp_n * NI as u32 * 8 + 2 * t,
        )
    }

    #[inline(always)]
    unsafe fn mma(&self, frag: (u32, u32), s: u32, acc: &mut Acc<MI, NI>) {
        let (a_row0, b_col0) = frag;
        let (lds_k, lds_n) = (self.lds_k, self.lds_n);
        for kk in 0..BK {
            let mut fa = [[0.0f32; 2]; MI];
            for (mi, f) in fa.iter_mut().enumerate() {
                for (h, v) in f.iter_mut().enumerate() {
                    *v = *self
                        .sa(s)
                        .add(((a_row0 + mi as u32 * 16 + 8 * h as u32) * lds_k + kk) as usize);
                }
            }
            let mut fb = [[0.0f32; 2]; NI];
            for (ni, f) in fb.iter_mut().enumerate() {
                for (e, v) in f.iter_mut().enumerate() {
                    let col = b_col0 + ni as u32 * 8 + e as u32;
                    *v = if B_COL {
                        *self.sb(s).add((col * lds_k + kk) as usize)
                    } else {
                        *self.sb(s).add((kk * lds_n + col) as usize)
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
}
