use fused_gemm_macros::fused_gemm;

// Launcher parameter names must be distinct.
#[fused_gemm(epilogue = [scale(a)])]
pub fn clashes_with_a() {}

#[fused_gemm(epilogue = [scale(bias), bias])]
pub fn clashes_with_bias() {}

#[fused_gemm(epilogue = [scale(alpha), gelu, scale(alpha)])]
pub fn same_twice() {}

fn main() {}
