use fused_gemm::fused_gemm;

static __FUSED_GEMM_PTX: fused_gemm::host::module::PtxSet =
    fused_gemm::host::module::PtxSet::new("ui", &[]);

// A user stage must be a `fn(f32) -> f32`; rustc's type error points at the path.
pub fn in_f64(x: f64) -> f64 {
    x * 2.0
}

#[fused_gemm(epilogue = [self::in_f64])]
pub fn wrong_signature() {}

fn main() {}
