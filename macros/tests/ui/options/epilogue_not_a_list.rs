use fused_gemm_macros::fused_gemm;

// `epilogue` takes a bracketed list.
#[fused_gemm(epilogue = bias)]
pub fn not_a_list() {}

#[fused_gemm(epilogue(bias, gelu))]
pub fn call_syntax() {}

fn main() {}
