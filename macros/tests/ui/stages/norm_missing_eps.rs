use fused_gemm_macros::fused_gemm;

// A norm needs its epsilon.
#[fused_gemm(epilogue = [residual, layer_norm])]
pub fn post_norm() {}

#[fused_gemm(epilogue = [rms_norm()])]
pub fn empty_args() {}

fn main() {}
