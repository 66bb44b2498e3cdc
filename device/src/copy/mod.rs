//! Data movement: global → shared (`cp.async`), shared → registers (`ldmatrix`), and cache-
//! controlled global loads.

pub mod cp_async;
pub mod ldmatrix;
pub mod tma;

/// `ld.global.cg.v4.f32`: a 16-byte load cached in L2 only, so it sees data other CTAs wrote
/// during this kernel (after the appropriate acquire), never a stale L1 line.
///
/// # Safety
/// `p` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn ld_global_cg_v4(p: *const [f32; 4]) -> [f32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b, c, d): (f32, f32, f32, f32);
        core::arch::asm!(
            "ld.global.cg.v4.f32 {{{a},{b},{c},{d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) p
        );
        [a, b, c, d]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = p;
        crate::arch::host_unreachable("ld_global_cg_v4")
    }
}

/// `st.global.cg.v4.f32`: a 16-byte store that bypasses L1.
///
/// # Safety
/// `p` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn st_global_cg_v4(p: *mut [f32; 4], v: [f32; 4]) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!(
        "st.global.cg.v4.f32 [{p}], {{{a},{b},{c},{d}}};",
        p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3]
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (p, v);
        crate::arch::host_unreachable("st_global_cg_v4")
    }
}
