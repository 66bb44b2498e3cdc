use fused_gemm_macros::fused_gemm;

// Stage names are identifiers, not strings.
#[fused_gemm(epilogue = ["bias", gelu])]
pub fn quoted() {}

fn main() {}
