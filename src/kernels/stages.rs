//! One kernel per epilogue stage (bf16, B stored N×K unless noted): the GPU tests check each
//! stage on its own against the f64 reference, and they double as ready-made kernels.

use crate::fused_gemm;

/// A user element-wise stage: a plain `fn(f32) -> f32` in the kernel crate.
pub fn square_plus_one(x: f32) -> f32 {
    x * x + 1.0
}

/// C = alpha·(A·B).
#[fused_gemm(epilogue = [scale(alpha)], arch = sm_80)]
pub fn stage_scale() {}
/// C = (A·B)·s[r].
#[fused_gemm(epilogue = [scale(row)], arch = sm_80)]
pub fn stage_scale_row() {}
/// C = (A·B)·s[c].
#[fused_gemm(epilogue = [scale(col)], arch = sm_80)]
pub fn stage_scale_col() {}
/// C = A·B + bias[r].
#[fused_gemm(epilogue = [bias(row)], arch = sm_80)]
pub fn stage_bias_row() {}
/// C = relu(A·B).
#[fused_gemm(epilogue = [relu], arch = sm_80)]
pub fn stage_relu() {}
/// C = gelu(A·B), erf form.
#[fused_gemm(epilogue = [gelu], arch = sm_80)]
pub fn stage_gelu() {}
/// C = gelu_tanh(A·B).
#[fused_gemm(epilogue = [gelu_tanh], arch = sm_80)]
pub fn stage_gelu_tanh() {}
/// C = silu(A·B).
#[fused_gemm(epilogue = [silu], arch = sm_80)]
pub fn stage_silu() {}
/// C = sigmoid(A·B).
#[fused_gemm(epilogue = [sigmoid], arch = sm_80)]
pub fn stage_sigmoid() {}
/// C = A·B + R.
#[fused_gemm(epilogue = [residual], arch = sm_80)]
pub fn stage_residual() {}
/// C += A·B.
#[fused_gemm(epilogue = [accumulate], arch = sm_80)]
pub fn stage_accumulate() {}
/// C = LayerNorm(A·B).
#[fused_gemm(epilogue = [layer_norm(eps = 1e-5)], arch = sm_80)]
pub fn stage_layer_norm() {}
/// C = RMSNorm(A·B).
#[fused_gemm(epilogue = [rms_norm(eps = 1e-6)], arch = sm_80)]
pub fn stage_rms_norm() {}
/// C = silu(g)·u on interleaved columns (width N/2).
#[fused_gemm(epilogue = [swiglu], arch = sm_80)]
pub fn stage_swiglu() {}
/// C = gelu(g)·u on interleaved columns (width N/2).
#[fused_gemm(epilogue = [geglu], arch = sm_80)]
pub fn stage_geglu() {}
/// C = RoPE(A·B), interleaved pairs, θ = 10000.
#[fused_gemm(epilogue = [rope(theta = 10000.0)], arch = sm_80)]
pub fn stage_rope() {}
/// C = A·B rounded to f16 precision, stored as f32.
#[fused_gemm(epilogue = [cast(f16)], out = f32, arch = sm_80)]
pub fn stage_cast_f16() {}
/// C = (A·B)² + 1 through a user function.
#[fused_gemm(epilogue = [crate::kernels::stages::square_plus_one], arch = sm_80)]
pub fn stage_user() {}

// Forms and options the kernels above do not use, so that their expansions also go through the
// nvptx64 build and ptxas (`tests/ptx.rs`). Each names one tile (two entry points: 16-byte and
// bounds-checked loads) to keep the PTX small.

/// C = (A·B)/8 squared plus one: a constant scale, and a user stage named by a bare identifier.
#[fused_gemm(epilogue = [scale(0.125), square_plus_one], tile = (64, 64, 32))]
pub fn stage_scale_const_user() {}
/// C = gelu(A·B) rounded to bf16 precision, stored as f32.
#[fused_gemm(epilogue = [gelu, cast(bf16)], out = f32, tile = (64, 64, 32))]
pub fn stage_cast_bf16() {}
/// Operands after a pair stage (width N/2), then `accumulate`: C += R + s[c]·(b[c] +
/// swiglu(rope(A·B))), f16.
#[fused_gemm(
    epilogue = [rope(theta = 10000.0), swiglu, bias, scale(col), residual, accumulate],
    dtype = f16,
    tile = (64, 64, 32)
)]
pub fn combo_pair_then_operands() {}
/// Stages after a row norm, which run in the norm's finishing kernel when the row spans several
/// CTA tiles: C = rope(R + alpha·gelu_tanh(LayerNorm(A·B + b))), f32 output.
#[fused_gemm(
    epilogue = [bias, layer_norm(eps = 1e-5), gelu_tanh, scale(alpha), residual, rope(theta = 10000.0)],
    out = f32,
    tile = (32, 64, 64)
)]
pub fn combo_norm_then_post() {}
/// A tile that is not one of the built-in shapes (the macro derives a 2×2 warp grid).
#[fused_gemm(epilogue = [bias, relu], tile = (96, 96, 48))]
pub fn option_tile_derived() {}
/// f16 inputs, B stored K×N, f32 output.
#[fused_gemm(epilogue = [bias, silu], dtype = f16, out = f32, b_layout = row, tile = (128, 64, 32))]
pub fn option_f16_brow_f32() {}
/// Compiled into the sm_90 PTX only.
#[fused_gemm(epilogue = [bias, gelu], arch = sm_90, tile = (128, 128, 32))]
pub fn option_sm90() {}
/// f32 inputs (CUDA-core mainloop) with a tile that is not one of its built-in shapes.
#[fused_gemm(epilogue = [bias, gelu], dtype = f32, tile = (64, 128, 16))]
pub fn option_f32_tile_derived() {}
