use fused_gemm_macros::fused_gemm;

// A tile whose pipeline does not fit the arch's shared memory.
#[fused_gemm(epilogue = [bias], tile = (128, 64, 256))]
pub fn deep_tile_sm80() {}

#[fused_gemm(epilogue = [bias], tile = (128, 128, 512), arch = sm_90)]
pub fn deep_tile_sm90() {}

fn main() {}
