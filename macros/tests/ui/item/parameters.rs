use fused_gemm_macros::fused_gemm;

// Parameters and the return type come from the macro.
#[fused_gemm(epilogue = [bias])]
pub fn with_params(a: &[f32], bias: &[f32]) {}

#[fused_gemm(epilogue = [bias])]
pub fn with_return() -> u32 {}

fn main() {}
