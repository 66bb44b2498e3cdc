//! Two kernels declared outside fused-gemm: `[bias, gelu]` with the built-in stages, and `bias`
//! followed by a stage of this crate, a plain `fn(f32) -> f32`. Each compiles to `mma.sync`
//! variants for every GPU and TMA + `wgmma` variants for H100/H200.
#![cfg_attr(target_arch = "nvptx64", no_std, feature(abi_ptx))]

use fused_gemm::fused_gemm;

fused_gemm::include_ptx!();

/// Squared ReLU (So et al., "Primer", 2021): `max(x, 0)²`. Runs on the device inside the
/// epilogue, so it is plain `core` arithmetic.
pub fn squared_relu(x: f32) -> f32 {
    let r = if x > 0.0 { x } else { 0.0 };
    r * r
}

/// `C = gelu(A·B + bias)`, erf GELU; A M×K, B N×K, C M×N, bf16, f32 accumulation.
#[fused_gemm(epilogue = [bias, gelu])]
pub fn bias_gelu() {}

/// `C = squared_relu(A·B + bias)`; A M×K, B N×K, C M×N, bf16, f32 accumulation.
#[fused_gemm(epilogue = [bias, squared_relu])]
pub fn bias_squared_relu() {}
