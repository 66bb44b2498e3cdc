use fused_gemm_macros::fused_gemm;

// `bias` is per column (length N) or `bias(row)` (length M).
#[fused_gemm(epilogue = [bias(rows)])]
pub fn rows() {}

#[fused_gemm(epilogue = [bias()])]
pub fn empty() {}

fn main() {}
