use fused_gemm_macros::fused_gemm;

// `scale` takes a parameter name, a literal, `row` or `col`.
#[fused_gemm(epilogue = [scale])]
pub fn bare() {}

#[fused_gemm(epilogue = [scale(alpha = 0.5)])]
pub fn named() {}

#[fused_gemm(epilogue = [scale(self)])]
pub fn keyword() {}

fn main() {}
