//! f64 references of the BERT encoder's non-GEMM kernels (`fused_gemm::bert`): embeddings +
//! LayerNorm, masked multi-head attention, masked mean pooling + L2 normalization.
//!
//! Batches are right-padded `[B, T]`: sequence `b` holds its tokens at positions
//! `0..lengths[b]`, activations are `[B·T, d]` row-major with row `b·T + t`.

/// The product of `dims`, panicking with `what` when it overflows `usize` (these references
/// panic on bad shapes; wrapping would let a bad shape pass the length checks).
fn product(what: &str, dims: &[usize]) -> usize {
    dims.iter()
        .try_fold(1usize, |p, &d| p.checked_mul(d))
        .unwrap_or_else(|| panic!("{what}: the shape {dims:?} overflows usize"))
}

/// LayerNorm of one row: `(x − μ)/√(σ² + ε)·γ + β`, μ and the biased σ² over the row.
///
/// The moments are accumulated with Welford's update (Welford 1962), so a constant row has
/// σ² = 0 and x − μ = 0 exactly and its output is exactly β.
///
/// # Panics
/// If `gamma` or `beta` is not as long as `x`.
pub fn layer_norm_row(x: &[f64], gamma: &[f64], beta: &[f64], eps: f64) -> Vec<f64> {
    assert_eq!(gamma.len(), x.len(), "gamma must have one value per column");
    assert_eq!(beta.len(), x.len(), "beta must have one value per column");
    let (mut n, mut mean, mut m2) = (0.0f64, 0.0f64, 0.0f64);
    for &v in x {
        n += 1.0;
        let d = v - mean;
        mean += d / n;
        m2 += d * (v - mean);
    }
    let rstd = 1.0 / (m2 / n + eps).sqrt();
    x.iter()
        .zip(gamma.iter().zip(beta))
        .map(|(&v, (&g, &b))| (v - mean) * rstd * g + b)
        .collect()
}

/// BERT's embedding tables and LayerNorm parameters, row-major, hidden size `hidden`.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddingTables<'a> {
    /// `[vocab, d]`.
    pub word: &'a [f64],
    /// `[max_positions, d]`.
    pub position: &'a [f64],
    /// `[types, d]`.
    pub token_type: &'a [f64],
    /// γ, `[d]`.
    pub gamma: &'a [f64],
    /// β, `[d]`.
    pub beta: &'a [f64],
    /// d.
    pub hidden: usize,
    /// LayerNorm ε.
    pub eps: f64,
}

/// `LayerNorm(word[ids[r]] + position[r % T] + token_type[types[r]])` for every row `r` of a
/// `[B, T]` batch (`types = None` means all 0). Returns `[B·T, d]`.
///
/// # Panics
/// If an id, type or position is beyond its table, or `ids.len()` is not a multiple of T, or
/// `ids.len()·d` overflows `usize`.
pub fn embeddings(
    ids: &[u32],
    token_types: Option<&[u32]>,
    seq_len: usize,
    t: &EmbeddingTables<'_>,
) -> Vec<f64> {
    assert!(
        seq_len > 0 && ids.len().is_multiple_of(seq_len),
        "ids must be [B, T]"
    );
    let d = t.hidden;
    let row = |table: &[f64], i: usize| -> Vec<f64> {
        let end = i.checked_add(1).and_then(|r| r.checked_mul(d));
        assert!(
            end.is_some_and(|e| e <= table.len()),
            "row {i} is beyond its table"
        );
        table[i * d..(i + 1) * d].to_vec()
    };
    let mut out = Vec::with_capacity(product("embeddings", &[ids.len(), d]));
    for (r, &id) in ids.iter().enumerate() {
        let ty = token_types.map_or(0, |tt| tt[r]) as usize;
        let w = row(t.word, id as usize);
        let p = row(t.position, r % seq_len);
        let y = row(t.token_type, ty);
        let x: Vec<f64> = (0..d).map(|c| w[c] + p[c] + y[c]).collect();
        out.extend(layer_norm_row(&x, t.gamma, t.beta, t.eps));
    }
    out
}

/// Multi-head self-attention with a key padding mask. `qkv` is `[B·T, 3·heads·head_dim]`
/// (columns `[Q | K | V]`, heads of `head_dim` contiguous columns within each). For query rows
/// `i < len_b`: `out[b·T + i, h·hd..] = Σ_{j < len_b} softmax_j(q_i·k_j/√hd)·v_j` (max-subtracted
/// softmax); rows `i ≥ len_b` are 0. Keys `j ≥ len_b` are never read. Returns
/// `[B·T, heads·head_dim]`.
///
/// # Panics
/// If `qkv` does not hold `lengths.len()·T` rows, a length is not in `1..=T`, or the shape
/// overflows `usize`.
pub fn attention(
    qkv: &[f64],
    lengths: &[u32],
    seq_len: usize,
    heads: usize,
    head_dim: usize,
) -> Vec<f64> {
    let d = product("heads·head_dim", &[heads, head_dim]);
    let rows = product("B·T", &[lengths.len(), seq_len]);
    assert_eq!(
        qkv.len(),
        product("qkv", &[rows, 3, d]),
        "qkv must be [B·T, 3·heads·head_dim]"
    );
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut out = vec![0.0; rows * d];
    for (b, &len) in lengths.iter().enumerate() {
        let len = len as usize;
        assert!(
            (1..=seq_len).contains(&len),
            "length {len} not in 1..={seq_len}"
        );
        for h in 0..heads {
            let at = |t: usize, part: usize| {
                let s = (b * seq_len + t) * 3 * d + part * d + h * head_dim;
                &qkv[s..s + head_dim]
            };
            for i in 0..len {
                let q = at(i, 0);
                let scores: Vec<f64> = (0..len)
                    .map(|j| q.iter().zip(at(j, 1)).map(|(a, k)| a * k).sum::<f64>() * scale)
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let l: f64 = p.iter().sum();
                let o = &mut out[(b * seq_len + i) * d + h * head_dim..][..head_dim];
                for (j, pj) in p.iter().enumerate() {
                    for (oc, v) in o.iter_mut().zip(at(j, 2)) {
                        *oc += pj / l * v;
                    }
                }
            }
        }
    }
    out
}

/// Masked mean pooling + L2 normalization (sentence-transformers' `Pooling(mean)` then
/// `Normalize`): `out[b] = m_b / max(‖m_b‖₂, 1e-12)`, `m_b` the mean of rows `b·T + t`,
/// `t < len_b`, of `hidden` (`[B·T, d]`). Padded rows are never read. Returns `[B, d]`.
///
/// # Panics
/// If `hidden` does not hold `lengths.len()·T` rows, a length is not in `1..=T`, or the shape
/// overflows `usize`.
pub fn mean_pool_l2(hidden: &[f64], lengths: &[u32], seq_len: usize, d: usize) -> Vec<f64> {
    assert_eq!(
        hidden.len(),
        product("hidden", &[lengths.len(), seq_len, d]),
        "hidden must be [B·T, d]"
    );
    let mut out = Vec::with_capacity(product("pooled", &[lengths.len(), d]));
    for (b, &len) in lengths.iter().enumerate() {
        let len = len as usize;
        assert!(
            (1..=seq_len).contains(&len),
            "length {len} not in 1..={seq_len}"
        );
        let mut m = vec![0.0; d];
        for t in 0..len {
            let row = &hidden[(b * seq_len + t) * d..][..d];
            for (mc, x) in m.iter_mut().zip(row) {
                *mc += x;
            }
        }
        m.iter_mut().for_each(|x| *x /= len as f64);
        let norm = m.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
        out.extend(m.iter().map(|x| x / norm));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // A row narrower than any block: N = 3, x = [1, 2, 3], eps 1e-5.
    #[test]
    fn layer_norm_of_three_values() {
        let y = layer_norm_row(&[1.0, 2.0, 3.0], &[1.0; 3], &[0.0; 3], 1e-5);
        let want = [-1.224_735_7, 0.0, 1.224_735_7];
        for (g, w) in y.iter().zip(want) {
            assert!((g - w).abs() < 1e-7, "{y:?}");
        }
    }

    // Constant rows (also where an f32 sum would overflow) give exactly β; a NaN poisons only
    // its own row.
    #[test]
    fn constant_rows_give_beta_and_nan_stays_in_its_row() {
        let beta: Vec<f64> = (0..384).map(|i| i as f64 * 0.25 - 7.0).collect();
        let gamma = vec![1.5; 384];
        for c in [1234.0, 0.0, 8.5e37, -3.0e38] {
            assert_eq!(
                layer_norm_row(&[c; 384], &gamma, &beta, 1e-12),
                beta,
                "c = {c}"
            );
        }
        let (d, vocab) = (4, 3);
        let mut word = vec![1.0; vocab * d];
        word[d + 2] = f64::NAN; // row 1
        let t = EmbeddingTables {
            word: &word,
            position: &[0.0; 8],
            token_type: &[0.0; 4],
            gamma: &[1.0; 4],
            beta: &[0.5, -0.5, 2.0, 3.0],
            hidden: d,
            eps: 1e-12,
        };
        let y = embeddings(&[0, 1, 2, 0], None, 2, &t);
        for (r, row) in y.chunks(d).enumerate() {
            if r == 1 {
                assert!(row.iter().all(|v| v.is_nan()), "{row:?}");
            } else {
                assert_eq!(row, t.beta, "row {r}");
            }
        }
    }

    #[test]
    fn embeddings_sum_three_tables_by_hand() {
        // Row 0: word[1] + pos[0] + type[1] = [0, 3] + [0, 1] + [0, 0] = [0, 4] → mean 2, σ² 4 → [−1, 1].
        // Row 1: word[0] + pos[1] + type[0] = [1, 0] + [1, 1] + [0, 0] = [2, 1] → [1, −1].
        // Then γ = [2, 1], β = [0, 10].
        let t = EmbeddingTables {
            word: &[1.0, 0.0, 0.0, 3.0],
            position: &[0.0, 1.0, 1.0, 1.0],
            token_type: &[0.0, 0.0, 0.0, 0.0],
            gamma: &[2.0, 1.0],
            beta: &[0.0, 10.0],
            hidden: 2,
            eps: 0.0,
        };
        let y = embeddings(&[1, 0], Some(&[1, 0]), 2, &t);
        assert_eq!(y, vec![-2.0, 11.0, 2.0, 9.0]);
    }

    #[test]
    fn attention_by_hand_ignores_padded_keys() {
        // heads 2, head_dim 2, T = 3, one sequence of length 2. Head 0: q0 = [√2·ln 3, 0],
        // k0 = [1, 0], k1 = [0, 1] → scores [ln 3, 0] → softmax [3/4, 1/4]; v0 = [4, 0],
        // v1 = [0, 8] → [3, 2]. Head 1: q = 0 → uniform → mean of v = [4, 6]. The padded key
        // (t = 2) holds NaN and huge values and must not matter.
        let a = 2f64.sqrt() * 3f64.ln();
        #[rustfmt::skip]
        let qkv = [
            // q h0      q h1      k h0      k h1      v h0      v h1
            a, 0.0,   0.0, 0.0,  1.0, 0.0,  1.0, 1.0,  4.0, 0.0,  2.0, 4.0,
            0.0, 0.0, 0.0, 0.0,  0.0, 1.0,  5.0, 5.0,  0.0, 8.0,  6.0, 8.0,
            f64::NAN, 1.0, 1.0, 1.0, 1e300, f64::NAN, 1e300, 0.0, f64::NAN, 1e300, f64::NAN, 0.0,
        ];
        let y = attention(&qkv, &[2], 3, 2, 2);
        let want_row0 = [3.0, 2.0, 4.0, 6.0];
        for (g, w) in y[..4].iter().zip(want_row0) {
            assert!((g - w).abs() < 1e-12, "{y:?}");
        }
        // Row 1: q = 0 in both heads → means of v: [2, 4] and [4, 6].
        for (g, w) in y[4..8].iter().zip([2.0, 4.0, 4.0, 6.0]) {
            assert!((g - w).abs() < 1e-12, "{y:?}");
        }
        assert_eq!(&y[8..], &[0.0; 4], "padded query row");
    }

    // A wrapped size (3·2^65 mod 2^64 = 0) matched the empty buffer and indexed past it.
    #[test]
    #[should_panic(expected = "qkv: the shape [8589934592, 3, 4294967296] overflows usize")]
    fn attention_shape_overflow_is_named() {
        attention(&[], &[1], 1 << 33, 1 << 32, 1);
    }

    #[test]
    #[should_panic(expected = "hidden: the shape [1, 4294967296, 4294967296] overflows usize")]
    fn mean_pool_shape_overflow_is_named() {
        mean_pool_l2(&[], &[1], 1 << 32, 1 << 32);
    }

    #[test]
    fn mean_pool_by_hand() {
        // Two sequences, T = 3, d = 2: [[1, 2], [3, 4], pad] → mean [2, 3] → /√13;
        // [[0, 0], pad, pad] → 0 (the ε guard, not NaN).
        let n = f64::NAN;
        let h = [1.0, 2.0, 3.0, 4.0, n, n, 0.0, 0.0, n, n, n, n];
        let y = mean_pool_l2(&h, &[2, 1], 3, 2);
        let s = 13f64.sqrt();
        assert!(
            (y[0] - 2.0 / s).abs() < 1e-15 && (y[1] - 3.0 / s).abs() < 1e-15,
            "{y:?}"
        );
        assert_eq!(&y[2..], &[0.0, 0.0]);
    }
}
