use fused_gemm_macros::fused_gemm;

// The attribute goes on a function.
#[fused_gemm(epilogue = [bias])]
pub struct Kernel;

fn main() {}
