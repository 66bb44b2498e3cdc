use fused_gemm_macros::fused_gemm;

// The kernel must be `pub`.
#[fused_gemm(epilogue = [bias])]
fn private() {}

#[fused_gemm(epilogue = [bias])]
pub(crate) fn crate_visible() {}

fn main() {}
