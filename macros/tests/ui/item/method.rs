use fused_gemm_macros::fused_gemm;

// A kernel is a free function, not a method.
pub struct Model;

impl Model {
    #[fused_gemm(epilogue = [bias])]
    pub fn forward(&self) {}
}

fn main() {}
