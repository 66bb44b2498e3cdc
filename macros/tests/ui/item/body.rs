use fused_gemm_macros::fused_gemm;

// The macro writes the body.
#[fused_gemm(epilogue = [bias, gelu])]
pub fn with_body() {
    let _ = 1 + 1;
}

fn main() {}
