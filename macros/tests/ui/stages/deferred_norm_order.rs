use fused_gemm_macros::fused_gemm;

// `folded_layer_norm` reads the raw product, so it comes first; `row_moments` takes statistics
// of full-width pre-norm values, once per kernel.
#[fused_gemm(epilogue = [bias, folded_layer_norm(eps = 1e-12)])]
pub fn folded_not_first() {}

#[fused_gemm(epilogue = [swiglu, row_moments])]
pub fn moments_after_pair() {}

#[fused_gemm(epilogue = [row_moments, residual, row_moments])]
pub fn moments_twice() {}

fn main() {}
