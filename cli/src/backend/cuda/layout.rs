//! How attention heads are laid out on the GPU: exactly as the model defines them.
//!
//! The QKV projection writes `[B·T, 3·d]` (columns `[Q | K | V]`, each `heads` heads of
//! `head_dim` contiguous columns, the row order of the packed weight `[3d, d]`), the attention
//! kernel ([`fused_gemm::bert::attention`]) reads it with the model's head dimension and writes
//! the context `[B·T, d]`, heads concatenated, which the output projection reads with the
//! model's weight `[d, d]`. No weight is rewritten. The kernel is built for the head
//! dimensions in [`fused_gemm::bert::HEAD_DIMS`] (all-MiniLM-L6-v2: 12 heads of 32); a model
//! with another head dimension is rejected when the backend is created.

use crate::config::MiniLmConfig;
use crate::error::{Error, Result};

/// Heads of the model as the GPU kernels see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadLayout {
    /// Attention heads H.
    pub heads: usize,
    /// The model's head dimension (`hidden_size / heads`), one of
    /// [`fused_gemm::bert::HEAD_DIMS`].
    pub head_dim: usize,
}

impl HeadLayout {
    /// The layout of `config` for the attention kernel.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`model`) as [`HeadLayout::new`].
    pub fn for_kernel(config: &MiniLmConfig) -> Result<Self> {
        Self::new(config.num_heads, config.head_dim())
    }

    /// `heads` heads of `head_dim` columns.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`model`) unless `heads ≥ 1` and `head_dim` is one the GPU
    /// attention kernel is built for ([`fused_gemm::bert::HEAD_DIMS`]).
    pub fn new(heads: usize, head_dim: usize) -> Result<Self> {
        if heads == 0 || !fused_gemm::bert::HEAD_DIMS.contains(&head_dim) {
            return Err(Error::invalid(
                "model",
                format!(
                    "attention heads of {:?} columns (the GPU attention kernel's)",
                    fused_gemm::bert::HEAD_DIMS
                ),
                format!("{heads} heads of {head_dim} columns"),
            ));
        }
        Ok(HeadLayout { heads, head_dim })
    }

    /// The model's hidden size `heads · head_dim`, also the width of the context.
    pub fn hidden(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of the context (attention output) on the GPU, `heads · head_dim`.
    pub fn ctx_width(&self) -> usize {
        self.hidden()
    }

    /// Width of the QKV projection output on the GPU, `3 · heads · head_dim`.
    pub fn qkv_width(&self) -> usize {
        3 * self.hidden()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::Backend;
    use crate::backend::cpu::{CpuBackend, CpuTensor};
    use crate::config::Activation;
    use crate::tokenize::TokenBatch;
    use crate::weights::{EmbeddingWeights, LayerNormWeights, ModelWeights};

    /// Deterministic values in [-1, 1) that differ per tensor and element.
    fn values(seed: usize, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5) - 1.0)
            .collect()
    }

    /// A model whose only use here is its config (the CPU backend's attention reads no weight).
    fn model(hidden: usize, heads: usize) -> ModelWeights {
        let ln = LayerNormWeights {
            gamma: vec![1.0; hidden],
            beta: vec![0.0; hidden],
        };
        ModelWeights {
            config: MiniLmConfig {
                vocab_size: 8,
                hidden_size: hidden,
                num_layers: 0,
                num_heads: heads,
                intermediate_size: 4 * hidden,
                max_position_embeddings: 64,
                type_vocab_size: 2,
                layer_norm_eps: 1e-12,
                activation: Activation::GeluErf,
            },
            embeddings: EmbeddingWeights {
                word: vec![0.0; 8 * hidden],
                position: vec![0.0; 64 * hidden],
                token_type: vec![0.0; 2 * hidden],
                layer_norm: ln,
            },
            layers: Vec::new(),
        }
    }

    /// The layout the GPU kernels are tested against (`reference::bert::attention` on the
    /// `[B·T, qkv_width]` projection, heads of `head_dim`) is the layout of the model as the
    /// CPU backend computes it: same context, column for column, on every real token.
    #[test]
    fn gpu_layout_computes_the_cpu_backends_attention() {
        for (hidden, heads) in [(64, 2), (384, 12), (128, 1)] {
            let m = Arc::new(model(hidden, heads));
            let layout = HeadLayout::for_kernel(&m.config).unwrap();
            assert_eq!(layout.ctx_width(), hidden);
            let batch = TokenBatch::pad(&[vec![1u32; 5], vec![2; 3]], 0).unwrap();
            let (rows, t) = (batch.tokens(), batch.seq_len);
            let qkv = CpuTensor {
                rows,
                cols: layout.qkv_width(),
                data: values(hidden, rows * layout.qkv_width())
                    .iter()
                    .map(|v| 2.0 * v)
                    .collect(),
            };
            let mut cpu = CpuBackend::new(m.clone(), crate::backend::Dtype::F32).unwrap();
            let inputs = cpu.upload_inputs(&batch).unwrap();
            let mut ctx = CpuTensor {
                rows,
                cols: hidden,
                data: vec![0.0; rows * hidden],
            };
            cpu.attention(0, &inputs, &qkv, &mut ctx).unwrap();

            let lengths: Vec<u32> = batch.lengths.iter().map(|&l| l as u32).collect();
            let qkv64: Vec<f64> = qkv.data.iter().map(|&v| v as f64).collect();
            let want = fused_gemm::host::reference::bert::attention(
                &qkv64,
                &lengths,
                t,
                layout.heads,
                layout.head_dim,
            );
            for (b, &len) in batch.lengths.iter().enumerate() {
                let real = (b * t * hidden)..((b * t + len) * hidden);
                for (i, (&g, &w)) in ctx.data[real.clone()].iter().zip(&want[real]).enumerate() {
                    assert!(
                        (g as f64 - w).abs() <= 1e-5 * w.abs().max(1.0),
                        "hidden {hidden}, sequence {b}, element {i}: CPU backend {g}, kernel reference {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn minilm_runs_unpadded_heads_of_32() {
        let l = HeadLayout::for_kernel(&MiniLmConfig::ALL_MINILM_L6_V2).unwrap();
        assert_eq!((l.heads, l.head_dim), (12, 32));
        assert_eq!((l.qkv_width(), l.ctx_width()), (1152, 384));
    }

    #[test]
    fn head_dims_without_a_kernel_are_errors() {
        for (heads, hd) in [(2, 65), (4, 96), (8, 48), (2, 16), (1, 256)] {
            assert!(
                matches!(
                    HeadLayout::new(heads, hd),
                    Err(Error::InvalidArgument { arg: "model", .. })
                ),
                "{heads}x{hd}"
            );
        }
        assert!(HeadLayout::new(0, 32).is_err());
        for hd in fused_gemm::bert::HEAD_DIMS {
            assert_eq!(HeadLayout::new(3, hd).unwrap().qkv_width(), 9 * hd);
        }
    }
}
