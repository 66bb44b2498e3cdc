//! Thin wrappers over PTX: thread indexing, barriers, warp shuffles, shared memory, atomics.
//!
//! Names follow CUDA's in snake_case. Each function is one or two PTX instructions
//! (PTX ISA 8.x, sections named on each item). On the host every function panics.

pub mod atomic;
pub mod shared;
pub mod sync;
pub mod thread;
pub mod warp;

#[cfg(not(target_arch = "nvptx64"))]
#[cold]
#[inline(never)]
pub(crate) fn host_unreachable(what: &str) -> ! {
    panic!("device intrinsic `{what}` called on the host")
}

/// Aborts the kernel (`trap`): the launch fails with `CUDA_ERROR_LAUNCH_FAILED`. For states a
/// correct launcher never creates; never used to report input errors, which the host rejects.
#[inline(always)]
pub fn trap() -> ! {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        core::arch::nvptx::trap()
    }
    #[cfg(not(target_arch = "nvptx64"))]
    host_unreachable("trap")
}
