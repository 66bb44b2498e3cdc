use fused_gemm_macros::fused_gemm;

// The epilogue list is required.
#[fused_gemm(dtype = f16)]
pub fn no_epilogue() {}

#[fused_gemm]
pub fn no_arguments() {}

fn main() {}
