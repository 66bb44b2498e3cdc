//! Explicit `.global` loads and stores (PTX ISA §9.7.9.8 `ld`, §9.7.9.9 `st`).
//!
//! Kernel parameters that arrive inside a `#[repr(C)]` struct carry device addresses as `u64`;
//! LLVM cannot infer that they point to global memory and would emit generic `ld`/`st`
//! (address-space translation on every access, and `tests/ptx.rs` rejects them). Kernels access
//! such memory through these functions instead. Loads are `pure` + `readonly`: LLVM may merge
//! identical loads but never moves them across a store.

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

macro_rules! ld {
    ($(#[$m:meta])* $name:ident, $t:ty, $reg:ident, $ptx:literal) => {
        $(#[$m])*
        ///
        /// # Safety
        /// `p` must be a valid, aligned global address.
        #[inline(always)]
        pub unsafe fn $name(p: *const $t) -> $t {
            #[cfg(target_arch = "nvptx64")]
            {
                let v: $t;
                asm!($ptx, v = out($reg) v, p = in(reg64) p, options(pure, readonly, nostack, preserves_flags));
                v
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                let _ = p;
                super::host_unreachable(stringify!($name))
            }
        }
    };
}

macro_rules! st {
    ($(#[$m:meta])* $name:ident, $t:ty, $reg:ident, $ptx:literal) => {
        $(#[$m])*
        ///
        /// # Safety
        /// `p` must be a valid, aligned global address.
        #[inline(always)]
        pub unsafe fn $name(p: *mut $t, v: $t) {
            #[cfg(target_arch = "nvptx64")]
            asm!($ptx, p = in(reg64) p, v = in($reg) v, options(nostack, preserves_flags));
            #[cfg(not(target_arch = "nvptx64"))]
            {
                let _ = (p, v);
                super::host_unreachable(stringify!($name))
            }
        }
    };
}

ld!(
    /// 2-byte load.
    ld_u16, u16, reg16, "ld.global.b16 {v}, [{p}];"
);
ld!(
    /// 4-byte load.
    ld_u32, u32, reg32, "ld.global.b32 {v}, [{p}];"
);
ld!(
    /// f32 load.
    ld_f32, f32, reg32, "ld.global.f32 {v}, [{p}];"
);
st!(
    /// 2-byte store.
    st_u16, u16, reg16, "st.global.b16 [{p}], {v};"
);
st!(
    /// 4-byte store.
    st_u32, u32, reg32, "st.global.b32 [{p}], {v};"
);
st!(
    /// f32 store.
    st_f32, f32, reg32, "st.global.f32 [{p}], {v};"
);

/// 8-byte load of two f32.
///
/// # Safety
/// `p` must be a valid, 8-byte aligned global address.
#[inline(always)]
pub unsafe fn ld_f32x2(p: *const [f32; 2]) -> [f32; 2] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b): (f32, f32);
        asm!("ld.global.v2.f32 {{{a},{b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, p = in(reg64) p, options(pure, readonly, nostack, preserves_flags));
        [a, b]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = p;
        super::host_unreachable("ld_f32x2")
    }
}

/// 8-byte store of two f32.
///
/// # Safety
/// `p` must be a valid, 8-byte aligned global address.
#[inline(always)]
pub unsafe fn st_f32x2(p: *mut [f32; 2], v: [f32; 2]) {
    #[cfg(target_arch = "nvptx64")]
    asm!("st.global.v2.f32 [{p}], {{{a},{b}}};", p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1], options(nostack, preserves_flags));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (p, v);
        super::host_unreachable("st_f32x2")
    }
}

/// 16-byte load of four f32.
///
/// # Safety
/// `p` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn ld_f32x4(p: *const [f32; 4]) -> [f32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b, c, d): (f32, f32, f32, f32);
        asm!(
            "ld.global.v4.f32 {{{a},{b},{c},{d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) p,
            options(pure, readonly, nostack, preserves_flags)
        );
        [a, b, c, d]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = p;
        super::host_unreachable("ld_f32x4")
    }
}

/// 16-byte store of four f32.
///
/// # Safety
/// `p` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn st_f32x4(p: *mut [f32; 4], v: [f32; 4]) {
    #[cfg(target_arch = "nvptx64")]
    asm!(
        "st.global.v4.f32 [{p}], {{{a},{b},{c},{d}}};",
        p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
        options(nostack, preserves_flags)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (p, v);
        super::host_unreachable("st_f32x4")
    }
}

/// Stores the eight 16-bit values packed in `v` (element `2i` in the low half of `v[i]`) at
/// `p`: as one 16-byte `st.global.v4.b32` when `vector`, else the first `count` (at most 8)
/// with `st.global.b16` each. One `asm` block of predicated stores, so the code is the same
/// few instructions whatever the compiler knows about `count`.
///
/// # Safety
/// With `vector`, `p` is a valid, 16-byte aligned global address of 16 bytes; otherwise the
/// `count` elements from `p` are valid 2-byte aligned global addresses.
#[inline(always)]
pub unsafe fn st_u16x8(p: u64, v: [u32; 4], vector: bool, count: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!(
        "{{ .reg .pred pv, p0, p1, p2, p3, p4, p5, p6, p7; .reg .b16 h<8>;",
        "setp.ne.u32 pv, {vec}, 0;",
        "@pv st.global.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};",
        "setp.gt.u32 p0, {n}, 0; setp.gt.u32 p1, {n}, 1; setp.gt.u32 p2, {n}, 2; setp.gt.u32 p3, {n}, 3;",
        "setp.gt.u32 p4, {n}, 4; setp.gt.u32 p5, {n}, 5; setp.gt.u32 p6, {n}, 6; setp.gt.u32 p7, {n}, 7;",
        "mov.b32 {{h0, h1}}, {a}; mov.b32 {{h2, h3}}, {b}; mov.b32 {{h4, h5}}, {c}; mov.b32 {{h6, h7}}, {d};",
        "@p0 st.global.b16 [{p}], h0; @p1 st.global.b16 [{p}+2], h1;",
        "@p2 st.global.b16 [{p}+4], h2; @p3 st.global.b16 [{p}+6], h3;",
        "@p4 st.global.b16 [{p}+8], h4; @p5 st.global.b16 [{p}+10], h5;",
        "@p6 st.global.b16 [{p}+12], h6; @p7 st.global.b16 [{p}+14], h7; }}",
        p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
        vec = in(reg32) vector as u32, n = in(reg32) if vector { 0 } else { count },
        options(nostack, preserves_flags)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (p, v, vector, count);
        super::host_unreachable("st_u16x8")
    }
}

/// Brings the 128-byte line holding global address `p` into L2 (tiles the epilogue reads once,
/// too large for the L1 left beside a Hopper kernel's shared memory).
///
/// A hint (PTX ISA, data-movement instructions, `prefetch`): it changes no value.
///
/// # Safety
/// `p` must lie in a global allocation (callers clip it to the data they will read).
#[inline(always)]
pub unsafe fn prefetch_l2(p: u64) {
    #[cfg(target_arch = "nvptx64")]
    asm!("prefetch.global.L2 [{p}];", p = in(reg64) p, options(nostack, preserves_flags));
    #[cfg(not(target_arch = "nvptx64"))]
    let _ = p;
}
