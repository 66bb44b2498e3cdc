use fused_gemm::fused_gemm;

static __FUSED_GEMM_PTX: fused_gemm::host::module::PtxSet =
    fused_gemm::host::module::PtxSet::new("ui", &[]);

// A user stage that does not exist: rustc's resolution error points at the path.
#[fused_gemm(epilogue = [crate::activations::mish])]
pub fn missing() {}

fn main() {}
