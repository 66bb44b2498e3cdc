use fused_gemm_macros::fused_gemm;

// Tile sizes must be multiples of the MMA shape.
#[fused_gemm(epilogue = [bias], tile = (100, 128, 24))]
pub fn odd_tile() {}

fn main() {}
