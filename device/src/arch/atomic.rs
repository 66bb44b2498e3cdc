//! Global-memory atomics with explicit ordering (PTX ISA §9.7.13.5 `atom`).

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// `atom.add.acq_rel.gpu.u32`: adds `v` to `*p` and returns the old value. Acquire-release at
/// GPU scope: writes this thread made before are visible to whoever observes the new count,
/// and writes made before by whoever produced the old count are visible after it.
///
/// # Safety
/// `p` must point to a valid, 4-byte aligned `u32` in global memory.
#[inline(always)]
pub unsafe fn atomic_add_acq_rel_u32(p: *mut u32, v: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let old: u32;
        asm!("atom.add.acq_rel.gpu.global.u32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) p, v = in(reg32) v);
        old
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (p, v);
        super::host_unreachable("atomic_add_acq_rel_u32")
    }
}

/// `st.release.gpu.u32`: stores `v` after all this thread's earlier writes are visible GPU-wide.
///
/// # Safety
/// `p` must point to a valid, 4-byte aligned `u32` in global memory.
#[inline(always)]
pub unsafe fn store_release_u32(p: *mut u32, v: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!("st.release.gpu.global.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v);
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (p, v);
        super::host_unreachable("store_release_u32")
    }
}

/// `ld.acquire.gpu.u32`: loads `*p`; later reads see what the releasing writer wrote before.
///
/// # Safety
/// `p` must point to a valid, 4-byte aligned `u32` in global memory.
#[inline(always)]
pub unsafe fn load_acquire_u32(p: *const u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let v: u32;
        asm!("ld.acquire.gpu.global.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p);
        v
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = p;
        super::host_unreachable("load_acquire_u32")
    }
}
