use fused_gemm_macros::fused_gemm;

// A misspelt stage name: the error points at it and suggests the closest stage.
#[fused_gemm(epilogue = [bias, gelu_tahn])]
pub fn ffn_up() {}

fn main() {}
