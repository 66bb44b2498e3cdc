//! The record a wave-scheduler benchmark writes (`bench/src/bin/waves.rs`).

use serde::Serialize;

use super::exec::LaunchInfo;

/// One measured execution mode of one workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WaveBenchRow {
    /// Workload name.
    pub workload: String,
    /// `per-op`, `cuda-graph` or `waves`.
    pub mode: String,
    /// Median latency of one forward, milliseconds (CUDA events).
    pub median_ms: f64,
    /// Timed runs.
    pub runs: usize,
    /// Kernel launches per forward.
    pub launches: usize,
    /// Mean over launches of CTAs resident at the start / CTA slots (vEUs) of the device.
    pub occupancy: f64,
    /// The scheduler's prediction, µs (when it applies).
    pub predicted_us: Option<f64>,
    /// Per launch: entry point, operators, CTAs, slots.
    pub launch_info: Vec<LaunchInfo>,
    /// Largest |difference| from the per-operator execution's output (0 = bit for bit).
    pub max_abs_diff_vs_per_op: Option<f64>,
}

/// A benchmark run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WaveBenchReport {
    /// The command that produced it.
    pub command: String,
    /// Date (YYYY-MM-DD).
    pub date: String,
    /// The device's name.
    pub device: String,
    /// Rows, workload by workload.
    pub rows: Vec<WaveBenchRow>,
}

impl WaveBenchReport {
    /// Pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serializes")
    }
}
