//! The timing primitive every fused-gemm benchmark shares.
//!
//! # Method
//! 1. **Warm-up**: the operation runs `warmup` times (module loading, cuBLASLt heuristics,
//!    clocks ramping up), then the stream is synchronized. The host time each call takes to
//!    *enqueue* is measured here.
//! 2. **Batches**: the timed runs are queued in batches of at most [`TimingConfig::batch`].
//!    Each batch starts with a one-thread spin kernel (`fg_spin_ns`) that keeps the GPU busy
//!    for about the time the host needs to queue the batch, so the runs then execute back to
//!    back and host launch overhead never shows up as idle GPU time inside a measurement.
//! 3. **Events**: a CUDA event (`cuEventRecord`, timing enabled) is recorded before the first
//!    run of a batch and after every run; run `i` takes `elapsed(e[i], e[i + 1])`
//!    ([`CudaEvent::elapsed_ms`], about 0.5 µs resolution).
//! 4. **Rotation**: the closure gets the run's index and is expected to use input/output set
//!    `index % sets`, with enough sets that their total size is at least twice the L2 cache
//!    ([`rotation_sets`]), so no run finds its operands in L2 from the previous one.
//! 5. **Statistics**: median, 10th and 90th percentiles (linear interpolation between order
//!    statistics, as numpy's default), mean, min and max ([`Summary`]).
//!
//! ```no_run
//! # use fused_gemm_bench::timing::{time_gpu, TimingConfig};
//! # fn f(gpu: &fused_gemm::Gpu) -> fused_gemm_bench::error::Result<()> {
//! let cfg = TimingConfig { warmup: 10, runs: 100, ..TimingConfig::default() };
//! let timed = time_gpu(gpu, &cfg, |i| {
//!     // launch the operation on gpu.stream(), using rotation set i % sets
//!     Ok(())
//! })?;
//! println!("median {:.4} ms", timed.summary.median_ms);
//! # Ok(()) }
//! ```

use std::time::Instant;

use cudarc::driver::CudaEvent;
use cudarc::driver::sys::CUevent_flags;
use fused_gemm::Gpu;
use fused_gemm::host::cudarc;
use fused_gemm::host::launch::LaunchShape;
use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};

/// The method in one sentence, for result headers.
pub const METHOD: &str = "CUDA events between consecutive runs queued back to back behind a \
                          spin kernel, inputs rotated over sets totalling at least twice the L2; \
                          medians over";

/// Summary statistics of a set of samples, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub runs: usize,
    /// Median.
    pub median_ms: f64,
    /// 10th percentile.
    pub p10_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// Smallest sample.
    pub min_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

/// The `p`-th percentile (0 ≤ p ≤ 100) of ascending `sorted` samples, interpolating linearly
/// between the two nearest order statistics (numpy's default, "linear"). `None` if empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let pos = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

impl Summary {
    /// Statistics of `samples` (any order). `None` if there are none or one is not finite.
    pub fn from_samples(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        Some(Summary {
            runs: s.len(),
            median_ms: percentile(&s, 50.0)?,
            p10_ms: percentile(&s, 10.0)?,
            p90_ms: percentile(&s, 90.0)?,
            mean_ms: s.iter().sum::<f64>() / s.len() as f64,
            min_ms: s[0],
            max_ms: s[s.len() - 1],
        })
    }
}

/// Number of rotation sets of `set_bytes` each so that together they are at least twice the
/// L2 cache, at least 2 (consecutive runs never share a set), at most `max_sets`, and within
/// `budget_bytes` of device memory (but never below 1). 0 only if one set does not fit.
pub fn rotation_sets(set_bytes: u64, l2_bytes: u64, budget_bytes: u64, max_sets: usize) -> usize {
    if set_bytes == 0 {
        return 1;
    }
    if set_bytes > budget_bytes {
        return 0;
    }
    let want = (2 * l2_bytes).div_ceil(set_bytes).max(2) as usize;
    let fit = (budget_bytes / set_bytes) as usize;
    want.min(max_sets.max(1)).min(fit).max(1)
}

/// How to time one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingConfig {
    /// Untimed runs first.
    pub warmup: usize,
    /// Timed runs (samples).
    pub runs: usize,
    /// Timed runs queued behind one spin kernel.
    pub batch: usize,
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            warmup: 10,
            runs: 100,
            batch: 64,
        }
    }
}

/// Samples and their summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Timed {
    /// Each run's time, ms, in run order.
    pub samples: Vec<f64>,
    /// Their statistics.
    pub summary: Summary,
    /// Median host time to enqueue one run (warm-up), µs: how far ahead the spin must hold
    /// the GPU.
    pub host_enqueue_us: f64,
}

/// Queues the spin kernel on `gpu`'s stream: the GPU waits `ns` nanoseconds (one thread).
///
/// # Errors
/// PTX or launch errors from the host runtime.
pub fn spin(gpu: &Gpu, ns: u64) -> Result<()> {
    let kernel = gpu.kernel(
        &fused_gemm::ptx::BUILTIN,
        fused_gemm::kernels::rowwise::fg_spin_ns,
    )?;
    let shape = LaunchShape {
        grid: (1, 1, 1),
        block: (1, 1, 1),
        smem_bytes: 0,
    };
    let cfg = shape.prepare(&kernel, gpu.props())?;
    // SAFETY: the spin kernel touches no memory.
    unsafe { kernel.launch(gpu, cfg, &ns) }?;
    Ok(())
}

/// Times `op` as the [module docs](self) describe. `op(i)` must queue one run on
/// `gpu.stream()` (and not synchronize); `i` counts every call, warm-up included.
///
/// # Errors
/// `runs == 0`, or whatever `op` or the driver returns.
pub fn time_gpu(
    gpu: &Gpu,
    cfg: &TimingConfig,
    mut op: impl FnMut(usize) -> Result<()>,
) -> Result<Timed> {
    if cfg.runs == 0 {
        return Err(BenchError::Usage {
            what: "runs",
            detail: "at least one timed run is needed".into(),
        });
    }
    let mut call = 0usize;
    let mut enqueue_us = Vec::with_capacity(cfg.warmup);
    for _ in 0..cfg.warmup {
        let t = Instant::now();
        op(call)?;
        enqueue_us.push(t.elapsed().as_secs_f64() * 1e6);
        call += 1;
    }
    gpu.synchronize()?;
    enqueue_us.sort_by(f64::total_cmp);
    // Without warm-up there is no estimate; assume a slow host (100 µs per run).
    let host_enqueue_us = percentile(&enqueue_us, 50.0).unwrap_or(100.0);

    let batch = cfg.batch.max(1);
    let ctx = gpu.context();
    let events: Vec<CudaEvent> = (0..=batch.min(cfg.runs))
        .map(|_| ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))
        .collect::<std::result::Result<_, _>>()?;
    let mut samples = Vec::with_capacity(cfg.runs);
    while samples.len() < cfg.runs {
        let b = batch.min(cfg.runs - samples.len());
        // Hold the GPU for 1.5× the host's queueing time of the batch, plus 50 µs of margin;
        // at most 200 ms.
        let hold_ns = ((b as f64 * host_enqueue_us * 1.5 + 50.0) * 1e3).min(2e8) as u64;
        spin(gpu, hold_ns)?;
        events[0].record(gpu.stream())?;
        for e in &events[1..=b] {
            op(call)?;
            call += 1;
            e.record(gpu.stream())?;
        }
        gpu.synchronize()?;
        for i in 0..b {
            samples.push(events[i].elapsed_ms(&events[i + 1])? as f64);
        }
    }
    let summary = Summary::from_samples(&samples).ok_or_else(|| BenchError::Usage {
        what: "timing",
        detail: "a CUDA event pair gave a non-finite time".into(),
    })?;
    Ok(Timed {
        samples,
        summary,
        host_enqueue_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let s = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&s, 50.0), Some(3.0));
        assert_eq!(percentile(&s, 0.0), Some(1.0));
        assert_eq!(percentile(&s, 100.0), Some(5.0));
        // numpy.percentile([1,2,3,4,5], 10) == 1.4; 90 → 4.6
        assert!((percentile(&s, 10.0).unwrap() - 1.4).abs() < 1e-12);
        assert!((percentile(&s, 90.0).unwrap() - 4.6).abs() < 1e-12);
        // Even count: the median is the mean of the middle two.
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.5));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&s, 101.0), None);
    }

    #[test]
    fn summary_sorts_and_rejects_bad_samples() {
        let s = Summary::from_samples(&[0.5, 0.1, 0.3, 0.2, 0.4]).unwrap();
        assert_eq!(s.runs, 5);
        assert_eq!((s.min_ms, s.max_ms, s.median_ms), (0.1, 0.5, 0.3));
        assert!((s.mean_ms - 0.3).abs() < 1e-12);
        assert!((s.p10_ms - 0.14).abs() < 1e-12 && (s.p90_ms - 0.46).abs() < 1e-12);
        assert_eq!(Summary::from_samples(&[]), None);
        assert_eq!(Summary::from_samples(&[1.0, f64::NAN]), None);
        // An outlier moves the mean but not the median.
        let o = Summary::from_samples(&[1.0, 1.0, 1.0, 1.0, 100.0]).unwrap();
        assert_eq!(o.median_ms, 1.0);
        assert!(o.mean_ms > 20.0);
    }

    #[test]
    fn rotation_covers_twice_l2_within_memory() {
        let l2 = 60 << 20;
        // 5.7 MB sets: 22 of them make 2 × 60 MB.
        let n = rotation_sets(5_700_000, l2, 100 << 30, 256);
        assert!(n as u64 * 5_700_000 >= 2 * l2 && (n - 1) as u64 * 5_700_000 < 2 * l2);
        // Sets larger than L2: still two, so consecutive runs never share one.
        assert_eq!(rotation_sets(1 << 30, l2, 100 << 30, 256), 2);
        // Memory-limited: as many as fit, at least one.
        assert_eq!(rotation_sets(1 << 30, l2, 3 << 29, 256), 1);
        assert_eq!(rotation_sets(1 << 30, l2, 1 << 29, 256), 0);
        // Capped.
        assert_eq!(rotation_sets(1000, l2, 100 << 30, 64), 64);
    }
}
