use fused_gemm_macros::fused_gemm;

// Unknown dtypes, with suggestions.
#[fused_gemm(epilogue = [bias], dtype = bfloat16)]
pub fn torch_name() {}

#[fused_gemm(epilogue = [bias], out = "f32")]
pub fn quoted() {}

#[fused_gemm(epilogue = [bias], dtype = f8)]
pub fn fp8() {}

fn main() {}
