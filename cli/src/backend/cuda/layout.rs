//! How attention heads are laid out on the GPU, and the host-side weight rewrite that makes a
//! head-dimension-64 attention kernel compute attention with a smaller head dimension exactly.
//!
//! The project's attention kernel ([`fused_gemm::bert::attention`]) reads heads of
//! [`fused_gemm::bert::HEAD_DIM`] = 64 columns and scales scores by `1/√64`. all-MiniLM-L6-v2
//! has 12 heads of 32. Padding every head to 64 columns with zeros keeps the mathematics
//! unchanged:
//! - QKV projection: each head's 32 weight rows (and bias entries) are placed at the start of a
//!   64-row slot whose other 32 rows are zero, so the padded columns of Q, K and V are exactly
//!   0 and `q'·k' = q·k`. The Q rows are multiplied by `√(64/32)`, so that
//!   `q'·k'/√64 = q·k/√32` (the factor is applied to the f32 weights before the one rounding to
//!   f16/bf16, so it adds no rounding step).
//! - attention output: `softmax(·)·v'` has zeros in each head's padded columns.
//! - output projection: the weight `[d, d]` becomes `[d, heads·64]` with zero columns where the
//!   context has padding, so `ctx'·W'ᵀ = ctx·Wᵀ`.
//!
//! The cost is a QKV GEMM twice as wide (N = 2304 instead of 1152), an output projection with
//! twice the K (768) and twice the attention work. A head-dimension-32 attention kernel removes
//! all three; then [`HeadLayout::padded_head_dim`] equals the head dimension and the rewrite is
//! the identity.

use crate::config::MiniLmConfig;
use crate::error::{Error, Result};
use crate::weights::Linear;

/// Heads of the model and their width on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadLayout {
    /// Attention heads H.
    pub heads: usize,
    /// The model's head dimension (`hidden_size / heads`).
    pub head_dim: usize,
    /// Columns per head in the QKV output and the context on the GPU (≥ `head_dim`).
    pub padded_head_dim: usize,
}

impl HeadLayout {
    /// The layout for the attention kernel: heads padded to [`fused_gemm::bert::HEAD_DIM`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`model`) when the head dimension exceeds the kernel's.
    pub fn for_kernel(config: &MiniLmConfig) -> Result<Self> {
        Self::new(
            config.num_heads,
            config.head_dim(),
            fused_gemm::bert::HEAD_DIM,
        )
    }

    /// `heads` heads of `head_dim` columns padded to `padded_head_dim`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`model`) unless `1 ≤ head_dim ≤ padded_head_dim` and
    /// `heads ≥ 1`.
    pub fn new(heads: usize, head_dim: usize, padded_head_dim: usize) -> Result<Self> {
        if heads == 0 || head_dim == 0 || head_dim > padded_head_dim {
            return Err(Error::invalid(
                "model",
                format!(
                    "attention heads of 1..={padded_head_dim} columns (the GPU attention kernel's)"
                ),
                format!("{heads} heads of {head_dim} columns"),
            ));
        }
        Ok(HeadLayout {
            heads,
            head_dim,
            padded_head_dim,
        })
    }

    /// The model's hidden size `heads · head_dim`.
    pub fn hidden(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of the context on the GPU, `heads · padded_head_dim`.
    pub fn ctx_width(&self) -> usize {
        self.heads * self.padded_head_dim
    }

    /// Width of the QKV projection output on the GPU, `3 · heads · padded_head_dim`.
    pub fn qkv_width(&self) -> usize {
        3 * self.ctx_width()
    }

    /// The factor on Q that turns the kernel's `1/√padded` score scale into `1/√head_dim`:
    /// `√(padded / head_dim)` (exactly 1 without padding).
    pub fn q_scale(&self) -> f32 {
        if self.padded_head_dim == self.head_dim {
            1.0
        } else {
            (self.padded_head_dim as f64 / self.head_dim as f64).sqrt() as f32
        }
    }

    /// The packed QKV layer (`[3d, d]` weight, `[3d]` bias, rows Q | K | V, heads of
    /// `head_dim` rows within each) rewritten for the GPU: weight `[qkv_width, d]` and bias
    /// `[qkv_width]` with every head in a `padded_head_dim`-row slot (zeros after its rows) and
    /// the Q rows multiplied by [`HeadLayout::q_scale`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`qkv weight`) when the layer is not `[3d, d]`.
    pub fn pad_qkv(&self, qkv: &Linear) -> Result<(Vec<f32>, Vec<f32>)> {
        let d = self.hidden();
        if qkv.out_features != 3 * d || qkv.in_features != d {
            return Err(Error::invalid(
                "qkv weight",
                format!("[{}, {d}]", 3 * d),
                format!("[{}, {}]", qkv.out_features, qkv.in_features),
            ));
        }
        let (hd, p) = (self.head_dim, self.padded_head_dim);
        let mut w = vec![0.0f32; self.qkv_width() * d];
        let mut b = vec![0.0f32; self.qkv_width()];
        for part in 0..3 {
            let scale = if part == 0 { self.q_scale() } else { 1.0 };
            for h in 0..self.heads {
                for r in 0..hd {
                    let src = part * d + h * hd + r;
                    let dst = part * self.ctx_width() + h * p + r;
                    for (o, &v) in w[dst * d..(dst + 1) * d]
                        .iter_mut()
                        .zip(&qkv.weight[src * d..(src + 1) * d])
                    {
                        *o = v * scale;
                    }
                    b[dst] = qkv.bias[src] * scale;
                }
            }
        }
        Ok((w, b))
    }

    /// The attention output projection's weight (`[d, d]`, input columns = heads of `head_dim`)
    /// rewritten for the padded context: `[d, ctx_width]`, zero columns at the padding.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`attention output weight`) when the layer is not `[d, d]`.
    pub fn pad_out_proj(&self, out: &Linear) -> Result<Vec<f32>> {
        let d = self.hidden();
        if out.out_features != d || out.in_features != d {
            return Err(Error::invalid(
                "attention output weight",
                format!("[{d}, {d}]"),
                format!("[{}, {}]", out.out_features, out.in_features),
            ));
        }
        let (hd, p, wide) = (self.head_dim, self.padded_head_dim, self.ctx_width());
        let mut w = vec![0.0f32; d * wide];
        for n in 0..d {
            for h in 0..self.heads {
                let src = &out.weight[n * d + h * hd..n * d + (h + 1) * hd];
                w[n * wide + h * p..n * wide + h * p + hd].copy_from_slice(src);
            }
        }
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1) that differ per tensor and element.
    fn values(seed: usize, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5) - 1.0)
            .collect()
    }

    fn linear(seed: usize, n: usize, k: usize) -> Linear {
        Linear {
            out_features: n,
            in_features: k,
            weight: values(seed, n * k),
            bias: values(seed + 1, n),
        }
    }

    /// `x·Wᵀ + b` in f64; `x: [m, k]`, `w: [n, k]`.
    fn lin64(x: &[f64], m: usize, k: usize, w: &[f32], b: Option<&[f32]>, n: usize) -> Vec<f64> {
        let mut y = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = b.map_or(0.0, |b| b[j] as f64);
                for p in 0..k {
                    acc += x[i * k + p] * w[j * k + p] as f64;
                }
                y[i * n + j] = acc;
            }
        }
        y
    }

    /// Attention of one unpadded sequence in f64 over heads of `width` columns of `qkv: [t,
    /// 3·heads·width]`, scores scaled by `1/√scale_dim`, only the first `len` keys.
    fn attn64(
        qkv: &[f64],
        t: usize,
        heads: usize,
        width: usize,
        scale_dim: usize,
        len: usize,
    ) -> Vec<f64> {
        let d = heads * width;
        let mut out = vec![0.0; t * d];
        for h in 0..heads {
            for i in 0..t {
                let q = &qkv[i * 3 * d + h * width..][..width];
                let s: Vec<f64> = (0..len)
                    .map(|j| {
                        let k = &qkv[j * 3 * d + d + h * width..][..width];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (scale_dim as f64).sqrt()
                    })
                    .collect();
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - max).exp()).collect();
                let z: f64 = e.iter().sum();
                for (j, p) in e.iter().enumerate() {
                    let v = &qkv[j * 3 * d + 2 * d + h * width..][..width];
                    for c in 0..width {
                        out[i * d + h * width + c] += p / z * v[c];
                    }
                }
            }
        }
        out
    }

    #[test]
    fn padded_heads_compute_the_same_attention_block() {
        // 3 heads of 4 padded to 8 (MiniLM: 12 of 32 padded to 64), 5 tokens, 4 of them real.
        let (heads, hd, p, t, len) = (3, 4, 8, 5, 4);
        let d = heads * hd;
        let layout = HeadLayout::new(heads, hd, p).unwrap();
        let qkv = linear(1, 3 * d, d);
        let out = linear(3, d, d);
        let x: Vec<f64> = values(5, t * d).iter().map(|&v| v as f64).collect();

        let q = lin64(&x, t, d, &qkv.weight, Some(&qkv.bias), 3 * d);
        let ctx = attn64(&q, t, heads, hd, hd, len);
        let want = lin64(&ctx, t, d, &out.weight, Some(&out.bias), d);

        let (wq, bq) = layout.pad_qkv(&qkv).unwrap();
        let q2 = lin64(&x, t, d, &wq, Some(&bq), layout.qkv_width());
        for (i, v) in q2.iter().enumerate() {
            if i % layout.qkv_width() % p >= hd {
                assert_eq!(
                    *v,
                    0.0,
                    "padding column {} of row {}",
                    i % layout.qkv_width(),
                    i
                );
            }
        }
        // The kernel scales by 1/√(padded head dim).
        let ctx2 = attn64(&q2, t, heads, p, p, len);
        let wo = layout.pad_out_proj(&out).unwrap();
        let got = lin64(&ctx2, t, layout.ctx_width(), &wo, Some(&out.bias), d);
        // Rows of real tokens only (padded query rows are never pooled).
        for i in 0..len * d {
            assert!(
                (got[i] - want[i]).abs() <= 1e-6 * want[i].abs().max(1.0),
                "element {i}: {} vs {}",
                got[i],
                want[i]
            );
        }
    }

    #[test]
    fn minilm_layout_and_identity_without_padding() {
        let l = HeadLayout::for_kernel(&MiniLmConfig::ALL_MINILM_L6_V2).unwrap();
        assert_eq!((l.heads, l.head_dim, l.padded_head_dim), (12, 32, 64));
        assert_eq!((l.qkv_width(), l.ctx_width()), (2304, 768));
        assert!((l.q_scale() - std::f32::consts::SQRT_2).abs() < 1e-7);

        let same = HeadLayout::new(2, 4, 4).unwrap();
        assert_eq!(same.q_scale(), 1.0);
        let qkv = linear(7, 24, 8);
        let (w, b) = same.pad_qkv(&qkv).unwrap();
        assert_eq!((w, b), (qkv.weight.clone(), qkv.bias.clone()));
        let out = linear(9, 8, 8);
        assert_eq!(same.pad_out_proj(&out).unwrap(), out.weight);
    }

    #[test]
    fn bad_layouts_and_shapes_are_errors() {
        assert!(HeadLayout::new(2, 65, 64).is_err());
        assert!(HeadLayout::new(0, 32, 64).is_err());
        let l = HeadLayout::new(2, 4, 8).unwrap();
        assert!(l.pad_qkv(&linear(1, 8, 8)).is_err());
        assert!(l.pad_out_proj(&linear(1, 8, 16)).is_err());
    }
}
