//! BERT embeddings: `LayerNorm(word[id] + position[t] + token_type[type])` per token.
//!
//! One warp per token row, [`EMBED_ROWS_PER_CTA`] rows per CTA. Lane `l` holds the row's
//! chunks `l + 32·j` (4 elements each, `j < EMBED_MAX_CHUNKS`) in registers; the loop over `j` is
//! unrolled with a bound check, so the row never goes through local memory. Statistics are
//! Welford/Chan [`Moments`]: each lane pushes only its in-bounds elements (padded lanes and the
//! tail of a partial chunk never enter the variance), then the warp merges them
//! by butterfly shuffles, always as `lower lane ⊕ upper lane`, so every lane ends with
//! bit-identical statistics. A constant row has mean = the constant and M2 = 0 exactly, so its
//! output is exactly β, even where a plain f32 sum of the row would overflow.

use super::{Exec, chunk_aligned, fma, load4, store4};
use crate::epilogue::stages::Moments;
use crate::math;
use crate::types::Element;

/// Token rows (warps) per CTA; the CTA has `32 · EMBED_ROWS_PER_CTA` threads.
pub const EMBED_ROWS_PER_CTA: u32 = 4;
/// 4-element chunks each lane can hold.
pub const EMBED_MAX_CHUNKS: usize = 8;
/// Largest hidden size the kernel supports: 32 lanes × 8 chunks × 4 = 1024 (BERT-large).
pub const EMBED_MAX_HIDDEN: u32 = 32 * EMBED_MAX_CHUNKS as u32 * 4;

crate::param_list! {
    /// Arguments of [`embed_layer_norm`], and the parameters of its entry points (one per storage
    /// type). Tables are row-major with `hidden` columns.
    #[derive(Clone, Copy)]
    pub struct EmbedArgs<E> {
        /// Token ids, `[B·T]` (row-major `[B, T]`).
        pub ids: *const u32,
        /// Token type ids, `[B·T]`, or null for all zeros.
        pub token_types: *const u32,
        /// `B·T`.
        pub rows: u32,
        /// T: the position of row `r` is `r % T`.
        pub seq_len: u32,
        /// Hidden size d, `1..=EMBED_MAX_HIDDEN`.
        pub hidden: u32,
        /// Word embeddings, `[vocab, d]`.
        pub word: *const E,
        /// Rows of `word`.
        pub vocab: u32,
        /// Position embeddings, `[positions, d]`.
        pub position: *const E,
        /// Rows of `position`.
        pub positions: u32,
        /// Token type embeddings, `[types, d]`.
        pub token_type: *const E,
        /// Rows of `token_type`.
        pub types: u32,
        /// LayerNorm scale γ, `[d]`.
        pub gamma: *const E,
        /// LayerNorm shift β, `[d]`.
        pub beta: *const E,
        /// LayerNorm ε, added to the (biased) variance.
        pub eps: f32,
        /// Output, `[B·T, d]`.
        pub out: *mut E,
    }
}

/// `out[r] = (x − μ)/√(σ² + ε)·γ + β` with `x = word[ids[r]] + position[r % T] +
/// token_type[types[r]]` summed in f32, μ and σ² (biased) over the row's d values (BERT's
/// `BertEmbeddings`; dropout is the identity at inference). Launch: grid
/// `ceil(rows / EMBED_ROWS_PER_CTA)`, block `32 · EMBED_ROWS_PER_CTA`, no shared memory.
///
/// A row whose id, type or position falls outside its table is written as NaN (nothing is read
/// out of bounds); the host launcher rejects such inputs before launching.
///
/// # Safety
/// Every pointer must be valid for the extents given in [`EmbedArgs`], `hidden` must be at most
/// [`EMBED_MAX_HIDDEN`], and the launch shape must be the one above.
#[inline(always)]
pub unsafe fn embed_layer_norm<E: Element, X: Exec>(a: &EmbedArgs<E>) {
    let row = X::block_idx_x() * EMBED_ROWS_PER_CTA + X::thread_idx_x() / 32;
    // Whole warps leave together: nothing below synchronizes across warps.
    if row >= a.rows || a.hidden > EMBED_MAX_HIDDEN || a.seq_len == 0 {
        return;
    }
    let lane = X::thread_idx_x() % 32;
    let d = a.hidden;
    let id = *a.ids.add(row as usize);
    let ty = if a.token_types.is_null() {
        0
    } else {
        *a.token_types.add(row as usize)
    };
    let t = row % a.seq_len;
    let out = a.out.add(row as usize * d as usize);
    let vector = d.is_multiple_of(4)
        && chunk_aligned(a.word)
        && chunk_aligned(a.position)
        && chunk_aligned(a.token_type)
        && chunk_aligned(a.gamma)
        && chunk_aligned(a.beta)
        && chunk_aligned(a.out as *const E);
    if id >= a.vocab || ty >= a.types || t >= a.positions {
        for j in 0..EMBED_MAX_CHUNKS {
            let c = (lane + 32 * j as u32) * 4;
            if c < d {
                store4(out.add(c as usize), [f32::NAN; 4], vector, d - c);
            }
        }
        return;
    }
    let word = a.word.add(id as usize * d as usize);
    let position = a.position.add(t as usize * d as usize);
    let token_type = a.token_type.add(ty as usize * d as usize);

    let mut x = [[0.0f32; 4]; EMBED_MAX_CHUNKS];
    let mut st = Moments::default();
    const {
        assert!(
            EMBED_MAX_CHUNKS == 8,
            "the unrolled loops below list 8 chunks"
        )
    };
    unrolled!(j in [0, 1, 2, 3, 4, 5, 6, 7] {
        let c = (lane + 32 * j as u32) * 4;
        if c < d {
            let n = d - c;
            let w = load4(word.add(c as usize), vector, n);
            let p = load4(position.add(c as usize), vector, n);
            let y = load4(token_type.add(c as usize), vector, n);
            for e in 0..4 {
                x[j][e] = w[e] + p[e] + y[e];
                if (e as u32) < n {
                    st.push(x[j][e]);
                }
            }
        }
    });
    let mut m = 16;
    while m > 0 {
        let o = Moments {
            n: X::shfl_xor_f32(st.n, m),
            mean: X::shfl_xor_f32(st.mean, m),
            m2: X::shfl_xor_f32(st.m2, m),
        };
        st = if lane & m == 0 {
            st.merge(o)
        } else {
            o.merge(st)
        };
        m >>= 1;
    }
    let rstd = math::rsqrt(st.m2 / st.n + a.eps);
    unrolled!(j in [0, 1, 2, 3, 4, 5, 6, 7] {
        let c = (lane + 32 * j as u32) * 4;
        if c < d {
            let n = d - c;
            let g = load4(a.gamma.add(c as usize), vector, n);
            let b = load4(a.beta.add(c as usize), vector, n);
            let mut y = [0.0f32; 4];
            for e in 0..4 {
                y[e] = fma((x[j][e] - st.mean) * rstd, g[e], b[e]);
            }
            store4(out.add(c as usize), y, vector, n);
        }
    });
}
