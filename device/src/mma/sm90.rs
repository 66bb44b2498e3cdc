//! Warpgroup matrix multiply-accumulate, `wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}`
//! (PTX ISA §9.7.15), sm_90a only.
//!
//! The four consecutive warps of a warpgroup (the first warp's index a multiple of 4) together
//! compute `D(64×N) += A(64×16)·B(16×N)` with A and B read from shared memory through 64-bit
//! matrix descriptors ([`smem_desc_sw128`], §9.7.15.5.1) and D in registers. Warp `w` of the
//! warpgroup holds rows `16w..16w+16` of D in exactly the `mma.sync` m16n8 accumulator layout,
//! one fragment per 8 columns (§9.7.15.5.2, "Register fragments", D): thread `(g, t) =
//! (lane/4, lane%4)` holds `D[16w + g + 8h][8i + 2t + e]` in register `4i + 2h + e`. So a
//! warp's part of a 64×N result is an [`Acc<1, N/8>`](crate::epilogue::Acc) with
//! `warp_row = tile_row + 16w`, and the epilogue runs on it unchanged.
//!
//! `wgmma` is asynchronous: [`fence`] before the first one of a batch (and whenever the
//! accumulators were touched by other instructions), [`commit_group`] after a batch,
//! [`wait_group`] before reusing the operands' shared memory or reading the accumulators.
//! The accumulator arrays are passed through every asm block that issues or waits on them
//! (`inout`), so the compiler never moves their registers while an MMA is in flight (ptxas
//! would otherwise serialise the `wgmma`s).

use crate::types::{Bf16, Element, F16};

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// Shared-memory matrix descriptor (§9.7.15.5.1) of a K-major operand tile written by TMA with
/// 128-byte swizzle: rows of 64 16-bit elements (128 bytes), 8-row atoms of 1024 bytes.
/// `addr` is the `.shared` address of the first element of the 64-row (A) or N-row (B) block,
/// plus `32·k` bytes for the k-th 16-wide slice of K; the block base must be 1024-byte aligned.
///
/// Fields: start address `addr >> 4` (bits 0-13), leading-dimension byte offset 16 (unused
/// for swizzled K-major layouts, bits 16-29), stride-dimension byte offset 1024 between 8-row
/// atoms (bits 32-45), base offset 0, swizzle mode 1 = 128 bytes (bits 62-63).
#[inline(always)]
pub const fn smem_desc_sw128(addr: u32) -> u64 {
    let start = ((addr as u64) >> 4) & 0x3fff;
    let lbo = 16u64 >> 4;
    let sbo = 1024u64 >> 4;
    start | (lbo << 16) | (sbo << 32) | (1u64 << 62)
}

/// [`smem_desc_sw128`] of `addr + offset`, from the descriptor `desc` of `addr`: the start
/// field holds `addr >> 4` whole (shared addresses are below 2^18), so moving the address by a
/// multiple of 16 bytes moves that field alone, with no carry out of it while the new address
/// stays below 2^18. One 32-bit add per `wgmma` operand instead of a shift, a mask and the
/// constant fields.
#[inline(always)]
pub const fn smem_desc_offset(desc: u64, offset: u32) -> u64 {
    let lo = (desc as u32).wrapping_add(offset >> 4);
    (desc & !0xffff_ffff) | lo as u64
}

/// `wgmma.fence.sync.aligned`: orders earlier register and shared-memory accesses of the
/// accumulators and operands before the next `wgmma`s.
///
/// # Safety
/// All threads of the warpgroup execute it together.
#[inline(always)]
pub unsafe fn fence() {
    #[cfg(target_arch = "nvptx64")]
    asm!("wgmma.fence.sync.aligned;", options(nostack));
}

/// `wgmma.commit_group.sync.aligned`: closes the batch of `wgmma`s issued since the last one.
///
/// # Safety
/// All threads of the warpgroup execute it together.
#[inline(always)]
pub unsafe fn commit_group() {
    #[cfg(target_arch = "nvptx64")]
    asm!("wgmma.commit_group.sync.aligned;", options(nostack));
}

/// `wgmma.wait_group.sync.aligned N`: waits until at most `N` batches are in flight. Then
/// the shared memory the finished batches read may be overwritten and their accumulators read.
///
/// # Safety
/// All threads of the warpgroup execute it together.
#[inline(always)]
pub unsafe fn wait_group<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    asm!("wgmma.wait_group.sync.aligned {n};", n = const N, options(nostack));
}

/// A 16-bit input type of `wgmma` with f32 accumulation.
pub trait WgmmaInput: Element {
    /// `d += A·B` for one m64n(8·NI)k16 step of this warp's warpgroup, A and B K-major in
    /// shared memory (descriptors `a`, `b`). NI ∈ {8, 16, 32} (N = 64, 128, 256).
    ///
    /// # Safety
    /// All threads of the warpgroup execute it together after [`fence`]; the descriptors
    /// address valid, 1024-byte-aligned swizzled tiles whose data is visible to the async
    /// proxy (TMA completion observed through an mbarrier).
    unsafe fn mma<const NI: usize>(d: &mut [[f32; 4]; NI], a: u64, b: u64);
}

/// An empty asm block that claims to read and write every accumulator: the compiler keeps
/// them in place across it (CUTLASS's `warpgroup_fence_operand`).
///
/// # Safety
/// None beyond the caller's; it emits no instruction.
#[inline(always)]
pub unsafe fn fence_operands<const NI: usize>(d: &mut [[f32; 4]; NI]) {
    match NI {
        8 => fence_regs_32(&mut *(d as *mut [[f32; 4]; NI] as *mut [[f32; 4]; 8])),
        16 => fence_regs_64(&mut *(d as *mut [[f32; 4]; NI] as *mut [[f32; 4]; 16])),
        32 => fence_regs_128(&mut *(d as *mut [[f32; 4]; NI] as *mut [[f32; 4]; 32])),
        _ => crate::arch::trap(),
    }
}

macro_rules! fence_regs {
    ($name:ident, $ni:literal, [$first:literal $(, $i:literal)*]) => {
        #[inline(always)]
        #[allow(unused_variables)]
        unsafe fn $name(d: &mut [[f32; 4]; $ni]) {
            #[cfg(target_arch = "nvptx64")]
            asm!(
                concat!("// fence operands {", $first, "}" $(, " {", $i, "}")*),
                inout(reg32) d[$first / 4][$first % 4],
                $(inout(reg32) d[$i / 4][$i % 4],)*
                options(nomem, nostack, preserves_flags)
            );
        }
    };
}

macro_rules! wgmma_fn {
    ($name:ident, $shape:literal, $ni:literal, [$first:literal $(, $i:literal)*]) => {
        #[inline(always)]
        #[allow(unused_variables)]
        unsafe fn $name(d: &mut [[f32; 4]; $ni], a: u64, b: u64) {
            #[cfg(target_arch = "nvptx64")]
            asm!(
                concat!(
                    "{{ .reg .pred p; setp.ne.b32 p, {one}, 0; wgmma.mma_async.sync.aligned.", $shape, " {{",
                    "{", $first, "}" $(, ",{", $i, "}")*,
                    "}}, {a}, {b}, p, 1, 1, 0, 0; }}"
                ),
                inout(reg32) d[$first / 4][$first % 4],
                $(inout(reg32) d[$i / 4][$i % 4],)*
                a = in(reg64) a,
                b = in(reg64) b,
                one = in(reg32) 1u32,
                options(nostack)
            );
            #[cfg(not(target_arch = "nvptx64"))]
            crate::arch::host_unreachable(stringify!($name))
        }
    };
}

fence_regs!(
    fence_regs_32,
    8,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31
    ]
);
fence_regs!(
    fence_regs_64,
    16,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
        48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63
    ]
);
fence_regs!(
    fence_regs_128,
    32,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
        48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70,
        71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93,
        94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112,
        113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127
    ]
);

wgmma_fn!(
    bf16_n64,
    "m64n64k16.f32.bf16.bf16",
    8,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31
    ]
);
wgmma_fn!(
    bf16_n128,
    "m64n128k16.f32.bf16.bf16",
    16,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
        48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63
    ]
);
wgmma_fn!(
    bf16_n256,
    "m64n256k16.f32.bf16.bf16",
    32,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
        48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70,
        71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93,
        94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112,
        113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127
    ]
);
wgmma_fn!(
    f16_n64,
    "m64n64k16.f32.f16.f16",
    8,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31
    ]
);
wgmma_fn!(
    f16_n128,
    "m64n128k16.f32.f16.f16",
    16,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
        48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63
    ]
);
wgmma_fn!(
    f16_n256,
    "m64n256k16.f32.f16.f16",
    32,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
        48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70,
        71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93,
        94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112,
        113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127
    ]
);

macro_rules! impl_input {
    ($t:ty, $n64:ident, $n128:ident, $n256:ident) => {
        impl WgmmaInput for $t {
            #[inline(always)]
            unsafe fn mma<const NI: usize>(d: &mut [[f32; 4]; NI], a: u64, b: u64) {
                let p = d as *mut [[f32; 4]; NI];
                match NI {
                    8 => $n64(&mut *(p as *mut [[f32; 4]; 8]), a, b),
                    16 => $n128(&mut *(p as *mut [[f32; 4]; 16]), a, b),
                    32 => $n256(&mut *(p as *mut [[f32; 4]; 32]), a, b),
                    _ => crate::arch::trap(),
                }
            }
        }
    };
}

impl_input!(Bf16, bf16_n64, bf16_n128, bf16_n256);
impl_input!(F16, f16_n64, f16_n128, f16_n256);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_offsets_match_descriptors_of_the_moved_address() {
        for base in [0u32, 1024, 0x1_0000, 0x3_0000] {
            for off in [0u32, 32, 64, 96, 8192, 8192 + 96, 16384] {
                assert_eq!(
                    smem_desc_offset(smem_desc_sw128(base), off),
                    smem_desc_sw128(base + off),
                    "{base:#x} + {off}"
                );
            }
        }
    }

    #[test]
    fn descriptor_fields() {
        let d = smem_desc_sw128(0x4400 + 64);
        assert_eq!(d & 0x3fff, (0x4400 + 64) >> 4);
        assert_eq!((d >> 16) & 0x3fff, 1);
        assert_eq!((d >> 32) & 0x3fff, 64);
        assert_eq!((d >> 49) & 0x7, 0);
        assert_eq!(d >> 62, 1);
    }
}
