use fused_gemm_macros::fused_gemm;

// `rope` rotates column pairs, which `swiglu` has reduced.
#[fused_gemm(epilogue = [swiglu, rope(theta = 10000.0)])]
pub fn swiglu_then_rope() {}

fn main() {}
