use fused_gemm_macros::fused_gemm;

// `accumulate` adds to C as it is stored: it must be last, and cannot follow a norm.
#[fused_gemm(epilogue = [accumulate, gelu])]
pub fn not_last() {}

#[fused_gemm(epilogue = [layer_norm(eps = 1e-5), accumulate])]
pub fn after_norm() {}

fn main() {}
