//! Warp-level data exchange (PTX ISA §9.7.8.6 `shfl.sync`).

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// Full-warp mask.
pub const FULL_MASK: u32 = 0xffff_ffff;

/// `__shfl_xor_sync(FULL_MASK, v, lane_mask)` for `f32`.
///
/// # Safety
/// All 32 lanes of the warp must execute this call together.
#[inline(always)]
pub unsafe fn shfl_xor_f32(v: f32, lane_mask: u32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: f32;
        asm!("shfl.sync.bfly.b32 {o}, {v}, {m}, 31, -1;", o = out(reg32) out, v = in(reg32) v, m = in(reg32) lane_mask);
        out
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (v, lane_mask);
        super::host_unreachable("shfl_xor_f32")
    }
}

/// Sum of `v` over all 32 lanes (butterfly reduction); every lane gets the total.
///
/// # Safety
/// All 32 lanes must execute this call together.
#[inline(always)]
pub unsafe fn warp_sum_f32(mut v: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v += shfl_xor_f32(v, m);
        m >>= 1;
    }
    v
}
