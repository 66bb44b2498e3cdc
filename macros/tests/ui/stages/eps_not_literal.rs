use fused_gemm_macros::fused_gemm;

// The macro bakes `eps` into the kernel: a constant's value is not visible to it.
const EPS: f64 = 1e-5;

#[fused_gemm(epilogue = [layer_norm(eps = EPS)])]
pub fn from_const() {}

#[fused_gemm(epilogue = [layer_norm(eps = "1e-5")])]
pub fn from_string() {}

fn main() {}
