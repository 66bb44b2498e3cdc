use fused_gemm_macros::fused_gemm;

// Every error is reported, not only the first.
#[fused_gemm(epilogue = [bais, layer_norm(eps = -1.0), accumulate, relu(1)], dtype = bf15, tile = (128, 100, 32))]
pub fn many() {}

fn main() {}
