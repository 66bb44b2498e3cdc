use fused_gemm_macros::fused_gemm;

// Names from model configs map to our stages, saying which GELU is which (erf or tanh).
#[fused_gemm(epilogue = [bias, gelu_new])]
pub fn gpt2_ffn_up() {}

#[fused_gemm(epilogue = [bias, swish])]
pub fn ffn_swish() {}

fn main() {}
