//! The construction-vs-search sweep: for each shape, the constructed plan
//! ([`Planner::plan`]) is timed against every launchable candidate (exhaustive search), and the
//! report says how often the constructed choice is within 10% of the best, how long
//! construction takes (µs) and how long the search took (s). Roller (OSDI'22) reports
//! construction ≈ 5,000× faster than Ansor's search at near-equal kernel quality.
//!
//! Timing is a [`GemmTimer`], implemented with the real kernel by the GEMM launcher; the rest
//! (shapes, planning, the report as a table and JSON) is here so it is tested on the CPU.

use std::time::Instant;

use fused_gemm_device::types::DType;
use serde::{Deserialize, Serialize};

use crate::plan::{ModelTerms, Plan, Planner, Problem, Roofline};
use crate::tensor::Tensor;
use crate::validate::{BLayout, GemmCall, check_gemm};
use crate::{Error, Gpu, Result};

/// Times GEMM launches with a chosen plan.
pub trait GemmTimer {
    /// Runs `problem` with `plan` (inputs allocated and filled by the implementation, warm-up
    /// included) and returns the median time of one launch in milliseconds.
    ///
    /// # Errors
    /// Whatever the launch returns; the sweep records the failure against the candidate.
    fn time_ms(&mut self, problem: &Problem, plan: &Plan) -> Result<f32>;
}

impl<F: FnMut(&Problem, &Plan) -> Result<f32>> GemmTimer for F {
    fn time_ms(&mut self, problem: &Problem, plan: &Plan) -> Result<f32> {
        self(problem, plan)
    }
}

type ShapeKey = (u32, u32, u32, DType);

/// A [`GemmTimer`] on a device: allocates A (M×K), B (N×K, a `Linear` weight) and C (M×N) of
/// the problem's dtype, filled with uniform random values (reused across the candidates of one
/// shape), validates the call, and times `launch(gpu, plan, call)` with CUDA events
/// ([`Gpu::time_ms`]). `launch` is the GEMM launcher run with an explicit plan.
pub struct DeviceTimer<'g, F> {
    gpu: &'g Gpu,
    launch: F,
    /// Untimed launches before timing.
    pub warmup: usize,
    /// Timed launches (the median is reported).
    pub reps: usize,
    /// A, B, C of the last shape timed, keyed by (M, N, K, dtype).
    buffers: Option<(ShapeKey, [Tensor; 3])>,
}

impl<'g, F> DeviceTimer<'g, F>
where
    F: FnMut(&Gpu, &Plan, &GemmCall<'_>) -> Result<()>,
{
    /// A timer launching through `launch` on `gpu`, 3 warm-up and 10 timed launches.
    pub fn new(gpu: &'g Gpu, launch: F) -> Self {
        DeviceTimer {
            gpu,
            launch,
            warmup: 3,
            reps: 10,
            buffers: None,
        }
    }
}

impl<F> GemmTimer for DeviceTimer<'_, F>
where
    F: FnMut(&Gpu, &Plan, &GemmCall<'_>) -> Result<()>,
{
    fn time_ms(&mut self, p: &Problem, plan: &Plan) -> Result<f32> {
        let shape = (p.m, p.n, p.k, p.in_dtype);
        if self.buffers.as_ref().is_none_or(|(s, _)| *s != shape) {
            self.buffers = None;
            let mut r = crate::testing::rng("plan_sweep");
            let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
            // Device buffers first: they check the sizes (TooLarge, OutOfMemory) before the
            // host data is made, so M·K and N·K below fit.
            let mut a = Tensor::zeros(self.gpu, m, k, p.in_dtype)?;
            let mut b = Tensor::zeros(self.gpu, n, k, p.in_dtype)?;
            let c = Tensor::zeros(self.gpu, m, n, p.in_dtype)?;
            a.upload_f32(self.gpu, &crate::testing::uniform(&mut r, m * k))?;
            b.upload_f32(self.gpu, &crate::testing::uniform(&mut r, n * k))?;
            self.buffers = Some((shape, [a, b, c]));
        }
        let [a, b, c] = &self.buffers.as_ref().expect("allocated above").1;
        let call = GemmCall {
            a: a.desc(),
            b: b.desc(),
            b_layout: BLayout::NxK,
            c: c.desc(),
            in_dtype: p.in_dtype,
            out_dtype: p.in_dtype,
            epilogue: &[],
            pair_stage: None,
            row_norm_stage: None,
        };
        check_gemm(&call)?;
        let launch = &mut self.launch;
        self.gpu
            .time_ms(self.warmup, self.reps, |g| launch(g, plan, &call))
    }
}

/// One shape of the sweep.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepShape {
    /// Model and layer, e.g. `llama3-8b mlp-down`.
    pub name: String,
    /// Rows of A (tokens).
    pub m: u32,
    /// Output features.
    pub n: u32,
    /// Input features.
    pub k: u32,
}

fn shape(name: &str, m: u32, n: u32, k: u32) -> SweepShape {
    SweepShape {
        name: name.to_owned(),
        m,
        n,
        k,
    }
}

/// The sweep's shapes (66): layers of BERT-base/large, MiniLM, GPT-2, LLaMA-3 1B and 8B at
/// token counts M from 1 (decode) to 16384, and unaligned sizes. N and K are the layers'
/// output and input features (`Linear` weights, stored N×K).
pub fn sweep_shapes() -> Vec<SweepShape> {
    let mut v = Vec::new();
    let layers = |v: &mut Vec<SweepShape>, model: &str, ms: &[u32], l: &[(&str, u32, u32)]| {
        for &m in ms {
            for &(layer, n, k) in l {
                v.push(shape(&format!("{model} {layer}"), m, n, k));
            }
        }
    };
    let bert = |d: u32, f: u32| {
        [
            ("qkv", 3 * d, d),
            ("out", d, d),
            ("ffn-up", f, d),
            ("ffn-down", d, f),
        ]
    };
    layers(&mut v, "bert-base", &[128, 512, 4096], &bert(768, 3072));
    layers(&mut v, "bert-large", &[4096], &bert(1024, 4096));
    layers(&mut v, "minilm", &[4096], &bert(384, 1536));
    let gpt2 = [
        ("qkv", 2304, 768),
        ("mlp-up", 3072, 768),
        ("lm-head", 50257, 768),
    ];
    layers(&mut v, "gpt2", &[1, 1024], &gpt2);
    let llama8b = [
        ("qkv", 6144, 4096),
        ("o", 4096, 4096),
        ("gate-up", 28672, 4096),
        ("down", 4096, 14336),
    ];
    layers(&mut v, "llama3-8b", &[1, 16, 128, 2048, 8192], &llama8b);
    let llama1b = [
        ("qkv", 3072, 2048),
        ("o", 2048, 2048),
        ("gate-up", 16384, 2048),
        ("down", 2048, 8192),
    ];
    layers(&mut v, "llama3-1b", &[1, 512, 16384], &llama1b);
    for (m, n, k) in [
        (1, 3073, 17),
        (17, 4095, 4097),
        (333, 777, 555),
        (1000, 1000, 1000),
        (4095, 4097, 1023),
        (16384, 127, 4096),
        (7, 16385, 2049),
        (2049, 2047, 65),
    ] {
        v.push(shape("unaligned", m, n, k));
    }
    v
}

/// A plan as the report records it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    /// `(BM, BN, BK, warps_m, warps_n, stages)`.
    pub tile: (u32, u32, u32, u32, u32, u32),
    /// K splits.
    pub splits: u32,
    /// The model's prediction, µs.
    pub predicted_us: f64,
}

impl From<&Plan> for PlanSummary {
    fn from(p: &Plan) -> Self {
        let t = &p.tile;
        PlanSummary {
            tile: (t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages),
            splits: p.splits,
            predicted_us: p.predicted_us,
        }
    }
}

impl PlanSummary {
    fn short(&self) -> String {
        let (bm, bn, bk, ..) = self.tile;
        format!("{bm}x{bn}x{bk}/s{}", self.splits)
    }
}

/// One timed candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timed {
    /// The candidate.
    pub plan: PlanSummary,
    /// The model's terms.
    pub model: ModelTerms,
    /// Measured µs, or `None` when timing failed.
    pub measured_us: Option<f64>,
    /// Why timing failed.
    pub error: Option<String>,
}

/// The sweep's result for one shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShapeResult {
    /// The shape.
    pub shape: SweepShape,
    /// The constructed plan.
    pub constructed: PlanSummary,
    /// Median time of one `Planner::plan` call, µs.
    pub construction_us: f64,
    /// Its measured time, µs (`None` if it failed).
    pub constructed_us: Option<f64>,
    /// The fastest measured candidate.
    pub best: Option<PlanSummary>,
    /// Its time, µs.
    pub best_us: Option<f64>,
    /// constructed / best (1.0 = the constructed plan was the fastest).
    pub ratio: Option<f64>,
    /// Rank of the constructed plan among the measured candidates (0 = fastest).
    pub rank: Option<usize>,
    /// Wall-clock seconds spent timing every candidate (the exhaustive search).
    pub search_s: f64,
    /// Every candidate, in predicted order.
    pub candidates: Vec<Timed>,
    /// With the roofline calibrated on all shapes' measurements: the plan the model would
    /// pick among the measured candidates, and its time over the best.
    pub calibrated_ratio: Option<f64>,
}

/// Aggregate numbers of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepSummary {
    /// Shapes swept.
    pub shapes: usize,
    /// Shapes where the constructed plan and at least one candidate were timed.
    pub timed: usize,
    /// Shapes with constructed/best ≤ 1.10.
    pub within_10pct: usize,
    /// `within_10pct / timed`.
    pub fraction_within_10pct: f64,
    /// The same with the calibrated roofline (in-sample).
    pub calibrated_within_10pct: usize,
    /// Geometric mean of constructed/best.
    pub geomean_ratio: f64,
    /// Median construction time per shape, µs.
    pub median_construction_us: f64,
    /// Median search time per shape, s.
    pub median_search_s: f64,
    /// Total search time, s.
    pub total_search_s: f64,
}

/// The whole report, written as JSON and as a Markdown table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    /// The command that produced it.
    pub command: String,
    /// The device (name, compute capability, SMs).
    pub device: String,
    /// dtype of A, B and C.
    pub dtype: String,
    /// The roofline the planner used.
    pub roofline: Roofline,
    /// The roofline fitted to the measurements ([`Roofline::calibrate`]).
    pub calibrated: Option<Roofline>,
    /// Per shape.
    pub results: Vec<ShapeResult>,
    /// Aggregates.
    pub summary: SweepSummary,
}

/// Median time of one call of `f`, µs, over `reps` calls (at least one).
pub fn median_us(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the sweep: for every shape, construct the plan (timing the construction), time every
/// candidate with `timer` (timing the search), and compare. `progress` is called after each
/// shape. Shapes the planner rejects are an error; candidates whose timing fails are recorded
/// and skipped.
///
/// # Errors
/// [`Error::LaunchLimit`] from the planner; [`Error::Timing`] when `timer` returns a time that
/// is not finite and positive.
pub fn run_sweep(
    planner: &Planner,
    shapes: &[SweepShape],
    dtype: DType,
    timer: &mut dyn GemmTimer,
    command: &str,
    device: &str,
    mut progress: impl FnMut(&ShapeResult),
) -> Result<SweepReport> {
    let mut results = Vec::with_capacity(shapes.len());
    for s in shapes {
        let problem = Problem::gemm(s.m, s.n, s.k, dtype);
        let constructed = planner.plan(&problem)?;
        let construction_us = median_us(51, || {
            std::hint::black_box(planner.plan(std::hint::black_box(&problem)).ok());
        });
        let candidates = planner.candidates(&problem)?;
        let start = Instant::now();
        let mut timed = Vec::with_capacity(candidates.len());
        for c in &candidates {
            let (measured_us, error) = match timer.time_ms(&problem, c) {
                Ok(ms) if ms.is_finite() && ms > 0.0 => (Some(ms as f64 * 1e3), None),
                Ok(ms) => {
                    return Err(Error::Timing {
                        what: format!("{} {}×{}×{}", s.name, s.m, s.n, s.k),
                        detail: format!("timer returned {ms} ms"),
                    });
                }
                Err(e) => (None, Some(e.to_string())),
            };
            timed.push(Timed {
                plan: PlanSummary::from(c),
                model: c.model,
                measured_us,
                error,
            });
        }
        let search_s = start.elapsed().as_secs_f64();
        let r = score(s.clone(), &constructed, construction_us, search_s, timed);
        progress(&r);
        results.push(r);
    }
    let calibrated = calibrate(planner, &results);
    if let Some(cal) = &calibrated {
        let cal_planner = planner.clone().with_roofline(*cal);
        for r in &mut results {
            r.calibrated_ratio = calibrated_ratio(&cal_planner, dtype, r);
        }
    }
    let summary = summarize(&results);
    Ok(SweepReport {
        command: command.to_owned(),
        device: device.to_owned(),
        dtype: dtype.name().to_owned(),
        roofline: planner.roofline,
        calibrated,
        results,
        summary,
    })
}

fn score(
    shape: SweepShape,
    constructed: &Plan,
    construction_us: f64,
    search_s: f64,
    candidates: Vec<Timed>,
) -> ShapeResult {
    let summary = PlanSummary::from(constructed);
    let same = |t: &&Timed| t.plan.tile == summary.tile && t.plan.splits == summary.splits;
    let constructed_us = candidates.iter().find(same).and_then(|t| t.measured_us);
    let best = candidates
        .iter()
        .filter(|t| t.measured_us.is_some())
        .min_by(|a, b| a.measured_us.unwrap().total_cmp(&b.measured_us.unwrap()));
    let best_us = best.and_then(|b| b.measured_us);
    let ratio = constructed_us.zip(best_us).map(|(c, b)| c / b);
    let rank = constructed_us.map(|c| {
        candidates
            .iter()
            .filter(|t| t.measured_us.is_some_and(|u| u < c))
            .count()
    });
    ShapeResult {
        shape,
        constructed: summary,
        construction_us,
        constructed_us,
        best: best.map(|b| b.plan),
        best_us,
        ratio,
        rank,
        search_s,
        candidates,
        calibrated_ratio: None,
    }
}

/// Fits the roofline to every measured candidate of every shape.
fn calibrate(planner: &Planner, results: &[ShapeResult]) -> Option<Roofline> {
    let samples: Vec<(ModelTerms, f64)> = results
        .iter()
        .flat_map(|r| r.candidates.iter())
        .filter_map(|t| t.measured_us.map(|u| (t.model, u)))
        .collect();
    (!samples.is_empty()).then(|| planner.roofline.calibrate(&samples))
}

/// The calibrated planner's choice among the measured candidates, over the best.
fn calibrated_ratio(cal: &Planner, dtype: DType, r: &ShapeResult) -> Option<f64> {
    let problem = Problem::gemm(r.shape.m, r.shape.n, r.shape.k, dtype);
    let cands = cal.candidates(&problem).ok()?;
    let best = r.best_us?;
    cands.iter().find_map(|c| {
        let s = PlanSummary::from(c);
        r.candidates
            .iter()
            .find(|t| t.plan.tile == s.tile && t.plan.splits == s.splits)
            .and_then(|t| t.measured_us)
            .map(|u| u / best)
    })
}

fn summarize(results: &[ShapeResult]) -> SweepSummary {
    let ratios: Vec<f64> = results.iter().filter_map(|r| r.ratio).collect();
    let within = ratios.iter().filter(|&&r| r <= 1.10).count();
    let cal_within = results
        .iter()
        .filter_map(|r| r.calibrated_ratio)
        .filter(|&r| r <= 1.10)
        .count();
    let geomean = if ratios.is_empty() {
        f64::NAN
    } else {
        (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp()
    };
    SweepSummary {
        shapes: results.len(),
        timed: ratios.len(),
        within_10pct: within,
        fraction_within_10pct: if ratios.is_empty() {
            f64::NAN
        } else {
            within as f64 / ratios.len() as f64
        },
        calibrated_within_10pct: cal_within,
        geomean_ratio: geomean,
        median_construction_us: median(results.iter().map(|r| r.construction_us).collect()),
        median_search_s: median(results.iter().map(|r| r.search_s).collect()),
        total_search_s: results.iter().map(|r| r.search_s).sum(),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "—".to_owned(), |x| format!("{x:.digits$}"))
}

impl SweepReport {
    /// The report as JSON (pretty-printed).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("sweep report serializes")
    }

    /// Parses a report written by [`SweepReport::to_json`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] with the parser's message.
    pub fn from_json(s: &str) -> Result<Self> {
        serde_json::from_str(s).map_err(|e| Error::invalid("report", "a sweep report", e))
    }

    /// The report as Markdown: a header with the command and device, one row per shape, and
    /// the summary.
    pub fn table(&self) -> String {
        let mut s = String::new();
        s += &format!(
            "# Plan sweep: constructed vs exhaustive\n\nCommand: `{}`\n\nDevice: {}; dtype {}\n\n",
            self.command, self.device, self.dtype
        );
        s += "| shape | M | N | K | constructed | pred µs | meas µs | best | best µs | ratio | rank | calibrated ratio | construct µs | search s |\n";
        s += "|---|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|\n";
        for r in &self.results {
            s += &format!(
                "| {} | {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {:.1} | {:.2} |\n",
                r.shape.name,
                r.shape.m,
                r.shape.n,
                r.shape.k,
                r.constructed.short(),
                r.constructed.predicted_us,
                opt(r.constructed_us, 1),
                r.best.map_or_else(|| "—".to_owned(), |b| b.short()),
                opt(r.best_us, 1),
                opt(r.ratio, 3),
                r.rank.map_or_else(|| "—".to_owned(), |k| k.to_string()),
                opt(r.calibrated_ratio, 3),
                r.construction_us,
                r.search_s,
            );
        }
        let m = &self.summary;
        s += &format!(
            "\n**{} of {} timed shapes ({:.0}%) within 10% of the exhaustive best** (calibrated \
             roofline, in-sample: {}); geometric-mean ratio {:.3}. Construction: median {:.1} µs \
             per shape; exhaustive search: median {:.2} s per shape, {:.1} s in all \
             ({:.0}× longer than construction).\n",
            m.within_10pct,
            m.timed,
            100.0 * m.fraction_within_10pct,
            m.calibrated_within_10pct,
            m.geomean_ratio,
            m.median_construction_us,
            m.median_search_s,
            m.total_search_s,
            m.median_search_s * 1e6 / m.median_construction_us,
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::DeviceProps;

    #[test]
    fn the_sweep_has_at_least_60_shapes_over_the_required_range() {
        let v = sweep_shapes();
        assert!(v.len() >= 60, "{}", v.len());
        assert_eq!(v.iter().map(|s| s.m).min(), Some(1));
        assert_eq!(v.iter().map(|s| s.m).max(), Some(16384));
        for family in ["bert", "gpt2", "llama3", "minilm", "unaligned"] {
            assert!(v.iter().any(|s| s.name.starts_with(family)), "{family}");
        }
        // Unaligned sizes: some N and K not multiples of 8.
        assert!(v.iter().any(|s| s.n % 8 != 0) && v.iter().any(|s| s.k % 8 != 0));
    }

    /// A fake GPU whose time is the model's prediction of a different roofline: the sweep must
    /// find the fake best and score the constructed plan against it.
    #[test]
    fn sweep_scores_against_the_fastest_timed_candidate() {
        let planner = Planner::new(DeviceProps::h200());
        let truth = planner.clone().with_roofline(Roofline {
            peak_tflops: 300.0,
            dram_tbs: 3.0,
            ..Roofline::default()
        });
        let mut timer = |p: &Problem, plan: &Plan| -> Result<f32> {
            if plan.splits == 3 {
                return Err(Error::invalid("splits", "not 3", 3));
            }
            let t = truth.evaluate(p, &plan.tile, plan.splits).unwrap();
            Ok((t.predicted_us / 1e3) as f32)
        };
        let shapes: Vec<SweepShape> = sweep_shapes().into_iter().step_by(9).collect();
        let mut seen = 0;
        let report = run_sweep(
            &planner,
            &shapes,
            DType::Bf16,
            &mut timer,
            "test",
            "fake H200",
            |_| seen += 1,
        )
        .unwrap();
        assert_eq!(seen, shapes.len());
        assert_eq!(report.summary.shapes, shapes.len());
        for r in &report.results {
            let best = r.best_us.unwrap();
            let min = r
                .candidates
                .iter()
                .filter_map(|t| t.measured_us)
                .fold(f64::INFINITY, f64::min);
            assert_eq!(best, min);
            assert!(r.ratio.unwrap_or(1.0) >= 1.0);
            assert!(
                r.candidates
                    .iter()
                    .filter(|t| t.plan.splits == 3)
                    .all(|t| t.error.is_some())
            );
            assert!(r.construction_us > 0.0);
        }
        // Calibration recovers the fake device's rates, so its choices are at least as good.
        let cal = report.calibrated.unwrap();
        assert!((cal.peak_tflops - 300.0).abs() < 30.0, "{cal:?}");
        assert!(report.summary.calibrated_within_10pct >= report.summary.within_10pct);
        let table = report.table();
        assert!(
            table.contains("Command: `test`") && table.contains("within 10%"),
            "{table}"
        );
        let back = SweepReport::from_json(&report.to_json()).unwrap();
        assert_eq!(back.results.len(), report.results.len());
        assert_eq!(back.summary.within_10pct, report.summary.within_10pct);
    }

    #[test]
    fn a_timer_returning_garbage_is_an_error() {
        let planner = Planner::new(DeviceProps::h200());
        let mut timer = |_: &Problem, _: &Plan| -> Result<f32> { Ok(f32::NAN) };
        let e = run_sweep(
            &planner,
            &sweep_shapes()[..1],
            DType::Bf16,
            &mut timer,
            "",
            "",
            |_| {},
        )
        .unwrap_err();
        assert!(matches!(e, Error::Timing { .. }), "{e}");
    }
}
