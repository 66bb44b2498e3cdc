//! Widening host data to f64 and emulating storage in a narrower dtype.
//!
//! A kernel computes in f32 and stores f32, bf16 or f16; its inputs were stored in one of those
//! types before it ran. To compare a kernel against the f64 reference of what it *received*,
//! widen the stored inputs with [`to_f64`]; to compare against what it *can* store, round the
//! reference with [`round_slice`].

use fused_gemm_device::types::{Bf16, DType, F16};

/// A host element type that widens to f64 exactly and rounds from f64.
///
/// Narrowing from f64 goes through f32 (round to nearest even twice, f64 → f32 → type): the
/// same rounding a kernel applies when it stores an f32 value, so a reference rounded this way
/// matches a correct kernel bit for bit on values the kernel computed exactly.
pub trait HostElement: Copy {
    /// The device dtype this type is stored as, `None` for f64 (host only).
    const DTYPE: Option<DType>;
    /// Exact widening.
    fn to_f64(self) -> f64;
    /// Rounding narrowing (through f32, see the trait docs).
    fn from_f64(x: f64) -> Self;
}

impl HostElement for f64 {
    const DTYPE: Option<DType> = None;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> Self {
        x
    }
}

impl HostElement for f32 {
    const DTYPE: Option<DType> = Some(DType::F32);
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}

impl HostElement for half::f16 {
    const DTYPE: Option<DType> = Some(DType::F16);
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(x: f64) -> Self {
        half::f16::from_f32(x as f32)
    }
}

impl HostElement for half::bf16 {
    const DTYPE: Option<DType> = Some(DType::Bf16);
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(x: f64) -> Self {
        half::bf16::from_f32(x as f32)
    }
}

impl HostElement for F16 {
    const DTYPE: Option<DType> = Some(DType::F16);
    fn to_f64(self) -> f64 {
        half::f16::from_bits(self.0).to_f64()
    }
    fn from_f64(x: f64) -> Self {
        F16(half::f16::from_f32(x as f32).to_bits())
    }
}

impl HostElement for Bf16 {
    const DTYPE: Option<DType> = Some(DType::Bf16);
    fn to_f64(self) -> f64 {
        half::bf16::from_bits(self.0).to_f64()
    }
    fn from_f64(x: f64) -> Self {
        Bf16(half::bf16::from_f32(x as f32).to_bits())
    }
}

/// Widens a host buffer (f32, `half::f16`, `half::bf16`, the device's `F16`/`Bf16`) to f64,
/// exactly.
pub fn to_f64<T: HostElement>(xs: &[T]) -> Vec<f64> {
    xs.iter().map(|&x| x.to_f64()).collect()
}

/// Rounds an f64 buffer to `T` (through f32, see [`HostElement`]).
pub fn from_f64<T: HostElement>(xs: &[f64]) -> Vec<T> {
    xs.iter().map(|&x| T::from_f64(x)).collect()
}

/// `x` rounded to `dtype` and widened back: f64 → f32 → dtype → f64, round to nearest even at
/// each step (what a kernel storing its f32 result in `dtype` produces). Values beyond the
/// type's range become ±∞; NaN stays NaN.
pub fn round_to(dtype: DType, x: f64) -> f64 {
    let f = x as f32;
    match dtype {
        DType::F32 => f as f64,
        DType::F16 => half::f16::from_f32(f).to_f64(),
        DType::Bf16 => half::bf16::from_f32(f).to_f64(),
    }
}

/// [`round_to`] on every element of `xs`, returning the rounded copy: the inputs a kernel sees
/// after they were stored in `dtype`, or the outputs it can store.
pub fn round_slice(dtype: DType, xs: &[f64]) -> Vec<f64> {
    xs.iter().map(|&x| round_to(dtype, x)).collect()
}

/// Unit roundoff of `dtype` (half the distance from 1 to the next value): 2⁻²⁴ for f32, 2⁻¹¹
/// for f16, 2⁻⁸ for bf16. A correctly rounded stored value is within this relative error.
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f64::powi(2.0, -24),
        DType::F16 => f64::powi(2.0, -11),
        DType::Bf16 => f64::powi(2.0, -8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_is_exact_and_rounding_is_to_nearest() {
        let xs = [1.0f64 + 1.0 / 4096.0, 300.0, -65504.0, 1e-3];
        let h: Vec<half::f16> = from_f64(&xs);
        // f16 spacing at 1 is 2⁻¹⁰: 1 + 2⁻¹² is below the midpoint, so it rounds to 1.
        assert_eq!(to_f64(&h)[0], 1.0);
        assert_eq!(to_f64(&h)[1..3], [300.0, -65504.0]);
        assert_eq!(round_to(DType::F16, 70000.0), f64::INFINITY);
        assert_eq!(round_to(DType::Bf16, 1.0 + 1.0 / 128.0), 1.0 + 1.0 / 128.0);
        assert_eq!(round_to(DType::Bf16, 1.0 + 1.0 / 512.0), 1.0);
        assert!(round_to(DType::F32, f64::NAN).is_nan());
        let d: Vec<F16> = from_f64(&xs);
        assert_eq!(to_f64(&d), to_f64(&h));
        let b: Vec<Bf16> = from_f64(&xs);
        let hb: Vec<half::bf16> = from_f64(&xs);
        assert_eq!(to_f64(&b), to_f64(&hb));
    }

    #[test]
    fn rounding_error_is_within_unit_roundoff() {
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            let u = unit_roundoff(dtype);
            for i in 1..2000 {
                let x = 1.0 + i as f64 * 0.000_731;
                let r = round_to(dtype, x);
                assert!((r - x).abs() <= u * x.abs(), "{dtype:?} {x} -> {r}");
            }
        }
    }
}
