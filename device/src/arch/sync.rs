//! Barriers and memory fences (PTX ISA §9.7.13 `bar`, `membar`/`fence`).

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// `__syncthreads()`: CTA-wide barrier that also orders shared and global memory among the CTA.
///
/// # Safety
/// Every thread of the CTA must reach the same call (no divergence around it), or the CTA hangs.
#[inline(always)]
pub unsafe fn sync_threads() {
    #[cfg(target_arch = "nvptx64")]
    core::arch::nvptx::_syncthreads();
    #[cfg(not(target_arch = "nvptx64"))]
    super::host_unreachable("sync_threads")
}

/// Named barrier `id` of `threads` threads in its non-`.aligned` form (`barrier.sync id,
/// threads`, PTX ISA §9.7.13.1), which the lanes of one warp may reach at different copies of
/// the instruction. For barriers right after a branch on the thread index (`if tid == 0 { … }`):
/// Rust's `asm!` is not `convergent` to LLVM, which copied such a barrier into both sides of the
/// branch, and as `.aligned` `bar.sync`, lane 0 at one copy and lanes 1-31 at the other, the CTA
/// hung (the global row-statistics exchange after thread 0's spin). ptxas puts the same
/// `BAR.SYNC` behind a `BRA.DIV` check, and the whole kernel gets more reconvergence points:
/// only for branches that cannot be predicated asm (thread 0's spin), and only in the kernels
/// that have them (`tests/ptx.rs`).
///
/// # Safety
/// Exactly `threads` threads (a multiple of 32) reach each use of `id`, and no other barrier
/// shares `id` meanwhile; otherwise the CTA hangs.
#[inline(always)]
pub unsafe fn named_barrier(id: u32, threads: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!("barrier.sync {i}, {n};", i = in(reg32) id, n = in(reg32) threads, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (id, threads);
        super::host_unreachable("named_barrier")
    }
}

/// `__threadfence()`: orders this thread's global writes before its later ones, GPU-wide
/// (`fence.acq_rel.gpu`).
#[inline(always)]
pub fn thread_fence() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("fence.acq_rel.gpu;")
    }
    #[cfg(not(target_arch = "nvptx64"))]
    super::host_unreachable("thread_fence")
}

/// `bar.warp.sync -1` (`__syncwarp()`, PTX ISA §9.7.13.3): reconverges the full warp, and orders
/// the memory accesses of its lanes before the call before those after it. Every lane must reach
/// it. Nothing on the host, which runs one thread per warp.
#[inline(always)]
pub fn sync_warp() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("bar.warp.sync -1;", options(nostack))
    };
}

/// `nanosleep.u32` (PTX ISA §9.7.13.12, sm_70+): a back-off hint of about `ns` nanoseconds for
/// spin loops. Nothing on the host.
#[inline(always)]
pub fn nanosleep(ns: u32) {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("nanosleep.u32 {t};", t = in(reg32) ns, options(nomem, nostack))
    };
    #[cfg(not(target_arch = "nvptx64"))]
    let _ = ns;
}

/// `griddepcontrol.wait` (PTX ISA, "Parallel Synchronization and Communication Instructions:
/// griddepcontrol"; sm_90, PTX 7.8): blocks until every grid this one depends on through a
/// programmatic dependent launch has completed and its memory operations are visible. Without
/// such a launch it returns at once. Nothing on the host.
///
/// sm_90 and above only: a kernel compiled for older archs must not call it. The `cfg` belongs
/// in the kernel crate (`target_feature = "sm_90"`), whose device build alone gets the
/// `-Ctarget-cpu`; in this crate the feature is never set.
///
/// Source: CUDA Programming Guide, "Programmatic Dependent Launch and Synchronization".
#[inline(always)]
pub fn grid_dependency_wait() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("griddepcontrol.wait;", options(nostack))
    };
}

/// `griddepcontrol.launch_dependents` (same PTX ISA section; sm_90, PTX 7.8): lets the grid
/// launched after this one with programmatic stream serialization start once every CTA of this
/// grid has called it or exited. The dependent grid must still call [`grid_dependency_wait`]
/// before it touches this grid's results: the signal only schedules it, it orders no memory.
/// sm_90 and above only, as [`grid_dependency_wait`]. Nothing on the host.
#[inline(always)]
pub fn launch_dependent_grids() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("griddepcontrol.launch_dependents;", options(nostack))
    };
}
