use fused_gemm_macros::fused_gemm;

// `rope` needs its base θ, greater than 1.
#[fused_gemm(epilogue = [rope])]
pub fn no_theta() {}

#[fused_gemm(epilogue = [rope(theta = 0.5)])]
pub fn small_theta() {}

fn main() {}
