use fused_gemm_macros::fused_gemm;

// An option given twice.
#[fused_gemm(epilogue = [bias], dtype = bf16, dtype = f16)]
pub fn twice() {}

fn main() {}
