//! Multi-head self-attention with a key padding mask on the tensor cores, for f16/bf16 storage,
//! generic over the head dimension `HD` ∈ [`ATTN_HEAD_DIMS`]: the same result, arguments and
//! grid as the CUDA-core kernel of [`super::attention`], computed FlashAttention-2 style (Dao,
//! "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023).
//!
//! # Work split
//! One CTA per (sequence b, head h, block of [`ATTN_BQ`] = 64 queries), 4 warps; warp `w` owns
//! query rows `16w..16w+16` of the block. The CTA walks the keys `0..len` in tiles of
//! [`MmaShape::BKV`] = 64; per tile each warp computes its 16×64 block of scores
//! `S = Q·Kᵀ` and then `O += P·V` with `mma.sync.m16n8k16` (f32 accumulators, PTX ISA
//! §9.7.14.5.14). Q is read into A fragments once (`ldmatrix`); K fragments come from
//! `ldmatrix` (K stored key-major is the "col" B operand of `Q·Kᵀ`), V fragments from
//! `ldmatrix.trans`. The f32 accumulator fragment of S has the same thread↔element map as
//! the A fragment of the next multiply, so P goes from S's registers to `P·V` without
//! touching shared memory.
//!
//! # Memory
//! Shared memory holds the Q tile and two stages of K and V tiles (`[64][HD + 8]` 16-bit
//! elements each; the 8-element pad spreads the 8 rows an `ldmatrix` reads over all 32 banks).
//! Tiles are copied with 16-byte `cp.async` when `qkv` is 16-byte aligned (every row and head
//! offset then is), else element by element; the copy of key tile `j + 1` runs while tile `j`
//! is computed. The output tile goes back through the Q buffer so global stores are 16-byte
//! rows (element-wise when `out` is not 16-byte aligned).
//!
//! # Softmax
//! Online softmax in base 2 with max subtraction (Milakov & Gimelshein 2018): each thread holds
//! two query rows (`g` and `g + 8`, `g = lane / 4`) of S; the row max over a tile is reduced
//! over the 4 lanes of a quad with `shfl.xor`, the row sums are kept per thread and reduced
//! once at the end. Scores are scaled by `log2(e)/√HD` inside `exp2`'s argument.
//!
//! # Masking
//! Keys `≥ len` inside the last tile get score −∞ (weight exactly 0); their K and V rows in
//! shared memory are zero-filled instead of read, so NaN in padded rows of `qkv` cannot reach
//! `P·V` (0·NaN would). Query rows `≥ len` are zero-filled Q rows and are written as zeros; a
//! query block entirely in the padding only writes zeros.

use super::attention::{
    ATTN_BQ, ATTN_HEAD_DIMS, AttnArgs, AttnBlock, AttnLaunch, attn_block, score_scale,
};
use super::{Exec, Ptx, st_global_v4};
use crate::math;
use crate::mma::sm80::MmaInput;

/// The warp-level operations of the tensor-core kernel beyond [`Exec`]: `ldmatrix`,
/// `mma.sync` and `cp.async`. [`Ptx`] is the real thing; `tests/sim_bert.rs` emulates them
/// on CPU threads from the fragment layouts of PTX ISA §9.7.14.5.8 and §9.7.14.5.15.
pub trait MmaExec: Exec {
    /// The `.shared` window address of a pointer into dynamic shared memory.
    fn shared_addr(p: *const u8) -> u32;
    /// `ldmatrix.sync.aligned.m8n8.x4.shared.b16` (see [`crate::copy::ldmatrix::ldsm_x4`]).
    ///
    /// # Safety
    /// All 32 lanes execute it together; `addr` is a 16-byte aligned shared address.
    unsafe fn ldsm_x4(addr: u32) -> [u32; 4];
    /// `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`.
    ///
    /// # Safety
    /// As [`MmaExec::ldsm_x4`].
    unsafe fn ldsm_x4_trans(addr: u32) -> [u32; 4];
    /// `d += a·b`, one `mma.sync.aligned.m16n8k16.row.col.f32.E.E.f32`.
    ///
    /// # Safety
    /// All 32 lanes execute it together.
    unsafe fn mma_16816<E: MmaInput>(d: &mut [f32; 4], a: &[u32; 4], b: &[u32; 2]);
    /// `cp.async.cg.shared.global [dst], [src], 16, src_bytes` (zero-fills the rest).
    ///
    /// # Safety
    /// `dst` a 16-byte aligned shared address; `src` a 16-byte aligned global address valid
    /// for `src_bytes` bytes (any address when 0).
    unsafe fn cp_async_16(dst: u32, src: *const u8, src_bytes: u32);
    /// `cp.async.commit_group`.
    fn cp_async_commit();
    /// `cp.async.wait_group 0`: this thread's copies have landed (a barrier then publishes
    /// them to the CTA).
    fn cp_async_wait_all();
    /// `__syncwarp()`: the shared-memory accesses of the warp's lanes before it happen before
    /// those after it.
    ///
    /// # Safety
    /// All 32 lanes execute it together.
    unsafe fn sync_warp();
}

impl MmaExec for Ptx {
    #[inline(always)]
    fn shared_addr(p: *const u8) -> u32 {
        crate::arch::shared::shared_addr(p)
    }
    #[inline(always)]
    unsafe fn ldsm_x4(addr: u32) -> [u32; 4] {
        crate::copy::ldmatrix::ldsm_x4(addr)
    }
    #[inline(always)]
    unsafe fn ldsm_x4_trans(addr: u32) -> [u32; 4] {
        crate::copy::ldmatrix::ldsm_x4_trans(addr)
    }
    #[inline(always)]
    unsafe fn mma_16816<E: MmaInput>(d: &mut [f32; 4], a: &[u32; 4], b: &[u32; 2]) {
        E::mma_16816(d, a, b)
    }
    #[inline(always)]
    unsafe fn cp_async_16(dst: u32, src: *const u8, src_bytes: u32) {
        crate::copy::cp_async::cp_async_cg_16(dst, src as u64, src_bytes)
    }
    #[inline(always)]
    fn cp_async_commit() {
        crate::copy::cp_async::commit_group()
    }
    #[inline(always)]
    fn cp_async_wait_all() {
        crate::copy::cp_async::wait_group::<0>()
    }
    #[inline(always)]
    unsafe fn sync_warp() {
        crate::arch::sync::sync_warp()
    }
}

/// Compile-time shape of the tensor-core kernel for head dimension `HD`.
pub struct MmaShape<const HD: u32>;

impl<const HD: u32> MmaShape<HD> {
    /// Warps per CTA, 16 query rows each.
    pub const WARPS: u32 = ATTN_BQ / 16;
    /// Threads per CTA.
    pub const THREADS: u32 = Self::WARPS * 32;
    /// Keys per tile.
    pub const BKV: u32 = 64;
    /// Elements per shared-memory row (HD plus the bank-spreading pad).
    const LDS: u32 = HD + 8;
    /// Bytes of one `[64][LDS]` tile (Q, or one stage of K or V).
    const TILE_BYTES: u32 = ATTN_BQ * Self::LDS * 2;
    /// Byte offsets in shared memory: Q, K stages 0/1, V stages 0/1.
    const Q_OFF: u32 = 0;
    const K_OFF: u32 = Self::TILE_BYTES;
    const V_OFF: u32 = 3 * Self::TILE_BYTES;
    /// Dynamic shared memory per CTA, bytes.
    pub const SMEM_BYTES: u32 = 5 * Self::TILE_BYTES;
    /// k16 steps over the head dimension (A fragments of a Q row block).
    const KSTEPS: usize = (HD / 16) as usize;
    /// n8 fragments of an output row block.
    const ONF: usize = (HD / 8) as usize;
    /// 16-byte chunks of a tile each thread copies.
    const COPIES: usize = (ATTN_BQ * HD / 8 / Self::THREADS) as usize;
    /// The launch of this shape.
    pub const LAUNCH: AttnLaunch = AttnLaunch {
        threads: Self::THREADS,
        smem_bytes: Self::SMEM_BYTES,
    };
    const CHECK: () = {
        assert!(
            HD == 32 || HD == 64 || HD == 128,
            "head dim must be one of ATTN_HEAD_DIMS"
        );
        assert!(
            ATTN_BQ == 64 && Self::BKV == 64,
            "the unrolled loops list 8 n8 fragments of S"
        );
        assert!(Self::KSTEPS <= 8 && Self::ONF <= 16 && Self::COPIES <= 8);
        assert!(Self::COPIES * Self::THREADS as usize * 8 == (ATTN_BQ * HD) as usize);
        assert!((Self::LDS * 2) % 16 == 0, "16-byte aligned shared rows");
    };
}

/// The tensor-core kernel's launch for `head_dim`, `None` unless it is in [`ATTN_HEAD_DIMS`].
pub const fn mma_launch(head_dim: u32) -> Option<AttnLaunch> {
    match head_dim {
        32 => Some(MmaShape::<32>::LAUNCH),
        64 => Some(MmaShape::<64>::LAUNCH),
        128 => Some(MmaShape::<128>::LAUNCH),
        _ => None,
    }
}

const _: () = assert!(ATTN_HEAD_DIMS.len() == 3);

/// 16 bytes in shared memory, 16-byte aligned (`ld.shared.v4`).
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct U4([u32; 4]);

/// Stores the 8 16-bit elements `v` (lowest address first) at `p`: one 16-byte store when
/// `vector` (then `p` is 16-byte aligned), else 8 element stores.
#[inline(always)]
unsafe fn store8(p: *mut u16, v: [u32; 4], vector: bool) {
    if vector {
        st_global_v4(p as *mut u32, v);
    } else {
        for (i, w) in v.iter().enumerate() {
            *p.add(2 * i) = *w as u16;
            *p.add(2 * i + 1) = (*w >> 16) as u16;
        }
    }
}

/// Global → shared copies of 64-row tiles of one head of `qkv`.
struct TileCopy {
    smem: *mut u8,
    /// `.shared` address of `smem`.
    base: u32,
    qkv: *const u16,
    /// Elements per `qkv` row (3·H·HD).
    ld: usize,
    /// `qkv` row of position 0 of this sequence (b·T).
    row0: usize,
    /// H·HD.
    d: u32,
    h: u32,
    len: u32,
    tid: u32,
    /// 16-byte `cp.async` (qkv 16-byte aligned) or element-wise copies.
    vector: bool,
}

impl TileCopy {
    /// Copies rows `r0..r0 + 64` of part `part` (0 Q, 1 K, 2 V) of head h into the tile at
    /// byte offset `dst` of shared memory; rows at or beyond `len` are zero-filled, never read.
    #[inline(always)]
    unsafe fn load<X: MmaExec, const HD: u32>(&self, part: u32, r0: u32, dst: u32) {
        let row_chunks = HD / 8;
        let lds = MmaShape::<HD>::LDS;
        unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
            if i < MmaShape::<HD>::COPIES {
                let c = self.tid + i as u32 * MmaShape::<HD>::THREADS;
                let (row, c8) = (c / row_chunks, c % row_chunks);
                let tok = r0 + row;
                let ok = tok < self.len;
                let at = dst + (row * lds + 8 * c8) * 2;
                let off = if ok {
                    (self.row0 + tok as usize) * self.ld
                        + (part * self.d + self.h * HD + 8 * c8) as usize
                } else {
                    0
                };
                if self.vector {
                    X::cp_async_16(
                        self.base + at,
                        self.qkv.add(off) as *const u8,
                        if ok { 16 } else { 0 },
                    );
                } else {
                    let sp = self.smem.add(at as usize) as *mut u16;
                    for e in 0..8 {
                        *sp.add(e) = if ok { *self.qkv.add(off + e) } else { 0 };
                    }
                }
            }
        });
    }
}

/// The tensor-core attention kernel body for head dimension `HD`; see the
/// [module docs](self). Launch: grid [`super::attention::attn_ctas`], block
/// [`MmaShape::THREADS`], [`MmaShape::SMEM_BYTES`] of dynamic shared memory (above 48 KB for
/// HD = 128: the launcher raises the function's limit).
///
/// # Safety
/// Pointers valid for the extents in [`AttnArgs`] with head dimension `HD`; the launch shape
/// above.
#[inline(always)]
pub unsafe fn attention_mma<E: MmaInput, X: MmaExec, const HD: u32>(a: &AttnArgs<E>) {
    #[allow(clippy::let_unit_value)]
    let () = MmaShape::<HD>::CHECK;
    let threads = MmaShape::<HD>::THREADS;
    let bkv = MmaShape::<HD>::BKV;
    let lds = MmaShape::<HD>::LDS;
    let (q_off, k_off, v_off) = (
        MmaShape::<HD>::Q_OFF,
        MmaShape::<HD>::K_OFF,
        MmaShape::<HD>::V_OFF,
    );
    let tile_bytes = MmaShape::<HD>::TILE_BYTES;
    let ksteps = MmaShape::<HD>::KSTEPS;
    let onf = MmaShape::<HD>::ONF;
    let copies = MmaShape::<HD>::COPIES;
    // 16-byte chunks per head row.
    let row_chunks = HD / 8;

    let Some(AttnBlock { b, h, q0, len }) = attn_block::<E, X>(a) else {
        return;
    };
    let t_len = a.seq_len;
    let tid = X::thread_idx_x();
    let lane = tid % 32;
    let warp = tid / 32;
    let d = a.heads * HD;
    let ld = 3 * d as usize;
    let row0 = b as usize * t_len as usize;
    let vec_in = (a.qkv as usize).is_multiple_of(16);
    let vec_out = (a.out as usize).is_multiple_of(16);
    // Chunk `c8` (8 elements) of row `row` of the block in `out`.
    let out16 = a.out as *mut u16;
    let out_at =
        |row: u32, c8: u32| (row0 + (q0 + row) as usize) * d as usize + (h * HD + 8 * c8) as usize;

    if q0 >= len {
        // The whole query block is padding (uniform per CTA, so no barrier is skipped unevenly).
        unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
            if i < copies {
                let c = tid + i as u32 * threads;
                let (row, c8) = (c / row_chunks, c % row_chunks);
                if q0 + row < t_len {
                    store8(out16.add(out_at(row, c8)), [0; 4], vec_out);
                }
            }
        });
        return;
    }

    let smem = X::dynamic_shared_base();
    let base = X::shared_addr(smem);
    let tiles = TileCopy {
        smem,
        base,
        qkv: a.qkv as *const u16,
        ld,
        row0,
        d,
        h,
        len,
        tid,
        vector: vec_in,
    };
    let n_tiles = len.div_ceil(bkv);
    tiles.load::<X, HD>(0, q0, q_off);
    tiles.load::<X, HD>(1, 0, k_off);
    tiles.load::<X, HD>(2, 0, v_off);
    X::cp_async_commit();

    let scale = score_scale(HD);
    let g = lane / 4;
    let t2 = 2 * (lane % 4);
    let mut qf = [[0u32; 4]; 8];
    let mut o = [[0.0f32; 4]; 16];
    // Running max of the raw scores and this thread's share of the normalizer, rows g, g + 8.
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0.0f32; 2];

    let mut j = 0;
    while j < n_tiles {
        X::cp_async_wait_all();
        // Tile j (and at j = 0 the Q tile) is visible to all; every warp is done with tile
        // j − 1, whose stage the copy of tile j + 1 reuses.
        X::sync_threads();
        let st = j % 2;
        if j + 1 < n_tiles {
            let nst = 1 - st;
            tiles.load::<X, HD>(1, (j + 1) * bkv, k_off + nst * tile_bytes);
            tiles.load::<X, HD>(2, (j + 1) * bkv, v_off + nst * tile_bytes);
        }
        X::cp_async_commit();
        if j == 0 {
            unrolled!(ks in [0, 1, 2, 3, 4, 5, 6, 7] {
                if ks < ksteps {
                    let row = warp * 16 + (lane & 15);
                    let col = ks as u32 * 16 + (lane >> 4) * 8;
                    qf[ks] = X::ldsm_x4(base + q_off + (row * lds + col) * 2);
                }
            });
        }

        // S = Q·Kᵀ: n8 fragment `n` holds keys 8n..8n+8 of the tile.
        let k_base = base + k_off + st * tile_bytes;
        let mut s = [[0.0f32; 4]; 8];
        unrolled!(ks in [0, 1, 2, 3, 4, 5, 6, 7] {
            if ks < ksteps {
                unrolled!(np in [0, 1, 2, 3] {
                    let key = np as u32 * 16 + (lane & 7) + (lane >> 4) * 8;
                    let col = ks as u32 * 16 + ((lane >> 3) & 1) * 8;
                    let r = X::ldsm_x4(k_base + (key * lds + col) * 2);
                    X::mma_16816::<E>(&mut s[2 * np], &qf[ks], &[r[0], r[1]]);
                    X::mma_16816::<E>(&mut s[2 * np + 1], &qf[ks], &[r[2], r[3]]);
                });
            }
        });

        let kt = j * bkv;
        if kt + bkv > len {
            unrolled!(n in [0, 1, 2, 3, 4, 5, 6, 7] {
                for (e, x) in s[n].iter_mut().enumerate() {
                    if kt + n as u32 * 8 + t2 + (e as u32 & 1) >= len {
                        *x = f32::NEG_INFINITY;
                    }
                }
            });
        }

        // Online softmax: new row maxima (finite: the tile holds a key < len), rescale.
        let mut mx = m;
        unrolled!(n in [0, 1, 2, 3, 4, 5, 6, 7] {
            mx[0] = mx[0].max(s[n][0].max(s[n][1]));
            mx[1] = mx[1].max(s[n][2].max(s[n][3]));
        });
        unrolled!(r in [0, 1] {
            mx[r] = mx[r].max(X::shfl_xor_f32(mx[r], 1));
            mx[r] = mx[r].max(X::shfl_xor_f32(mx[r], 2));
        });
        let corr = [
            math::exp2((m[0] - mx[0]) * scale),
            math::exp2((m[1] - mx[1]) * scale),
        ];
        let neg_ms = [-mx[0] * scale, -mx[1] * scale];
        m = mx;
        let mut rs = [0.0f32; 2];
        unrolled!(n in [0, 1, 2, 3, 4, 5, 6, 7] {
            for e in 0..4 {
                let p = math::exp2(math::fma(s[n][e], scale, neg_ms[e / 2]));
                s[n][e] = p;
                rs[e / 2] += p;
            }
        });
        l = [
            math::fma(l[0], corr[0], rs[0]),
            math::fma(l[1], corr[1], rs[1]),
        ];
        unrolled!(n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
            if n < onf {
                o[n] = [o[n][0] * corr[0], o[n][1] * corr[0], o[n][2] * corr[1], o[n][3] * corr[1]];
            }
        });

        // O += P·V: the k16 step `kk` takes keys 16kk..16kk+16, i.e. S fragments 2kk, 2kk+1.
        let v_base = base + v_off + st * tile_bytes;
        unrolled!(kk in [0, 1, 2, 3] {
            let pa = [
                E::pack2(s[2 * kk][0], s[2 * kk][1]),
                E::pack2(s[2 * kk][2], s[2 * kk][3]),
                E::pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                E::pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]),
            ];
            unrolled!(dp in [0, 1, 2, 3, 4, 5, 6, 7] {
                if dp < ksteps {
                    let key = kk as u32 * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                    let col = dp as u32 * 16 + (lane >> 4) * 8;
                    let r = X::ldsm_x4_trans(v_base + (key * lds + col) * 2);
                    X::mma_16816::<E>(&mut o[2 * dp], &pa, &[r[0], r[1]]);
                    X::mma_16816::<E>(&mut o[2 * dp + 1], &pa, &[r[2], r[3]]);
                }
            });
        });
        j += 1;
    }

    // Row sums over the quad; padded query rows get 0 (their o is finite: zero Q rows).
    unrolled!(r in [0, 1] {
        l[r] += X::shfl_xor_f32(l[r], 1);
        l[r] += X::shfl_xor_f32(l[r], 2);
    });
    let rows = [warp * 16 + g, warp * 16 + g + 8];
    let inv = [0, 1].map(|r| if q0 + rows[r] < len { 1.0 / l[r] } else { 0.0 });
    // Each warp overwrites only its own 16 rows of the Q tile, which only it has read. Other
    // lanes read those rows (`ldmatrix`): the warp barrier orders their reads before these
    // writes in the memory model, not only by the collectives between them.
    X::sync_warp();
    unrolled!(n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
        if n < onf {
            let col = n as u32 * 8 + t2;
            for r in 0..2 {
                let at = q_off + (rows[r] * lds + col) * 2;
                *(smem.add(at as usize) as *mut u32) =
                    E::pack2(o[n][2 * r] * inv[r], o[n][2 * r + 1] * inv[r]);
            }
        }
    });
    X::sync_threads();
    unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
        if i < copies {
            let c = tid + i as u32 * threads;
            let (row, c8) = (c / row_chunks, c % row_chunks);
            if q0 + row < t_len {
                let at = q_off + (row * lds + 8 * c8) * 2;
                let v = (*(smem.add(at as usize) as *const U4)).0;
                store8(out16.add(out_at(row, c8)), v, vec_out);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mma_shapes_cover_every_head_dim() {
        for hd in ATTN_HEAD_DIMS {
            let l = mma_launch(hd).unwrap();
            assert_eq!(l.threads, 128, "{hd}");
            // Q + 2 stages of K and V, rows padded by 8 elements.
            assert_eq!(l.smem_bytes, 5 * 64 * (hd + 8) * 2, "{hd}");
        }
        assert_eq!(mma_launch(96), None);
        // Only head dim 128 needs the opt-in above 48 KB.
        assert!(mma_launch(64).unwrap().smem_bytes <= 48 * 1024);
    }
}
