//! Device side of the benchmark timing primitive (`fused-gemm-bench`'s `timing` module).

/// Reads `%globaltimer`: nanoseconds of a GPU-wide clock (PTX ISA §10.36; its update interval
/// is implementation-defined, up to about a microsecond).
#[inline(always)]
pub fn global_timer_ns() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let t: u64;
        core::arch::asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t);
        t
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::arch::host_unreachable("global_timer_ns")
}

/// Keeps thread 0 of the launch busy for `ns` nanoseconds. A benchmark launches it (one
/// thread) before a batch of timed runs so the host can queue the whole batch while the GPU
/// waits: the runs then execute back to back, and host launch overhead does not appear as idle
/// time between the timing events.
///
/// # Safety
/// None beyond launching it; it touches no memory.
#[inline(always)]
pub unsafe fn spin_ns(ns: u64) {
    if crate::arch::thread::thread_idx_x() != 0 || crate::arch::thread::block_idx_x() != 0 {
        return;
    }
    let t0 = global_timer_ns();
    while global_timer_ns().wrapping_sub(t0) < ns {}
}
