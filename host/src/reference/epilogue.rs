//! f64 reference of the whole fused operation `C = epilogue(A·B)`, and of each stage alone.
//!
//! A fused kernel is described here as a plain list of [`RefStage`]s, applied in order to the
//! f64 product, exactly as `#[fused_gemm(epilogue = [...])]` applies its stages to the f32
//! accumulator tile (`fused_gemm_device::epilogue::stages` gives the device formulas, which
//! these mirror). [`fused_gemm_reference`] is the entry point; [`apply_stages`] runs only the
//! epilogue on a given M×N matrix; [`fused_gemm_split_k_reference`] sums split-K partial
//! products first and applies the epilogue once.
//!
//! Shapes: A is M×K row-major; B is K×N row-major, or N×K row-major (PyTorch `Linear`
//! weights) with `b_col_major`; every matrix in and out is row-major. The *width* of the tile
//! is N until a pair-reducing stage (SwiGLU, GeGLU) halves it; vectors and matrices read by
//! later stages are sized by the width at their position.
//!
//! Inputs are f64. To check a kernel, widen what it was given with [`to_f64`] (f32, f16, bf16
//! host buffers), run the reference, and compare, possibly after [`round_slice`] to the output
//! dtype. Pass every vector and tile as the kernel stored it: bias, residual, gamma, beta and
//! `c_in` in the output dtype, scale vectors in f32 (as `fused_gemm_device::epilogue::stages`
//! reads them), each widened with [`to_f64`]. Standalone stages: [`layer_norm_rows`], [`rms_norm_rows`], [`rope`], [`swiglu`],
//! [`geglu`], [`gelu_erf`], [`gelu_tanh`].
//!
//! Every function returns a [`ReferenceError`] on bad input rather than panicking, a shape whose
//! element count overflows `usize` included ([`ReferenceError::TooLarge`]).

pub mod activation;
pub mod dtype;
pub mod folded_norm;
pub mod gated;
pub mod norm;
pub mod rotary;
pub mod stage;

use std::ops::Range;

pub use activation::{Activation, gelu_erf, gelu_tanh, relu, sigmoid, silu};
pub use dtype::{HostElement, from_f64, round_slice, round_to, to_f64, unit_roundoff};
pub use gated::{geglu, glu, swiglu};
pub use norm::{
    RowMoments, layer_norm_rows, layer_norm_rows_tiled, merge_row_moments, partial_row_moments,
    rms_norm_rows, rms_norm_rows_tiled,
};
pub use rotary::rope;
pub use stage::{PairLayout, RefStage, ReferenceError, RopeConfig, output_width};
use stage::{check_len, check_shape, elements, too_large, zeros};

fn check_order(stages: &[RefStage]) -> Result<(), ReferenceError> {
    let mut paired = false;
    for (index, s) in stages.iter().enumerate() {
        let err = |reason| {
            Err(ReferenceError::StageOrder {
                stage: s.name(),
                index,
                reason,
            })
        };
        match s {
            RefStage::Accumulate if index + 1 != stages.len() => {
                return err("`accumulate` must be the last stage");
            }
            RefStage::Rope(_) if paired => {
                return err("`rope` works on column pairs and must come before swiglu/geglu");
            }
            RefStage::SwiGlu(_) | RefStage::GeGlu(_) if paired => {
                return err("at most one pair-reducing stage (swiglu/geglu) per epilogue");
            }
            _ => {}
        }
        paired |= s.pairs();
    }
    Ok(())
}

/// Applies `stages` in order to the M×N row-major matrix `x` (the accumulator). `c_in` is the
/// output buffer's prior contents, M × [`output_width`], read by [`RefStage::Accumulate`].
/// Returns M × [`output_width`]`(n, stages)`, row-major.
///
/// # Errors
/// [`ReferenceError::Length`] for any vector or matrix not sized for its position,
/// [`ReferenceError::TooLarge`] if M×N overflows `usize`, [`ReferenceError::StageOrder`]
/// (`accumulate` not last, `rope` after a pair reduction, two pair reductions),
/// [`ReferenceError::MissingCIn`], and the errors of [`rope`], [`swiglu`], [`layer_norm_rows`],
/// [`rms_norm_rows`].
pub fn apply_stages(
    m: usize,
    n: usize,
    x: &[f64],
    stages: &[RefStage],
    c_in: Option<&[f64]>,
) -> Result<Vec<f64>, ReferenceError> {
    check_shape("accumulator", m, n, x.len())?;
    check_order(stages)?;
    let mut w = n;
    let mut t = x.to_vec();
    let map = |t: &mut Vec<f64>, f: &dyn Fn(f64) -> f64| t.iter_mut().for_each(|v| *v = f(*v));
    for s in stages {
        match s {
            RefStage::Scale(alpha) => map(&mut t, &|v| v * alpha),
            RefStage::ScaleRow(sv) => {
                check_len("scale(row) vector", m, sv.len())?;
                for (row, s) in t.chunks_exact_mut(w.max(1)).zip(sv) {
                    row.iter_mut().for_each(|v| *v *= s);
                }
            }
            RefStage::ScaleCol(sv) => {
                check_len("scale(col) vector", w, sv.len())?;
                for row in t.chunks_exact_mut(w.max(1)) {
                    row.iter_mut().zip(sv).for_each(|(v, s)| *v *= s);
                }
            }
            RefStage::BiasCol(b) => {
                check_len("bias", w, b.len())?;
                for row in t.chunks_exact_mut(w.max(1)) {
                    row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
                }
            }
            RefStage::BiasRow(b) => {
                check_len("bias(row)", m, b.len())?;
                for (row, b) in t.chunks_exact_mut(w.max(1)).zip(b) {
                    row.iter_mut().for_each(|v| *v += b);
                }
            }
            RefStage::Relu => map(&mut t, &relu),
            RefStage::Gelu => map(&mut t, &gelu_erf),
            RefStage::GeluTanh => map(&mut t, &gelu_tanh),
            RefStage::Silu => map(&mut t, &silu),
            RefStage::Sigmoid => map(&mut t, &sigmoid),
            RefStage::Residual(r) => {
                check_shape("residual", m, w, r.len())?;
                t.iter_mut().zip(r).for_each(|(v, r)| *v += r);
            }
            RefStage::Accumulate => {
                let c = c_in.ok_or(ReferenceError::MissingCIn)?;
                check_shape("c_in", m, w, c.len())?;
                t.iter_mut().zip(c).for_each(|(v, c)| *v += c);
            }
            RefStage::LayerNorm { gamma, beta, eps } => {
                t = layer_norm_rows(m, w, &t, gamma, beta, *eps)?;
            }
            RefStage::RmsNorm { gamma, eps } => t = rms_norm_rows(m, w, &t, gamma, *eps)?,
            RefStage::SwiGlu(layout) => {
                t = swiglu(m, w, &t, *layout)?;
                w /= 2;
            }
            RefStage::GeGlu(layout) => {
                t = geglu(m, w, &t, *layout)?;
                w /= 2;
            }
            RefStage::Rope(cfg) => t = rope(m, w, &t, cfg)?,
            RefStage::Cast(dtype) => map(&mut t, &|v| round_to(*dtype, v)),
            RefStage::User(f) => map(&mut t, f),
        }
    }
    Ok(t)
}

/// Checks A and B, and that C (M×N) fits in `usize`.
fn check_gemm(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Result<(), ReferenceError> {
    check_shape("A (M×K)", m, k, a.len())?;
    check_shape("B (K×N or N×K)", k, n, b.len())?;
    elements("C (M×N)", m, n).map(drop)
}

/// The fused operation in f64: `C = stages(A·B)`, stages applied in list order (so
/// `[Scale(a), BiasCol(b)]` is `a·AB + b` and `[BiasCol(b), Scale(a)]` is `a·(AB + b)`).
///
/// A is M×K row-major; B is K×N row-major, or N×K row-major when `b_col_major` (PyTorch
/// `Linear` weight). `c_in` (M × output width) is read by [`RefStage::Accumulate`] only.
/// Returns M × [`output_width`]`(n, stages)`, row-major.
///
/// # Errors
/// [`ReferenceError::Length`] if A or B does not match its shape,
/// [`ReferenceError::TooLarge`] if M×K, K×N or M×N overflows `usize` or C cannot be allocated,
/// and those of [`apply_stages`].
#[allow(clippy::too_many_arguments)]
pub fn fused_gemm_reference(
    m: usize,
    n: usize,
    k: usize,
    a: &[f64],
    b: &[f64],
    b_col_major: bool,
    stages: &[RefStage],
    c_in: Option<&[f64]>,
) -> Result<Vec<f64>, ReferenceError> {
    check_gemm(m, n, k, a, b)?;
    let mut acc = zeros("C (M×N)", m, n)?;
    super::gemm_into(m, n, k, a, b, b_col_major, &mut acc);
    apply_stages(m, n, &acc, stages, c_in)
}

/// The K ranges of a `splits`-way split-K: chunks of ceil(K/splits), the last ones shorter or
/// empty when `splits` does not divide K (an empty chunk contributes a zero partial).
///
/// # Errors
/// [`ReferenceError::ZeroDim`] if `splits` is 0, [`ReferenceError::TooLarge`] if the list of
/// `splits` ranges cannot be allocated.
pub fn split_k_ranges(k: usize, splits: usize) -> Result<Vec<Range<usize>>, ReferenceError> {
    if splits == 0 {
        return Err(ReferenceError::ZeroDim { what: "splits" });
    }
    let mut out = Vec::new();
    out.try_reserve_exact(splits)
        .map_err(|_| too_large("split-K ranges", splits, 1))?;
    let chunk = k.div_ceil(splits);
    // Saturating: every bound is clipped to K anyway.
    let at = |i: usize| i.saturating_mul(chunk).min(k);
    out.extend((0..splits).map(|i| at(i)..at(i + 1)));
    Ok(out)
}

/// Partial product over `ks` ⊆ 0..K: `P[i, j] = Σ_{κ ∈ ks} A[i, κ]·B[κ, j]`, M×N row-major,
/// layouts as [`fused_gemm_reference`].
///
/// # Errors
/// [`ReferenceError::Length`] on mis-sized A or B, [`ReferenceError::Length`] (`what` = "K
/// range") if `ks` reaches past K, [`ReferenceError::TooLarge`] if a shape overflows `usize` or
/// P cannot be allocated.
pub fn gemm_k_slice(
    m: usize,
    n: usize,
    k: usize,
    a: &[f64],
    b: &[f64],
    b_col_major: bool,
    ks: Range<usize>,
) -> Result<Vec<f64>, ReferenceError> {
    check_gemm(m, n, k, a, b)?;
    if ks.end > k {
        return Err(ReferenceError::Length {
            what: "K range",
            expected: k,
            actual: ks.end,
        });
    }
    let mut p = zeros("P (M×N)", m, n)?;
    for i in 0..m {
        for j in 0..n {
            p[i * n + j] = ks
                .clone()
                .map(|kk| {
                    let bkj = if b_col_major {
                        b[j * k + kk]
                    } else {
                        b[kk * n + j]
                    };
                    a[i * k + kk] * bkj
                })
                .sum();
        }
    }
    Ok(p)
}

/// The fused operation computed as a `splits`-way split-K kernel must compute it: partial
/// products over the [`split_k_ranges`], summed in split order, then the epilogue applied
/// **once** to the sum (bias and activation are not linear in the partials; applying them per
/// split is wrong). Equals [`fused_gemm_reference`] up to f64 rounding of the sum
/// order.
///
/// # Errors
/// Those of [`split_k_ranges`] and [`fused_gemm_reference`].
#[allow(clippy::too_many_arguments)]
pub fn fused_gemm_split_k_reference(
    m: usize,
    n: usize,
    k: usize,
    a: &[f64],
    b: &[f64],
    b_col_major: bool,
    splits: usize,
    stages: &[RefStage],
    c_in: Option<&[f64]>,
) -> Result<Vec<f64>, ReferenceError> {
    check_gemm(m, n, k, a, b)?;
    let mut acc = zeros("C (M×N)", m, n)?;
    for ks in split_k_ranges(k, splits)? {
        // An empty range adds nothing (its partials are −0.0).
        if ks.is_empty() {
            continue;
        }
        let p = gemm_k_slice(m, n, k, a, b, b_col_major, ks)?;
        acc.iter_mut().zip(p).for_each(|(s, p)| *s += p);
    }
    apply_stages(m, n, &acc, stages, c_in)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_ranges_cover_k_once() {
        for k in [0, 1, 2, 7, 4096] {
            for splits in [1, 2, 3, 4, 9] {
                let r = split_k_ranges(k, splits).unwrap();
                assert_eq!(r.len(), splits);
                assert_eq!(r[0].start, 0);
                assert_eq!(r.last().unwrap().end, k);
                for w in r.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
            }
        }
        assert!(split_k_ranges(4, 0).is_err());
    }

    #[test]
    fn split_ranges_at_the_limits() {
        // usize::MAX ranges cannot be allocated: an error, not a capacity-overflow panic.
        assert!(matches!(
            split_k_ranges(4, usize::MAX),
            Err(ReferenceError::TooLarge { .. })
        ));
        // (i + 1)·chunk past usize::MAX saturates and is clipped to K.
        assert_eq!(
            split_k_ranges(usize::MAX, 2).unwrap(),
            vec![0..1 << 63, 1 << 63..usize::MAX]
        );
    }

    #[test]
    fn shapes_overflowing_usize_are_typed_errors() {
        let too_large = |r: Result<Vec<f64>, ReferenceError>| {
            assert!(matches!(r, Err(ReferenceError::TooLarge { .. })), "{r:?}");
        };
        // Empty A and B, no stages: only the shape decides.
        let empty = |m, n, k| fused_gemm_reference(m, n, k, &[], &[], false, &[], None);
        // M·K = 2^64: wrapped to 0 it matched the empty A and indexed out of it.
        too_large(empty(1 << 32, 0, 1 << 32));
        too_large(fused_gemm_split_k_reference(
            1 << 32,
            0,
            1 << 32,
            &[],
            &[],
            false,
            2,
            &[],
            None,
        ));
        too_large(gemm_k_slice(1 << 32, 0, 1 << 32, &[], &[], true, 0..0));
        // M·N = 2^64 with K = 0.
        too_large(empty(1 << 32, 1 << 32, 0));
        // M·N = 2^62 fits in usize but not in memory (2^65 bytes).
        too_large(empty(1 << 31, 1 << 31, 0));
        too_large(apply_stages(1 << 32, 1 << 32, &[], &[], None));
        // An empty product of many rows is fast and exact.
        assert_eq!(empty(1 << 40, 0, 0), Ok(Vec::new()));
        too_large(swiglu(1 << 32, 1 << 32, &[], PairLayout::Interleaved));
        too_large(layer_norm_rows(1 << 32, 1 << 32, &[], &[], &[], 1e-5));
        too_large(rope(
            1 << 32,
            1 << 32,
            &[],
            &RopeConfig::new(1e4, 2, 1, PairLayout::Interleaved),
        ));
        let mut cfg = RopeConfig::new(1e4, 2, 4, PairLayout::Interleaved);
        cfg.pos_offset = usize::MAX - 2;
        assert!(matches!(
            cfg.validate(),
            Err(ReferenceError::TooLarge { .. })
        ));
        cfg.pos_offset = usize::MAX - 3;
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.position(7), usize::MAX);
    }

    #[test]
    fn stage_order_is_checked() {
        let x = vec![0.0; 4];
        let rope = RefStage::Rope(RopeConfig::new(1e4, 2, 1, PairLayout::Interleaved));
        let cases: [&[RefStage]; 3] = [
            &[RefStage::Accumulate, RefStage::Relu],
            &[RefStage::SwiGlu(PairLayout::Interleaved), rope],
            &[
                RefStage::SwiGlu(PairLayout::Interleaved),
                RefStage::GeGlu(PairLayout::Interleaved),
            ],
        ];
        for stages in cases {
            assert!(
                matches!(
                    apply_stages(1, 4, &x, stages, Some(&x)),
                    Err(ReferenceError::StageOrder { .. })
                ),
                "{stages:?}"
            );
        }
        assert_eq!(
            apply_stages(1, 4, &x, &[RefStage::Accumulate], None),
            Err(ReferenceError::MissingCIn)
        );
    }
}
