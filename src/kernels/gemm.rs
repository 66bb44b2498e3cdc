//! Plain GEMMs (empty epilogue), one per input dtype, B layout and output dtype.

use crate::fused_gemm;

/// C = A·B, bf16 in and out, B stored N×K.
#[fused_gemm(epilogue = [], dtype = bf16)]
pub fn gemm_bf16() {}

/// C = A·B, f16 in and out, B stored N×K.
#[fused_gemm(epilogue = [], dtype = f16)]
pub fn gemm_f16() {}

/// C = A·B, bf16 in and out, B stored K×N.
#[fused_gemm(epilogue = [], dtype = bf16, b_layout = row)]
pub fn gemm_bf16_brow() {}

/// C = A·B, f16 in and out, B stored K×N.
#[fused_gemm(epilogue = [], dtype = f16, b_layout = row)]
pub fn gemm_f16_brow() {}

/// C = A·B, bf16 in, f32 out, B stored N×K.
#[fused_gemm(epilogue = [], dtype = bf16, out = f32)]
pub fn gemm_bf16_f32() {}

/// C = A·B in f32 on the CUDA cores (f32 models; no rounding of the inputs).
#[fused_gemm(epilogue = [], dtype = f32)]
pub fn gemm_f32() {}

/// C = A·B, bf16, 128×256 tile (8 warps of 64×64): tile-size experiments.
#[fused_gemm(epilogue = [], tile = (128, 256, 32))]
pub fn gemm_bf16_t128x256() {}

/// C = A·B, bf16, 256×128 tile (8 warps of 64×64): tile-size experiments.
#[fused_gemm(epilogue = [], tile = (256, 128, 32))]
pub fn gemm_bf16_t256x128() {}

/// C = A·B, bf16, 128×128×64 tile (4 warps of 64×64, BK = 64): tile-size experiments.
#[fused_gemm(epilogue = [], tile = (128, 128, 64))]
pub fn gemm_bf16_t128x128x64() {}
