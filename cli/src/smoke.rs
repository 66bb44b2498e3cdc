//! `fused-gemm smoke`: runs the first kernels (axpy, naive GEMM) on the GPU, or the same
//! computations on the CPU when there is no GPU, and checks them against an f64 reference.

use fused_gemm::host::reference::{gemm, max_rel_error};
use fused_gemm::host::testing::{rng, uniform};

use crate::error::{Error, Result};

/// What one smoke run measured.
#[derive(Clone, Debug)]
pub struct SmokeReport {
    /// Where it ran: the GPU's name, or `"cpu"`.
    pub device: String,
    /// Largest relative error of `y ← αx + y` (n = 1025) against f64.
    pub axpy_max_rel_error: f64,
    /// Largest relative error (floor 1) of C = A·B (M×N×K = 67×45×129) against f64.
    pub gemm_max_rel_error: f64,
}

/// Tolerance on [`SmokeReport::axpy_max_rel_error`].
pub const AXPY_TOLERANCE: f64 = 1e-6;
/// Tolerance on [`SmokeReport::gemm_max_rel_error`].
pub const GEMM_TOLERANCE: f64 = 1e-5;

const AXPY_LEN: usize = 1025;
const M: usize = 67;
const N: usize = 45;
const K: usize = 129;

/// Runs the smoke test on GPU 0 when `gpu` is true, else on the CPU (f32 loop and
/// `matrixmultiply::sgemm`), on fresh random inputs (the seed is printed to stderr).
///
/// # Errors
/// GPU runtime errors; [`Error::SmokeFailed`] when an error exceeds its tolerance.
pub fn run_smoke(gpu: bool) -> Result<SmokeReport> {
    let mut r = rng("smoke");
    let (alpha, x, y) = (
        0.75f32,
        uniform(&mut r, AXPY_LEN),
        uniform(&mut r, AXPY_LEN),
    );
    let (a, b) = (uniform(&mut r, M * K), uniform(&mut r, K * N));

    let (device, axpy_out, gemm_out) = if gpu {
        let g = fused_gemm::Gpu::new(0)?;
        let dx = g.upload(&x)?;
        let mut dy = g.upload(&y)?;
        fused_gemm::ops::axpy(&g, alpha, &dx, &mut dy)?;
        let axpy_out = g.download(&dy)?;
        let (da, db) = (g.upload(&a)?, g.upload(&b)?);
        let mut dc = g.upload(&vec![f32::NAN; M * N])?;
        fused_gemm::ops::gemm_naive_f32(&g, M, N, K, &da, &db, &mut dc)?;
        (g.name().to_owned(), axpy_out, g.download(&dc)?)
    } else {
        let axpy_out: Vec<f32> = x.iter().zip(&y).map(|(&x, &y)| alpha * x + y).collect();
        let mut c = vec![f32::NAN; M * N];
        // SAFETY: a is M×K, b is K×N, c is M×N, all row-major and of exactly those lengths;
        // beta = 0 so the NaN poison is overwritten, not read.
        unsafe {
            matrixmultiply::sgemm(
                M,
                K,
                N,
                1.0,
                a.as_ptr(),
                K as isize,
                1,
                b.as_ptr(),
                N as isize,
                1,
                0.0,
                c.as_mut_ptr(),
                N as isize,
                1,
            );
        }
        ("cpu".to_owned(), axpy_out, c)
    };

    let wide = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let axpy_want: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(&x, &y)| alpha as f64 * x as f64 + y as f64)
        .collect();
    let gemm_want = gemm(M, N, K, &wide(&a), &wide(&b), false);
    let report = SmokeReport {
        device,
        axpy_max_rel_error: max_rel_error(&wide(&axpy_out), &axpy_want, 1e-3),
        gemm_max_rel_error: max_rel_error(&wide(&gemm_out), &gemm_want, 1.0),
    };
    for (what, err, tol) in [
        ("axpy", report.axpy_max_rel_error, AXPY_TOLERANCE),
        ("naive GEMM", report.gemm_max_rel_error, GEMM_TOLERANCE),
    ] {
        // NaN fails too.
        if err.is_nan() || err > tol {
            return Err(Error::SmokeFailed {
                what,
                device: report.device.clone(),
                error: err,
                tolerance: tol,
            });
        }
    }
    Ok(report)
}
