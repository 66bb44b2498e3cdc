//! Rotary position embedding (RoPE) in f64, both pair layouts.
//!
//! Su, Lu, Pan, Murtadha, Wen, Liu 2021, "RoFormer: Enhanced Transformer with Rotary Position
//! Embedding" (arXiv 2104.09864), eq. 34, with the sign convention of LLaMA and GPT-NeoX: pair
//! `(x, y)` of a head at position p and frequency index i becomes
//!
//! ```text
//! x' = x·cos(p·ω_i) − y·sin(p·ω_i)
//! y' = y·cos(p·ω_i) + x·sin(p·ω_i),      ω_i = θ^(−2i/d),  i = 0 .. d/2
//! ```
//!
//! with d the rotary dimension (≤ head_dim; columns `d..head_dim` of each head pass through,
//! GPT-NeoX's `rotary_pct`). Which columns form pair i is the layout
//! ([`PairLayout`](super::PairLayout)): `(i, i + d/2)` for
//! [`PairLayout::HalfSplit`](super::PairLayout::HalfSplit) (Hugging Face checkpoints,
//! `rotate_half`) and `(2i, 2i + 1)` for
//! [`PairLayout::Interleaved`](super::PairLayout::Interleaved) (RoFormer, GPT-J, and the fused
//! kernel once the Q/K weight rows are permuted with `crate::weights`).

pub use super::stage::RopeConfig;
use super::stage::{ReferenceError, check_shape};

/// RoPE of an M × width row-major matrix (`rows` = M) under `cfg`; see the
/// [module docs](self) for the formula. Returns M × width.
///
/// # Errors
/// Those of [`RopeConfig::validate`] (an odd rotary dimension is
/// [`ReferenceError::OddRotaryDim`]), [`ReferenceError::WidthNotMultipleOfHead`],
/// [`ReferenceError::Length`] if `x` is not rows × width, and [`ReferenceError::TooLarge`] if
/// rows × width overflows `usize`.
pub fn rope(
    rows: usize,
    width: usize,
    x: &[f64],
    cfg: &RopeConfig,
) -> Result<Vec<f64>, ReferenceError> {
    cfg.validate()?;
    if !width.is_multiple_of(cfg.head_dim) {
        return Err(ReferenceError::WidthNotMultipleOfHead {
            width,
            head_dim: cfg.head_dim,
        });
    }
    check_shape("x", rows, width, x.len())?;
    let mut y = x.to_vec();
    if width == 0 {
        return Ok(y);
    }
    for (r, row) in y.chunks_exact_mut(width).enumerate() {
        let pos = cfg.position(r);
        for head in row.chunks_exact_mut(cfg.head_dim) {
            cfg.rotate_head(head, pos);
        }
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::epilogue::PairLayout;

    #[test]
    fn half_split_pairs_span_the_rotary_half() {
        let mut c = RopeConfig::new(10000.0, 10, 1, PairLayout::HalfSplit);
        c.rotary_dim = 6;
        assert_eq!((c.pair(0), c.pair(2)), ((0, 3), (2, 5)));
        c.layout = PairLayout::Interleaved;
        assert_eq!((c.pair(0), c.pair(2)), ((0, 1), (4, 5)));
        assert_eq!(c.inv_freq(0), 1.0);
        assert!((c.inv_freq(1) - 10000f64.powf(-2.0 / 6.0)).abs() < 1e-15);
    }

    #[test]
    fn bad_configs_are_rejected() {
        let ok = RopeConfig::new(10000.0, 8, 4, PairLayout::Interleaved);
        assert_eq!(ok.validate(), Ok(()));
        let bad = [
            RopeConfig { head_dim: 0, ..ok },
            RopeConfig { seq_len: 0, ..ok },
            RopeConfig {
                rotary_dim: 7,
                ..ok
            },
            RopeConfig {
                rotary_dim: 10,
                ..ok
            },
            RopeConfig { theta: 0.0, ..ok },
            RopeConfig {
                theta: f64::NAN,
                ..ok
            },
        ];
        for b in bad {
            assert!(b.validate().is_err(), "{b:?}");
        }
        assert_eq!(
            rope(1, 12, &[0.0; 12], &ok),
            Err(ReferenceError::WidthNotMultipleOfHead {
                width: 12,
                head_dim: 8
            })
        );
    }
}
