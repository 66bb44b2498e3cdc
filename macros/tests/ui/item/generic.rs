use fused_gemm_macros::fused_gemm;

// A kernel is not generic.
#[fused_gemm(epilogue = [bias])]
pub fn generic<T: Copy>() {}

#[fused_gemm(epilogue = [bias])]
pub fn with_where() where u8: Copy {}

fn main() {}
