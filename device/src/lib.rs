//! Device code for fused-gemm: `#![no_std]`, compiled for `nvptx64-nvidia-cuda` and for the host.
//!
//! On the GPU this crate provides the intrinsics ([`arch`]), the math the epilogue stages use
//! ([`math`]), storage types for bf16/f16 ([`types`]), and the kernel bodies ([`kernel`]) that
//! entry points in a kernel crate instantiate. On the host the same crate type-checks and supplies
//! the `#[repr(C)]` parameter structs ([`params`]) that host launchers fill in, so their layout is
//! the same on both sides by construction. Intrinsics called on the host panic: they exist there
//! only so generic kernel code compiles.
#![no_std]
// Index loops over fixed-size register arrays keep each access's index, which the warp-level
// layout code also uses for addressing; `x % d == 0` is one instruction where `is_multiple_of`
// adds a test for `d == 0` when `d` is not a constant.
#![allow(clippy::needless_range_loop, clippy::manual_is_multiple_of)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        abi_ptx,
        stdarch_nvptx,
        asm_experimental_arch,
        core_intrinsics,
        gpu_intrinsics,
        gpu_launch_sized_workgroup_mem
    )
)]

#[cfg(test)]
extern crate std;

pub mod arch;
pub mod copy;
pub mod epilogue;
pub mod gemm;
pub mod kernel;
pub mod math;
pub mod mma;
pub mod params;
pub mod target;
pub mod types;

#[cfg(all(target_arch = "nvptx64", not(test)))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // A device panic (only reachable through a bug: kernels index with checked bounds) traps,
    // which the host sees as CUDA_ERROR_LAUNCH_FAILED on the next synchronizing call.
    unsafe { core::arch::nvptx::trap() }
}
