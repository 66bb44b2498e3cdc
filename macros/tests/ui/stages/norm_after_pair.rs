use fused_gemm_macros::fused_gemm;

// A norm after a pair stage: the row statistics are taken over the full-width tile.
#[fused_gemm(epilogue = [geglu, layer_norm(eps = 1e-5)])]
pub fn geglu_then_norm() {}

fn main() {}
