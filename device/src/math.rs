//! Scalar f32 math for epilogue stages, accurate to a few ulp where the stage needs it.
//!
//! rustc's NVPTX backend has no libm, so transcendental functions are built from PTX's
//! `ex2.approx` (PTX ISA §9.7.3.22, max relative error 2^-22 for normal inputs) and
//! `sin.approx`/`cos.approx` after an explicit range reduction. On the host the same functions
//! use `libm`, so host unit tests check the formulas, and GPU tests check the instructions.

/// log2(e).
const LOG2_E: f32 = core::f32::consts::LOG2_E;

/// 2^x.
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let y: f32;
        core::arch::asm!("ex2.approx.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack));
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    libm::exp2f(x)
}

/// 2^x with subnormal inputs and results flushed to zero (`ex2.approx.ftz.f32`): one MUFU
/// instruction, where the non-ftz form adds a subnormal fix-up around it. For activations whose
/// result only needs e^x next to 1 (sigmoid, GELU): a result below 2^-126 is 0 either way.
#[inline(always)]
pub fn exp2_ftz(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let y: f32;
        core::arch::asm!("ex2.approx.ftz.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack));
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    libm::exp2f(x)
}

/// 1/x to 1 ulp for normal x (`rcp.approx.ftz.f32`, PTX ISA §9.7.3.14): one MUFU instruction,
/// where `div.full` adds range scaling. 1/∞ = 0; for |x| > 2^126 the result is flushed to 0.
#[inline(always)]
pub fn rcp(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let y: f32;
        core::arch::asm!("rcp.approx.ftz.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack));
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        1.0 / x
    }
}

/// log2(x) (`lg2.approx`, max relative error 2^-22.6 on the device).
#[inline(always)]
pub fn log2(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let y: f32;
        core::arch::asm!("lg2.approx.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack));
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    libm::log2f(x)
}

/// e^x.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        exp2(x * LOG2_E)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    libm::expf(x)
}

/// a/b to 2 ulp (`div.full.f32`). IEEE division (`div.rn.f32`) has a slow path that ptxas
/// emits as a subroutine call; inside an unrolled epilogue holding the accumulator tile in
/// registers, that call forces spills.
#[inline(always)]
pub fn div(a: f32, b: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let y: f32;
        core::arch::asm!("div.full.f32 {y}, {a}, {b};", y = out(reg32) y, a = in(reg32) a, b = in(reg32) b, options(pure, nomem, nostack));
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        a / b
    }
}

/// Fused multiply-add a·b + c with one rounding (`fma.rn.f32`).
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        core::intrinsics::fmaf32(a, b, c)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    libm::fmaf(a, b, c)
}

/// IEEE square root (`sqrt.rn.f32`).
#[inline(always)]
pub fn sqrt(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        core::intrinsics::sqrtf32(x)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    libm::sqrtf(x)
}

/// 1/sqrt(x) (`rsqrt.approx.f32`, max relative error 2^-22.9 on the device).
#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let y: f32;
        core::arch::asm!("rsqrt.approx.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack));
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        1.0 / libm::sqrtf(x)
    }
}

/// Complementary error function, erfc(x) = 1 − erf(x).
///
/// Chebyshev fit of Press et al., *Numerical Recipes* §6.2 (`erfcc`): fractional error below
/// 1.2e-7 everywhere. Branch-free: t = 1/(1 + z/2) is one `rcp.approx.ftz` (1 ulp),
/// e^(−z² + P(t)) one `ex2.approx.ftz` with log2(e) folded into its argument, the sign one
/// `selp`. Below 2^-126 (|x| > 9.3) the result flushes to 0 (to 2 for x < −9.3).
#[inline(always)]
#[allow(clippy::excessive_precision)] // the coefficients as Numerical Recipes prints them
pub fn erfc(x: f32) -> f32 {
    let z = select(x < 0.0, -x, x);
    let t = rcp(fma(0.5, z, 1.0));
    let p = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * exp2_ftz(fma(-z, z, p) * LOG2_E);
    select(x >= 0.0, r, 2.0 - r)
}

/// Error function.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    1.0 - erfc(x)
}

/// Hyperbolic tangent through e^(2|x|); odd, saturates to ±1 without overflow. Both branches
/// are computed and one selected: no branch, so an unrolled epilogue can interleave the
/// `ex2`/`rcp` latencies of many values (a branch per value serialized them).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = if x < 0.0 { -x } else { x };
    // For small |x| the formula below cancels; the Taylor series to x⁷ is exact to f32 there.
    let a2 = a * a;
    let series = a * (1.0 + a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0 + a2 * (-17.0 / 315.0))));
    let e = exp(2.0 * a.min(20.0));
    let formula = 1.0 - div(2.0, e + 1.0);
    let r = select(a < 0.1, series, formula);
    if x < 0.0 { -r } else { r }
}

/// `if c { a } else { b }` as one `selp` (no branch).
#[inline(always)]
pub fn select(c: bool, a: f32, b: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let y: f32;
        core::arch::asm!(
            "{{ .reg .pred p; setp.ne.u32 p, {c}, 0; selp.f32 {y}, {a}, {b}, p; }}",
            y = out(reg32) y, c = in(reg32) c as u32, a = in(reg32) a, b = in(reg32) b,
            options(pure, nomem, nostack)
        );
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        if c { a } else { b }
    }
}

/// Logistic sigmoid 1/(1+e^-x): one `ex2` and one `rcp` (1 + e^-x ≥ 1, so no range issue;
/// e^-x = ∞ gives 0).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        rcp(1.0 + exp2_ftz(-x * LOG2_E))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        1.0 / (1.0 + libm::expf(-x))
    }
}

/// The largest error of [`gelu_erf`] against float64 over all f32: absolute where |GELU(x)| is
/// below 1, relative above (3.2e-6 measured over a sweep of ±20, rounded up).
pub const GELU_ERF_MAX_ERROR: f32 = 4e-6;

/// GELU with the exact normal CDF, x·Φ(x): what BERT configs call `gelu`.
///
/// logit Φ is odd, so x·Φ(x) = x/(1 + e^(−logit Φ(x))), and −log2(e)·logit Φ(x) is fitted as
/// x·P(x²) with P of degree 4 (this crate's fit: weighted least squares iterated towards
/// minimax on |x| ≤ 6, weights the sensitivity of x·Φ to the logit at ±x). One `ex2`, one
/// `rcp` and eight FMA-class instructions, no branch: within [`GELU_ERF_MAX_ERROR`] (4e-6)
/// of float64 over all f32 (absolute below 1, relative above), under a hundredth of an f16 step
/// at 1 and far below the tanh approximation's 5e-4. A GEMM epilogue runs it once per output
/// value, where each term of P costs time (degree 6, 2e-7, was 4–7% slower on the H100's
/// BERT and MiniLM FFN-up rows); degree 4 is the lowest whose error stays that small without
/// a clamp. P's leading coefficient is negative, so for large x the result is x and for large
/// −x it is −0; NaN stays NaN.
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    const P: [f32; 5] = [
        -2.302_043_7,
        -1.052_299_7e-1,
        3.620_477_2e-4,
        8.790_976_4e-5,
        -3.210_377_1e-6,
    ];
    let s = x * x;
    let mut p = P[4];
    p = fma(p, s, P[3]);
    p = fma(p, s, P[2]);
    p = fma(p, s, P[1]);
    p = fma(p, s, P[0]);
    x * rcp(1.0 + exp2_ftz(x * p))
}

/// GELU, tanh approximation (`gelu_new`, `gelu_pytorch_tanh`, cuBLASLt's GELU epilogue):
/// ½x(1 + tanh(u)), u = √(2/π)(x + 0.044715x³), computed as the equal x·σ(2u) = x/(1 + e^(−2u))
/// with log2(e) folded into the polynomial: one `ex2`, one `rcp`, no branch (e^(−2u) = ∞ gives
/// x·0 = 0, the limit).
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const K: f32 = 0.797_884_6; // sqrt(2/pi)
    #[cfg(target_arch = "nvptx64")]
    {
        // −2u·log2(e) = x·(A + B·x²).
        const A: f32 = -2.0 * K * LOG2_E;
        const B: f32 = -2.0 * K * 0.044_715 * LOG2_E;
        x * rcp(1.0 + exp2_ftz(x * fma(B, x * x, A)))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        x / (1.0 + libm::expf(-2.0 * K * (x + 0.044_715 * x * x * x)))
    }
}

/// SiLU (swish): x·sigmoid(x).
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// (sin x, cos x) for any finite x: Cody–Waite reduction to [−π, π] with a two-part 2π, then
/// `sin.approx`/`cos.approx` (absolute error about 5e-7 on that interval).
#[inline(always)]
pub fn sincos(x: f32) -> (f32, f32) {
    #[cfg(target_arch = "nvptx64")]
    {
        const INV_2PI: f32 = 0.159_154_94;
        const TWO_PI_HI: f32 = 6.281_25; // exact in 9 bits, so k·HI is exact for |k| < 2^15
        const TWO_PI_LO: f32 = 1.935_307_2e-3;
        let k = round(x * INV_2PI);
        let r = (x - k * TWO_PI_HI) - k * TWO_PI_LO;
        let (s, c): (f32, f32);
        unsafe {
            core::arch::asm!("sin.approx.f32 {s}, {r};", s = out(reg32) s, r = in(reg32) r, options(pure, nomem, nostack));
            core::arch::asm!("cos.approx.f32 {c}, {r};", c = out(reg32) c, r = in(reg32) r, options(pure, nomem, nostack));
        }
        (s, c)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    (libm::sinf(x), libm::cosf(x))
}

/// Round half away from zero to an integral f32.
#[inline(always)]
pub fn round(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let y: f32;
        core::arch::asm!("cvt.rni.f32.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack));
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    libm::rintf(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Float64 values of erf-GELU and tanh-GELU, which differ by up to ~4e-4: erf-GELU to its
    // 4e-6 contract (plus the values' rounding), tanh-GELU to 1e-6.
    #[test]
    fn gelu_variants_match_float64_at_given_points() {
        let xs = [-3.0f32, -1.5, 1.0, 3.0];
        let erf = [-0.004_049_7, -0.100_210_8, 0.841_344_7, 2.995_950_3];
        let tanh = [-0.003_637_4, -0.100_428_4, 0.841_192, 2.996_362_6];
        for i in 0..4 {
            assert!(
                (gelu_erf(xs[i]) - erf[i]).abs() < 5e-6,
                "gelu({}) = {}",
                xs[i],
                gelu_erf(xs[i])
            );
            assert!(
                (gelu_tanh(xs[i]) - tanh[i]).abs() < 1e-6,
                "gelu_tanh({}) = {}",
                xs[i],
                gelu_tanh(xs[i])
            );
        }
    }

    #[test]
    fn gelu_tanh_matches_float64_over_a_sweep_and_saturates() {
        let reference = |x: f64| {
            0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x)).tanh())
        };
        let mut x = -12.0f64;
        while x < 12.0 {
            let (got, want) = (gelu_tanh(x as f32) as f64, reference(x as f32 as f64));
            assert!(
                (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                "gelu_tanh({x}) = {got}, want {want}"
            );
            x += 0.0137;
        }
        assert_eq!(gelu_tanh(-1e30), 0.0);
        assert_eq!(gelu_tanh(1e30), 1e30);
        assert_eq!(gelu_tanh(0.0), 0.0);
        assert!(gelu_tanh(f32::NAN).is_nan());
        for x in [-0.3f32, -0.05, 1e-4, 0.09, 0.11, 5.0] {
            assert!(
                (tanh(x) as f64 - (x as f64).tanh()).abs()
                    < 1e-6 * (x as f64).tanh().abs().max(1e-3)
            );
        }
    }

    #[test]
    fn erfc_relative_error_is_small_over_a_sweep() {
        let mut x = -6.0f64;
        while x < 6.0 {
            let xf = x as f32;
            let want = libm::erfc(xf as f64);
            let got = erfc(xf) as f64;
            // f32 rounding of the exponent's argument (≈ x²) dominates for large |x|.
            assert!(
                ((got - want) / want).abs() < 1e-6 * (1.0 + x * x),
                "erfc({x}): {got} vs {want}"
            );
            x += 0.013;
        }
    }

    #[test]
    fn erf_gelu_matches_float64_over_a_sweep() {
        let reference = |x: f64| 0.5 * x * libm::erfc(-x / core::f64::consts::SQRT_2);
        let (mut x, mut worst) = (-20.0f64, 0.0f64);
        while x < 20.0 {
            let xf = x as f32;
            let (got, want) = (gelu_erf(xf) as f64, reference(xf as f64));
            let err = (got - want).abs() / want.abs().max(1.0);
            worst = worst.max(err);
            assert!(
                err <= GELU_ERF_MAX_ERROR as f64,
                "gelu_erf({xf}) = {got}, want {want}"
            );
            x += 0.000_731;
        }
        for xf in [
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1e-30,
            -1e-30,
            1e30,
            -1e30,
        ] {
            let want = reference(xf as f64);
            assert!(
                (gelu_erf(xf) as f64 - want).abs()
                    <= GELU_ERF_MAX_ERROR as f64 * want.abs().max(1.0)
            );
        }
        assert_eq!(gelu_erf(f32::INFINITY), f32::INFINITY);
        assert!(worst > 0.0);
    }

    #[test]
    fn erf_gelu_saturates_and_keeps_nan() {
        assert_eq!(erfc(-10.0), 2.0);
        assert!((0.0..1e-30).contains(&erfc(10.0)));
        assert_eq!(gelu_erf(12.0), 12.0);
        assert!(gelu_erf(-12.0).abs() < 1e-30);
        assert_eq!(gelu_erf(0.0), 0.0);
        assert!(gelu_erf(f32::NAN).is_nan() && erfc(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_is_accurate_near_zero_and_saturates() {
        for &x in &[1e-6f32, 1e-3, 0.0999, 0.1, 0.3, 0.5, 1.0, 5.0, 50.0, -7.0] {
            let want = libm::tanh(x as f64);
            let got = tanh(x) as f64;
            assert!(
                (got - want).abs() < 3e-7 && ((got - want) / want).abs() < 2e-6,
                "tanh({x}) = {got}, want {want}"
            );
        }
        assert_eq!(tanh(1e30), 1.0);
        assert_eq!(tanh(-1e30), -1.0);
    }
}
