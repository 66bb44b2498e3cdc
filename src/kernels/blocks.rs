//! The fused GEMMs of Transformer blocks (BERT, GPT, LLaMA).

use crate::fused_gemm;

/// BERT/GPT FFN up: gelu(A·W + b), erf GELU (BERT's "gelu").
#[fused_gemm(epilogue = [bias, gelu])]
pub fn ffn_up_bias_gelu() {}
/// FFN up with f16 inputs.
#[fused_gemm(epilogue = [bias, gelu], dtype = f16)]
pub fn ffn_up_bias_gelu_f16() {}
/// GPT-2 FFN up: gelu_tanh(A·W + b).
#[fused_gemm(epilogue = [bias, gelu_tanh])]
pub fn ffn_up_bias_gelu_tanh() {}
/// BERT (post-norm) out-proj / FFN down: LayerNorm(A·W + b + residual), BERT's eps.
#[fused_gemm(epilogue = [bias, residual, layer_norm(eps = 1e-12)])]
pub fn proj_bias_residual_layer_norm() {}
/// The same with f16 inputs.
#[fused_gemm(epilogue = [bias, residual, layer_norm(eps = 1e-12)], dtype = f16)]
pub fn proj_bias_residual_layer_norm_f16() {}
/// Deferred post-norm LayerNorm, producer half: h = A·W + b + residual stored centred (each
/// row of a tile less the tile's row mean, h′), with the statistics and shifts per 64 columns
/// in `stats`; the next GEMM normalizes (`folded_ln_*`).
#[fused_gemm(epilogue = [bias, residual, row_moments])]
pub fn proj_bias_residual_moments() {}
/// The same with f16 inputs.
#[fused_gemm(epilogue = [bias, residual, row_moments], dtype = f16)]
pub fn proj_bias_residual_moments_f16() {}
/// Deferred LayerNorm, consumer half, BERT FFN up: gelu(LayerNorm(h)·W + b) from the stored
/// h′, its `row_moments` statistics and weights with γ folded in (`weights::fold_layer_norm`).
#[fused_gemm(epilogue = [folded_layer_norm(eps = 1e-12), gelu])]
pub fn folded_ln_ffn_up_gelu() {}
/// The same with f16 inputs.
#[fused_gemm(epilogue = [folded_layer_norm(eps = 1e-12), gelu], dtype = f16)]
pub fn folded_ln_ffn_up_gelu_f16() {}
/// Deferred LayerNorm, consumer half, a `Linear` layer (BERT's QKV projection):
/// LayerNorm(h)·W + b from the stored h′, its statistics and weights with γ folded in.
#[fused_gemm(epilogue = [folded_layer_norm(eps = 1e-12)])]
pub fn folded_ln_linear() {}
/// The same with f16 inputs.
#[fused_gemm(epilogue = [folded_layer_norm(eps = 1e-12)], dtype = f16)]
pub fn folded_ln_linear_f16() {}
/// A post-norm layer whose input norm was deferred too (BERT out-proj / FFN down between
/// deferred norms): A·W + b + LayerNorm(h_prev), stored centred with its row statistics.
#[fused_gemm(epilogue = [bias, normed_residual(eps = 1e-12), row_moments])]
pub fn proj_bias_normed_residual_moments() {}
/// The same with f16 inputs.
#[fused_gemm(epilogue = [bias, normed_residual(eps = 1e-12), row_moments], dtype = f16)]
pub fn proj_bias_normed_residual_moments_f16() {}
/// The last post-norm layer of an encoder whose norms were deferred (BERT FFN down of the last
/// layer): LayerNorm(A·W + b + LayerNorm(h_prev)), normalized in full for the pooling after it.
#[fused_gemm(epilogue = [bias, normed_residual(eps = 1e-12), layer_norm(eps = 1e-12)])]
pub fn proj_bias_normed_residual_layer_norm() {}
/// The same with f16 inputs.
#[fused_gemm(epilogue = [bias, normed_residual(eps = 1e-12), layer_norm(eps = 1e-12)], dtype = f16)]
pub fn proj_bias_normed_residual_layer_norm_f16() {}
/// GPT/LLaMA (pre-norm) out-proj / FFN down: A·W + b + residual.
#[fused_gemm(epilogue = [bias, residual])]
pub fn proj_bias_residual() {}
/// LLaMA MLP up: silu(gate)·up on interleaved gate/up weight rows (width N/2).
#[fused_gemm(epilogue = [swiglu])]
pub fn mlp_up_swiglu() {}
/// LLaMA RMSNorm folded into the next GEMM (CODA): diag(r)·(A·W), r the rows' 1/rms.
#[fused_gemm(epilogue = [scale(row)])]
pub fn rms_scaled_gemm() {}
/// Q/K projection with rotary embedding (interleaved pairs, θ = 500000 as LLaMA-3).
#[fused_gemm(epilogue = [rope(theta = 500000.0)])]
pub fn qk_proj_rope() {}
/// `scale` before `bias` scales only the product: `alpha·(A·W) + b`.
#[fused_gemm(epilogue = [scale(alpha), bias], arch = sm_80)]
pub fn scale_then_bias() {}
/// `scale` after `bias` scales both: `alpha·(A·W + b)`.
#[fused_gemm(epilogue = [bias, scale(alpha)], arch = sm_80)]
pub fn bias_then_scale() {}
/// A·W + b, bf16.
#[fused_gemm(epilogue = [bias])]
pub fn bias_bf16() {}
/// f16 GEMM + bias at any operand alignment (unaligned operands take the bounds-checked path).
#[fused_gemm(epilogue = [bias], dtype = f16)]
pub fn bias_f16() {}
/// Bias then erf GELU, applied once to the sum of a split-K reduction, never per split.
#[fused_gemm(epilogue = [bias, gelu], dtype = f16, out = f32, arch = sm_80)]
pub fn bias_gelu_f16_f32() {}
/// f16 RMSNorm of a row (here the residual): squares summed in f32, so no f16 overflow.
#[fused_gemm(epilogue = [residual, rms_norm(eps = 1e-6)], dtype = f16)]
pub fn residual_rms_norm_f16() {}
/// SwiGLU with f16 storage, including odd output widths.
#[fused_gemm(epilogue = [swiglu], dtype = f16)]
pub fn mlp_up_swiglu_f16() {}
/// f32 (CUDA-core) bias, for f32 models: A·W + b.
#[fused_gemm(epilogue = [bias], dtype = f32)]
pub fn bias_f32() {}
/// f32 FFN up: gelu(A·W + b).
#[fused_gemm(epilogue = [bias, gelu], dtype = f32)]
pub fn ffn_up_bias_gelu_f32() {}
/// f32 post-norm projection: LayerNorm(A·W + b + residual), BERT's eps.
#[fused_gemm(epilogue = [bias, residual, layer_norm(eps = 1e-12)], dtype = f32)]
pub fn proj_bias_residual_layer_norm_f32() {}
