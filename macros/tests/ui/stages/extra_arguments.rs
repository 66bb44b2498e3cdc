use fused_gemm_macros::fused_gemm;

// Extra arguments are pointed at one by one.
#[fused_gemm(epilogue = [rms_norm(eps = 1e-6, 2.0)])]
pub fn two_eps() {}

#[fused_gemm(epilogue = [relu(0.1), gelu()])]
pub fn args_on_activations() {}

#[fused_gemm(epilogue = [scale(alpha, beta)])]
pub fn two_scales() {}

fn main() {}
