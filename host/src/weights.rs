//! Host-side weight layouts for the fused kernels' pairwise stages.
//!
//! A fused epilogue sees the output tile in registers, each thread holding pairs of adjacent
//! columns `(2i, 2i + 1)` (`fused_gemm_device::epilogue`). SwiGLU/GeGLU and RoPE combine two
//! output columns that checkpoints place far apart:
//!
//! - **SwiGLU/GeGLU** (Shazeer 2020, "GLU Variants Improve Transformer"): `out = act(x·W_gᵀ) ⊙
//!   (x·W_uᵀ)`, gate and up projections N×K each (or one `[gate | up]` 2N×K `gate_up_proj`).
//!   Interleaving their rows, `[g0, u0, g1, u1, …]`, puts gate column i next to up column i:
//!   [`interleave_gate_up`], [`interleave_gate_up_concat`], [`interleave_gate_up_bias`].
//! - **RoPE** (Su et al. 2021, "RoFormer"): Hugging Face checkpoints of LLaMA-family models
//!   rotate pairs `(i, i + d/2)` of each head (the half-split layout, `rotate_half`).
//!   Permuting the rows of the Q and K projections (and biases) per head so that row i moves to
//!   2i and row i + d/2 to 2i + 1 makes the same rotation act on adjacent columns:
//!   [`rope_weight_to_interleaved`], [`rope_bias_to_interleaved`]. Q and K get the same
//!   permutation, so attention scores `q·k` are unchanged; V and the output projection are
//!   untouched.
//!
//! Weights are PyTorch `Linear` weights: `out_features × in_features` (N×K) row-major, so an
//! output column is a weight *row* and these functions permute rows (a bias is the
//! `cols = 1` case). For a weight stored K×N (output features as columns) apply the same
//! permutation to columns with [`permute_cols`]. Every function is generic over the element
//! type (f32, `half::f16`, `half::bf16`, anything `Copy`), moves elements without arithmetic,
//! and returns a [`WeightLayoutError`] on a bad shape (one whose element count overflows
//! `usize` included) instead of panicking. Each forward transform has an inverse
//! (`deinterleave_*`, `*_to_half_split`).

/// A weight or bias whose shape does not fit the requested layout change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WeightLayoutError {
    /// A buffer's length does not match its shape.
    #[error("`{what}` has {actual} elements, expected {expected}")]
    Length {
        /// The buffer.
        what: &'static str,
        /// Length its shape implies.
        expected: usize,
        /// Length given.
        actual: usize,
    },
    /// A dimension that must be positive is 0.
    #[error("{what} must be at least 1")]
    ZeroDim {
        /// The dimension.
        what: &'static str,
    },
    /// A block split into two halves must have an even number of rows.
    #[error("block of {block} rows cannot be split into two halves (odd)")]
    OddBlock {
        /// The block size.
        block: usize,
    },
    /// The rows do not divide into whole blocks (heads).
    #[error("{rows} rows are not a whole number of blocks of {block}")]
    RowsNotMultipleOfBlock {
        /// Rows of the matrix.
        rows: usize,
        /// Rows per block (head_dim, or 2N for gate/up).
        block: usize,
    },
    /// RoPE rotates pairs, so the rotary dimension must be even.
    #[error("rotary dimension {rotary_dim} is odd: RoPE rotates pairs of columns")]
    OddRotaryDim {
        /// The dimension given.
        rotary_dim: usize,
    },
    /// The rotary dimension is wider than a head.
    #[error("rotary dimension {rotary_dim} exceeds head_dim {head_dim}")]
    RotaryDimTooLarge {
        /// The rotary dimension.
        rotary_dim: usize,
        /// The head dimension.
        head_dim: usize,
    },
    /// The index list is not a permutation of `0..len`.
    #[error("not a permutation of 0..{len}: {reason}")]
    NotAPermutation {
        /// Its length.
        len: usize,
        /// What is wrong (an index out of range or repeated).
        reason: String,
    },
    /// A shape whose element count overflows `usize`, or an index table that cannot be
    /// allocated.
    #[error("{what} of {rows}×{cols} elements is too large for host memory")]
    TooLarge {
        /// The buffer.
        what: &'static str,
        /// Rows of its shape.
        rows: usize,
        /// Columns of its shape (1 for an index table).
        cols: usize,
    },
}

/// `Result` with [`WeightLayoutError`].
pub type Result<T, E = WeightLayoutError> = std::result::Result<T, E>;

fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(WeightLayoutError::Length {
            what,
            expected,
            actual,
        })
    }
}

/// `rows · cols`, or [`WeightLayoutError::TooLarge`] when it overflows.
fn elements(what: &'static str, rows: usize, cols: usize) -> Result<usize> {
    rows.checked_mul(cols)
        .ok_or(WeightLayoutError::TooLarge { what, rows, cols })
}

/// Checks that `actual` elements hold a `rows × cols` shape.
fn check_shape(what: &'static str, rows: usize, cols: usize, actual: usize) -> Result<()> {
    check_len(what, elements(what, rows, cols)?, actual)
}

/// The permutation `new ↦ f(new)` of `0..rows`, allocated fallibly: `rows` comes from the
/// caller and may be far beyond memory.
fn build_permutation(rows: usize, f: impl Fn(usize) -> usize) -> Result<Vec<usize>> {
    let mut perm = Vec::new();
    perm.try_reserve_exact(rows)
        .map_err(|_| WeightLayoutError::TooLarge {
            what: "permutation",
            rows,
            cols: 1,
        })?;
    perm.extend((0..rows).map(f));
    Ok(perm)
}

/// Checks `w` against rows × cols before a permutation of `rows` entries is built (so a wrong
/// length is reported without allocating it). `false` when `cols` is 0: the result is empty
/// and needs no permutation, however many rows there are.
fn check_rows_before_permutation<T>(w: &[T], rows: usize, cols: usize) -> Result<bool> {
    check_shape("weight", rows, cols, w.len())?;
    Ok(cols != 0)
}

/// 2N, the rows of a `[gate | up]` weight of N×K halves, or [`WeightLayoutError::TooLarge`].
fn double_rows(what: &'static str, n: usize, k: usize) -> Result<usize> {
    n.checked_mul(2).ok_or(WeightLayoutError::TooLarge {
        what,
        rows: n,
        cols: k,
    })
}

fn check_perm(perm: &[usize]) -> Result<()> {
    let mut seen = vec![false; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        if p >= perm.len() {
            return Err(WeightLayoutError::NotAPermutation {
                len: perm.len(),
                reason: format!("entry {i} is {p}"),
            });
        }
        if std::mem::replace(&mut seen[p], true) {
            return Err(WeightLayoutError::NotAPermutation {
                len: perm.len(),
                reason: format!("{p} appears twice"),
            });
        }
    }
    Ok(())
}

/// The row permutation that interleaves the two halves of every block of `block` rows:
/// `perm[new] = old`, with, inside each block, new row `2i` ← old row `i` and new row `2i + 1`
/// ← old row `i + block/2`. Length `rows`.
///
/// # Errors
/// [`WeightLayoutError::ZeroDim`] if `block` is 0, [`WeightLayoutError::OddBlock`],
/// [`WeightLayoutError::RowsNotMultipleOfBlock`], [`WeightLayoutError::TooLarge`] if the
/// permutation cannot be allocated.
pub fn interleave_halves_permutation(rows: usize, block: usize) -> Result<Vec<usize>> {
    check_halves(rows, block)?;
    let half = block / 2;
    build_permutation(rows, |new| {
        let (start, j) = (new - new % block, new % block);
        start + j / 2 + (j % 2) * half
    })
}

fn check_halves(rows: usize, block: usize) -> Result<()> {
    if block == 0 {
        return Err(WeightLayoutError::ZeroDim { what: "block" });
    }
    if !block.is_multiple_of(2) {
        return Err(WeightLayoutError::OddBlock { block });
    }
    if !rows.is_multiple_of(block) {
        return Err(WeightLayoutError::RowsNotMultipleOfBlock { rows, block });
    }
    Ok(())
}

/// The row permutation taking a Q/K projection from the half-split RoPE layout to interleaved
/// pairs, per head: within each head of `head_dim` rows, the first `rotary_dim` rows are
/// interleaved as in [`interleave_halves_permutation`] (pair `(i, i + rotary_dim/2)` →
/// `(2i, 2i + 1)`) and rows `rotary_dim..head_dim` stay in place. `perm[new] = old`, length
/// `rows` (= heads × head_dim).
///
/// # Errors
/// [`WeightLayoutError::ZeroDim`] if `head_dim` is 0, [`WeightLayoutError::OddRotaryDim`],
/// [`WeightLayoutError::RotaryDimTooLarge`], [`WeightLayoutError::RowsNotMultipleOfBlock`],
/// [`WeightLayoutError::TooLarge`] if the permutation cannot be allocated.
pub fn rope_interleave_permutation(
    rows: usize,
    head_dim: usize,
    rotary_dim: usize,
) -> Result<Vec<usize>> {
    check_rope(rows, head_dim, rotary_dim)?;
    let half = rotary_dim / 2;
    build_permutation(rows, |new| {
        let (start, j) = (new - new % head_dim, new % head_dim);
        if j < rotary_dim {
            start + j / 2 + (j % 2) * half
        } else {
            new
        }
    })
}

fn check_rope(rows: usize, head_dim: usize, rotary_dim: usize) -> Result<()> {
    if head_dim == 0 {
        return Err(WeightLayoutError::ZeroDim { what: "head_dim" });
    }
    if !rotary_dim.is_multiple_of(2) {
        return Err(WeightLayoutError::OddRotaryDim { rotary_dim });
    }
    if rotary_dim > head_dim {
        return Err(WeightLayoutError::RotaryDimTooLarge {
            rotary_dim,
            head_dim,
        });
    }
    if !rows.is_multiple_of(head_dim) {
        return Err(WeightLayoutError::RowsNotMultipleOfBlock {
            rows,
            block: head_dim,
        });
    }
    Ok(())
}

/// The inverse permutation: `inv[perm[i]] = i`.
///
/// # Errors
/// [`WeightLayoutError::NotAPermutation`] if `perm` is not a permutation of `0..perm.len()`.
pub fn invert_permutation(perm: &[usize]) -> Result<Vec<usize>> {
    check_perm(perm)?;
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    Ok(inv)
}

/// Row `i` of the result is row `perm[i]` of `w` (rows × cols, row-major).
///
/// # Errors
/// [`WeightLayoutError::Length`] if `w` is not rows × cols or `perm` not of length `rows`,
/// [`WeightLayoutError::NotAPermutation`], [`WeightLayoutError::TooLarge`] if rows × cols
/// overflows `usize`.
pub fn permute_rows<T: Copy>(w: &[T], rows: usize, cols: usize, perm: &[usize]) -> Result<Vec<T>> {
    check_shape("weight", rows, cols, w.len())?;
    check_len("permutation", rows, perm.len())?;
    check_perm(perm)?;
    let mut out = Vec::with_capacity(w.len());
    for &p in perm {
        out.extend_from_slice(&w[p * cols..(p + 1) * cols]);
    }
    Ok(out)
}

/// Column `j` of the result is column `perm[j]` of `w` (rows × cols, row-major): for weights
/// stored K×N, and for permuting a GEMM's output columns.
///
/// # Errors
/// [`WeightLayoutError::Length`] if `w` is not rows × cols or `perm` not of length `cols`,
/// [`WeightLayoutError::NotAPermutation`], [`WeightLayoutError::TooLarge`] if rows × cols
/// overflows `usize`.
pub fn permute_cols<T: Copy>(w: &[T], rows: usize, cols: usize, perm: &[usize]) -> Result<Vec<T>> {
    check_shape("weight", rows, cols, w.len())?;
    check_len("permutation", cols, perm.len())?;
    check_perm(perm)?;
    let mut out = Vec::with_capacity(w.len());
    if cols == 0 {
        return Ok(out);
    }
    for row in w.chunks_exact(cols) {
        out.extend(perm.iter().map(|&p| row[p]));
    }
    Ok(out)
}

/// Interleaves the halves of every block of `block` rows of `w` (rows × cols, row-major):
/// `[a0 … a(h−1) | b0 … b(h−1)]` → `[a0, b0, a1, b1, …]` per block, h = block/2. With
/// `block = head_dim` this is the full-rotary RoPE permutation; with `block = rows` it turns a
/// concatenated `[gate | up]` weight into interleaved gate/up rows.
///
/// # Errors
/// Those of [`interleave_halves_permutation`] and [`permute_rows`].
pub fn interleave_halves<T: Copy>(
    w: &[T],
    rows: usize,
    cols: usize,
    block: usize,
) -> Result<Vec<T>> {
    check_halves(rows, block)?;
    if !check_rows_before_permutation(w, rows, cols)? {
        return Ok(Vec::new());
    }
    permute_rows(w, rows, cols, &interleave_halves_permutation(rows, block)?)
}

/// Inverse of [`interleave_halves`]: `[a0, b0, a1, b1, …]` → `[a… | b…]` per block.
///
/// # Errors
/// As [`interleave_halves`].
pub fn deinterleave_halves<T: Copy>(
    w: &[T],
    rows: usize,
    cols: usize,
    block: usize,
) -> Result<Vec<T>> {
    check_halves(rows, block)?;
    if !check_rows_before_permutation(w, rows, cols)? {
        return Ok(Vec::new());
    }
    let perm = invert_permutation(&interleave_halves_permutation(rows, block)?)?;
    permute_rows(w, rows, cols, &perm)
}

/// Gate and up projection weights, N×K each (PyTorch `gate_proj.weight`, `up_proj.weight`), to
/// one 2N×K weight with rows `[g0, u0, g1, u1, …]`: GEMM output column `2i` is gate i and
/// `2i + 1` is up i, the layout of the fused `swiglu`/`geglu` stages.
///
/// # Errors
/// [`WeightLayoutError::Length`] if `gate` or `up` is not N×K, [`WeightLayoutError::TooLarge`]
/// if N×K or the 2N×K result overflows `usize`.
pub fn interleave_gate_up<T: Copy>(gate: &[T], up: &[T], n: usize, k: usize) -> Result<Vec<T>> {
    check_shape("gate weight", n, k, gate.len())?;
    check_shape("up weight", n, k, up.len())?;
    // Both inputs exist, so only a zero-sized `T` can overflow here.
    let total = gate
        .len()
        .checked_add(up.len())
        .ok_or(WeightLayoutError::TooLarge {
            what: "interleaved gate/up weight",
            rows: n,
            cols: k,
        })?;
    let mut out = Vec::with_capacity(total);
    if k == 0 {
        return Ok(out);
    }
    for (g, u) in gate.chunks_exact(k).zip(up.chunks_exact(k)) {
        out.extend_from_slice(g);
        out.extend_from_slice(u);
    }
    Ok(out)
}

/// A concatenated `[gate | up]` weight (2N×K: rows 0..N gate, N..2N up; e.g. Phi-3's
/// `gate_up_proj`) to interleaved rows `[g0, u0, g1, u1, …]`.
///
/// # Errors
/// [`WeightLayoutError::Length`] if `w` is not 2N×K, [`WeightLayoutError::TooLarge`] if 2N×K
/// overflows `usize`.
pub fn interleave_gate_up_concat<T: Copy>(w: &[T], n: usize, k: usize) -> Result<Vec<T>> {
    let rows = double_rows("[gate | up] weight", n, k)?;
    check_shape("[gate | up] weight", rows, k, w.len())?;
    if n == 0 || k == 0 {
        return Ok(Vec::new());
    }
    interleave_halves(w, rows, k, rows)
}

/// Inverse of [`interleave_gate_up`]: an interleaved 2N×K weight back to (gate, up), N×K each.
///
/// # Errors
/// [`WeightLayoutError::Length`] if `w` is not 2N×K, [`WeightLayoutError::TooLarge`] if 2N×K
/// overflows `usize`.
pub fn deinterleave_gate_up<T: Copy>(w: &[T], n: usize, k: usize) -> Result<(Vec<T>, Vec<T>)> {
    let rows = double_rows("interleaved gate/up weight", n, k)?;
    check_shape("interleaved gate/up weight", rows, k, w.len())?;
    let half = w.len() / 2;
    let (mut gate, mut up) = (Vec::with_capacity(half), Vec::with_capacity(half));
    // An empty weight passes the shape check with any K, and 2·K may then overflow.
    if w.is_empty() {
        return Ok((gate, up));
    }
    for pair in w.chunks_exact(2 * k) {
        gate.extend_from_slice(&pair[..k]);
        up.extend_from_slice(&pair[k..]);
    }
    Ok((gate, up))
}

/// Gate and up biases (length N each) to the interleaved bias `[bg0, bu0, bg1, bu1, …]`
/// (length 2N) matching [`interleave_gate_up`].
///
/// # Errors
/// [`WeightLayoutError::Length`] if the lengths differ.
pub fn interleave_gate_up_bias<T: Copy>(gate: &[T], up: &[T]) -> Result<Vec<T>> {
    interleave_gate_up(gate, up, gate.len(), 1)
}

/// A Q or K projection weight (rows = heads × head_dim, `cols` = K, row-major) from the
/// checkpoint's half-split RoPE layout to interleaved pairs per head
/// ([`rope_interleave_permutation`]). Use with the fused `rope` stage; the bias gets
/// [`rope_bias_to_interleaved`].
///
/// # Errors
/// Those of [`rope_interleave_permutation`] and [`permute_rows`].
pub fn rope_weight_to_interleaved<T: Copy>(
    w: &[T],
    rows: usize,
    cols: usize,
    head_dim: usize,
    rotary_dim: usize,
) -> Result<Vec<T>> {
    check_rope(rows, head_dim, rotary_dim)?;
    if !check_rows_before_permutation(w, rows, cols)? {
        return Ok(Vec::new());
    }
    permute_rows(
        w,
        rows,
        cols,
        &rope_interleave_permutation(rows, head_dim, rotary_dim)?,
    )
}

/// Inverse of [`rope_weight_to_interleaved`].
///
/// # Errors
/// As [`rope_weight_to_interleaved`].
pub fn rope_weight_to_half_split<T: Copy>(
    w: &[T],
    rows: usize,
    cols: usize,
    head_dim: usize,
    rotary_dim: usize,
) -> Result<Vec<T>> {
    check_rope(rows, head_dim, rotary_dim)?;
    if !check_rows_before_permutation(w, rows, cols)? {
        return Ok(Vec::new());
    }
    let perm = invert_permutation(&rope_interleave_permutation(rows, head_dim, rotary_dim)?)?;
    permute_rows(w, rows, cols, &perm)
}

/// A Q or K projection bias (length heads × head_dim) to the interleaved RoPE layout, matching
/// [`rope_weight_to_interleaved`].
///
/// # Errors
/// As [`rope_weight_to_interleaved`].
pub fn rope_bias_to_interleaved<T: Copy>(
    b: &[T],
    head_dim: usize,
    rotary_dim: usize,
) -> Result<Vec<T>> {
    rope_weight_to_interleaved(b, b.len(), 1, head_dim, rotary_dim)
}

/// Inverse of [`rope_bias_to_interleaved`].
///
/// # Errors
/// As [`rope_weight_to_interleaved`].
pub fn rope_bias_to_half_split<T: Copy>(
    b: &[T],
    head_dim: usize,
    rotary_dim: usize,
) -> Result<Vec<T>> {
    rope_weight_to_half_split(b, b.len(), 1, head_dim, rotary_dim)
}

/// A `Linear` layer with the deferred LayerNorm before it folded in: the operands of a
/// `folded_layer_norm` consumer. See [`fold_layer_norm`].
#[derive(Clone, Debug, PartialEq)]
pub struct FoldedLinear {
    /// `W′[j, k] = γ[k]·W[j, k]` rounded to the GEMM's input dtype (each value exact in it),
    /// N×K row-major: B of the consumer GEMM (B stored N×K).
    pub weight: Vec<f32>,
    /// `Σ_{k ∈ g} W′[j, k]` over the rounded weights for each group g of 64 columns of K
    /// (the deferred norm's statistics groups), ceil(K/64) × N row-major: the launcher's
    /// `colsum`.
    pub colsum: Vec<f32>,
    /// `Σ_k β[k]·W[j, k] + b[j]`, length N: the launcher's `offset`.
    pub offset: Vec<f32>,
}

/// Folds the LayerNorm (γ, β: length K) that a `Linear` layer (W: N×K row-major, PyTorch
/// layout; bias: length N) reads into its weights, for a GEMM with `dtype` inputs (CODA's
/// reparameterisation of post-norm layers): `LayerNorm(h)·Wᵀ + b = rstd·(h′·W′ᵀ +
/// Σ_g ((t_g − t_0) − μ)·colsum[g]) + offset`, h′ = h less each group's shift t_g (see the
/// `folded_layer_norm` stage). Sums in f64; `colsum` is taken over the weights as rounded to
/// `dtype`, so that it matches what the GEMM multiplies. Unlike the layout functions of this
/// module it does arithmetic.
///
/// # Errors
/// [`WeightLayoutError::ZeroDim`] if N or K is 0, [`WeightLayoutError::Length`] on a buffer of
/// the wrong length, [`WeightLayoutError::TooLarge`] if N×K overflows.
pub fn fold_layer_norm(
    w: &[f32],
    bias: Option<&[f32]>,
    gamma: &[f32],
    beta: &[f32],
    n: usize,
    k: usize,
    dtype: fused_gemm_device::types::DType,
) -> Result<FoldedLinear> {
    use fused_gemm_device::types::DType;
    if n == 0 {
        return Err(WeightLayoutError::ZeroDim { what: "N" });
    }
    if k == 0 {
        return Err(WeightLayoutError::ZeroDim { what: "K" });
    }
    check_shape("weight", n, k, w.len())?;
    check_len("gamma", k, gamma.len())?;
    check_len("beta", k, beta.len())?;
    if let Some(b) = bias {
        check_len("bias", n, b.len())?;
    }
    let round = |x: f64| match dtype {
        DType::Bf16 => half::bf16::from_f64(x).to_f32(),
        DType::F16 => half::f16::from_f64(x).to_f32(),
        DType::F32 => x as f32,
    };
    let group = fused_gemm_device::epilogue::stages::MOMENT_GROUP_COLS as usize;
    let mut weight = Vec::with_capacity(n * k);
    let mut colsum = vec![0f32; k.div_ceil(group) * n];
    let mut offset = Vec::with_capacity(n);
    for (j, row) in w.chunks_exact(k).enumerate() {
        let mut d = bias.map_or(0.0, |b| b[j] as f64);
        for (g, cols) in row.chunks(group).enumerate() {
            let mut c = 0f64;
            for (i, &x) in cols.iter().enumerate() {
                let at = g * group + i;
                let folded = round(gamma[at] as f64 * x as f64);
                weight.push(folded);
                c += folded as f64;
                d += beta[at] as f64 * x as f64;
            }
            colsum[g * n + j] = c as f32;
        }
        offset.push(d as f32);
    }
    Ok(FoldedLinear {
        weight,
        colsum,
        offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_permutations_by_hand() {
        assert_eq!(
            interleave_halves_permutation(8, 4).unwrap(),
            vec![0, 2, 1, 3, 4, 6, 5, 7]
        );
        // head_dim 5, rotary 4: rows 0..4 interleaved, row 4 in place; two heads.
        assert_eq!(
            rope_interleave_permutation(10, 5, 4).unwrap(),
            vec![0, 2, 1, 3, 4, 5, 7, 6, 8, 9]
        );
        let w = [10, 11, 20, 21, 30, 31, 40, 41]; // 4 rows × 2
        assert_eq!(
            interleave_gate_up_concat(&w, 2, 2).unwrap(),
            vec![10, 11, 30, 31, 20, 21, 40, 41]
        );
        assert_eq!(
            interleave_gate_up_bias(&[1, 2, 3], &[7, 8, 9]).unwrap(),
            vec![1, 7, 2, 8, 3, 9]
        );
        assert_eq!(
            permute_cols(&[1, 2, 3, 4, 5, 6], 2, 3, &[2, 0, 1]).unwrap(),
            vec![3, 1, 2, 6, 4, 5]
        );
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        let w = [0.0f32; 12];
        assert_eq!(
            interleave_halves(&w, 4, 3, 3),
            Err(WeightLayoutError::OddBlock { block: 3 })
        );
        assert_eq!(
            interleave_halves(&w, 6, 2, 4),
            Err(WeightLayoutError::RowsNotMultipleOfBlock { rows: 6, block: 4 })
        );
        assert_eq!(
            interleave_halves(&w, 4, 2, 2),
            Err(WeightLayoutError::Length {
                what: "weight",
                expected: 8,
                actual: 12
            })
        );
        assert_eq!(
            rope_weight_to_interleaved(&w, 12, 1, 6, 5),
            Err(WeightLayoutError::OddRotaryDim { rotary_dim: 5 })
        );
        assert_eq!(
            rope_weight_to_interleaved(&w, 12, 1, 6, 8),
            Err(WeightLayoutError::RotaryDimTooLarge {
                rotary_dim: 8,
                head_dim: 6
            })
        );
        assert!(matches!(
            rope_bias_to_interleaved(&w, 0, 0),
            Err(WeightLayoutError::ZeroDim { .. })
        ));
        assert!(matches!(
            invert_permutation(&[0, 2, 2]),
            Err(WeightLayoutError::NotAPermutation { .. })
        ));
        assert!(matches!(
            permute_rows(&w, 3, 4, &[0, 1, 3]),
            Err(WeightLayoutError::NotAPermutation { .. })
        ));
        assert!(matches!(
            interleave_gate_up(&w, &w[..8], 4, 3),
            Err(WeightLayoutError::Length { .. })
        ));
        assert!(matches!(
            interleave_gate_up_bias(&w[..2], &w[..3]),
            Err(WeightLayoutError::Length { .. })
        ));
    }

    #[test]
    fn shapes_overflowing_usize_are_typed_errors() {
        let none: [f32; 0] = [];
        // rows · cols = 2^64: wrapped to 0 it matched the empty slice and indexed out of it.
        assert_eq!(
            permute_rows(&none, 2, 1 << 63, &[1, 0]),
            Err(WeightLayoutError::TooLarge {
                what: "weight",
                rows: 2,
                cols: 1 << 63
            })
        );
        assert!(matches!(
            permute_cols(&none, 1 << 63, 2, &[1, 0]),
            Err(WeightLayoutError::TooLarge { .. })
        ));
        // 2 · N · K = 2^64.
        assert!(matches!(
            deinterleave_gate_up(&none, 1 << 62, 2),
            Err(WeightLayoutError::TooLarge { .. })
        ));
        assert!(matches!(
            interleave_gate_up_concat(&none, 1 << 62, 2),
            Err(WeightLayoutError::TooLarge { .. })
        ));
        // 2N itself overflows, with K = 0.
        assert!(matches!(
            interleave_gate_up_concat(&none, 1 << 63, 0),
            Err(WeightLayoutError::TooLarge { .. })
        ));
        assert!(matches!(
            interleave_gate_up(&none, &none, 1 << 33, 1 << 31),
            Err(WeightLayoutError::TooLarge { .. })
        ));
        // A permutation table beyond memory is an error, not an abort.
        assert!(matches!(
            interleave_halves_permutation(1 << 62, 2),
            Err(WeightLayoutError::TooLarge {
                what: "permutation",
                ..
            })
        ));
        assert!(matches!(
            rope_interleave_permutation(1 << 62, 4, 4),
            Err(WeightLayoutError::TooLarge { .. })
        ));
        // A mismatched length is reported before the permutation is built.
        assert!(matches!(
            interleave_halves(&none, 1 << 62, 1, 2),
            Err(WeightLayoutError::Length { .. })
        ));
        assert!(matches!(
            rope_weight_to_half_split(&none, 1 << 62, 1, 4, 4),
            Err(WeightLayoutError::Length { .. })
        ));
        // Zero columns: an empty result, however many rows, without a permutation.
        assert_eq!(interleave_halves(&none, 1 << 62, 0, 2), Ok(Vec::new()));
        assert_eq!(
            rope_weight_to_interleaved(&none, 1 << 62, 0, 4, 2),
            Ok(Vec::new())
        );
        // Shape errors still come first.
        assert_eq!(
            interleave_halves(&none, 1 << 62, 0, 3),
            Err(WeightLayoutError::OddBlock { block: 3 })
        );
    }

    #[test]
    fn folding_matches_the_reference_and_rounds_the_weights() {
        use crate::reference::epilogue::folded_norm::FoldedLinear as Reference;
        use fused_gemm_device::types::DType;
        // K = 150: three groups of the statistics, the last one partial.
        let (n, k) = (5, 150);
        let val = |i: usize, s: f64| ((i * 37 % 17) as f64 - 8.0) * s;
        let w: Vec<f32> = (0..n * k).map(|i| val(i, 0.013) as f32).collect();
        let b: Vec<f32> = (0..n).map(|i| val(i + 3, 0.1) as f32).collect();
        let g: Vec<f32> = (0..k).map(|i| 1.0 + val(i, 0.05) as f32).collect();
        let be: Vec<f32> = (0..k).map(|i| val(i + 1, 0.02) as f32).collect();
        let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        let want =
            Reference::fold(n, k, &f64s(&w), Some(&f64s(&b)), &f64s(&g), &f64s(&be)).unwrap();
        for dtype in [DType::Bf16, DType::F16, DType::F32] {
            let got = fold_layer_norm(&w, Some(&b), &g, &be, n, k, dtype).unwrap();
            let u = crate::reference::epilogue::unit_roundoff(dtype);
            for (x, y) in got.weight.iter().zip(&want.weight) {
                assert!(
                    (*x as f64 - y).abs() <= u * y.abs(),
                    "{dtype:?}: {x} vs {y}"
                );
                assert_eq!(
                    crate::reference::epilogue::round_to(dtype, *x as f64),
                    *x as f64
                );
            }
            assert_eq!(got.colsum.len(), 3 * n);
            for j in 0..n {
                for (g, cols) in [0..64, 64..128, 128..150].into_iter().enumerate() {
                    let sum: f64 = got.weight[j * k..(j + 1) * k][cols]
                        .iter()
                        .map(|&x| x as f64)
                        .sum();
                    let c = got.colsum[g * n + j] as f64;
                    assert!((c - sum).abs() <= 1e-6 * sum.abs().max(1.0), "{dtype:?}");
                }
                let d = want.offset[j];
                assert!((got.offset[j] as f64 - d).abs() <= 1e-6 * d.abs().max(1.0));
            }
        }
        assert_eq!(
            fold_layer_norm(&w, None, &g[..6], &be, n, k, DType::Bf16),
            Err(WeightLayoutError::Length {
                what: "gamma",
                expected: 150,
                actual: 6
            })
        );
        assert!(fold_layer_norm(&[], None, &[], &[], 0, 0, DType::Bf16).is_err());
    }
}
