// `#[cfg]` on a kernel applies to everything generated for it: with it dropped, the two
// definitions below would collide.
static __FUSED_GEMM_PTX: fused_gemm::host::module::PtxSet =
    fused_gemm::host::module::PtxSet::new("ui", &[]);

use fused_gemm::fused_gemm;

/// Compiled in.
#[cfg(all())]
#[fused_gemm(epilogue = [bias])]
pub fn kernel() {}

/// Compiled out.
#[fused_gemm(epilogue = [gelu])]
#[cfg(any())]
pub fn kernel() {}

fn main() {
    assert_eq!(KERNEL.stages, "bias");
}
