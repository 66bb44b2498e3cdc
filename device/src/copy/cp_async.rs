//! Asynchronous global → shared copies (`cp.async`, PTX ISA §9.7.9.25), sm_80+.

/// `cp.async.cg.shared.global [dst], [src], 16, src_bytes`: copies 16 bytes, of which only the
/// first `src_bytes` (0..=16) are read; the rest of the destination is zero-filled. Bypasses L1.
///
/// # Safety
/// `dst` is a 16-byte aligned `.shared` address; `src` is a 16-byte aligned global address
/// valid for `src_bytes` bytes (any address when `src_bytes` is 0).
#[inline(always)]
pub unsafe fn cp_async_cg_16(dst: u32, src: u64, src_bytes: u32) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) dst, s = in(reg64) src, n = in(reg32) src_bytes);
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (dst, src, src_bytes);
        crate::arch::host_unreachable("cp_async_cg_16")
    }
}

/// `cp.async.commit_group`: closes the group of copies issued since the last commit.
#[inline(always)]
pub fn commit_group() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        core::arch::asm!("cp.async.commit_group;")
    }
}

/// `cp.async.wait_group N`: waits until at most `N` of this thread's groups are in flight.
#[inline(always)]
pub fn wait_group<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        core::arch::asm!("cp.async.wait_group {n};", n = const N)
    }
}
