//! Multi-head self-attention with a key padding mask on the CUDA cores, f32 math, generic over
//! the head dimension `HD` ∈ [`ATTN_HEAD_DIMS`]:
//! `O = softmax(Q·Kᵀ/√HD + mask)·V` per (sequence, head), keys at positions ≥ len excluded.
//! This is the kernel for f32 storage; f16/bf16 use the tensor-core kernel of
//! [`super::attention_mma`], which shares this module's launch grid and arguments.
//!
//! # Work split
//! One CTA per (sequence b, head h, block of [`ATTN_BQ`] queries), [`SimtShape::THREADS`]
//! threads: `SPLIT` adjacent lanes share a query row (2 for HD ≤ 64, HD/32 above), lane
//! `s = tid % SPLIT` owning the 4-element chunks `SPLIT·i + s` of q and of the output
//! accumulator, so a thread holds at most 8 + 8 chunks in registers and a dot product needs
//! `log2(SPLIT)` `shfl.xor`. Keys and values are staged in shared memory as f32,
//! [`SimtShape::BK`] keys at a time (`K_s`, `V_s`: `[BK][HD]`); a warp's reads of a key row
//! touch `SPLIT` 16-byte chunks in disjoint banks (conflict-free broadcasts).
//!
//! # Softmax
//! Online softmax (Milakov & Gimelshein, "Online normalizer calculation for softmax", 2018, as
//! used by FlashAttention, Dao et al. 2022), in base 2: q is pre-scaled by `log2(e)/√HD`
//! ([`score_scale`]), and for each group of [`ATTN_KC`] keys the running max `m`, normalizer
//! `l` and output `o` are rescaled once by `2^(m_old − m_new)`.
//!
//! # Masking
//! Only keys `< len` are staged; the rest of a tile is zero-filled and their scores are −∞, so
//! padded keys contribute exactly nothing even if their K/V rows hold NaN. Query rows `≥ len`
//! (padding) are written as zeros; a query block entirely in the padding skips the math.
//! `len` is clamped to T; `len = 0` (which the launcher rejects) would give zero rows, not NaN.

use super::{Exec, chunk_aligned, fma, load_chunk, load_partial, store4};
use crate::math;
use crate::types::Element;

/// Head dimensions the attention kernels are built for (columns per head).
pub const ATTN_HEAD_DIMS: [u32; 3] = [32, 64, 128];
/// Query rows per CTA (both kernels).
pub const ATTN_BQ: u32 = 64;
/// Keys per online-softmax rescale (CUDA-core kernel).
pub const ATTN_KC: usize = 16;
/// Most 4-element chunks of a head row one thread holds (the unrolled loops list 0..8).
const MAX_CHUNKS: usize = 8;

/// `log2(e)/√head_dim`: the factor on a raw score `q·k` that gives the exponent of 2 in the
/// softmax, `e^(q·k/√hd) = 2^(q·k·log2(e)/√hd)`. 0 for a head dimension not in
/// [`ATTN_HEAD_DIMS`].
pub const fn score_scale(head_dim: u32) -> f32 {
    // 1/√hd in f64 (1/√32 = (1/√2)/4, 1/√128 = (1/√2)/8), then one rounding.
    let inv_sqrt = match head_dim {
        32 => core::f64::consts::FRAC_1_SQRT_2 / 4.0,
        64 => 0.125,
        128 => core::f64::consts::FRAC_1_SQRT_2 / 8.0,
        _ => 0.0,
    };
    (core::f64::consts::LOG2_E * inv_sqrt) as f32
}

/// How to launch an attention kernel: block size and dynamic shared memory. The grid is
/// [`attn_ctas`] for every kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnLaunch {
    /// Threads per CTA (1-D).
    pub threads: u32,
    /// Dynamic shared memory per CTA, bytes.
    pub smem_bytes: u32,
}

/// Compile-time shape of the CUDA-core kernel for head dimension `HD`.
pub struct SimtShape<const HD: u32>;

impl<const HD: u32> SimtShape<HD> {
    /// Threads per query row.
    pub const SPLIT: u32 = if HD <= 64 { 2 } else { HD / 32 };
    /// Threads per CTA.
    pub const THREADS: u32 = ATTN_BQ * Self::SPLIT;
    /// Keys per shared-memory tile.
    pub const BK: u32 = if HD <= 64 { 64 } else { 32 };
    /// 4-element chunks of the head row per thread.
    const CHUNKS: usize = (HD / 4 / Self::SPLIT) as usize;
    /// Chunks of a K (or V) tile each thread stages.
    const STAGE: usize = (Self::BK * HD / 4 / Self::THREADS) as usize;
    /// Dynamic shared memory per CTA, bytes: `K_s` and `V_s`, f32.
    pub const SMEM_BYTES: u32 = 2 * Self::BK * HD * 4;
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
        assert!(Self::SPLIT == 2 || Self::SPLIT == 4, "one or two shuffles");
        assert!(
            Self::CHUNKS <= MAX_CHUNKS && Self::CHUNKS * 4 * Self::SPLIT as usize == HD as usize
        );
        assert!(
            Self::STAGE <= 8
                && Self::STAGE * Self::THREADS as usize * 4 == (Self::BK * HD) as usize
        );
        assert!((Self::BK as usize).is_multiple_of(ATTN_KC));
    };
}

/// The CUDA-core kernel's launch for `head_dim`, `None` unless it is in [`ATTN_HEAD_DIMS`].
pub const fn simt_launch(head_dim: u32) -> Option<AttnLaunch> {
    match head_dim {
        32 => Some(SimtShape::<32>::LAUNCH),
        64 => Some(SimtShape::<64>::LAUNCH),
        128 => Some(SimtShape::<128>::LAUNCH),
        _ => None,
    }
}

/// f32x4 in shared memory, 16-byte aligned (`ld.shared.v4.f32`).
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct F4([f32; 4]);

/// Arguments of [`attention`] and [`super::attention_mma::attention_mma`].
#[derive(Clone, Copy)]
pub struct AttnArgs<E> {
    /// Fused QKV projection output, `[B·T, 3·H·HD]` row-major: columns `[Q | K | V]`, each
    /// `H` heads of `HD` contiguous columns.
    pub qkv: *const E,
    /// Sequence lengths, `[B]`, each in `1..=T`.
    pub lengths: *const u32,
    /// B.
    pub batch: u32,
    /// T.
    pub seq_len: u32,
    /// H.
    pub heads: u32,
    /// Output, `[B·T, H·HD]` row-major, heads concatenated.
    pub out: *mut E,
}

crate::param_list! {
    /// The parameters of the attention entry points (one per storage type and head dimension):
    /// [`AttnArgs`] and an early-exit flag.
    #[derive(Clone, Copy)]
    pub struct AttnKernelArgs<E> {
        /// [`AttnArgs::qkv`].
        pub qkv: *const E,
        /// [`AttnArgs::lengths`].
        pub lengths: *const u32,
        /// [`AttnArgs::batch`].
        pub batch: u32,
        /// [`AttnArgs::seq_len`].
        pub seq_len: u32,
        /// [`AttnArgs::heads`].
        pub heads: u32,
        /// [`AttnArgs::out`].
        pub out: *mut E,
        /// Null, or a `u32` the entry point reads first: it returns at once when that is
        /// nonzero (an early exit decided by an earlier kernel of the stream).
        pub skip_if: *const u32,
    }
}

impl<E> From<AttnKernelArgs<E>> for AttnArgs<E> {
    #[inline(always)]
    fn from(p: AttnKernelArgs<E>) -> Self {
        AttnArgs {
            qkv: p.qkv,
            lengths: p.lengths,
            batch: p.batch,
            seq_len: p.seq_len,
            heads: p.heads,
            out: p.out,
        }
    }
}

/// Number of CTAs for a launch: `B · H · ceil(T / ATTN_BQ)` (block index = `(b·H + h)·QB + qb`).
#[inline(always)]
pub const fn attn_ctas(batch: u64, heads: u64, seq_len: u64) -> u64 {
    batch * heads * seq_len.div_ceil(ATTN_BQ as u64)
}

/// This CTA's place in the grid of [`attn_ctas`].
#[derive(Clone, Copy)]
pub(super) struct AttnBlock {
    /// Sequence b.
    pub b: u32,
    /// Head h.
    pub h: u32,
    /// First query row of the block.
    pub q0: u32,
    /// `len_b` clamped to T.
    pub len: u32,
}

/// Decodes the block index; `None` for a CTA with nothing to do (an empty launch or a block
/// index beyond the batch).
///
/// # Safety
/// `a.lengths` valid for `a.batch` values.
#[inline(always)]
pub(super) unsafe fn attn_block<E, X: Exec>(a: &AttnArgs<E>) -> Option<AttnBlock> {
    let t_len = a.seq_len;
    if t_len == 0 || a.heads == 0 {
        return None;
    }
    let q_blocks = t_len.div_ceil(ATTN_BQ);
    let blk = X::block_idx_x();
    let qb = blk % q_blocks;
    let h = (blk / q_blocks) % a.heads;
    let b = blk / q_blocks / a.heads;
    if b >= a.batch {
        return None;
    }
    let len = (*a.lengths.add(b as usize)).min(t_len);
    Some(AttnBlock {
        b,
        h,
        q0: qb * ATTN_BQ,
        len,
    })
}

/// The CUDA-core attention kernel body for head dimension `HD`; see the
/// [module docs](self). Launch: grid [`attn_ctas`], block [`SimtShape::THREADS`],
/// [`SimtShape::SMEM_BYTES`] of dynamic shared memory.
///
/// # Safety
/// Pointers valid for the extents in [`AttnArgs`] with head dimension `HD`; the launch shape
/// above.
#[inline(always)]
pub unsafe fn attention<E: Element, X: Exec, const HD: u32>(a: &AttnArgs<E>) {
    #[allow(clippy::let_unit_value)]
    let () = SimtShape::<HD>::CHECK;
    let split = SimtShape::<HD>::SPLIT;
    let threads = SimtShape::<HD>::THREADS;
    let bk = SimtShape::<HD>::BK;
    let chunks = SimtShape::<HD>::CHUNKS;
    let stage = SimtShape::<HD>::STAGE;
    // Chunks per head row.
    let row_chunks = HD / 4;

    let Some(AttnBlock { b, h, q0, len }) = attn_block::<E, X>(a) else {
        return;
    };
    let t_len = a.seq_len;
    let tid = X::thread_idx_x();
    let s = tid % split;
    let qi = q0 + tid / split;
    let d = a.heads * HD;
    let ld = 3 * d as usize;
    let vector = chunk_aligned(a.qkv) && chunk_aligned(a.out as *const E);
    let row0 = b as usize * t_len as usize;
    // This thread's chunks of a head row start at column 4·(SPLIT·i + s).
    let col = |i: usize| 4 * (split as usize * i + s as usize);
    // Only dereferenced when qi < T.
    let out_row = a
        .out
        .wrapping_add((row0 + qi as usize) * d as usize + (h * HD) as usize);

    if q0 >= len {
        // The whole query block is padding (uniform per CTA, so no barrier is skipped unevenly).
        if qi < t_len {
            unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
                if i < chunks {
                    store4(out_row.add(col(i)), [0.0; 4], vector, 4);
                }
            });
        }
        return;
    }

    let q_valid = qi < len;
    let q_scale = score_scale(HD);
    let mut q = [[0.0f32; 4]; MAX_CHUNKS];
    if q_valid {
        let src = a.qkv.add((row0 + qi as usize) * ld + (h * HD) as usize);
        unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
            if i < chunks {
                let v = if vector {
                    load_chunk(src.add(col(i)))
                } else {
                    load_partial(src.add(col(i)), 4)
                };
                for e in 0..4 {
                    q[i][e] = v[e] * q_scale;
                }
            }
        });
    }

    let k_s = X::dynamic_shared_base() as *mut F4;
    let v_s = k_s.add((bk * row_chunks) as usize);
    let mut o = [[0.0f32; 4]; MAX_CHUNKS];
    let mut m = f32::NEG_INFINITY;
    let mut l = 0.0f32;

    let mut kt = 0;
    while kt < len {
        // Stage keys kt..kt+BK: chunk c of the tile is key c/(HD/4), columns 4·(c%(HD/4)).
        X::sync_threads();
        // Loads first, then stores, unrolled: a thread's loads are in flight together.
        let mut kv = [[0.0f32; 4]; 8];
        let mut vv = [[0.0f32; 4]; 8];
        unrolled!(r in [0, 1, 2, 3, 4, 5, 6, 7] {
            if r < stage {
                let c = tid + r as u32 * threads;
                let key = kt + c / row_chunks;
                if key < len {
                    let src = a.qkv.add(
                        (row0 + key as usize) * ld + (h * HD + 4 * (c % row_chunks)) as usize,
                    );
                    if vector {
                        kv[r] = load_chunk(src.add(d as usize));
                        vv[r] = load_chunk(src.add(2 * d as usize));
                    } else {
                        kv[r] = load_partial(src.add(d as usize), 4);
                        vv[r] = load_partial(src.add(2 * d as usize), 4);
                    }
                }
            }
        });
        unrolled!(r in [0, 1, 2, 3, 4, 5, 6, 7] {
            if r < stage {
                let c = (tid + r as u32 * threads) as usize;
                *k_s.add(c) = F4(kv[r]);
                *v_s.add(c) = F4(vv[r]);
            }
        });
        X::sync_threads();

        let n_valid = (len - kt).min(bk);
        let mut k0 = 0;
        while k0 < n_valid {
            const { assert!(ATTN_KC == 16, "the unrolled loops below list 16 keys") };
            let mut sc = [0.0f32; ATTN_KC];
            unrolled!(j in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
                let krow = k_s.add((k0 as usize + j) * row_chunks as usize);
                let mut dot = 0.0f32;
                unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
                    if i < chunks {
                        let kc = (*krow.add(split as usize * i + s as usize)).0;
                        for e in 0..4 {
                            dot = fma(q[i][e], kc[e], dot);
                        }
                    }
                });
                dot += X::shfl_xor_f32(dot, 1);
                if split > 2 {
                    dot += X::shfl_xor_f32(dot, 2);
                }
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
                if i < chunks {
                    o[i] = o[i].map(|x| x * corr);
                }
            });
            unrolled!(j in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
                let p = math::exp2(sc[j] - m_new);
                l += p;
                let vrow = v_s.add((k0 as usize + j) * row_chunks as usize);
                unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
                    if i < chunks {
                        let vc = (*vrow.add(split as usize * i + s as usize)).0;
                        for e in 0..4 {
                            o[i][e] = fma(p, vc[e], o[i][e]);
                        }
                    }
                });
            });
            m = m_new;
            k0 += ATTN_KC as u32;
        }
        kt += bk;
    }

    if qi < t_len {
        let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
        unrolled!(i in [0, 1, 2, 3, 4, 5, 6, 7] {
            if i < chunks {
                let mut y = [0.0f32; 4];
                if q_valid {
                    for e in 0..4 {
                        y[e] = o[i][e] * inv;
                    }
                }
                store4(out_row.add(col(i)), y, vector, 4);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_scale_is_log2e_over_sqrt_head_dim() {
        for hd in ATTN_HEAD_DIMS {
            let want = core::f64::consts::LOG2_E / (hd as f64).sqrt();
            assert!(
                ((score_scale(hd) as f64) - want).abs() < 1e-7 * want,
                "{hd}"
            );
        }
        assert_eq!(score_scale(48), 0.0);
    }

    #[test]
    fn simt_shapes_cover_every_head_dim() {
        for hd in ATTN_HEAD_DIMS {
            let l = simt_launch(hd).unwrap();
            assert!(l.threads.is_multiple_of(32) && l.threads <= 1024, "{hd}");
            assert!(l.smem_bytes <= 48 * 1024, "{hd}: {l:?}");
        }
        assert_eq!(simt_launch(48), None);
        assert_eq!(simt_launch(64).unwrap().threads, 128);
    }
}
