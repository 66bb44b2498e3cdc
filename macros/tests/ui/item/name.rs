use fused_gemm_macros::fused_gemm;

// Kernel names are snake_case: the spec is the name in upper case.
#[fused_gemm(epilogue = [bias])]
pub fn FfnUp() {}

fn main() {}
