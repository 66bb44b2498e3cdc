use fused_gemm_macros::fused_gemm;

// A tile whose accumulators do not fit in registers.
#[fused_gemm(epilogue = [bias], tile = (256, 256, 32))]
pub fn huge_tile() {}

fn main() {}
