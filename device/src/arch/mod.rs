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
