//! Shared memory (PTX ISA §5.1.5, state space `.shared`).
//!
//! Kernels use one dynamically sized shared allocation, sized by the launcher. Rust has no
//! `__shared__` variables; rustc's `gpu_launch_sized_workgroup_mem` intrinsic declares the
//! `.extern .shared` array and returns a generic pointer to it. LLVM's address-space inference
//! turns loads and stores through that pointer into `ld.shared`/`st.shared` (checked on the PTX
//! by `tests/ptx.rs`). Instructions that take a shared *address* (`ldmatrix`, `cp.async`,
//! `mbarrier`) get it from [`shared_addr`].

/// Alignment promised for the start of dynamic shared memory (TMA's 128-byte swizzle needs 1024).
#[repr(C, align(1024))]
pub struct SharedAlign([u8; 1024]);

/// Generic pointer to the start of this CTA's dynamic shared memory, 1024-byte aligned.
#[inline(always)]
pub fn dynamic_shared_base() -> *mut u8 {
    #[cfg(target_arch = "nvptx64")]
    {
        core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<SharedAlign>() as *mut u8
    }
    #[cfg(not(target_arch = "nvptx64"))]
    super::host_unreachable("dynamic_shared_base")
}

/// The 32-bit `.shared` window address of a generic pointer into shared memory
/// (`cvta.to.shared`), as taken by `ldmatrix`, `cp.async` and `mbarrier`.
#[inline(always)]
pub fn shared_addr<T>(p: *const T) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let a: u32;
        core::arch::asm!("{{ .reg .u64 t; cvta.to.shared.u64 t, {p}; cvt.u32.u64 {a}, t; }}", p = in(reg64) p, a = out(reg32) a);
        a
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = p;
        super::host_unreachable("shared_addr")
    }
}
