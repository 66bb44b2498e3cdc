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
//! GPT-NeoX's `rotary_pct`). Which columns form pair i is the layout ([`PairLayout`]):
//! `(i, i + d/2)` for [`PairLayout::HalfSplit`] (Hugging Face checkpoints, `rotate_half`) and
//! `(2i, 2i + 1)` for [`PairLayout::Interleaved`] (RoFormer, GPT-J, and the fused kernel once
//! the Q/K weight rows are permuted with `crate::weights`).

use super::{PairLayout, ReferenceError, check_shape};

/// A rotary embedding over the rows of an M × width matrix holding `width / head_dim` heads
/// per row. Row r is the token at position `r % seq_len + pos_offset` (rows are `seq_len`-token
/// sequences stacked, each starting at the KV-cache offset `pos_offset`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeConfig {
    /// Frequency base θ (10000 for LLaMA-2 and BERT-era models, 500000 for LLaMA-3).
    pub theta: f64,
    /// Columns per head.
    pub head_dim: usize,
    /// Rotated columns at the start of each head: even, ≤ `head_dim`.
    pub rotary_dim: usize,
    /// Tokens per sequence (≥ 1).
    pub seq_len: usize,
    /// Position of each sequence's first row.
    pub pos_offset: usize,
    /// Which columns form a pair.
    pub layout: PairLayout,
}

impl RopeConfig {
    /// Full-width rotation of one sequence of `seq_len` tokens from position 0.
    pub fn new(theta: f64, head_dim: usize, seq_len: usize, layout: PairLayout) -> RopeConfig {
        RopeConfig {
            theta,
            head_dim,
            rotary_dim: head_dim,
            seq_len,
            pos_offset: 0,
            layout,
        }
    }

    /// Checks the configuration on its own.
    ///
    /// # Errors
    /// [`ReferenceError::ZeroDim`] for `head_dim` or `seq_len` of 0,
    /// [`ReferenceError::OddRotaryDim`], [`ReferenceError::RotaryDimTooLarge`],
    /// [`ReferenceError::InvalidTheta`] unless θ is finite and > 0, and
    /// [`ReferenceError::TooLarge`] if the last position, `pos_offset + seq_len − 1`, overflows
    /// `usize`.
    pub fn validate(&self) -> Result<(), ReferenceError> {
        if self.head_dim == 0 {
            return Err(ReferenceError::ZeroDim { what: "head_dim" });
        }
        if self.seq_len == 0 {
            return Err(ReferenceError::ZeroDim { what: "seq_len" });
        }
        if !self.rotary_dim.is_multiple_of(2) {
            return Err(ReferenceError::OddRotaryDim {
                rotary_dim: self.rotary_dim,
            });
        }
        if self.rotary_dim > self.head_dim {
            return Err(ReferenceError::RotaryDimTooLarge {
                rotary_dim: self.rotary_dim,
                head_dim: self.head_dim,
            });
        }
        if !(self.theta.is_finite() && self.theta > 0.0) {
            return Err(ReferenceError::InvalidTheta { theta: self.theta });
        }
        if self.pos_offset.checked_add(self.seq_len - 1).is_none() {
            return Err(ReferenceError::TooLarge {
                what: "pos_offset + seq_len − 1",
                detail: format!("{} + {} − 1 overflows usize", self.pos_offset, self.seq_len),
            });
        }
        Ok(())
    }

    /// Position of row `r`; saturates at `usize::MAX` (never for a configuration that passes
    /// [`validate`](RopeConfig::validate)), and `seq_len = 0` counts as 1.
    pub fn position(&self, r: usize) -> usize {
        (r % self.seq_len.max(1)).saturating_add(self.pos_offset)
    }

    /// Columns (within a head) of pair `i`, for `i < rotary_dim / 2`.
    pub fn pair(&self, i: usize) -> (usize, usize) {
        match self.layout {
            PairLayout::Interleaved => (2 * i, 2 * i + 1),
            PairLayout::HalfSplit => (i, i + self.rotary_dim / 2),
        }
    }

    /// ω_i = θ^(−2i/d).
    pub fn inv_freq(&self, i: usize) -> f64 {
        self.theta.powf(-((2 * i) as f64) / self.rotary_dim as f64)
    }

    /// Rotates one head (`head.len() == head_dim`) in place as the token at `pos`.
    /// The configuration must be valid ([`validate`](RopeConfig::validate)).
    pub fn rotate_head(&self, head: &mut [f64], pos: usize) {
        for i in 0..self.rotary_dim / 2 {
            let (a, b) = self.pair(i);
            let (s, c) = (pos as f64 * self.inv_freq(i)).sin_cos();
            let (x, y) = (head[a], head[b]);
            head[a] = x * c - y * s;
            head[b] = y * c + x * s;
        }
    }
}

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
