//! Trimmed.
use crate::fused_gemm;
#[fused_gemm(epilogue = [], dtype = bf16, arch = sm_90)]
pub fn h_gemm_bf16() {}
#[fused_gemm(epilogue = [bias, gelu_tanh], arch = sm_90)]
pub fn h_bias_gelu_tanh() {}
#[fused_gemm(epilogue = [bias, residual, layer_norm(eps = 1e-12)], arch = sm_90)]
pub fn h_bias_residual_layer_norm() {}
#[fused_gemm(epilogue = [rms_norm(eps = 1e-6)], arch = sm_90)]
pub fn h_rms_norm() {}
