use fused_gemm::fused_gemm;

// f32 inputs are not supported by the tensor-core mainloop.
#[fused_gemm(epilogue = [bias], dtype = f32)]
pub fn f32_inputs() {}

fn main() {}
