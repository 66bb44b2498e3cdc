//! The CPU backend: f32 throughout, GEMMs through `matrixmultiply::sgemm` (SIMD micro-kernels,
//! multithreaded; set `MATMUL_NUM_THREADS` to pin the thread count).

use std::sync::Arc;

use crate::backend::{Activations, Backend, Dtype};
use crate::config::{Activation, MiniLmConfig};
use crate::error::{Error, Result};
use crate::tokenize::TokenBatch;
use crate::weights::{LayerWeights, Linear, ModelWeights};

/// A row-major `[rows, cols]` f32 matrix in host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTensor {
    /// Rows (M).
    pub rows: usize,
    /// Columns; also the row stride.
    pub cols: usize,
    /// `rows·cols` values.
    pub data: Vec<f32>,
}

/// A token batch checked by [`TokenBatch::validate`] against the model: what
/// [`Backend::upload_inputs`] returns, so that the steps never index past the batch or the
/// embedding tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuInputs(TokenBatch);

impl CpuInputs {
    /// The checked batch.
    pub fn batch(&self) -> &TokenBatch {
        &self.0
    }
}

/// The CPU implementation of [`Backend`], f32 only.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    weights: Arc<ModelWeights>,
}

impl CpuBackend {
    /// A CPU backend over `weights`.
    ///
    /// # Errors
    /// [`Error::UnsupportedDtype`] for any `dtype` other than [`Dtype::F32`]; as
    /// [`ModelWeights::check_shapes`].
    pub fn new(weights: Arc<ModelWeights>, dtype: Dtype) -> Result<Self> {
        if dtype != Dtype::F32 {
            return Err(Error::UnsupportedDtype {
                backend: "cpu",
                requested: dtype,
                supported: "f32",
            });
        }
        weights.check_shapes()?;
        Ok(CpuBackend { weights })
    }

    fn layer(&self, layer: usize) -> Result<&LayerWeights> {
        let layers = &self.weights.layers;
        layers
            .get(layer)
            .ok_or_else(|| Error::invalid("layer", format!("below {}", layers.len()), layer))
    }

    fn check_shape(t: &CpuTensor, rows: usize, cols: usize, what: &'static str) -> Result<()> {
        if t.rows != rows || t.cols != cols || Some(t.data.len()) != rows.checked_mul(cols) {
            return Err(Error::invalid(
                what,
                format!("[{rows}, {cols}]"),
                format!("[{}, {}]", t.rows, t.cols),
            ));
        }
        Ok(())
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Inputs = CpuInputs;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn config(&self) -> &MiniLmConfig {
        &self.weights.config
    }

    fn upload_inputs(&mut self, batch: &TokenBatch) -> Result<CpuInputs> {
        batch.validate(self.config())?;
        Ok(CpuInputs(batch.clone()))
    }

    fn activations(&mut self, rows: usize) -> Result<Activations<CpuTensor>> {
        let c = &self.weights.config;
        let (d, f) = (c.hidden_size, c.intermediate_size);
        let zeros = |cols: usize| -> Result<CpuTensor> {
            let too_many = || Error::invalid("activation rows", "a size that fits in memory", rows);
            let len = rows.checked_mul(cols).ok_or_else(too_many)?;
            let mut data = Vec::new();
            data.try_reserve_exact(len).map_err(|_| too_many())?;
            data.resize(len, 0.0);
            Ok(CpuTensor { rows, cols, data })
        };
        Ok(Activations {
            x: zeros(d)?,
            h: zeros(d)?,
            qkv: zeros(d.saturating_mul(3))?,
            ctx: zeros(d)?,
            mid: zeros(f)?,
        })
    }

    fn embeddings(&mut self, inputs: &CpuInputs, x: &mut CpuTensor) -> Result<()> {
        let inputs = inputs.batch();
        let c = &self.weights.config;
        let e = &self.weights.embeddings;
        let d = c.hidden_size;
        Self::check_shape(x, inputs.tokens(), d, "embeddings output")?;
        for (m, row) in x.data.chunks_exact_mut(d).enumerate() {
            let (id, ty, pos) = (
                inputs.ids[m] as usize,
                inputs.type_ids[m] as usize,
                m % inputs.seq_len,
            );
            let w = &e.word[id * d..(id + 1) * d];
            let p = &e.position[pos * d..(pos + 1) * d];
            let t = &e.token_type[ty * d..(ty + 1) * d];
            for j in 0..d {
                row[j] = w[j] + p[j] + t[j];
            }
            layer_norm_row(
                row,
                &e.layer_norm.gamma,
                &e.layer_norm.beta,
                c.layer_norm_eps,
            );
        }
        Ok(())
    }

    fn qkv_projection(&mut self, layer: usize, x: &CpuTensor, qkv: &mut CpuTensor) -> Result<()> {
        linear(x, &self.layer(layer)?.qkv, qkv)
    }

    fn attention(
        &mut self,
        _layer: usize,
        inputs: &CpuInputs,
        qkv: &CpuTensor,
        ctx: &mut CpuTensor,
    ) -> Result<()> {
        let inputs = inputs.batch();
        let c = &self.weights.config;
        let (d, heads, hd) = (c.hidden_size, c.num_heads, c.head_dim());
        let t = inputs.seq_len;
        Self::check_shape(qkv, inputs.tokens(), 3 * d, "attention qkv")?;
        Self::check_shape(ctx, inputs.tokens(), d, "attention output")?;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut scores = vec![0.0f32; t * t];
        for b in 0..inputs.batch {
            let mask = &inputs.mask[b * t..(b + 1) * t];
            let base = b * t * 3 * d;
            for h in 0..heads {
                // scores[i, j] = q_i · k_j · scale: A = Q [t, hd] (row stride 3d),
                // B = Kᵀ [hd, t] (K rows read as columns).
                let q = &qkv.data[base + h * hd..];
                let k = &qkv.data[base + d + h * hd..];
                let v = &qkv.data[base + 2 * d + h * hd..];
                // SAFETY: every index sgemm touches is inside the slices: Q/K/V rows
                // 0..t with stride 3d starting at column offsets < 3d, scores is t×t.
                unsafe {
                    matrixmultiply::sgemm(
                        t,
                        hd,
                        t,
                        scale,
                        q.as_ptr(),
                        (3 * d) as isize,
                        1,
                        k.as_ptr(),
                        1,
                        (3 * d) as isize,
                        0.0,
                        scores.as_mut_ptr(),
                        t as isize,
                        1,
                    );
                }
                for row in scores.chunks_exact_mut(t) {
                    masked_softmax(row, mask);
                }
                let out = &mut ctx.data[b * t * d + h * hd..];
                // SAFETY: P is t×t; V rows 0..t with stride 3d; ctx rows 0..t with stride d
                // starting at column h·hd, hd columns wide, all in bounds.
                unsafe {
                    matrixmultiply::sgemm(
                        t,
                        t,
                        hd,
                        1.0,
                        scores.as_ptr(),
                        t as isize,
                        1,
                        v.as_ptr(),
                        (3 * d) as isize,
                        1,
                        0.0,
                        out.as_mut_ptr(),
                        d as isize,
                        1,
                    );
                }
            }
        }
        Ok(())
    }

    fn attn_out_residual_layernorm(
        &mut self,
        layer: usize,
        ctx: &CpuTensor,
        residual: &CpuTensor,
        out: &mut CpuTensor,
    ) -> Result<()> {
        let l = self.layer(layer)?;
        linear(ctx, &l.attn_out, out)?;
        residual_layer_norm(
            out,
            residual,
            &l.attn_norm.gamma,
            &l.attn_norm.beta,
            self.weights.config.layer_norm_eps,
        )
    }

    fn ffn_up_gelu(&mut self, layer: usize, h: &CpuTensor, mid: &mut CpuTensor) -> Result<()> {
        linear(h, &self.layer(layer)?.ffn_up, mid)?;
        let act: Activation = self.weights.config.activation;
        for v in &mut mid.data {
            *v = act.apply(*v);
        }
        Ok(())
    }

    fn ffn_down_residual_layernorm(
        &mut self,
        layer: usize,
        mid: &CpuTensor,
        residual: &CpuTensor,
        out: &mut CpuTensor,
    ) -> Result<()> {
        let l = self.layer(layer)?;
        linear(mid, &l.ffn_down, out)?;
        residual_layer_norm(
            out,
            residual,
            &l.ffn_norm.gamma,
            &l.ffn_norm.beta,
            self.weights.config.layer_norm_eps,
        )
    }

    fn mean_pool_normalize(&mut self, inputs: &CpuInputs, x: &CpuTensor) -> Result<Vec<f32>> {
        let inputs = inputs.batch();
        let d = self.weights.config.hidden_size;
        Self::check_shape(x, inputs.tokens(), d, "pooling input")?;
        let t = inputs.seq_len;
        let mut out = vec![0.0f32; inputs.batch * d];
        for (b, o) in out.chunks_exact_mut(d).enumerate() {
            let mask = &inputs.mask[b * t..(b + 1) * t];
            let rows = x.data[b * t * d..(b + 1) * t * d].chunks_exact(d);
            mean_pool_row(o, rows, mask);
            l2_normalize(o);
        }
        Ok(out)
    }

    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }
}

/// `out = x·Wᵀ + b` for `x: [M, K]`, `W: [N, K]`, `out: [M, N]`.
fn linear(x: &CpuTensor, w: &Linear, out: &mut CpuTensor) -> Result<()> {
    let (m, k, n) = (x.rows, w.in_features, w.out_features);
    CpuBackend::check_shape(x, m, k, "linear input")?;
    CpuBackend::check_shape(out, m, n, "linear output")?;
    if Some(w.weight.len()) != n.checked_mul(k) || w.bias.len() != n {
        return Err(Error::invalid(
            "linear layer",
            format!("a [{n}, {k}] weight and {n} biases"),
            format!("{} weights, {} biases", w.weight.len(), w.bias.len()),
        ));
    }
    for row in out.data.chunks_exact_mut(n) {
        row.copy_from_slice(&w.bias);
    }
    // SAFETY: x is m×k row-major, W is n×k row-major read as the k×n matrix Wᵀ
    // (row stride 1, column stride k), out is m×n row-major; lengths checked above.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            x.data.as_ptr(),
            k as isize,
            1,
            w.weight.as_ptr(),
            1,
            k as isize,
            1.0,
            out.data.as_mut_ptr(),
            n as isize,
            1,
        );
    }
    Ok(())
}

/// `out[m] = LN(out[m] + residual[m])` row by row.
fn residual_layer_norm(
    out: &mut CpuTensor,
    residual: &CpuTensor,
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) -> Result<()> {
    CpuBackend::check_shape(residual, out.rows, out.cols, "residual")?;
    let d = out.cols;
    for (row, res) in out
        .data
        .chunks_exact_mut(d)
        .zip(residual.data.chunks_exact(d))
    {
        for (o, r) in row.iter_mut().zip(res) {
            *o += r;
        }
        layer_norm_row(row, gamma, beta, eps);
    }
    Ok(())
}

/// LayerNorm of one row in place: `y_j = (x_j − μ)/√(σ² + eps)·gamma_j + beta_j` with the
/// population variance σ². Mean and variance are accumulated in f64 over two passes, so a
/// constant row gives exactly `beta` even at magnitudes where an f32 sum overflows, and a NaN
/// stays in its own row.
///
/// `row`, `gamma` and `beta` have the same length (panics otherwise: internal use only).
pub fn layer_norm_row(row: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    assert!(row.len() == gamma.len() && row.len() == beta.len());
    let n = row.len() as f64;
    let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = row
        .iter()
        .map(|&v| {
            let c = v as f64 - mean;
            c * c
        })
        .sum::<f64>()
        / n;
    let rstd = 1.0 / (var + eps as f64).sqrt();
    for ((v, &g), &b) in row.iter_mut().zip(gamma).zip(beta) {
        *v = ((*v as f64 - mean) * rstd) as f32 * g + b;
    }
}

/// Softmax of one row of attention scores in place; entries whose `mask` is 0 get exactly 0.
/// A row with no unmasked entry becomes all zeros.
fn masked_softmax(row: &mut [f32], mask: &[u32]) {
    let max = row
        .iter()
        .zip(mask)
        .filter(|(_, m)| **m != 0)
        .map(|(v, _)| *v)
        .fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for (v, &m) in row.iter_mut().zip(mask) {
        *v = if m != 0 { (*v - max).exp() } else { 0.0 };
        sum += *v;
    }
    if sum > 0.0 {
        let inv = 1.0 / sum;
        for v in row.iter_mut() {
            *v *= inv;
        }
    }
}

/// `out = Σ_t mask_t·x_t / max(Σ_t mask_t, 1e-9)` (sentence-transformers' mean pooling).
fn mean_pool_row<'a>(out: &mut [f32], rows: impl Iterator<Item = &'a [f32]>, mask: &[u32]) {
    out.fill(0.0);
    let mut count = 0.0f32;
    for (x, &m) in rows.zip(mask) {
        if m != 0 {
            count += 1.0;
            for (o, v) in out.iter_mut().zip(x) {
                *o += v;
            }
        }
    }
    let inv = 1.0 / count.max(1e-9);
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// `v / max(‖v‖₂, 1e-12)` in place (PyTorch's `F.normalize`).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt() as f32;
    let inv = 1.0 / norm.max(1e-12);
    for x in v.iter_mut() {
        *x *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ln(x: &[f32], eps: f32) -> Vec<f32> {
        let mut r = x.to_vec();
        layer_norm_row(&mut r, &vec![1.0; x.len()], &vec![0.0; x.len()], eps);
        r
    }

    #[test]
    fn layer_norm_of_constant_and_extreme_rows_is_beta() {
        // A constant row's LayerNorm is exactly beta: 384 × 1234.0, zeros and 8.5e37 (where a
        // plain f32 sum overflows).
        let beta: Vec<f32> = (0..384).map(|i| i as f32 * 0.01 - 1.0).collect();
        let gamma = vec![2.0f32; 384];
        for c in [1234.0f32, 0.0, 8.5e37] {
            let mut row = vec![c; 384];
            layer_norm_row(&mut row, &gamma, &beta, 1e-12);
            assert_eq!(row, beta, "constant row {c}");
        }
    }

    #[test]
    fn layer_norm_nan_stays_in_its_row() {
        let mut t = CpuTensor {
            rows: 2,
            cols: 4,
            data: vec![1.0, 2.0, f32::NAN, 4.0, 1.0, 2.0, 3.0, 4.0],
        };
        let zero = CpuTensor {
            rows: 2,
            cols: 4,
            data: vec![0.0; 8],
        };
        residual_layer_norm(&mut t, &zero, &[1.0; 4], &[0.0; 4], 1e-12).unwrap();
        assert!(t.data[..4].iter().all(|v| v.is_nan()));
        assert!(t.data[4..].iter().all(|v| v.is_finite()), "{:?}", t.data);
    }

    #[test]
    fn layer_norm_narrow_row() {
        // A row narrower than any block: N = 3, x = [1, 2, 3], eps 1e-5.
        let r = ln(&[1.0, 2.0, 3.0], 1e-5);
        let want = [-1.2247357f32, 0.0, 1.2247357];
        for (g, w) in r.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{r:?}");
        }
    }

    #[test]
    fn layer_norm_ramp_matches_float64() {
        // A ramp x_i = i over N = 384, against float64.
        let x: Vec<f32> = (0..384).map(|i| i as f32).collect();
        let r = ln(&x, 1e-12);
        let mean = 191.5f64;
        let var = (0..384).map(|i| (i as f64 - mean).powi(2)).sum::<f64>() / 384.0;
        for (i, g) in r.iter().enumerate() {
            let w = (i as f64 - mean) / var.sqrt();
            assert!((*g as f64 - w).abs() < 1e-6, "i={i}: {g} vs {w}");
        }
    }

    #[test]
    fn masked_softmax_gives_padding_zero_weight() {
        let mut row = [1.0f32, 2.0, 100.0, -5.0];
        masked_softmax(&mut row, &[1, 1, 0, 0]);
        let e = (1.0f32).exp();
        assert_eq!(row[2], 0.0);
        assert_eq!(row[3], 0.0);
        assert!((row[0] - 1.0 / (1.0 + e)).abs() < 1e-7, "{row:?}");
        assert!((row[0] + row[1] - 1.0).abs() < 1e-7);
    }

    #[test]
    fn linear_matches_naive_loop_on_awkward_shape() {
        let (m, k, n) = (5, 17, 3);
        let x = CpuTensor {
            rows: m,
            cols: k,
            data: (0..m * k).map(|i| ((i * 7) % 11) as f32 - 5.0).collect(),
        };
        let w = Linear {
            out_features: n,
            in_features: k,
            weight: (0..n * k)
                .map(|i| ((i * 3) % 13) as f32 * 0.25 - 1.0)
                .collect(),
            bias: vec![0.5, -1.0, 2.0],
        };
        let mut out = CpuTensor {
            rows: m,
            cols: n,
            data: vec![f32::NAN; m * n],
        };
        linear(&x, &w, &mut out).unwrap();
        for i in 0..m {
            for j in 0..n {
                let want: f64 = w.bias[j] as f64
                    + (0..k)
                        .map(|p| x.data[i * k + p] as f64 * w.weight[j * k + p] as f64)
                        .sum::<f64>();
                assert!((out.data[i * n + j] as f64 - want).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn mean_pool_ignores_padding_and_normalizes() {
        let rows = [[1.0f32, 0.0], [3.0, 4.0], [100.0, 100.0]];
        let mut out = [0.0f32; 2];
        mean_pool_row(&mut out, rows.iter().map(|r| &r[..]), &[1, 1, 0]);
        assert_eq!(out, [2.0, 2.0]);
        l2_normalize(&mut out);
        let s = std::f32::consts::FRAC_1_SQRT_2;
        assert!((out[0] - s).abs() < 1e-7 && (out[1] - s).abs() < 1e-7);
    }
}
