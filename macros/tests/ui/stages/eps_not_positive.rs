use fused_gemm_macros::fused_gemm;

// `eps` must be a positive float literal that f32 can hold.
#[fused_gemm(epilogue = [layer_norm(eps = -1e-5)])]
pub fn negative() {}

#[fused_gemm(epilogue = [rms_norm(eps = 0.0)])]
pub fn zero() {}

#[fused_gemm(epilogue = [rms_norm(eps = 1e-60)])]
pub fn underflows_f32() {}

fn main() {}
