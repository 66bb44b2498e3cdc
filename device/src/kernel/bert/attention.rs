//! Multi-head self-attention with a key padding mask, head dimension 64, f32 math:
//! `O = softmax(Q·Kᵀ/√64 + mask)·V` per (sequence, head), keys at positions ≥ len excluded.
//!
//! # Work split
//! One CTA per (sequence b, head h, block of [`ATTN_BQ`] queries), [`ATTN_THREADS`] threads:
//! two adjacent lanes share a query row, lane parity `s` owning the 4-element chunks
//! `2i + s` (i < 8) of q and of the output accumulator, so each thread holds 32 + 32 values in
//! registers and a dot product needs one `shfl.xor 1`. Keys and values are staged in shared
//! memory as f32, [`ATTN_BK`] keys at a time (`K_s`, `V_s`: `[ATTN_BK][64]`); a warp's reads of
//! a key row touch two 16-byte chunks in disjoint banks (conflict-free broadcasts).
//!
//! # Softmax
//! Online softmax (Milakov & Gimelshein, "Online normalizer calculation for softmax", 2018, as
//! used by FlashAttention, Dao et al. 2022), in base 2: q is pre-scaled by `log2(e)/√64`, and
//! for each group of [`ATTN_KC`] keys the running max `m`, normalizer `l` and output `o` are
//! rescaled once by `2^(m_old − m_new)`.
//!
//! # Masking
//! Only keys `< len` are staged; the rest of a tile is zero-filled and their scores are −∞, so
//! padded keys contribute exactly nothing even if their K/V rows hold NaN. Query rows `≥ len`
//! (padding) are written as zeros; a query block entirely in the padding skips the math.
//! `len` is clamped to T; `len = 0` (which the launcher rejects) would give zero rows, not NaN.

use super::{Exec, chunk_aligned, fma, load_chunk, load_partial, store4};
use crate::math;
use crate::types::Element;

/// Head dimension (columns per head).
pub const ATTN_HEAD_DIM: u32 = 64;
/// Query rows per CTA.
pub const ATTN_BQ: u32 = 64;
/// Threads per query row.
const SPLIT: u32 = 2;
/// Threads per CTA.
pub const ATTN_THREADS: u32 = ATTN_BQ * SPLIT;
/// Keys per shared-memory tile.
pub const ATTN_BK: u32 = 64;
/// Keys per online-softmax rescale.
pub const ATTN_KC: usize = 16;
/// 4-element chunks of the head dimension per thread (the unrolled loops list 0..8).
const CHUNKS: usize = (ATTN_HEAD_DIM / 4 / SPLIT) as usize;
const _: () = assert!(CHUNKS == 8);
/// Dynamic shared memory per CTA, bytes: `K_s` and `V_s`, f32.
pub const ATTN_SMEM_BYTES: u32 = 2 * ATTN_BK * ATTN_HEAD_DIM * 4;

/// f32x4 in shared memory, 16-byte aligned (`ld.shared.v4.f32`).
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct F4([f32; 4]);

/// Arguments of [`attention`].
#[derive(Clone, Copy)]
pub struct AttnArgs<E> {
    /// Fused QKV projection output, `[B·T, 3·H·64]` row-major: columns `[Q | K | V]`, each
    /// `H` heads of 64 contiguous columns.
    pub qkv: *const E,
    /// Sequence lengths, `[B]`, each in `1..=T`.
    pub lengths: *const u32,
    /// B.
    pub batch: u32,
    /// T.
    pub seq_len: u32,
    /// H.
    pub heads: u32,
    /// Output, `[B·T, H·64]` row-major, heads concatenated.
    pub out: *mut E,
}

/// Number of CTAs for a launch: `B · H · ceil(T / ATTN_BQ)` (block index = `(b·H + h)·QB + qb`).
#[inline(always)]
pub const fn attn_ctas(batch: u64, heads: u64, seq_len: u64) -> u64 {
    batch * heads * seq_len.div_ceil(ATTN_BQ as u64)
}

/// The attention kernel body; see the [module docs](self). Launch: grid [`attn_ctas`], block
/// [`ATTN_THREADS`], [`ATTN_SMEM_BYTES`] of dynamic shared memory.
///
/// # Safety
/// Pointers valid for the extents in [`AttnArgs`]; the launch shape above.
#[inline(always)]
pub unsafe fn attention<E: Element, X: Exec>(a: &AttnArgs<E>) {
    let t_len = a.seq_len;
    if t_len == 0 || a.heads == 0 {
        return;
    }
    let q_blocks = t_len.div_ceil(ATTN_BQ);
    let blk = X::block_idx_x();
    let qb = blk % q_blocks;
    let h = (blk / q_blocks) % a.heads;
    let b = blk / q_blocks / a.heads;
    if b >= a.batch {
        return;
    }
    let len = (*a.lengths.add(b as usize)).min(t_len);
    let tid = X::thread_idx_x();
    let s = tid % SPLIT;
    let qi = qb * ATTN_BQ + tid / SPLIT;
    let d = a.heads * ATTN_HEAD_DIM;
    let ld = 3 * d as usize;
    let vector = chunk_aligned(a.qkv) && chunk_aligned(a.out as *const E);
    let row0 = b as usize * t_len as usize;
    // This thread's chunks of a head row start at column 4·(2i + s).
    let col = |i: usize| 4 * (SPLIT as usize * i + s as usize);
    // Only dereferenced when qi < T.
    let out_row = a
        .out
        .wrapping_add((row0 + qi as usize) * d as usize + (h * ATTN_HEAD_DIM) as usize);

    if qb * ATTN_BQ >= len {
        // The whole query block is padding (uniform per CTA, so no barrier is skipped unevenly).
        if qi < t_len {
            unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
                store4(out_row.add(col(i)), [0.0; 4], vector, 4);
            });
        }
        return;
    }

    let q_valid = qi < len;
    let q_scale = core::f32::consts::LOG2_E / 8.0; // log2(e)/√64
    let mut q = [[0.0f32; 4]; CHUNKS];
    if q_valid {
        let src = a
            .qkv
            .add((row0 + qi as usize) * ld + (h * ATTN_HEAD_DIM) as usize);
        unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
            let v = if vector {
                load_chunk(src.add(col(i)))
            } else {
                load_partial(src.add(col(i)), 4)
            };
            for e in 0..4 {
                q[i][e] = v[e] * q_scale;
            }
        });
    }

    let k_s = X::dynamic_shared_base() as *mut F4;
    let v_s = k_s.add((ATTN_BK * ATTN_HEAD_DIM / 4) as usize);
    let mut o = [[0.0f32; 4]; CHUNKS];
    let mut m = f32::NEG_INFINITY;
    let mut l = 0.0f32;

    let mut kt = 0;
    while kt < len {
        // Stage keys kt..kt+BK: chunk c of the tile is key c/16, columns 4·(c%16).
        X::sync_threads();
        // Loads first, then stores, unrolled: the 16 loads of a thread are in flight together.
        const {
            assert!(
                ATTN_BK * ATTN_HEAD_DIM / 4 == 8 * ATTN_THREADS,
                "8 chunks per thread"
            )
        };
        let mut kv = [[0.0f32; 4]; 8];
        let mut vv = [[0.0f32; 4]; 8];
        unrolled!(r in [0, 1, 2, 3, 4, 5, 6, 7] {
            let c = tid + r as u32 * ATTN_THREADS;
            let key = kt + c / (ATTN_HEAD_DIM / 4);
            if key < len {
                let src = a.qkv.add(
                    (row0 + key as usize) * ld
                        + (h * ATTN_HEAD_DIM + 4 * (c % (ATTN_HEAD_DIM / 4))) as usize,
                );
                if vector {
                    kv[r] = load_chunk(src.add(d as usize));
                    vv[r] = load_chunk(src.add(2 * d as usize));
                } else {
                    kv[r] = load_partial(src.add(d as usize), 4);
                    vv[r] = load_partial(src.add(2 * d as usize), 4);
                }
            }
        });
        unrolled!(r in [0, 1, 2, 3, 4, 5, 6, 7] {
            let c = (tid + r as u32 * ATTN_THREADS) as usize;
            *k_s.add(c) = F4(kv[r]);
            *v_s.add(c) = F4(vv[r]);
        });
        X::sync_threads();

        let n_valid = (len - kt).min(ATTN_BK);
        let mut k0 = 0;
        while k0 < n_valid {
            const { assert!(ATTN_KC == 16, "the unrolled loops below list 16 keys") };
            let mut sc = [0.0f32; ATTN_KC];
            unrolled!(j in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
                let krow = k_s.add(((k0 as usize + j) * ATTN_HEAD_DIM as usize) / 4);
                let mut dot = 0.0f32;
                unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
                    let kc = (*krow.add(SPLIT as usize * i + s as usize)).0;
                    for e in 0..4 {
                        dot = fma(q[i][e], kc[e], dot);
                    }
                });
                dot += X::shfl_xor_f32(dot, 1);
                sc[j] = if k0 + (j as u32) < n_valid {
                    dot
                } else {
                    f32::NEG_INFINITY
                };
            });
            let mut m_new = m;
            for &x in &sc {
                m_new = m_new.max(x);
            }
            // m_new is finite: the group holds at least one valid key.
            let corr = math::exp2(m - m_new);
            l *= corr;
            unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
                o[i] = o[i].map(|x| x * corr);
            });
            unrolled!(j in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
                let p = math::exp2(sc[j] - m_new);
                l += p;
                let vrow = v_s.add(((k0 as usize + j) * ATTN_HEAD_DIM as usize) / 4);
                unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
                    let vc = (*vrow.add(SPLIT as usize * i + s as usize)).0;
                    for e in 0..4 {
                        o[i][e] = fma(p, vc[e], o[i][e]);
                    }
                });
            });
            m = m_new;
            k0 += ATTN_KC as u32;
        }
        kt += ATTN_BK;
    }

    if qi < t_len {
        let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
        unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
            let mut y = [0.0f32; 4];
            if q_valid {
                for e in 0..4 {
                    y[e] = o[i][e] * inv;
                }
            }
            store4(out_row.add(col(i)), y, vector, 4);
        });
    }
}
