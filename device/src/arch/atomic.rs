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

/// One thread's arrival on a counter of `arrivals` for its group, as one `asm!` block of
/// predicated instructions: where `leader`, adds 1 to `*counter` (as [`atomic_add_acq_rel_u32`]),
/// resets it to 0 when that was the last arrival, and writes 1 (last) or 0 to `*flag`; other
/// threads do nothing. Written without `if leader { … }`: with no branch on the thread index,
/// LLVM cannot copy the `.aligned` barrier that follows into both sides of one (see
/// `arch::sync::named_barrier`).
///
/// # Safety
/// `counter` must point to a valid, 4-byte aligned `u32` in global memory and `flag` be the
/// `.shared` window address ([`shared_addr`](super::shared::shared_addr)) of a 4-byte aligned
/// `u32`; `arrivals ≥ 1`.
#[inline(always)]
pub unsafe fn leader_arrive_counted(leader: bool, counter: *mut u32, arrivals: u32, flag: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!(
        "{{ .reg .pred p, q; .reg .b32 o, l;",
        "setp.ne.u32 p, {lead}, 0;",
        "mov.b32 o, 0;",
        "@p atom.add.acq_rel.gpu.global.u32 o, [{c}], 1;",
        "setp.eq.and.u32 q, o, {last}, p;",
        "@q st.global.b32 [{c}], 0;",
        "selp.u32 l, 1, 0, q;",
        "@p st.volatile.shared.b32 [{f}], l; }}",
        lead = in(reg32) leader as u32,
        c = in(reg64) counter,
        last = in(reg32) arrivals - 1,
        f = in(reg32) flag,
        options(nostack)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (leader, counter, arrivals, flag);
        super::host_unreachable("leader_arrive_counted")
    }
}
