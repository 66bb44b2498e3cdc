use fused_gemm_macros::fused_gemm;

// `arch` is `sm_80` (mma.sync only) or `sm_90` (Hopper only), or left out (every GPU).
#[fused_gemm(epilogue = [bias], arch = sm_86)]
pub fn ampere_consumer() {}

#[fused_gemm(epilogue = [bias], arch = sm_90a)]
pub fn hopper_wgmma() {}

#[fused_gemm(epilogue = [bias], arch = sm_70)]
pub fn volta() {}

fn main() {}
