use fused_gemm_macros::fused_gemm;

// `b_layout` is `col` (N×K) or `row` (K×N).
#[fused_gemm(epilogue = [bias], b_layout = nk)]
pub fn nk() {}

fn main() {}
