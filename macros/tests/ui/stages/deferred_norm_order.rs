use fused_gemm_macros::fused_gemm;

// `folded_layer_norm` reads the raw product, so it comes first; `row_moments` takes statistics
// of the full-width values C stores, once per kernel, as the last stage, on tiles whose BN is a
// multiple of its 64-column groups.
#[fused_gemm(epilogue = [bias, folded_layer_norm(eps = 1e-12)])]
pub fn folded_not_first() {}

#[fused_gemm(epilogue = [swiglu, row_moments])]
pub fn moments_after_pair() {}

#[fused_gemm(epilogue = [row_moments, residual, row_moments])]
pub fn moments_twice() {}

#[fused_gemm(epilogue = [bias, row_moments, gelu])]
pub fn moments_not_last() {}

#[fused_gemm(epilogue = [bias, row_moments], tile = (64, 96, 32))]
pub fn moments_on_a_96_wide_tile() {}

fn main() {}
