use fused_gemm_macros::fused_gemm;

// `cast` takes one of the element types.
#[fused_gemm(epilogue = [cast(bf61)])]
pub fn typo() {}

#[fused_gemm(epilogue = [cast])]
pub fn missing() {}

#[fused_gemm(epilogue = [cast(i8)])]
pub fn integer() {}

fn main() {}
