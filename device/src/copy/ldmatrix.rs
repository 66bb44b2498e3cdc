//! `ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16` (PTX ISA §9.7.14.5.15), sm_75+: each
//! lane gives the `.shared` address of one 16-byte row (lanes 0-7 rows of matrix 0, 8-15 of
//! matrix 1, ...); lane `l` receives, per matrix, row `l/4` columns `2(l%4), 2(l%4)+1`, or with
//! `.trans` column `l/4` rows `2(l%4), 2(l%4)+1`.

/// Four 8×8 b16 matrices, not transposed (SM75_U32x4_LDSM_N).
///
/// # Safety
/// All lanes execute it together; `addr` is a 16-byte aligned `.shared` address.
#[inline(always)]
pub unsafe fn ldsm_x4(addr: u32) -> [u32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b, c, d): (u32, u32, u32, u32);
        core::arch::asm!(
            "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{a},{b},{c},{d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr
        );
        [a, b, c, d]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = addr;
        crate::arch::host_unreachable("ldsm_x4")
    }
}

/// Four 8×8 b16 matrices, transposed (SM75_U16x8_LDSM_T).
///
/// # Safety
/// As [`ldsm_x4`].
#[inline(always)]
pub unsafe fn ldsm_x4_trans(addr: u32) -> [u32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b, c, d): (u32, u32, u32, u32);
        core::arch::asm!(
            "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{a},{b},{c},{d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr
        );
        [a, b, c, d]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = addr;
        crate::arch::host_unreachable("ldsm_x4_trans")
    }
}
