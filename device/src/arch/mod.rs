//! Thin wrappers over PTX: thread indexing, barriers, warp shuffles, shared memory, atomics.
//!
//! Names follow CUDA's in snake_case. Each function is one or two PTX instructions
//! (PTX ISA 8.x, sections named on each item). On the host every function panics.

pub mod atomic;
pub mod global;
pub mod mbarrier;
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

/// Returns `x` unchanged through an empty, ordered `asm` block: everything computing `x` must
/// finish before the next such fence. Epilogue loops fence each finished value so LLVM does not
/// sink the tails of 64 independent element computations to the store and keep all their
/// temporaries live at once (which cost 1 KB of spills for erf-GELU on a 128×128 tile).
#[inline(always)]
pub fn fence_value(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let mut y = x;
        unsafe { core::arch::asm!("// fence {0}", inout(reg32) y, options(nomem, nostack)) };
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    x
}
