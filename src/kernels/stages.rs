//! One kernel per epilogue stage (bf16, B stored N×K unless noted): the GPU tests check each
//! stage on its own against the f64 reference, and they double as ready-made kernels.

use crate::fused_gemm;

/// A user element-wise stage: a plain `fn(f32) -> f32` in the kernel crate.
pub fn square_plus_one(x: f32) -> f32 {
    x * x + 1.0
}

/// C = alpha·(A·B).
#[fused_gemm(epilogue = [scale(alpha)])]
pub fn stage_scale() {}
/// C = (A·B)·s[r].
#[fused_gemm(epilogue = [scale(row)])]
pub fn stage_scale_row() {}
/// C = (A·B)·s[c].
#[fused_gemm(epilogue = [scale(col)])]
pub fn stage_scale_col() {}
/// C = A·B + bias[c].
#[fused_gemm(epilogue = [bias])]
pub fn stage_bias() {}
/// C = A·B + bias[r].
#[fused_gemm(epilogue = [bias(row)])]
pub fn stage_bias_row() {}
/// C = relu(A·B).
#[fused_gemm(epilogue = [relu])]
pub fn stage_relu() {}
/// C = gelu(A·B), erf form.
#[fused_gemm(epilogue = [gelu])]
pub fn stage_gelu() {}
/// C = gelu_tanh(A·B).
#[fused_gemm(epilogue = [gelu_tanh])]
pub fn stage_gelu_tanh() {}
/// C = silu(A·B).
#[fused_gemm(epilogue = [silu])]
pub fn stage_silu() {}
/// C = sigmoid(A·B).
#[fused_gemm(epilogue = [sigmoid])]
pub fn stage_sigmoid() {}
/// C = A·B + R.
#[fused_gemm(epilogue = [residual])]
pub fn stage_residual() {}
/// C += A·B.
#[fused_gemm(epilogue = [accumulate])]
pub fn stage_accumulate() {}
/// C = LayerNorm(A·B).
#[fused_gemm(epilogue = [layer_norm(eps = 1e-5)])]
pub fn stage_layer_norm() {}
/// C = RMSNorm(A·B).
#[fused_gemm(epilogue = [rms_norm(eps = 1e-6)])]
pub fn stage_rms_norm() {}
/// C = silu(g)·u on interleaved columns (width N/2).
#[fused_gemm(epilogue = [swiglu])]
pub fn stage_swiglu() {}
/// C = gelu(g)·u on interleaved columns (width N/2).
#[fused_gemm(epilogue = [geglu])]
pub fn stage_geglu() {}
/// C = RoPE(A·B), interleaved pairs, θ = 10000.
#[fused_gemm(epilogue = [rope(theta = 10000.0)])]
pub fn stage_rope() {}
/// C = A·B rounded to f16 precision, stored as f32.
#[fused_gemm(epilogue = [cast(f16)], out = f32)]
pub fn stage_cast_f16() {}
/// C = (A·B)² + 1 through a user function.
#[fused_gemm(epilogue = [crate::kernels::stages::square_plus_one])]
pub fn stage_user() {}
