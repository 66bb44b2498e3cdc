use fused_gemm_macros::fused_gemm;

// A pair stage after a norm: the finishing kernel sees single columns, not gate/up pairs.
#[fused_gemm(epilogue = [rms_norm(eps = 1e-6), swiglu])]
pub fn norm_then_swiglu() {}

fn main() {}
