use fused_gemm_macros::fused_gemm;

// Only doc comments and `#[cfg]` are kept on a kernel.
#[fused_gemm(epilogue = [bias])]
#[inline]
pub fn inlined() {}

fn main() {}
