use fused_gemm_macros::fused_gemm;

// After one pair stage there are no pairs left.
#[fused_gemm(epilogue = [swiglu, geglu])]
pub fn two_pairs() {}

fn main() {}
