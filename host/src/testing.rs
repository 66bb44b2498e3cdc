//! Helpers for GPU tests: open the GPU (or skip without one), fresh seeded random data,
//! poisoning, and the comparisons of a result with its f64 reference.
//!
//! # Skipping, and `FUSED_GEMM_REQUIRE_GPU`
//!
//! Without a CUDA driver or device, [`gpu_or_skip`] prints why the test is skipped and returns
//! `None`; the test returns early and libtest counts it as passed. That keeps `cargo test`
//! useful where there is no GPU (CI). Where a GPU must be present, set
//! `FUSED_GEMM_REQUIRE_GPU=1` (any value other than empty or `0`): then a missing driver or
//! device panics, and the test fails instead of passing without having run. Tests that skip for
//! another reason (a model that is not on disk) ask [`gpu_required`] and fail likewise.
//!
//! # Sanitizer-sized shapes, and `FUSED_GEMM_SANITIZE`
//!
//! `scripts/sanitize.sh` sets `FUSED_GEMM_SANITIZE=1`, under which the GPU tests run their
//! largest launches smaller ([`sanitizing`]).
//!
//! # Comparisons
//!
//! [`assert_close`] (and [`compare`], which returns the [`Closeness`] report instead of
//! panicking) checks a result against its reference twice: the relative Frobenius error as a
//! whole, and every element on its own, `|x − ref| ≤ atol + rtol·|ref|`. The Frobenius error
//! alone averages: one wrong element among millions (a tile edge written twice, an element a
//! kernel never wrote) moves it by less than any useful threshold. A NaN or an infinity never
//! passes where the reference is finite, and a NaN in the reference must be matched by a NaN.
//! [`Tolerance`] documents the default bounds. [`max_abs_diff`], [`nan_max`] and [`nan_min`]
//! are the NaN-propagating reductions for tests that compare two results directly
//! (`fold(0.0, f32::max)` silently drops a NaN: `f32::max(0.0, NaN)` is `0.0`).

use std::ffi::OsStr;
use std::fmt;
use std::sync::OnceLock;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use fused_gemm_device::math::GELU_ERF_MAX_ERROR;

use crate::reference::epilogue::RefStage;
use crate::reference::rel_frobenius_error;
use crate::{Error, Gpu};

/// The variable that turns "no GPU, test skipped" into a test failure.
pub const REQUIRE_GPU_VAR: &str = "FUSED_GEMM_REQUIRE_GPU";

/// Whether `FUSED_GEMM_REQUIRE_GPU` asks for a GPU: set to anything other than empty or `0`.
/// Tests that skip for reasons of their own (a model that is not on disk) must fail instead
/// when this is true.
pub fn gpu_required() -> bool {
    flag_set(std::env::var_os(REQUIRE_GPU_VAR).as_deref())
}

/// Whether an on/off variable is on: set, and neither empty nor `0`.
fn flag_set(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// The variable that asks the GPU tests for their sanitizer-sized shapes ([`sanitizing`]).
pub const SANITIZE_VAR: &str = "FUSED_GEMM_SANITIZE";

/// Whether `FUSED_GEMM_SANITIZE` is set to anything other than empty or `0` (read once per
/// process). `scripts/sanitize.sh` sets it: under compute-sanitizer, whose racecheck
/// instruments every shared-memory access, the GPU tests then shrink their largest shapes (and
/// time only a few launches where a test times) so that each test binary finishes in minutes.
///
/// The shrunk set is chosen to keep every path the full one covers: the same kernels, entry points,
/// tiles and epilogues (where the launcher picks the tile, shapes on which its model, evaluated
/// with H100 and H200 figures when the set was chosen, picks the same ones; no test asserts that
/// for other cards); awkward sizes (M or N one off a tile multiple, 1, odd N, K not a multiple of
/// BK) with partial tiles at both edges; persistent CTAs that take two tiles or more (the
/// shared-memory ring wraps, epilogue buffers are reused); K loops longer than the pipeline's
/// stages; split-K with its workspace, split tails, clusters and row norms.
pub fn sanitizing() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| flag_set(std::env::var_os(SANITIZE_VAR).as_deref()))
}

/// Opens GPU 0, or prints why the GPU test `test` is skipped and returns `None` when there is no
/// CUDA driver or no device.
///
/// With `FUSED_GEMM_REQUIRE_GPU` set to anything other than empty or `0` (see
/// [`gpu_required`]), a missing driver or device panics instead, naming the test and the reason:
/// a GPU test run must not pass by skipping. Any other failure to open the device always panics.
///
/// The device has no autotuner: tiles are the model's, so that a printed seed replays the same
/// launches on any machine (a tuned tile depends on the timings and on the cache). Tests of the
/// autotuner install one with [`Gpu::set_autotuner`].
pub fn gpu_or_skip(test: &str) -> Option<Gpu> {
    match Gpu::new(0) {
        Ok(g) => {
            g.set_autotuner(None);
            Some(g)
        }
        Err(e @ (Error::NoDriver | Error::NoDevice { .. })) => {
            assert!(
                !gpu_required(),
                "GPU test `{test}` cannot run: {e}, and {REQUIRE_GPU_VAR} is set (a GPU is \
                 required here; unset it, or set it to 0, to skip GPU tests without one)"
            );
            eprintln!("skipping GPU test `{test}`: {e}");
            None
        }
        Err(e) => panic!("GPU present but unusable: {e}"),
    }
}

/// A fresh random generator; its seed is printed so a failure can be replayed with
/// `FUSED_GEMM_SEED=<seed>`.
pub fn rng(test: &str) -> StdRng {
    let seed = std::env::var("FUSED_GEMM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("{test}: seed {seed}");
    StdRng::seed_from_u64(seed)
}

/// `len` values uniform in `[-1, 1)`.
pub fn uniform(rng: &mut StdRng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

pub use crate::tensor::POISON_F32;

/// How close a result must be to its reference, for [`compare`] and [`assert_close`].
///
/// With `scale = max(rms(ref), floor)` (the root mean square of the reference's finite
/// elements; 1 where that is 0, as [`rel_frobenius_error`] falls back to the absolute error for
/// an all-zero reference), a result passes when
/// - its relative Frobenius error ‖x − ref‖ / (√n·scale) is below `frobenius` (this is
///   [`rel_frobenius_error`] whenever `floor` does not exceed rms(ref)), and
/// - every element has `|x − ref| ≤ atol·scale + abs + rtol·|ref|`, with the non-finite rules
///   of [`compare`].
///
/// The default for a test whose tolerance is `tol` ([`Tolerance::rel`], also `From<f64>`) is
/// `frobenius = rtol = atol = tol`, `abs = floor = 0`, because:
/// - `rtol = tol`: the tests' tolerances sit above the unit roundoff of the output type
///   (bf16 2⁻⁸ ≈ 3.9e-3 under 1e-2, f16 2⁻¹¹ ≈ 4.9e-4 under 2e-3), the bound on the relative
///   error of a correctly rounded element; f32 accumulation adds far less.
/// - `atol = tol` in units of rms(ref): an element that cancels to near zero (a GEMM sum, a
///   LayerNorm output at the mean) carries the rounding errors of terms of the output's typical
///   magnitude, not of its own; its bound is the test's tolerance of that typical magnitude.
///
/// A wrong element (unwritten, from another row, stale) is off by about its own magnitude and
/// fails both parts. Where an epilogue amplifies rounding errors beyond this (say why where
/// used), [`Tolerance::per_element`] loosens the element bound alone; where an output is a
/// weighted average of inputs much larger than itself (attention: a convex combination of V
/// rows, whose 16-bit weights each carry a relative rounding error), [`Tolerance::plus_abs`]
/// adds `tol·max|input|`, the size of those terms' rounding errors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Bound on the relative Frobenius error (strict: the error must be below it).
    pub frobenius: f64,
    /// The relative part of the per-element bound.
    pub rtol: f64,
    /// The absolute part of the per-element bound, in units of `scale`.
    pub atol: f64,
    /// A further absolute part of the per-element bound (not scaled).
    pub abs: f64,
    /// The smallest scale: outputs whose typical magnitude is below the output type's
    /// resolution (f16 subnormals) are judged against this absolute magnitude instead.
    pub floor: f64,
}

impl Tolerance {
    /// The default bounds for a test tolerance `tol`: relative Frobenius error below `tol`, and
    /// each element within `tol·(rms(ref) + |ref|)`. See [`Tolerance`] for why.
    pub const fn rel(tol: f64) -> Self {
        Tolerance {
            frobenius: tol,
            rtol: tol,
            atol: tol,
            abs: 0.0,
            floor: 0.0,
        }
    }

    /// The same Frobenius bound, with the per-element bound (`rtol`, `atol` and `abs`) `factor`
    /// times as wide.
    pub const fn per_element(self, factor: f64) -> Self {
        Tolerance {
            rtol: self.rtol * factor,
            atol: self.atol * factor,
            abs: self.abs * factor,
            ..self
        }
    }

    /// The same bounds with `abs` more absolute slack per element (see [`Tolerance`]).
    pub const fn plus_abs(self, abs: f64) -> Self {
        Tolerance {
            abs: self.abs + abs,
            ..self
        }
    }

    /// The same bounds, judged against a scale of at least `floor` (see [`Tolerance::floor`]).
    pub const fn with_floor(self, floor: f64) -> Self {
        Tolerance { floor, ..self }
    }

    /// The same bounds for a result that also carries an absolute error of up to `err` of its
    /// own (a function approximated to an absolute bound): the floor grows by the magnitude
    /// whose Frobenius bound is `err`, so outputs far below `err` (GELU's negative tail, a row
    /// of one element) are judged against that magnitude.
    pub fn plus_absolute_error(self, err: f64) -> Self {
        Tolerance {
            floor: self.floor + err / self.frobenius,
            ..self
        }
    }

    /// The same bounds widened by the absolute error the device's approximations in `stages`
    /// add: erf-GELU's [`GELU_ERF_MAX_ERROR`] for a `gelu` or `geglu` stage.
    pub fn for_stages(self, stages: &[RefStage]) -> Self {
        if stages
            .iter()
            .any(|s| matches!(s, RefStage::Gelu | RefStage::GeGlu(_)))
        {
            self.plus_absolute_error(GELU_ERF_MAX_ERROR as f64)
        } else {
            self
        }
    }
}

impl From<f64> for Tolerance {
    /// [`Tolerance::rel`].
    fn from(tol: f64) -> Self {
        Tolerance::rel(tol)
    }
}

/// How many elements [`Closeness::first_bad`] keeps.
pub const FIRST_BAD: usize = 8;

/// What [`compare`] found: the Frobenius error, the worst element, and the elements outside
/// their bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Closeness {
    /// The bounds checked.
    pub tol: Tolerance,
    /// Number of elements compared.
    pub len: usize,
    /// The relative Frobenius error (infinite when a NaN or an infinity appears where the
    /// reference has none).
    pub frobenius: f64,
    /// The scale `atol` is a multiple of: max(rms(ref), floor), or 1 where that is 0.
    pub scale: f64,
    /// The largest |x − ref| / (atol·scale + abs + rtol·|ref|) over the elements (infinite for a
    /// non-finite mismatch), and where it is.
    pub worst: f64,
    pub worst_index: Option<usize>,
    /// Number of elements outside their bound.
    pub bad: usize,
    /// The first [`FIRST_BAD`] of them: (index, got, want).
    pub first_bad: Vec<(usize, f64, f64)>,
}

impl Closeness {
    /// Whether both the Frobenius error and every element are within bounds.
    pub fn passed(&self) -> bool {
        self.frobenius < self.tol.frobenius && self.bad == 0
    }
}

impl fmt::Display for Closeness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.tol;
        write!(
            f,
            "rel Frobenius error {:.2e} (bound {:.0e}); elements: {} of {} outside \
             |x − ref| ≤ {:.2e} + {:.0e}·|ref|",
            self.frobenius,
            t.frobenius,
            self.bad,
            self.len,
            t.atol * self.scale + t.abs,
            t.rtol
        )?;
        if let Some(i) = self.worst_index {
            write!(f, ", worst at [{i}] {:.2} of its bound", self.worst)?;
        }
        if !self.first_bad.is_empty() {
            write!(f, "; first bad (index, got, want):")?;
            for (i, g, w) in &self.first_bad {
                write!(f, " ({i}, {g:e}, {w:e})")?;
            }
        }
        Ok(())
    }
}

/// Compares `got` with its reference `want` element by element and as a whole; see
/// [`Tolerance`] for the bounds. Per element: a NaN in `want` is matched only by a NaN, an
/// infinity only by the same infinity, and a finite `want` only by a finite `got` within
/// `atol·scale + abs + rtol·|want|`.
///
/// # Panics
/// If the lengths differ.
// `!(x <= bound)` is true for NaN: written so, a NaN can never pass.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub fn compare(got: &[f64], want: &[f64], tol: impl Into<Tolerance>) -> Closeness {
    let tol = tol.into();
    assert_eq!(got.len(), want.len(), "compared buffers differ in length");
    let (mut sum, mut finite) = (0.0f64, 0usize);
    for w in want.iter().filter(|w| w.is_finite()) {
        sum += w * w;
        finite += 1;
    }
    let rms = if finite == 0 {
        0.0
    } else {
        (sum / finite as f64).sqrt()
    };
    let mut frobenius = rel_frobenius_error(got, want);
    if tol.floor > rms && frobenius.is_finite() {
        // rel_frobenius_error is ‖d‖/(√n·rms), or ‖d‖ for rms = 0; measure against the floor.
        let n = (finite.max(1) as f64).sqrt();
        let norm_d = if rms > 0.0 {
            frobenius * rms * n
        } else {
            frobenius
        };
        frobenius = norm_d / (n * tol.floor);
    }
    let scale = match rms.max(tol.floor) {
        s if s > 0.0 => s,
        _ => 1.0,
    };
    let atol = tol.atol * scale + tol.abs;
    let mut report = Closeness {
        tol,
        len: got.len(),
        frobenius,
        scale,
        worst: 0.0,
        worst_index: None,
        bad: 0,
        first_bad: Vec::new(),
    };
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ratio = if w.is_nan() || g.is_nan() {
            if w.is_nan() && g.is_nan() {
                0.0
            } else {
                f64::INFINITY
            }
        } else if w.is_infinite() || g.is_infinite() {
            if g == w { 0.0 } else { f64::INFINITY }
        } else {
            let diff = (g - w).abs();
            let bound = atol + tol.rtol * w.abs();
            if diff == 0.0 {
                0.0
            } else if bound > 0.0 {
                diff / bound
            } else {
                f64::INFINITY
            }
        };
        // Written so that a NaN ratio (impossible above, but cheap to rule out) is bad too.
        if !(ratio <= 1.0) {
            report.bad += 1;
            if report.first_bad.len() < FIRST_BAD {
                report.first_bad.push((i, g, w));
            }
        }
        if report.worst_index.is_none() || !(ratio <= report.worst) {
            report.worst = ratio;
            report.worst_index = Some(i);
        }
    }
    report
}

/// [`compare`], printing `what` and the report; panics with them when the result is not close.
/// Returns the report (for tests that print or collect it).
#[track_caller]
pub fn assert_close(got: &[f64], want: &[f64], tol: impl Into<Tolerance>, what: &str) -> Closeness {
    let r = compare(got, want, tol);
    println!("{what}: {r}");
    assert!(r.passed(), "{what}: not close to the reference: {r}");
    r
}

/// The largest |a − b| over the pairs, NaN-safe: a pair with one NaN gives infinity (a NaN on
/// both sides counts as equal, as does the same infinity on both), so an element one result
/// never wrote fails any bound. (`fold(0.0, f32::max)` returns 0 for a NaN difference.)
///
/// # Panics
/// If the lengths differ.
pub fn max_abs_diff<T: Copy + Into<f64>>(a: &[T], b: &[T]) -> f64 {
    assert_eq!(a.len(), b.len(), "compared buffers differ in length");
    a.iter()
        .zip(b)
        .map(|(&x, &y)| crate::reference::element_diff(x.into(), y.into()))
        // element_diff leaves no NaN, so f64::max drops nothing.
        .fold(0.0, f64::max)
}

/// The largest value, or NaN when any value is NaN (`f64::max` would skip it); `-∞` for none.
pub fn nan_max(values: impl IntoIterator<Item = f64>) -> f64 {
    values.into_iter().fold(f64::NEG_INFINITY, |m, v| {
        if m.is_nan() || v.is_nan() {
            f64::NAN
        } else {
            m.max(v)
        }
    })
}

/// The smallest value, or NaN when any value is NaN (`f64::min` would skip it); `+∞` for none.
pub fn nan_min(values: impl IntoIterator<Item = f64>) -> f64 {
    values.into_iter().fold(f64::INFINITY, |m, v| {
        if m.is_nan() || v.is_nan() {
            f64::NAN
        } else {
            m.min(v)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};
    use rand::RngExt;

    fn data(len: usize, seed: u64) -> Vec<f64> {
        let mut r = StdRng::seed_from_u64(seed);
        (0..len).map(|_| r.random_range(-1.0..1.0)).collect()
    }

    #[test]
    fn on_off_variable_values() {
        // FUSED_GEMM_REQUIRE_GPU and FUSED_GEMM_SANITIZE.
        assert!(!flag_set(None));
        assert!(!flag_set(Some(OsStr::new(""))));
        assert!(!flag_set(Some(OsStr::new("0"))));
        assert!(flag_set(Some(OsStr::new("1"))));
        assert!(flag_set(Some(OsStr::new("yes"))));
    }

    #[test]
    fn exact_and_correctly_rounded_bf16_and_f16_pass() {
        let want = data(100_000, 1);
        let r = compare(&want, &want, 1e-2);
        assert!(r.passed() && r.frobenius == 0.0 && r.worst == 0.0, "{r}");
        // What a bf16 (f16) output is at best: the reference correctly rounded. Elements near
        // zero included, and a GEMM-like reference (sums of products, wide range).
        let mut gemmish = data(100_000, 2);
        let b = data(64, 3);
        for (i, v) in gemmish.iter_mut().enumerate() {
            *v = (0..64)
                .map(|k| *v * b[(i + k) % 64] * (k as f64 - 31.5))
                .sum();
        }
        for want in [&want, &gemmish] {
            let got: Vec<f64> = want.iter().map(|&w| bf16::from_f64(w).to_f64()).collect();
            let r = assert_close(&got, want, 1e-2, "bf16-rounded");
            assert!(r.frobenius > 1e-3 && r.worst < 0.5, "{r}");
            let got: Vec<f64> = want.iter().map(|&w| f16::from_f64(w).to_f64()).collect();
            let r = assert_close(&got, want, 2e-3, "f16-rounded");
            assert!(r.worst < 0.5, "{r}");
        }
    }

    #[test]
    fn one_nan_fails() {
        let want = data(1000, 4);
        let mut got = want.clone();
        got[517] = f64::NAN;
        let r = compare(&got, &want, 1e-2);
        assert!(!r.passed(), "{r}");
        assert_eq!((r.bad, r.first_bad[0].0), (1, 517));
        assert!(r.frobenius.is_infinite() && r.worst.is_infinite());
        // Also a NaN where the reference is NaN on purpose is fine, and a number there is not;
        // infinities must match.
        let mut want2 = want.clone();
        want2[3] = f64::NAN;
        let mut got2 = want2.clone();
        assert!(compare(&got2, &want2, 1e-2).passed());
        got2[3] = 0.0;
        assert_eq!(compare(&got2, &want2, 1e-2).bad, 1);
        let mut got3 = want.clone();
        got3[9] = f64::INFINITY;
        assert_eq!(compare(&got3, &want, 1e-2).bad, 1);
    }

    #[test]
    #[should_panic(expected = "not close to the reference")]
    fn assert_close_panics_on_a_nan() {
        let want = data(64, 5);
        let mut got = want.clone();
        got[63] = f64::NAN;
        assert_close(&got, &want, 1e-2, "one NaN");
    }

    #[test]
    fn one_element_off_by_ten_tol_among_a_million_fails() {
        let tol = 1e-2;
        let want = data(1 << 20, 6);
        let mut got: Vec<f64> = want.iter().map(|&w| bf16::from_f64(w).to_f64()).collect();
        // An element of typical magnitude, somewhere in the middle.
        let i = (123_456..want.len())
            .find(|&j| want[j].abs() > 0.5)
            .unwrap();
        got[i] = want[i] * (1.0 + 10.0 * tol);
        let r = compare(&got, &want, tol);
        // The Frobenius error alone would pass it: that is what the element check is for.
        assert!(r.frobenius < tol, "{r}");
        assert!(!r.passed());
        assert_eq!(r.bad, 1, "{r}");
        assert_eq!(r.first_bad[0].0, i);
        assert_eq!(r.worst_index, Some(i));
        let caught = std::panic::catch_unwind(|| assert_close(&got, &want, tol, "off by 10 tol"));
        assert!(caught.is_err());
    }

    #[test]
    fn near_zero_elements_are_judged_against_the_typical_magnitude() {
        // Cancellation: the reference is 1e-6, the result 1e-4 off: within tol·rms of 1.0.
        let mut want = vec![1.0; 100];
        want[0] = 1e-6;
        let mut got = want.clone();
        got[0] = 1e-6 + 1e-4;
        assert!(compare(&got, &want, 1e-3).passed());
        got[0] = 1e-6 + 1e-2;
        assert!(!compare(&got, &want, 1e-3).passed());
    }

    #[test]
    fn per_element_and_floor() {
        // 100 elements of 1: bound 1e-2·(1 + 1) = 0.02 per element; one is 0.025 off.
        let want = vec![1.0; 100];
        let mut got = want.clone();
        got[40] = 1.025;
        assert!(!compare(&got, &want, 1e-2).passed());
        assert!(compare(&got, &want, Tolerance::rel(1e-2).per_element(2.0)).passed());
        // Below the floor the error is measured in units of the floor.
        let tiny = vec![1e-7, 0.0];
        let got = vec![1.1e-7, 0.0];
        assert!(!compare(&got, &tiny, 2e-3).passed());
        let r = compare(&got, &tiny, Tolerance::rel(2e-3).with_floor(6.1e-5));
        assert!(r.passed(), "{r}");
        assert!(
            (r.frobenius - 1e-8 / (2f64.sqrt() * 6.1e-5)).abs() < 1e-12,
            "{r}"
        );
        // An absolute term: 100 ones and one 0.025 off (bound 0.02) pass with 0.01 more (0.03).
        let want = vec![1.0; 100];
        let mut got = want.clone();
        got[7] = 1.025;
        assert!(!compare(&got, &want, 1e-2).passed());
        let r = compare(&got, &want, Tolerance::rel(1e-2).plus_abs(0.01));
        assert!(r.passed() && (r.worst - 0.025 / 0.03).abs() < 1e-9, "{r}");
        // erf-GELU's own absolute error: a one-element output of GELU's far tail, 3e-6 off,
        // fails a relative bound and passes once a `gelu` stage adds that error; 3e-5 off
        // still fails, and stages without an approximation add nothing.
        let tail = vec![-1e-5];
        let t = Tolerance::rel(1e-2);
        assert!(!compare(&[-1.3e-5], &tail, t).passed());
        assert!(compare(&[-1.3e-5], &tail, t.for_stages(&[RefStage::Gelu])).passed());
        assert!(!compare(&[-4e-5], &tail, t.for_stages(&[RefStage::Gelu])).passed());
        assert_eq!(t.for_stages(&[RefStage::GeluTanh, RefStage::Relu]), t);
        // An all-zero reference: absolute bounds, as rel_frobenius_error.
        assert!(compare(&[1e-3, 0.0], &[0.0, 0.0], 1e-2).passed());
        assert!(!compare(&[1e-1, 0.0], &[0.0, 0.0], 1e-2).passed());
        assert!(compare(&[], &[], 1e-2).passed());
    }

    #[test]
    fn max_abs_diff_does_not_drop_nan() {
        assert_eq!(max_abs_diff(&[1.0f32, 2.0], &[1.0, 2.5]), 0.5);
        assert!(max_abs_diff(&[1.0f32, f32::NAN], &[1.0, 2.0]).is_infinite());
        assert!(max_abs_diff(&[1.0f64, 2.0], &[f64::NAN, 2.0]).is_infinite());
        assert_eq!(max_abs_diff(&[f32::NAN], &[f32::NAN]), 0.0);
        assert_eq!(max_abs_diff(&[f64::INFINITY], &[f64::INFINITY]), 0.0);
        assert!(max_abs_diff(&[f64::INFINITY], &[1.0]).is_infinite());
        assert!(nan_max([1.0, f64::NAN, 3.0]).is_nan());
        assert!(nan_min([1.0, f64::NAN, 3.0]).is_nan());
        assert_eq!((nan_max([1.0, 3.0]), nan_min([1.0, 3.0])), (3.0, 1.0));
    }
}
