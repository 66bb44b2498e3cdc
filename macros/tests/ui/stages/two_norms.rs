use fused_gemm_macros::fused_gemm;

// One row norm per kernel.
#[fused_gemm(epilogue = [layer_norm(eps = 1e-5), bias, rms_norm(eps = 1e-6)])]
pub fn two_norms() {}

fn main() {}
