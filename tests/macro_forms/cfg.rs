// `#[cfg]` on a kernel applies to everything generated for it: with it dropped, the two
// definitions below would collide.
use fused_gemm::fused_gemm;

/// Compiled in.
#[cfg(target_pointer_width = "64")]
#[fused_gemm(epilogue = [bias])]
pub fn kernel() {}

/// Compiled out.
#[fused_gemm(epilogue = [gelu])]
#[cfg(any())]
pub fn kernel() {}

#[test]
fn cfg_applies_to_everything_generated() {
    assert_eq!(KERNEL.stages, "bias");
}
