//! The BERT kernel bodies (`fused_gemm::device::kernel::bert`) run on the CPU: one OS thread per
//! GPU thread, `std::sync::Barrier` for `__syncthreads()` and for each warp's shuffles, a fresh
//! NaN-filled shared memory per CTA. The same generic bodies the PTX entry points instantiate
//! are checked here against the f64 references on every machine (CI has no GPU), including
//! what a GPU test cannot set up: operands that start one element into their buffer (the
//! element-wise path; a wrong vector access is caught by debug builds' alignment checks), and
//! NaN guard zones around every buffer (an out-of-bounds read shows up as NaN, an
//! out-of-bounds write as a changed guard). Outputs are compared with `assert_close` (relative
//! Frobenius error and each element), as the GPU tests compare the kernels' outputs.
//!
//! The tensor-core attention body also runs here: `ldmatrix`, `mma.sync.m16n8k16` and
//! `cp.async` are emulated per warp from the fragment layouts of PTX ISA §9.7.14.5.8 (mma) and
//! §9.7.14.5.15 (ldmatrix); `cp.async` copies land only at `cp.async.wait_group`, so a read
//! of a tile before its wait sees the NaN fill.
//!
//! This checks indexing, masking, reductions and synchronization; the PTX itself (vector
//! instructions, `ex2.approx`, register allocation, the real tensor cores) is checked by
//! `tests/ptx.rs` and on the GPU by `tests/gpu_bert.rs`.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use fused_gemm::device::kernel::bert::Exec;
use fused_gemm::device::kernel::bert::attention::{self as attn, AttnArgs};
use fused_gemm::device::kernel::bert::attention_mma::{self as attn_mma, MmaExec};
use fused_gemm::device::kernel::bert::embed::{self, EmbedArgs};
use fused_gemm::device::kernel::bert::pool::{self, PoolArgs};
use fused_gemm::device::mma::sm80::MmaInput;
use fused_gemm::device::types::{Bf16, Element, F16};
use fused_gemm::host::reference::bert as reference;
use fused_gemm::host::testing::{Tolerance, assert_close, compare, nan_max, rng, uniform};
use rand::RngExt;
use rand::rngs::StdRng;

/// A reusable barrier for `n` threads that gives up (panics) once any thread of the CTA has
/// panicked, so a failing kernel body fails the test instead of hanging it.
struct Barrier {
    n: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl Barrier {
    fn new(n: usize) -> Self {
        Barrier {
            n,
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
        }
    }

    fn wait(&self, aborted: &AtomicBool) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let generation = st.1;
        st.0 += 1;
        if st.0 == self.n {
            *st = (0, generation + 1);
            self.cv.notify_all();
            return;
        }
        while st.1 == generation {
            assert!(
                !aborted.load(Ordering::SeqCst),
                "another simulated thread panicked"
            );
            st = self
                .cv
                .wait_timeout(st, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// 32-bit words a lane publishes in one warp-wide exchange (an mma's A, B and C fragments).
const SLOT_WORDS: usize = 10;

struct Warp {
    barrier: Barrier,
    slots: [[AtomicU32; SLOT_WORDS]; 32],
}

struct Cta {
    barrier: Barrier,
    warps: Vec<Warp>,
    smem: *mut u8,
    smem_len: usize,
    aborted: AtomicBool,
}

/// Marks the CTA aborted when its thread unwinds.
struct AbortOnPanic<'a>(&'a AtomicBool);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

thread_local! {
    /// (blockIdx.x, threadIdx.x, the CTA) of the simulated thread running on this OS thread.
    static CTX: Cell<Option<(u32, u32, *const Cta)>> = const { Cell::new(None) };
}

fn ctx() -> (u32, u32, &'static Cta) {
    let (b, t, c) = CTX
        .get()
        .expect("device function called outside a simulated launch");
    // SAFETY: the CTA outlives every thread that runs it (scoped threads in `launch`).
    (b, t, unsafe { &*c })
}

/// A warp-wide exchange: this lane publishes `words`, the warp waits for all 32 lanes, `f`
/// reads any lane's words (`read(lane, i)`) and gets this lane's index, the warp waits again so
/// the slots can be reused.
fn warp_exchange<R>(words: &[u32], f: impl FnOnce(&dyn Fn(usize, usize) -> u32, usize) -> R) -> R {
    let (_, t, cta) = ctx();
    let w = &cta.warps[(t / 32) as usize];
    let lane = (t % 32) as usize;
    for (slot, &x) in w.slots[lane].iter().zip(words) {
        slot.store(x, Ordering::SeqCst);
    }
    w.barrier.wait(&cta.aborted);
    let read = |l: usize, i: usize| w.slots[l][i].load(Ordering::SeqCst);
    let r = f(&read, lane);
    w.barrier.wait(&cta.aborted);
    r
}

/// The 16-bit word at byte offset `at` of this CTA's shared memory, bounds-checked.
fn smem_u16(at: usize) -> u32 {
    let cta = ctx().2;
    assert!(
        at + 2 <= cta.smem_len,
        "shared read at byte {at} beyond {}",
        cta.smem_len
    );
    // SAFETY: in bounds (checked); shared memory is plain bytes.
    u16::from_le_bytes(unsafe { [*cta.smem.add(at), *cta.smem.add(at + 1)] }) as u32
}

/// `ldmatrix.x4` emulated: lanes `8m..8m+8` give the row addresses of matrix `m`; lane `l`
/// gets, per matrix, row `l/4` columns `2(l%4), 2(l%4)+1`, or with `trans` column `l/4` rows
/// `2(l%4), 2(l%4)+1` (lower index in the lower half).
fn ldmatrix(addr: u32, trans: bool) -> [u32; 4] {
    assert!(
        addr.is_multiple_of(16),
        "ldmatrix row address {addr} not 16-byte aligned"
    );
    warp_exchange(&[addr], |read, l| {
        std::array::from_fn(|m| {
            let row = |r: usize| read(8 * m + r, 0) as usize;
            let (lo, hi) = if trans {
                let (r, c) = (2 * (l % 4), l / 4);
                (smem_u16(row(r) + 2 * c), smem_u16(row(r + 1) + 2 * c))
            } else {
                let (r, c) = (l / 4, 2 * (l % 4));
                (smem_u16(row(r) + 2 * c), smem_u16(row(r) + 2 * c + 2))
            };
            lo | (hi << 16)
        })
    })
}

thread_local! {
    /// `cp.async` copies issued and not yet waited for: (shared offset, source, bytes).
    static PENDING: RefCell<Vec<(u32, usize, u32)>> = const { RefCell::new(Vec::new()) };
}

/// [`Exec`] on OS threads.
struct Sim;

impl MmaExec for Sim {
    fn shared_addr(p: *const u8) -> u32 {
        let cta = ctx().2;
        let off = (p as usize).wrapping_sub(cta.smem as usize);
        assert!(off < cta.smem_len, "pointer outside shared memory");
        off as u32
    }
    unsafe fn ldsm_x4(addr: u32) -> [u32; 4] {
        ldmatrix(addr, false)
    }
    unsafe fn ldsm_x4_trans(addr: u32) -> [u32; 4] {
        ldmatrix(addr, true)
    }
    /// Fragments (PTX ISA §9.7.14.5.8), `g = lane/4`, `t = lane%4`: A register `i` holds row
    /// `g + 8(i%2)`, columns `2t + 8(i/2) + {0,1}`; B register `i` rows (k) `2t + 8i + {0,1}`,
    /// column `g`; C/D element `i` row `g + 8(i/2)`, column `2t + i%2`.
    unsafe fn mma_16816<E: MmaInput>(d: &mut [f32; 4], a: &[u32; 4], b: &[u32; 2]) {
        let mut words = [0u32; SLOT_WORDS];
        words[..4].copy_from_slice(a);
        words[4..6].copy_from_slice(b);
        let c = *d;
        *d = warp_exchange(&words, |read, l| {
            let half = |w: u32, k: usize| {
                let (lo, hi) = E::unpack2(w);
                if k.is_multiple_of(2) { lo } else { hi }
            };
            let a_at = |r: usize, k: usize| {
                half(read((r % 8) * 4 + (k % 8) / 2, r / 8 + 2 * (k / 8)), k) as f64
            };
            let b_at = |k: usize, n: usize| half(read(n * 4 + (k % 8) / 2, 4 + k / 8), k) as f64;
            std::array::from_fn(|i| {
                let (r, n) = (l / 4 + 8 * (i / 2), 2 * (l % 4) + i % 2);
                let dot: f64 = (0..16).map(|k| a_at(r, k) * b_at(k, n)).sum();
                (c[i] as f64 + dot) as f32
            })
        });
    }
    unsafe fn cp_async_16(dst: u32, src: *const u8, src_bytes: u32) {
        assert!(dst.is_multiple_of(16) && (src as usize).is_multiple_of(16));
        assert!(src_bytes <= 16);
        PENDING.with_borrow_mut(|p| p.push((dst, src as usize, src_bytes)));
    }
    fn cp_async_commit() {}
    fn cp_async_wait_all() {
        let cta = ctx().2;
        for (dst, src, n) in PENDING.take() {
            assert!(
                dst as usize + 16 <= cta.smem_len,
                "cp.async beyond shared memory"
            );
            for i in 0..16 {
                // SAFETY: in bounds (checked); the source is valid for `n` bytes (kernel contract,
                // and the NaN guards around every test buffer catch reads past it).
                unsafe {
                    *cta.smem.add(dst as usize + i) = if (i as u32) < n {
                        *(src as *const u8).add(i)
                    } else {
                        0
                    };
                }
            }
        }
    }
    unsafe fn sync_warp() {
        let (_, t, cta) = ctx();
        cta.warps[(t / 32) as usize].barrier.wait(&cta.aborted);
    }
}

impl Exec for Sim {
    fn block_idx_x() -> u32 {
        ctx().0
    }
    fn thread_idx_x() -> u32 {
        ctx().1
    }
    unsafe fn sync_threads() {
        let cta = ctx().2;
        cta.barrier.wait(&cta.aborted);
    }
    unsafe fn shfl_xor_f32(v: f32, lane_mask: u32) -> f32 {
        f32::from_bits(warp_exchange(&[v.to_bits()], |read, lane| {
            read(lane ^ lane_mask as usize, 0)
        }))
    }
    fn dynamic_shared_base() -> *mut u8 {
        ctx().2.smem
    }
}

/// Raw pointers inside kernel arguments are shared by the simulated threads like on the GPU.
struct Shared<A>(A);
unsafe impl<A> Sync for Shared<A> {}

#[repr(C, align(1024))]
#[derive(Clone, Copy)]
struct SmemBlock([u8; 1024]);

/// Runs `body` as a launch of `grid` CTAs of `block` threads (a multiple of 32) with
/// `smem_bytes` of dynamic shared memory, filled with NaN bytes.
fn launch<A>(grid: u32, block: u32, smem_bytes: usize, args: &A, body: unsafe fn(&A)) {
    assert_eq!(block % 32, 0);
    let args = Shared(args);
    for bid in 0..grid {
        let mut smem = vec![SmemBlock([0xff; 1024]); smem_bytes.div_ceil(1024).max(1)];
        let cta = Cta {
            barrier: Barrier::new(block as usize),
            warps: (0..block / 32)
                .map(|_| Warp {
                    barrier: Barrier::new(32),
                    slots: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU32::new(0))),
                })
                .collect(),
            smem: smem.as_mut_ptr() as *mut u8,
            smem_len: smem_bytes,
            aborted: AtomicBool::new(false),
        };
        let cta_addr = &cta as *const Cta as usize;
        std::thread::scope(|s| {
            for tid in 0..block {
                let args = &args;
                std::thread::Builder::new()
                    .stack_size(1 << 20)
                    .spawn_scoped(s, move || {
                        CTX.set(Some((bid, tid, cta_addr as *const Cta)));
                        PENDING.take();
                        let _guard = AbortOnPanic(&ctx().2.aborted);
                        // SAFETY: the caller's arguments describe valid buffers.
                        unsafe { body(args.0) };
                    })
                    .expect("spawning a simulated thread");
            }
        });
    }
}

/// Guard elements on each side of every buffer.
const GUARD: usize = 64;

/// A device-like buffer: `GUARD` elements of `fill` on each side, the data optionally one
/// element past an aligned start (misaligning it for vector access).
struct Buf<E> {
    v: Vec<E>,
    start: usize,
    len: usize,
}

impl<E: Element> Buf<E> {
    fn new(data: &[E], misalign: bool, fill: E) -> Self {
        // Start the guard zone on a 16-byte boundary so `misalign` alone decides alignment.
        let mut v = vec![fill; 2 * GUARD + data.len() + 16];
        let lead = v.as_ptr().align_offset(16) % 16;
        let start = lead + GUARD + misalign as usize;
        v[start..start + data.len()].copy_from_slice(data);
        Buf {
            v,
            start,
            len: data.len(),
        }
    }
    fn ptr(&self) -> *const E {
        self.v[self.start..].as_ptr()
    }
    fn mut_ptr(&mut self) -> *mut E {
        self.v[self.start..].as_mut_ptr()
    }
    fn data(&self) -> Vec<f64> {
        self.v[self.start..self.start + self.len]
            .iter()
            .map(|x| x.to_f32() as f64)
            .collect()
    }
    /// Panics if anything outside the data changed (bit patterns, so NaN guards compare).
    fn assert_guards(&self, fill: E, what: &str)
    where
        E: PartialEq,
    {
        let f = fill.to_f32().to_bits();
        for (i, x) in self.v.iter().enumerate() {
            if !(self.start..self.start + self.len).contains(&i) {
                assert_eq!(
                    x.to_f32().to_bits(),
                    f,
                    "{what}: element {i} outside the buffer was written"
                );
            }
        }
    }
}

fn nan<E: Element>() -> E {
    E::from_f32(f32::NAN)
}

fn rounded<E: Element>(xs: &[f32]) -> Vec<E> {
    xs.iter().map(|&x| E::from_f32(x)).collect()
}

fn widen<E: Element>(xs: &[E]) -> Vec<f64> {
    xs.iter().map(|x| x.to_f32() as f64).collect()
}

fn tol<E: Element>() -> f64 {
    match E::DTYPE.name() {
        "f32" => 1e-5,
        "f16" => 2e-3,
        _ => 1e-2,
    }
}

/// Embedding tables and the kernel run on them.
struct EmbedCase<E> {
    word: Vec<E>,
    pos: Vec<E>,
    typ: Vec<E>,
    gamma: Vec<E>,
    beta: Vec<E>,
    d: usize,
    eps: f32,
}

impl<E: Element + PartialEq> EmbedCase<E> {
    fn random(r: &mut StdRng, vocab: usize, positions: usize, d: usize) -> Self {
        EmbedCase {
            word: rounded(&uniform(r, vocab * d)),
            pos: rounded(&uniform(r, positions * d)),
            typ: rounded(&uniform(r, 2 * d)),
            gamma: rounded(
                &uniform(r, d)
                    .iter()
                    .map(|x| 1.0 + 0.25 * x)
                    .collect::<Vec<_>>(),
            ),
            beta: rounded(&uniform(r, d).iter().map(|x| 0.5 * x).collect::<Vec<_>>()),
            d,
            eps: 1e-12,
        }
    }

    fn run(&self, ids: &[u32], types: Option<&[u32]>, seq_len: usize, misalign: bool) -> Vec<f64> {
        let n = nan::<E>();
        let (word, pos, typ) = (
            Buf::new(&self.word, misalign, n),
            Buf::new(&self.pos, misalign, n),
            Buf::new(&self.typ, misalign, n),
        );
        let (gamma, beta) = (
            Buf::new(&self.gamma, misalign, n),
            Buf::new(&self.beta, misalign, n),
        );
        let sentinel = E::from_f32(-7.0);
        let mut out = Buf::new(&vec![n; ids.len() * self.d], misalign, sentinel);
        let d = self.d as u32;
        let a = EmbedArgs {
            ids: ids.as_ptr(),
            token_types: types.map_or(std::ptr::null(), |t| t.as_ptr()),
            rows: ids.len() as u32,
            seq_len: seq_len as u32,
            hidden: d,
            word: word.ptr(),
            vocab: (self.word.len() / self.d) as u32,
            position: pos.ptr(),
            positions: (self.pos.len() / self.d) as u32,
            token_type: typ.ptr(),
            types: (self.typ.len() / self.d) as u32,
            gamma: gamma.ptr(),
            beta: beta.ptr(),
            eps: self.eps,
            out: out.mut_ptr(),
        };
        let grid = (ids.len() as u32).div_ceil(embed::EMBED_ROWS_PER_CTA);
        launch(
            grid,
            32 * embed::EMBED_ROWS_PER_CTA,
            0,
            &a,
            embed::embed_layer_norm::<E, Sim>,
        );
        out.assert_guards(sentinel, "embeddings out");
        out.data()
    }

    fn reference(&self, ids: &[u32], types: Option<&[u32]>, seq_len: usize) -> Vec<f64> {
        let (w, p, t, g, b) = (
            widen(&self.word),
            widen(&self.pos),
            widen(&self.typ),
            widen(&self.gamma),
            widen(&self.beta),
        );
        reference::embeddings(
            ids,
            types,
            seq_len,
            &reference::EmbeddingTables {
                word: &w,
                position: &p,
                token_type: &t,
                gamma: &g,
                beta: &b,
                hidden: self.d,
                eps: self.eps as f64,
            },
        )
    }
}

fn token_ids(r: &mut StdRng, seq_len: usize, lengths: &[u32], vocab: u32) -> Vec<u32> {
    let mut ids = vec![0u32; lengths.len() * seq_len];
    for (b, &len) in lengths.iter().enumerate() {
        for id in &mut ids[b * seq_len..][..len as usize] {
            *id = r.random_range(0..vocab);
        }
    }
    ids
}

fn embeddings_for<E: Element + PartialEq>(r: &mut StdRng) {
    // Few rows: every warp shuffle of the simulation is a barrier of 32 OS threads.
    let (seq_len, lengths) = (7usize, [7u32, 1, 5]);
    for (d, misalign) in [
        (384usize, false),
        (384, true),
        (3, false),
        (17, false),
        (1024, false),
    ] {
        let case = EmbedCase::<E>::random(r, 40, seq_len, d);
        let ids = token_ids(r, seq_len, &lengths, 40);
        let types: Vec<u32> = (0..ids.len()).map(|_| r.random_range(0..2)).collect();
        for t in [None, Some(&types[..])] {
            let got = case.run(&ids, t, seq_len, misalign);
            assert_close(
                &got,
                &case.reference(&ids, t, seq_len),
                tol::<E>(),
                &format!(
                    "sim embeddings {} d={d} misaligned={misalign} types={}",
                    E::DTYPE.name(),
                    t.is_some()
                ),
            );
        }
    }
}

#[test]
fn embeddings_body_matches_reference() {
    let mut r = rng("sim embeddings");
    embeddings_for::<f32>(&mut r);
    embeddings_for::<F16>(&mut r);
    embeddings_for::<Bf16>(&mut r);
}

/// LayerNorm's constant and narrow rows through the embedding body: constant rows (including
/// one whose f32 sum overflows) give exactly β, a NaN stays in its row, a row narrower than the
/// block (N = 3, x = [1, 2, 3]) gives [−1.2247357, 0, 1.2247357].
#[test]
fn embeddings_body_constant_nan_and_narrow_rows() {
    let mut r = rng("sim embeddings faults");
    let d = 384;
    for k in [1234.0f32, 0.0, 8.5e37, -8.5e37] {
        let mut case = EmbedCase::<f32>::random(&mut r, 4, 3, d);
        case.word = vec![k; 4 * d];
        case.pos = vec![0.0; 3 * d];
        case.typ = vec![0.0; 2 * d];
        let got = case.run(&[0, 1, 2, 3, 0, 0], None, 3, false);
        for row in got.chunks(d) {
            assert_eq!(row, widen(&case.beta), "k = {k}");
        }
    }
    let mut case = EmbedCase::<f32>::random(&mut r, 4, 3, d);
    case.word[2 * d + 5] = f32::NAN;
    let got = case.run(&[0, 1, 2, 3, 0, 0], None, 3, false);
    for (i, row) in got.chunks(d).enumerate() {
        assert_eq!(row.iter().all(|v| v.is_nan()), i == 2, "row {i}");
        assert_eq!(row.iter().any(|v| v.is_nan()), i == 2, "row {i}");
    }
    let case = EmbedCase::<f32> {
        word: vec![1.0, 2.0, 3.0],
        pos: vec![0.0; 3],
        typ: vec![0.0; 3],
        gamma: vec![1.0; 3],
        beta: vec![0.0; 3],
        d: 3,
        eps: 1e-5,
    };
    let got = case.run(&[0], None, 1, false);
    for (g, w) in got.iter().zip([-1.224_735_7, 0.0, 1.224_735_7]) {
        assert!((g - w).abs() < 1e-6, "{got:?}");
    }
}

/// Out-of-range ids become NaN rows, never out-of-bounds reads (the guards would be NaN
/// anyway; the row must be entirely NaN and the neighbours correct).
#[test]
fn embeddings_body_writes_nan_for_out_of_range_ids() {
    let mut r = rng("sim embeddings bad ids");
    let case = EmbedCase::<f32>::random(&mut r, 5, 2, 64);
    let ids = [4, 5, 0, 1 << 31];
    let got = case.run(&ids, None, 2, false);
    let want = case.reference(&[4, 0, 0, 0], None, 2);
    for (i, (g, w)) in got.chunks(64).zip(want.chunks(64)).enumerate() {
        if i % 2 == 1 {
            assert!(g.iter().all(|v| v.is_nan()), "row {i}");
        } else {
            let r = compare(g, w, 1e-5);
            assert!(r.passed(), "row {i}: {r}");
        }
    }
}

/// Which attention body a case runs.
#[derive(Clone, Copy, Debug)]
enum AttnKernel {
    /// `attention::attention` (CUDA cores; f32 on the GPU).
    Simt,
    /// `attention_mma::attention_mma` (tensor cores; f16/bf16 on the GPU).
    Mma,
}

/// An attention case: shape, inputs scaled by `scale`, which operands start one element into
/// their buffers (`misalign`: qkv, out).
struct AttnCase<'a> {
    heads: usize,
    head_dim: usize,
    seq_len: usize,
    lengths: &'a [u32],
    misalign: (bool, bool),
    scale: f32,
}

fn simt_body<E: Element>(head_dim: usize) -> (unsafe fn(&AttnArgs<E>), attn::AttnLaunch) {
    match head_dim {
        32 => (attn::attention::<E, Sim, 32>, attn::SimtShape::<32>::LAUNCH),
        64 => (attn::attention::<E, Sim, 64>, attn::SimtShape::<64>::LAUNCH),
        128 => (
            attn::attention::<E, Sim, 128>,
            attn::SimtShape::<128>::LAUNCH,
        ),
        _ => panic!("no CUDA-core body for head dim {head_dim}"),
    }
}

fn mma_body<E: MmaInput>(head_dim: usize) -> (unsafe fn(&AttnArgs<E>), attn::AttnLaunch) {
    match head_dim {
        32 => (
            attn_mma::attention_mma::<E, Sim, 32>,
            attn_mma::MmaShape::<32>::LAUNCH,
        ),
        64 => (
            attn_mma::attention_mma::<E, Sim, 64>,
            attn_mma::MmaShape::<64>::LAUNCH,
        ),
        128 => (
            attn_mma::attention_mma::<E, Sim, 128>,
            attn_mma::MmaShape::<128>::LAUNCH,
        ),
        _ => panic!("no tensor-core body for head dim {head_dim}"),
    }
}

/// The tolerance of an attention output: `tol`, plus `tol·max|qkv|` per element. The output is
/// a convex combination of V rows whose weights carry rounding errors relative to themselves
/// (bf16 probabilities: 2⁻⁸), so an element's error is bounded by that relative error times
/// the values mixed, which can be far larger than the (averaged) output; the Frobenius bound is
/// unchanged. (The GPU tests of these bodies, tests/gpu_bert.rs, use the same bound.)
fn attention_tolerance(tol: impl Into<Tolerance>, qkv: &[f64]) -> Tolerance {
    let tol = tol.into();
    let max = nan_max(qkv.iter().filter(|v| v.is_finite()).map(|v| v.abs()));
    tol.plus_abs(tol.rtol * max.max(0.0))
}

/// Runs `body` on random QKV whose padded rows are NaN and checks the output against the f64
/// reference: finite everywhere, padded query rows exactly 0, relative Frobenius error and each
/// element within `tol`. Returns the Frobenius error.
fn attention_case<E: Element + PartialEq>(
    r: &mut StdRng,
    c: &AttnCase<'_>,
    kernel: AttnKernel,
    (body, shape): (unsafe fn(&AttnArgs<E>), attn::AttnLaunch),
    tol: impl Into<Tolerance>,
) -> f64 {
    let (heads, seq_len, lengths) = (c.heads, c.seq_len, c.lengths);
    let d = heads * c.head_dim;
    let mut x = uniform(r, lengths.len() * seq_len * 3 * d);
    x.iter_mut().for_each(|v| *v *= c.scale);
    for (b, &len) in lengths.iter().enumerate() {
        x[(b * seq_len + len as usize) * 3 * d..(b + 1) * seq_len * 3 * d].fill(f32::NAN);
    }
    let qkv_e: Vec<E> = rounded(&x);
    let qkv = Buf::new(&qkv_e, c.misalign.0, nan::<E>());
    let sentinel = E::from_f32(-7.0);
    let mut out = Buf::new(
        &vec![nan::<E>(); lengths.len() * seq_len * d],
        c.misalign.1,
        sentinel,
    );
    let a = AttnArgs {
        qkv: qkv.ptr(),
        lengths: lengths.as_ptr(),
        batch: lengths.len() as u32,
        seq_len: seq_len as u32,
        heads: heads as u32,
        out: out.mut_ptr(),
    };
    let grid = attn::attn_ctas(lengths.len() as u64, heads as u64, seq_len as u64) as u32;
    launch(grid, shape.threads, shape.smem_bytes as usize, &a, body);
    out.assert_guards(sentinel, "attention out");
    let got = out.data();
    let qkv64 = widen(&qkv_e);
    let want = reference::attention(&qkv64, lengths, seq_len, heads, c.head_dim);
    let close = compare(&got, &want, attention_tolerance(tol, &qkv64));
    let err = close.frobenius;
    println!(
        "sim attention {kernel:?} {} hd={} heads={heads} T={seq_len} lengths={lengths:?} misaligned={:?} scale={}: {close}",
        E::DTYPE.name(),
        c.head_dim,
        c.misalign,
        c.scale
    );
    assert!(got.iter().all(|v| v.is_finite()), "non-finite output");
    for (b, &len) in lengths.iter().enumerate() {
        let pad = &got[(b * seq_len + len as usize) * d..(b + 1) * seq_len * d];
        assert!(
            pad.iter().all(|&v| v == 0.0),
            "padded query rows of sequence {b} not zero"
        );
    }
    assert!(
        close.passed(),
        "{kernel:?} {} hd={}: not close to the reference: {close}",
        E::DTYPE.name(),
        c.head_dim
    );
    err
}

fn case<'a>(heads: usize, head_dim: usize, seq_len: usize, lengths: &'a [u32]) -> AttnCase<'a> {
    AttnCase {
        heads,
        head_dim,
        seq_len,
        lengths,
        misalign: (false, false),
        scale: 2.0,
    }
}

/// f32 attention with scores of a few hundred: an f32 rounding error of a score (|s|·2⁻²⁴,
/// about 1e-5) shifts the softmax weights of nearly tied keys by as much, and the few outputs
/// that mix such keys are off by up to ~20× the average error (seen: Frobenius 6e-7, one
/// element 6e-5 = 1.2e-5 of the output's rms). The element bound is 10× the tolerance there;
/// a wrong element is off by about the output's rms, still 50× over it.
const LARGE_SCORES_F32: Tolerance = Tolerance::rel(1e-5).per_element(10.0);

#[test]
fn attention_body_matches_reference() {
    let mut r = rng("sim attention");
    let t32 = tol::<f32>();
    let s = AttnKernel::Simt;
    for hd in [32, 64, 128] {
        // Crosses the 64-query block and the key tile by a few; one key, one query.
        attention_case::<f32>(
            &mut r,
            &case(2, hd, 70, &[70, 1, 33]),
            s,
            simt_body(hd),
            t32,
        );
        attention_case::<f32>(&mut r, &case(1, hd, 1, &[1]), s, simt_body(hd), t32);
        let mis = AttnCase {
            misalign: (true, true),
            ..case(1, hd, 66, &[66])
        };
        attention_case::<f32>(&mut r, &mis, s, simt_body(hd), t32);
    }
    // The body is generic over storage; the GPU runs it for f32 only.
    attention_case::<F16>(
        &mut r,
        &case(2, 32, 70, &[70, 1, 33]),
        s,
        simt_body(32),
        tol::<F16>(),
    );
    // Scores of a few hundred: e^score overflows f32 without max subtraction.
    let big = AttnCase {
        scale: 10.0,
        ..case(2, 64, 70, &[70, 40])
    };
    attention_case::<f32>(&mut r, &big, s, simt_body(64), LARGE_SCORES_F32);
}

#[test]
fn attention_mma_body_matches_reference() {
    let mut r = rng("sim attention mma");
    let (t16, tb16) = (tol::<F16>(), tol::<Bf16>());
    let m = AttnKernel::Mma;
    for hd in [32, 64] {
        attention_case::<F16>(&mut r, &case(2, hd, 70, &[70, 1, 33]), m, mma_body(hd), t16);
        attention_case::<Bf16>(&mut r, &case(1, hd, 70, &[64, 65]), m, mma_body(hd), tb16);
    }
    // Element-wise paths: qkv and out misaligned, or only out.
    let mis = AttnCase {
        misalign: (true, true),
        ..case(1, 32, 66, &[17, 66])
    };
    attention_case::<Bf16>(&mut r, &mis, m, mma_body(32), tb16);
    let mis_out = AttnCase {
        misalign: (false, true),
        ..case(1, 64, 20, &[20, 3])
    };
    attention_case::<F16>(&mut r, &mis_out, m, mma_body(64), t16);
    attention_case::<F16>(&mut r, &case(1, 128, 129, &[129]), m, mma_body(128), t16);
    attention_case::<F16>(&mut r, &case(1, 32, 1, &[1]), m, mma_body(32), t16);
    // Scores of a few hundred: f32 exp overflows without max subtraction.
    let big = AttnCase {
        scale: 10.0,
        ..case(1, 32, 70, &[70, 40])
    };
    attention_case::<F16>(&mut r, &big, m, mma_body(32), t16);
}

fn pool_case<E: Element + PartialEq>(
    r: &mut StdRng,
    d: usize,
    seq_len: usize,
    lengths: &[u32],
    misalign: bool,
) {
    let mut x = uniform(r, lengths.len() * seq_len * d);
    for (b, &len) in lengths.iter().enumerate() {
        x[(b * seq_len + len as usize) * d..(b + 1) * seq_len * d].fill(f32::NAN);
    }
    let h_e: Vec<E> = rounded(&x);
    let h = Buf::new(&h_e, misalign, nan::<E>());
    let mut out = Buf::new(&vec![f32::NAN; lengths.len() * d], misalign, -7.0f32);
    let a = PoolArgs {
        hidden: h.ptr(),
        lengths: lengths.as_ptr(),
        batch: lengths.len() as u32,
        seq_len: seq_len as u32,
        hidden_size: d as u32,
        out: out.mut_ptr(),
    };
    launch(
        lengths.len() as u32,
        pool::POOL_THREADS,
        pool::POOL_SMEM_BYTES as usize,
        &a,
        pool::mean_pool_l2::<E, Sim>,
    );
    out.assert_guards(-7.0, "pool out");
    let got = out.data();
    let want = reference::mean_pool_l2(&widen(&h_e), lengths, seq_len, d);
    assert_close(
        &got,
        &want,
        1e-5,
        &format!(
            "sim mean pool {} d={d} T={seq_len} lengths={lengths:?} misaligned={misalign}",
            E::DTYPE.name()
        ),
    );
}

#[test]
fn mean_pool_body_matches_reference() {
    let mut r = rng("sim mean pool");
    pool_case::<f32>(&mut r, 384, 17, &[17, 1, 5], false);
    pool_case::<f32>(&mut r, 384, 17, &[17, 1, 5], true);
    pool_case::<f32>(&mut r, 3, 40, &[40, 39], false);
    pool_case::<f32>(&mut r, 1000, 5, &[5], false);
    pool_case::<F16>(&mut r, 384, 17, &[17, 1, 5], false);
    pool_case::<Bf16>(&mut r, 383, 9, &[9, 2], true);
}

#[test]
fn mean_pool_body_zero_and_huge_rows() {
    let d = 384usize;
    let mut h = vec![0.0f32; 4 * d];
    for c in 0..d {
        h[c] = 1.0 + c as f32;
        h[d + c] = -(1.0 + c as f32);
        h[2 * d + c] = 3.0e37;
        h[3 * d + c] = 3.0e37;
    }
    let hb = Buf::new(&h, false, f32::NAN);
    let mut out = Buf::new(&vec![f32::NAN; 2 * d], false, -7.0f32);
    let lengths = [2u32, 2];
    let a = PoolArgs {
        hidden: hb.ptr(),
        lengths: lengths.as_ptr(),
        batch: 2,
        seq_len: 2,
        hidden_size: d as u32,
        out: out.mut_ptr(),
    };
    launch(
        2,
        pool::POOL_THREADS,
        pool::POOL_SMEM_BYTES as usize,
        &a,
        pool::mean_pool_l2::<f32, Sim>,
    );
    let got = out.data();
    assert!(
        got[..d].iter().all(|&v| v == 0.0),
        "zero mean: {:?}",
        &got[..4]
    );
    let want = 1.0 / (d as f64).sqrt();
    assert!(
        got[d..].iter().all(|&v| (v - want).abs() < 1e-6),
        "huge: {:?}",
        &got[d..d + 4]
    );
}
