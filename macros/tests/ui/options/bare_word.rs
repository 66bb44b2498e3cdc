use fused_gemm_macros::fused_gemm;

// A value without its option name.
#[fused_gemm(epilogue = [bias], f16)]
pub fn dtype_without_name() {}

#[fused_gemm(epilogue = [bias], gelu)]
pub fn stage_outside_list() {}

fn main() {}
