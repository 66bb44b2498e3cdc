//! Gated linear units in f64: SwiGLU and GeGLU over both column layouts.
//!
//! Shazeer 2020, "GLU Variants Improve Transformer" (arXiv 2002.05202): for a row holding a
//! gate half g and an up half u of width d each, `out[c] = act(g[c]) · u[c]`, act = SiLU
//! (SwiGLU, LLaMA's MLP) or GELU (GeGLU). The row is `[g | u]` ([`PairLayout::HalfSplit`],
//! what `torch.cat` / a fused `gate_up_proj` checkpoint gives) or `[g0, u0, g1, u1, …]`
//! ([`PairLayout::Interleaved`], what the fused kernel needs: one thread holds both halves of a
//! pair; see `crate::weights` for the weight-row permutation).

use super::activation::{gelu_erf, silu};
use super::stage::{PairLayout, ReferenceError, check_shape};

/// `out[r, c] = act(g[r, c]) · u[r, c]` over an M × width row-major `x` (`rows` = M) holding
/// gate and up columns in `layout`. Returns M × width/2.
///
/// # Errors
/// [`ReferenceError::OddPairWidth`] if `width` is odd, [`ReferenceError::Length`] if `x` is
/// not rows × width, [`ReferenceError::TooLarge`] if rows × width overflows `usize`.
pub fn glu(
    rows: usize,
    width: usize,
    x: &[f64],
    layout: PairLayout,
    act: impl Fn(f64) -> f64,
) -> Result<Vec<f64>, ReferenceError> {
    if !width.is_multiple_of(2) {
        return Err(ReferenceError::OddPairWidth { width });
    }
    check_shape("x", rows, width, x.len())?;
    let d = width / 2;
    let mut out = Vec::with_capacity(x.len() / 2);
    if d == 0 {
        return Ok(out);
    }
    for row in x.chunks_exact(width) {
        for c in 0..d {
            let (g, u) = match layout {
                PairLayout::Interleaved => (row[2 * c], row[2 * c + 1]),
                PairLayout::HalfSplit => (row[c], row[d + c]),
            };
            out.push(act(g) * u);
        }
    }
    Ok(out)
}

/// SwiGLU: [`glu`] with act = SiLU, `out = silu(g)·u`. Output M × width/2.
///
/// # Errors
/// As [`glu`].
pub fn swiglu(
    rows: usize,
    width: usize,
    x: &[f64],
    layout: PairLayout,
) -> Result<Vec<f64>, ReferenceError> {
    glu(rows, width, x, layout, silu)
}

/// GeGLU: [`glu`] with act = erf-GELU, `out = gelu(g)·u`. Output M × width/2.
///
/// # Errors
/// As [`glu`].
pub fn geglu(
    rows: usize,
    width: usize,
    x: &[f64],
    layout: PairLayout,
) -> Result<Vec<f64>, ReferenceError> {
    glu(rows, width, x, layout, gelu_erf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_pick_the_right_columns() {
        // One row, d = 2: half-split [g0 g1 | u0 u1], interleaved [g0 u0 g1 u1].
        let id = |g: f64| g;
        let hs = glu(1, 4, &[1.0, 2.0, 10.0, 20.0], PairLayout::HalfSplit, id).unwrap();
        let il = glu(1, 4, &[1.0, 10.0, 2.0, 20.0], PairLayout::Interleaved, id).unwrap();
        assert_eq!(hs, vec![10.0, 40.0]);
        assert_eq!(il, hs);
        assert_eq!(
            swiglu(1, 3, &[0.0; 3], PairLayout::HalfSplit),
            Err(ReferenceError::OddPairWidth { width: 3 })
        );
    }
}
