//! The CTA driver the sm_80 ([`super::sm80`]) and f32 SIMT ([`super::simt`]) mainloops share,
//! split as CUTLASS 3 splits a kernel into a collective mainloop and the code around it: a
//! [`Mainloop`] says how one k-tile of A and B is loaded into shared memory and how one k-tile is
//! accumulated from shared memory into the [`Acc`]; [`run_tile`] owns everything else: the
//! CTA/warp decomposition, the tile's K range (split-K), the `STAGES`-deep `cp.async` ring with
//! its prologue, steady state and drain, and the hand-off to [`finish`] (split-K reduction,
//! epilogue, store).
//!
//! CTA tile `(m, n, split)` computes the C tile at rows `m·BM..`, columns `n·BN..` over the K
//! range of split `split`. Warp `w` holds the `(BM/WM) × (BN/WN)` sub-tile at warp coordinates
//! `(w % WM, w / WM)`, and each thread the elements an `mma.sync` m16n8 fragment gives it, so
//! every mainloop leaves the same [`Acc`] layout.
//!
//! Ring layout (dynamic shared memory): `STAGES` A tiles (BM rows of `BK + PAD` elements), then
//! `STAGES` B tiles (BN rows of `BK + PAD` for B stored N×K, BK rows of `BN + PAD` for K×N);
//! `PAD` elements are 16 bytes.

use crate::arch::shared::dynamic_shared_base;
use crate::arch::sync::sync_threads;
use crate::arch::thread::thread_idx_x;
use crate::copy::cp_async::{commit_group, wait_group};
use crate::epilogue::{Acc, Stage};
use crate::gemm::finish::{Cta, finish};
use crate::gemm::{GemmArgs, TileCoord};
use crate::types::Element;
use core::mem::size_of;

/// The K range of this CTA's split, elements `begin..end` (empty when `end <= begin`).
#[derive(Clone, Copy)]
pub(crate) struct KRange {
    pub begin: u32,
    pub end: u32,
}

/// A collective mainloop: the shape of its shared-memory ring, and how one k-tile moves
/// global → shared and shared → [`Acc`]. `MI × NI` m16n8 fragments per warp.
///
/// Implementations are views of per-CTA state (the ring's addresses and geometry, A and B) built
/// once by [`Mainloop::new`]; every method must be `#[inline(always)]` (the kernels' register
/// allocation was tuned on the fully inlined body), and only the loader closure is not.
pub(crate) trait Mainloop<const MI: usize, const NI: usize>: Sized {
    /// Element of A and B in global and shared memory.
    type Elem: Copy;
    /// Where this thread's fragments start in the CTA tile, as [`Mainloop::mma`] wants it.
    type Frag: Copy;
    /// Warps along M.
    const WM: u32;
    /// Warps along N.
    const WN: u32;
    /// K per k-tile (pipeline stage).
    const BK: u32;
    /// Ring stages, 2 to 6.
    const STAGES: u32;
    /// Whether B is stored N×K.
    const B_COL: bool;
    /// Whether global loads may be 16-byte `cp.async` (16-byte aligned rows), else
    /// bounds-checked element loads.
    const VEC: bool;
    /// Shared-memory row padding, elements (16 bytes).
    const PAD: u32;
    /// Compile-time checks of the mainloop's own constraints (evaluated by [`run_tile`]).
    const CHECK: ();

    /// Rows of C per CTA.
    const BM: u32 = Self::WM * MI as u32 * 16;
    /// Columns of C per CTA.
    const BN: u32 = Self::WN * NI as u32 * 8;
    /// Threads per CTA.
    const THREADS: u32 = Self::WM * Self::WN * 32;
    /// Elements per shared row of A (and of B when stored N×K).
    const LDS_K: u32 = Self::BK + Self::PAD;
    /// Elements per shared row of B when stored K×N.
    const LDS_N: u32 = Self::BN + Self::PAD;
    /// Elements of one stage's A tile.
    const A_STAGE: u32 = Self::BM * Self::LDS_K;
    /// Elements of one stage's B tile.
    const B_STAGE: u32 = if Self::B_COL {
        Self::BN * Self::LDS_K
    } else {
        Self::BK * Self::LDS_N
    };
    /// Bytes of the whole ring (the epilogue's scratch starts past it).
    const RING_BYTES: u32 =
        Self::STAGES * (Self::A_STAGE + Self::B_STAGE) * size_of::<Self::Elem>() as u32;
    /// Checks of the ring [`run_tile`] drives, for any mainloop.
    const RING_CHECK: () = {
        assert!(
            Self::STAGES >= 2 && Self::STAGES <= 6,
            "two to six pipeline stages"
        );
        assert!(Self::THREADS <= 1024, "at most 1024 threads");
        let chunk = 16 / size_of::<Self::Elem>() as u32;
        assert!(
            !Self::VEC || (Self::BK % chunk == 0 && Self::BN % chunk == 0),
            "16-byte copies need BK and BN multiples of 16 bytes"
        );
    };

    /// Per-CTA state; `smem` is the dynamic shared memory the ring occupies.
    fn new(args: &GemmArgs, smem: *mut u8) -> Self;

    /// The k-tile loader: `(kt, s)` copies k-tile `kt` of this CTA's K range `k` (A rows
    /// `cta.m0..`, B columns `cta.n0..`) global → shared into stage `s`. Elements past M, N or
    /// `k.end` are zero, so the last k-tile and edge tiles need no masking; `cp.async` copies
    /// join the thread's open group.
    ///
    /// A closure that is not `#[inline(always)]`, as the loaders the kernels were tuned with:
    /// LLVM optimises it on its own, reading what it captures through plain references, before
    /// it inlines it at both call sites; an `#[inline(always)]` method taking `&` arguments
    /// (`noalias` to LLVM) yields different PTX.
    ///
    /// # Safety
    /// For every call of the closure: validated `args`, `s < STAGES`, and every thread of the
    /// CTA makes the same call.
    unsafe fn loader<'a>(
        &'a self,
        args: &'a GemmArgs,
        cta: &'a Cta,
        k: &'a KRange,
    ) -> impl Fn(u32, u32) + 'a;

    /// This thread's [`Frag`](Mainloop::Frag).
    fn frag(cta: &Cta) -> Self::Frag;

    /// Accumulates the k-tile in stage `s` into `acc`, the fragments at `frag` (the stage's
    /// copies have landed and the CTA has synchronised).
    ///
    /// # Safety
    /// `s < STAGES`.
    unsafe fn mma(&self, frag: Self::Frag, s: u32, acc: &mut Acc<MI, NI>);
}

/// `C = epilogue(A·B)` for one CTA tile with mainloop `L`: the decomposition, ring and k-loop
/// described in [the module docs](self), then [`finish`] with the ring as epilogue scratch.
/// Launch as [`super::sm80::run_tile`].
///
/// # Safety
/// As [`super::sm80::run_tile`].
#[inline(always)]
pub(crate) unsafe fn run_tile<
    Out: Element,
    const MI: usize,
    const NI: usize,
    L: Mainloop<MI, NI>,
    E: Stage,
>(
    args: &GemmArgs,
    epi: &E::Params,
    tile: TileCoord,
) {
    #[allow(clippy::let_unit_value)]
    let () = L::RING_CHECK;
    #[allow(clippy::let_unit_value)]
    let () = L::CHECK;
    let (bm, bn) = (L::BM, L::BN);

    let tid = thread_idx_x();
    let lane = tid & 31;
    let warp = tid >> 5;
    let warp_m = warp % L::WM;
    let warp_n = warp / L::WM;
    // A persistent CTA's previous tile may still be reading shared memory in its epilogue.
    sync_threads();
    let m0 = tile.m * bm;
    let n0 = tile.n * bn;
    let k_begin = tile.split * args.k_per_split;
    let k_end = if args.splits > 1 {
        args.k.min(k_begin.saturating_add(args.k_per_split))
    } else {
        args.k
    };
    let ktiles = if k_end > k_begin {
        (k_end - k_begin).div_ceil(L::BK)
    } else {
        0
    };
    let k = KRange {
        begin: k_begin,
        end: k_end,
    };

    let cta = Cta {
        tid,
        threads: L::THREADS,
        lane,
        warp_m,
        warp_n,
        warps_n: L::WN,
        tile_m: tile.m,
        tile_n: tile.n,
        split: tile.split,
        tiles_n: tile.tiles_n,
        m0,
        n0,
        bm,
        bn,
        warp_row: m0 + warp_m * MI as u32 * 16,
        warp_col: n0 + warp_n * NI as u32 * 8,
    };
    let smem = dynamic_shared_base();
    let ml = L::new(args, smem);

    let load_tile = ml.loader(args, &cta, &k);
    let mut acc = Acc::<MI, NI>::zero();

    // Prologue: fill STAGES-1 stages. One commit per step keeps the group count uniform.
    for s in 0..L::STAGES - 1 {
        if s < ktiles {
            load_tile(s, s);
        }
        commit_group();
    }

    // Here rather than before the prologue, as in the loops the kernels were tuned with: LLVM
    // folds the fragment origins into different instructions when it sees them earlier.
    let frag = L::frag(&cta);
    for kt in 0..ktiles {
        // `cp.async.wait_group STAGES-2`: k-tile `kt` has landed (the count is an immediate).
        match L::STAGES {
            2 => wait_group::<0>(),
            3 => wait_group::<1>(),
            4 => wait_group::<2>(),
            5 => wait_group::<3>(),
            _ => wait_group::<4>(), // 6
        }
        sync_threads();
        // Refill the stage consumed in the previous iteration (all warps are past it).
        let next = kt + L::STAGES - 1;
        if next < ktiles {
            load_tile(next, next % L::STAGES);
        }
        commit_group();
        ml.mma(frag, kt % L::STAGES, &mut acc);
    }
    wait_group::<0>();
    sync_threads();

    finish::<Out, MI, NI, E>(args, epi, acc, &cta, smem, L::RING_BYTES);
}
