//! Element types as stored in global memory. All arithmetic happens in f32.

use crate::arch::global;

/// Data type tag, shared by host and device (`#[repr(u32)]`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary32.
    F32 = 0,
    /// bfloat16: 8 exponent bits, 7 mantissa bits.
    Bf16 = 1,
    /// IEEE binary16.
    F16 = 2,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::Bf16 | DType::F16 => 2,
        }
    }

    /// Lower-case name as used in the `#[fused_gemm]` options and kernel names.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
        }
    }
}

/// bfloat16 bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bf16(pub u16);

/// IEEE half-precision bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F16(pub u16);

/// A storage element: converts to and from f32 (round to nearest even).
pub trait Element: Copy + 'static {
    /// The tag.
    const DTYPE: DType;
    /// Widens to f32 (exact).
    fn to_f32(self) -> f32;
    /// Rounds an f32 to this type (round to nearest even; f32 is the identity).
    fn from_f32(x: f32) -> Self;
    /// Packs two values `(lo, hi)` into one 32-bit word, `lo` at the lower address.
    /// Only meaningful for 16-bit types.
    fn pack2(lo: f32, hi: f32) -> u32;
    /// Unpacks a word written by [`pack2`](Element::pack2).
    fn unpack2(w: u32) -> (f32, f32);
    /// Loads one element from global memory, widened to f32 (an explicit `ld.global`).
    ///
    /// # Safety
    /// `p` must be a valid, aligned global address.
    #[inline(always)]
    unsafe fn load_global(p: *const Self) -> f32 {
        match Self::DTYPE {
            DType::F32 => global::ld_f32(p as *const f32),
            DType::Bf16 => Bf16(global::ld_u16(p as *const u16)).to_f32(),
            DType::F16 => F16(global::ld_u16(p as *const u16)).to_f32(),
        }
    }
    /// Rounds `v` to this type and stores it to global memory (an explicit `st.global`).
    ///
    /// # Safety
    /// `p` must be a valid, aligned global address.
    #[inline(always)]
    unsafe fn store_global(p: *mut Self, v: f32) {
        match Self::DTYPE {
            DType::F32 => global::st_f32(p as *mut f32, v),
            DType::Bf16 => global::st_u16(p as *mut u16, Bf16::from_f32(v).0),
            DType::F16 => global::st_u16(p as *mut u16, F16::from_f32(v).0),
        }
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn pack2(_: f32, _: f32) -> u32 {
        unreachable!()
    }
    #[inline(always)]
    fn unpack2(_: u32) -> (f32, f32) {
        unreachable!()
    }
}

impl Element for Bf16 {
    const DTYPE: DType = DType::Bf16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        #[cfg(target_arch = "nvptx64")]
        unsafe {
            let h: u16;
            core::arch::asm!("cvt.rn.bf16.f32 {h}, {x};", h = out(reg16) h, x = in(reg32) x, options(pure, nomem, nostack));
            Bf16(h)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        Bf16(half::bf16::from_f32(x).to_bits())
    }
    #[inline(always)]
    fn pack2(lo: f32, hi: f32) -> u32 {
        #[cfg(target_arch = "nvptx64")]
        unsafe {
            let w: u32;
            core::arch::asm!("cvt.rn.bf16x2.f32 {w}, {hi}, {lo};", w = out(reg32) w, hi = in(reg32) hi, lo = in(reg32) lo, options(pure, nomem, nostack));
            w
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            ((Self::from_f32(hi).0 as u32) << 16) | Self::from_f32(lo).0 as u32
        }
    }
    #[inline(always)]
    fn unpack2(w: u32) -> (f32, f32) {
        (f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000))
    }
}

impl Element for F16 {
    const DTYPE: DType = DType::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        unsafe {
            let x: f32;
            core::arch::asm!("cvt.f32.f16 {x}, {h};", x = out(reg32) x, h = in(reg16) self.0, options(pure, nomem, nostack));
            x
        }
        #[cfg(not(target_arch = "nvptx64"))]
        half::f16::from_bits(self.0).to_f32()
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        #[cfg(target_arch = "nvptx64")]
        unsafe {
            let h: u16;
            core::arch::asm!("cvt.rn.f16.f32 {h}, {x};", h = out(reg16) h, x = in(reg32) x, options(pure, nomem, nostack));
            F16(h)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        F16(half::f16::from_f32(x).to_bits())
    }
    #[inline(always)]
    fn pack2(lo: f32, hi: f32) -> u32 {
        #[cfg(target_arch = "nvptx64")]
        unsafe {
            let w: u32;
            core::arch::asm!("cvt.rn.f16x2.f32 {w}, {hi}, {lo};", w = out(reg32) w, hi = in(reg32) hi, lo = in(reg32) lo, options(pure, nomem, nostack));
            w
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            ((Self::from_f32(hi).0 as u32) << 16) | Self::from_f32(lo).0 as u32
        }
    }
    #[inline(always)]
    fn unpack2(w: u32) -> (f32, f32) {
        (F16(w as u16).to_f32(), F16((w >> 16) as u16).to_f32())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_round_trip_and_pack_order() {
        for &x in &[0.0f32, 1.0, -2.5, 3.140625, 65504.0, 1e-20] {
            assert_eq!(Bf16::from_f32(x).to_f32(), half::bf16::from_f32(x).to_f32());
        }
        let (lo, hi) = Bf16::unpack2(Bf16::pack2(1.0, -2.0));
        assert_eq!((lo, hi), (1.0, -2.0));
        let (lo, hi) = F16::unpack2(F16::pack2(0.5, 300.0));
        assert_eq!((lo, hi), (0.5, 300.0));
    }
}
