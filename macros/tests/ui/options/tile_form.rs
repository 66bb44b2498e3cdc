use fused_gemm_macros::fused_gemm;

// A tile is three integer literals in a tuple.
#[fused_gemm(epilogue = [bias], tile = (128, 128))]
pub fn two_sizes() {}

#[fused_gemm(epilogue = [bias], tile = [128, 128, 32])]
pub fn array() {}

#[fused_gemm(epilogue = [bias], tile = (128, 0, BK))]
pub fn not_literals() {}

fn main() {}
