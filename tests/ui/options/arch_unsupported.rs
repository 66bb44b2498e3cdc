use fused_gemm::fused_gemm;

// Supported archs are sm_80 and sm_90.
#[fused_gemm(epilogue = [bias], arch = sm_86)]
pub fn ampere_consumer() {}

#[fused_gemm(epilogue = [bias], arch = sm_90a)]
pub fn hopper_wgmma() {}

#[fused_gemm(epilogue = [bias], arch = sm_70)]
pub fn volta() {}

fn main() {}
