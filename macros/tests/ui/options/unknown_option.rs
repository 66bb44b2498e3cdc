use fused_gemm_macros::fused_gemm;

// Unknown options, with suggestions.
#[fused_gemm(epilogue = [bias], dtyp = f16)]
pub fn typo() {}

#[fused_gemm(epilogue = [bias], out_dtype = f32)]
pub fn other_library() {}

#[fused_gemm(epilogue = [bias], split_k = 4)]
pub fn unknown() {}

fn main() {}
