use fused_gemm::fused_gemm;

// A kernel crate defines `__FUSED_GEMM_PTX` at its root with `fused_gemm::include_ptx!("crate")`;
// without it, rustc's resolution error points at the attribute.
#[fused_gemm(epilogue = [bias])]
pub fn no_ptx() {}

fn main() {}
