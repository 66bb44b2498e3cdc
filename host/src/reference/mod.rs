//! CPU references in f64, for tests and for the CPU path of the examples.
//!
//! Every function takes inputs already widened to f64 and row-major buffers, and documents the
//! shapes it expects. They are written for clarity, not speed.

pub mod bert;
pub mod epilogue;

/// `C = A·B` in f64. A is M×K row-major; B is K×N row-major when `b_col_major` is false and N×K
/// row-major (i.e. Bᵀ stored, PyTorch `Linear` weights) when true. Returns C, M×N row-major.
///
/// # Panics
/// If a buffer's length does not match its shape, or M·K, K·N or M·N overflows `usize` (a bug
/// in the caller: references are test code; [`epilogue::fused_gemm_reference`] returns errors
/// instead).
pub fn gemm(m: usize, n: usize, k: usize, a: &[f64], b: &[f64], b_col_major: bool) -> Vec<f64> {
    assert_eq!(Some(a.len()), m.checked_mul(k), "A must be M×K");
    assert_eq!(Some(b.len()), k.checked_mul(n), "B must hold K·N elements");
    let len = m.checked_mul(n).expect("C (M×N) must fit in usize");
    let mut c = vec![0.0; len];
    gemm_into(m, n, k, a, b, b_col_major, &mut c);
    c
}

/// Adds `A·B` to `c` (M×N); the shapes must already be checked.
pub(crate) fn gemm_into(
    m: usize,
    n: usize,
    k: usize,
    a: &[f64],
    b: &[f64],
    b_col_major: bool,
    c: &mut [f64],
) {
    // Nothing to add; also keeps a huge M with an empty product from spinning.
    if n == 0 || k == 0 {
        return;
    }
    for i in 0..m {
        for kk in 0..k {
            let aik = a[i * k + kk];
            if aik == 0.0 {
                continue;
            }
            let row = &mut c[i * n..(i + 1) * n];
            if b_col_major {
                for (j, cij) in row.iter_mut().enumerate() {
                    *cij += aik * b[j * k + kk];
                }
            } else {
                for (cij, bkj) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                    *cij += aik * bkj;
                }
            }
        }
    }
}

/// Relative Frobenius error ‖got − want‖ / ‖want‖ over the finite elements of `want`;
/// `f64::INFINITY` if `got` has a NaN or an infinity where `want` is finite, a number where
/// `want` is NaN, or anything but the same infinity where `want` is infinite (a mismatch never
/// passes a threshold); the absolute error when `want` is all zeros. Per-element bounds as
/// well: [`crate::testing::assert_close`].
pub fn rel_frobenius_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "compared buffers differ in length");
    let mut num = 0.0;
    let mut den = 0.0;
    for (&g, &w) in got.iter().zip(want) {
        if !g.is_finite() && w.is_finite() {
            return f64::INFINITY;
        }
        if g.is_nan() != w.is_nan() {
            return f64::INFINITY;
        }
        if w.is_nan() {
            continue;
        }
        if w.is_infinite() {
            if g != w {
                return f64::INFINITY;
            }
            continue;
        }
        num += (g - w) * (g - w);
        den += w * w;
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// `|got − want|` where NaN never passes: 0 where both are NaN or they are equal (the same
/// infinity too), infinity where only one is NaN or an infinity meets anything else.
pub fn element_diff(got: f64, want: f64) -> f64 {
    if got.is_nan() || want.is_nan() {
        if got.is_nan() && want.is_nan() {
            0.0
        } else {
            f64::INFINITY
        }
    } else if got == want {
        0.0
    } else {
        (got - want).abs()
    }
}

/// Largest |got − want| / max(|want|, floor) over all elements (a NaN or an infinity matched
/// by anything else gives infinity; a NaN on both sides, or the same infinity, counts as equal).
pub fn max_rel_error(got: &[f64], want: &[f64], floor: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "compared buffers differ in length");
    got.iter()
        .zip(want)
        .map(|(&g, &w)| {
            let d = element_diff(g, w);
            if d == 0.0 || d.is_infinite() {
                d
            } else {
                d / w.abs().max(floor)
            }
        })
        // No NaN is left above, so f64::max drops nothing.
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_layouts_agree() {
        let (m, n, k) = (3, 5, 4);
        let a: Vec<f64> = (0..m * k).map(|i| i as f64 * 0.5 - 2.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64).sin()).collect();
        let mut bt = vec![0.0; k * n];
        for kk in 0..k {
            for j in 0..n {
                bt[j * k + kk] = b[kk * n + j];
            }
        }
        let c1 = gemm(m, n, k, &a, &b, false);
        let c2 = gemm(m, n, k, &a, &bt, true);
        assert_eq!(c1, c2);
        // C[1,2] by hand.
        let want: f64 = (0..k).map(|kk| a[k + kk] * b[kk * n + 2]).sum();
        assert!((c1[n + 2] - want).abs() < 1e-12);
    }

    #[test]
    fn errors_flag_nan_and_scale() {
        assert_eq!(rel_frobenius_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!(rel_frobenius_error(&[f64::NAN, 2.0], &[1.0, 2.0]).is_infinite());
        assert!((rel_frobenius_error(&[1.1, 0.0], &[1.0, 0.0]) - 0.1).abs() < 1e-12);
        assert!(max_rel_error(&[1.0, f64::NAN], &[1.0, 1.0], 1e-6).is_infinite());
        // Infinities: the same one matches, anything else does not.
        let inf = f64::INFINITY;
        assert_eq!(rel_frobenius_error(&[inf, 1.0], &[inf, 1.0]), 0.0);
        assert!(rel_frobenius_error(&[1.0, 1.0], &[inf, 1.0]).is_infinite());
        assert!(rel_frobenius_error(&[-inf, 1.0], &[inf, 1.0]).is_infinite());
        assert_eq!(max_rel_error(&[inf], &[inf], 1e-6), 0.0);
        assert!(max_rel_error(&[1.0], &[inf], 1e-6).is_infinite());
        assert!(max_rel_error(&[-inf], &[inf], 1e-6).is_infinite());
    }
}
