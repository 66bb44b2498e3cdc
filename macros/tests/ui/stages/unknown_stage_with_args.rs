use fused_gemm_macros::fused_gemm;

// An unknown name with arguments cannot be a user function either.
#[fused_gemm(epilogue = [softmax(dim = 1)])]
pub fn logits() {}

fn main() {}
