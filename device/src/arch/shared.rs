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

/// `mapa` + `st.shared::cluster.v4.f32`: stores `v` at the same offset as `addr` (a `.shared`
/// window address, 16-byte aligned) in the shared memory of CTA `rank` of this cluster
/// (distributed shared memory, PTX ISA §9.7.9.10 `st`, §9.7.9.18 `mapa`). A CTA launched without
/// a cluster is a cluster of one, rank 0.
///
/// # Safety
/// The kernel runs in clusters with a CTA of that rank that has not exited, and nothing else
/// uses those 16 bytes until a barrier orders this store before it.
#[inline(always)]
pub unsafe fn st_cluster_f32x4(addr: u32, rank: u32, v: [f32; 4]) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!(
        "{{ .reg .b32 ra; mapa.shared::cluster.u32 ra, {a}, {r}; st.shared::cluster.v4.f32 [ra], {{{x}, {y}, {z}, {w}}}; }}",
        a = in(reg32) addr, r = in(reg32) rank,
        x = in(reg32) v[0], y = in(reg32) v[1], z = in(reg32) v[2], w = in(reg32) v[3],
        options(nostack)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (addr, rank, v);
        super::host_unreachable("shared::st_cluster_f32x4")
    }
}

/// `ld.shared.v4.b32`: the 16 bytes at `.shared` window address `addr` (PTX ISA §9.7.9.8).
///
/// # Safety
/// `addr` is 16-byte aligned, inside this CTA's shared memory, and no thread writes those
/// bytes until a barrier orders this load before the write.
#[inline(always)]
pub unsafe fn ld_shared_u32x4(addr: u32) -> [u32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b, c, d): (u32, u32, u32, u32);
        core::arch::asm!(
            "ld.shared.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            p = in(reg32) addr, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            options(readonly, nostack, preserves_flags)
        );
        [a, b, c, d]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = addr;
        super::host_unreachable("shared::ld_shared_u32x4")
    }
}

/// `%dynamic_smem_size`: bytes of dynamic shared memory this CTA was launched with (PTX ISA,
/// special registers).
#[inline(always)]
pub fn dynamic_shared_size() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let v: u32;
        core::arch::asm!("mov.u32 {v}, %dynamic_smem_size;", v = out(reg32) v, options(pure, nomem, nostack));
        v
    }
    #[cfg(not(target_arch = "nvptx64"))]
    super::host_unreachable("shared::dynamic_shared_size")
}
