use fused_gemm_macros::fused_gemm;

// Argument names are checked, with a suggestion.
#[fused_gemm(epilogue = [layer_norm(epsilon = 1e-5)])]
pub fn ln() {}

#[fused_gemm(epilogue = [rope(base = 10000.0)])]
pub fn qk() {}

fn main() {}
