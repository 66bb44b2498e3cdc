//! `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32` (PTX ISA §9.7.14.5.14),
//! sm_80+. One warp computes a 16×8 f32 tile `D = A·B + C` with A 16×16 and B 16×8, each thread
//! holding the fragments described in §9.7.14.5.8: A as 4 registers of 2 packed 16-bit values,
//! B as 2, C/D as 4 f32.

use crate::types::{Bf16, Element, F16};

/// A 16-bit input type the tensor cores multiply with f32 accumulation.
pub trait MmaInput: Element {
    /// `d += a·b` for one m16n8k16 tile (SM80_16x8x16_F32{BF16,F16}{BF16,F16}F32_TN).
    ///
    /// # Safety
    /// All 32 lanes of the warp must execute it together (`.sync.aligned`).
    unsafe fn mma_16816(d: &mut [f32; 4], a: &[u32; 4], b: &[u32; 2]);
}

macro_rules! impl_mma {
    ($t:ty, $ptx:literal) => {
        impl MmaInput for $t {
            #[inline(always)]
            unsafe fn mma_16816(d: &mut [f32; 4], a: &[u32; 4], b: &[u32; 2]) {
                #[cfg(target_arch = "nvptx64")]
                core::arch::asm!(
                    $ptx,
                    d0 = inout(reg32) d[0], d1 = inout(reg32) d[1], d2 = inout(reg32) d[2], d3 = inout(reg32) d[3],
                    a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                    b0 = in(reg32) b[0], b1 = in(reg32) b[1],
                );
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    let _ = (d, a, b);
                    crate::arch::host_unreachable("mma_16816")
                }
            }
        }
    };
}

impl_mma!(
    Bf16,
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{d0},{d1},{d2},{d3}}}, {{{a0},{a1},{a2},{a3}}}, {{{b0},{b1}}}, {{{d0},{d1},{d2},{d3}}};"
);
impl_mma!(
    F16,
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{d0},{d1},{d2},{d3}}}, {{{a0},{a1},{a2},{a3}}}, {{{b0},{b1}}}, {{{d0},{d1},{d2},{d3}}};"
);
