use fused_gemm_macros::fused_gemm;

// A user stage is a path to a `fn(f32) -> f32`, without arguments.
pub fn leaky(x: f32, slope: f32) -> f32 {
    if x > 0.0 { x } else { slope * x }
}

#[fused_gemm(epilogue = [self::leaky(0.1)])]
pub fn with_args() {}

fn main() {}
