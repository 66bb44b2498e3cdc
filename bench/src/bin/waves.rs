//! The wave scheduler against per-operator launches and CUDA-graph replay, in one
//! process:
//!
//! - (a) 8 independent 256×256×256 GEMM + bias + ReLU, and 8 of mixed shapes;
//! - (b) one MiniLM-shaped encoder layer (d = 384, FFN 1536) at batch 1, 16 / 32 / 64 tokens:
//!   QKV, attention (its own launch between programs), out-proj + LN, FFN up + GELU,
//!   FFN down + LN;
//! - (c) an LSTM stack, 8 layers × 8 steps, hidden 256, batch 1 and 4.
//!
//! ```text
//! cargo run --release -p fused-gemm-bench --bin waves
//! ```
//!
//! Modes: `per-op` (each operator launched alone with its fastest-alone variant, on a stream),
//! `cuda-graph` (the same launches captured once and replayed), `waves` (the scheduler's
//! programs, launched on the stream), `waves+graph` (those launches replayed as a CUDA graph). Latency is the median of `WAVES_REPS` (default 200) forwards timed with CUDA
//! events after 20 warm-up ones. Prints a table and writes `bench/results/<card>/waves.json`
//! (`WAVES_RESULTS_DIR` overrides the folder). Takes well under two minutes on an H200.

use fused_gemm_bench::report::{device_slug, results_dir};
use std::process::ExitCode;

use fused_gemm::host::graph::Graph;
use fused_gemm::host::schedule::report::{WaveBenchReport, WaveBenchRow};
use fused_gemm::host::schedule::verify::verify;
use fused_gemm::host::schedule::{
    self, Family, Program, Schedule, ScheduleOptions, WaveGraph, WaveRunner,
};
use fused_gemm::host::testing::{rng, uniform};
use fused_gemm::host::{Error, Gpu, Result, Tensor};
use fused_gemm::kernels::waves::{WAVES_BF16, WAVES_BF16_ROWS};
use fused_gemm::waves::workloads::{Gemms, LstmStack, MiniLmLayer};

const COMMAND: &str = "cargo run --release -p fused-gemm-bench --bin waves";

fn reps() -> usize {
    std::env::var("WAVES_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
        .max(100)
}

/// The executions of one graph: the baseline's launches, the scheduler's programs, and
/// schedules with every operator fixed to one tile shape without split-K (to check the
/// scheduler's variant choice against the obvious alternatives).
struct Pair {
    per_op: WaveRunner,
    waves: WaveRunner,
    schedule: Schedule,
    alts: Vec<(String, WaveRunner, Schedule)>,
}

fn pair(gpu: &Gpu, g: &WaveGraph, family: &Family) -> Result<Pair> {
    let vdev = schedule::exec::vdevice(gpu, family)?;
    let opts = ScheduleOptions::default();
    let s = schedule::schedule(g, family, gpu.props(), vdev, &opts)?;
    verify(g, family, &s).map_err(|e| Error::LaunchLimit(format!("schedule check: {e}")))?;
    let base = schedule::per_op(g, family, gpu.props(), vdev, &opts)?;
    let mut alts = Vec::new();
    let mut tiles: Vec<_> = family.arms.iter().map(|a| a.tile).collect();
    tiles.dedup();
    for tile in tiles {
        let fixed: Option<Vec<_>> = g
            .ops()
            .iter()
            .map(|o| {
                family
                    .arms_of(o.kind)
                    .find(|(_, a)| a.tile == tile)
                    .map(|(i, _)| Some((i, 1)))
            })
            .collect();
        let Some(fixed) = fixed else { continue };
        let alt_opts = ScheduleOptions {
            fixed,
            fallback: false,
            ..ScheduleOptions::default()
        };
        let Ok(alt) = schedule::schedule(g, family, gpu.props(), vdev, &alt_opts) else {
            continue;
        };
        verify(g, family, &alt).map_err(|e| Error::LaunchLimit(format!("schedule check: {e}")))?;
        let label = format!("waves[{}x{} s1]", tile.bm, tile.bn);
        alts.push((label, WaveRunner::new(gpu, g, family, &alt)?, alt));
    }
    Ok(Pair {
        per_op: WaveRunner::new(gpu, g, family, &base)?,
        waves: WaveRunner::new(gpu, g, family, &s)?,
        schedule: s,
        alts,
    })
}

fn describe(s: &Schedule, g: &WaveGraph) -> String {
    let mut out = Vec::new();
    for p in &s.programs {
        match p {
            Program::Persistent(p) => out.push(format!(
                "persistent[{} ops, {} tasks, {} CTAs]",
                p.ops.len(),
                p.tasks.len(),
                p.ctas
            )),
            Program::Launches(ops) => out.push(format!("{} launch(es)", ops.len())),
        }
    }
    let vars: Vec<String> = s
        .variants
        .iter()
        .zip(g.ops())
        .map(|(v, o)| format!("{}:{}x{}/s{}", o.name, v.tile.bm, v.tile.bn, v.splits))
        .collect();
    format!("{} | {}", out.join(" + "), vars.join(" "))
}

fn max_abs_diff(x: &[f32], y: &[f32]) -> f64 {
    x.iter()
        .zip(y)
        .map(|(a, b)| {
            if a.is_nan() || b.is_nan() {
                f64::INFINITY
            } else {
                (a - b).abs() as f64
            }
        })
        .fold(0.0, f64::max)
}

fn download_all(gpu: &Gpu, ts: &[&Tensor]) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    for t in ts {
        v.extend(t.download_f32(gpu)?);
    }
    Ok(v)
}

/// Which execution a forward uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The per-operator launches (also what the CUDA graph captures).
    PerOp,
    /// The scheduler's programs.
    Waves,
    /// Alternative schedule `i` of the workload.
    Alt(usize),
}

/// One workload: its forward in either mode and its outputs.
trait Workload {
    fn name(&self) -> String;
    /// Enqueues one forward on `gpu`'s stream.
    fn forward(&mut self, gpu: &Gpu, mode: Mode) -> Result<()>;
    /// The outputs, as f32 (synchronizes).
    fn outputs(&self, gpu: &Gpu) -> Result<Vec<f32>>;
    /// The runners of one forward in `mode`, and launches outside them.
    fn runners(&self, mode: Mode) -> (Vec<&WaveRunner>, usize);
    /// The scheduler's prediction for a forward in `mode` (waves or alternative), µs.
    fn predicted_us(&self, mode: Mode) -> Option<f64>;
    /// Labels of the alternative schedules.
    fn alternatives(&self) -> Vec<String>;
}

fn row(
    w: &dyn Workload,
    mode: Mode,
    label: &str,
    ms: f32,
    reps: usize,
    diff: Option<f64>,
) -> WaveBenchRow {
    let (runners, extra) = w.runners(mode);
    let info: Vec<_> = runners.iter().flat_map(|r| r.info().to_vec()).collect();
    let occupancy = if info.is_empty() {
        0.0
    } else {
        info.iter().map(|i| i.resident_fraction).sum::<f64>() / info.len() as f64
    };
    WaveBenchRow {
        workload: w.name(),
        mode: label.to_owned(),
        median_ms: ms as f64,
        runs: reps,
        launches: runners.iter().map(|r| r.launches()).sum::<usize>() + extra,
        occupancy,
        predicted_us: w.predicted_us(mode),
        launch_info: info,
        max_abs_diff_vs_per_op: diff,
    }
}

/// Times the modes of one workload.
fn measure(gpu: &Gpu, w: &mut dyn Workload, rows: &mut Vec<WaveBenchRow>) -> Result<()> {
    let reps = reps();
    w.forward(gpu, Mode::PerOp)?;
    let base_out = w.outputs(gpu)?;
    let diff = |w: &mut dyn Workload, mode: Mode| -> Result<f64> {
        w.forward(gpu, mode)?;
        Ok(max_abs_diff(&base_out, &w.outputs(gpu)?))
    };
    let d_waves = diff(w, Mode::Waves)?;

    let t_op = gpu.time_ms(20, reps, |g| w.forward(g, Mode::PerOp))?;
    let graph: Graph = gpu.capture(|g| w.forward(g, Mode::PerOp))?;
    graph.upload()?;
    let t_graph = gpu.time_ms(20, reps, |_| graph.replay())?;
    let t_waves = gpu.time_ms(20, reps, |g| w.forward(g, Mode::Waves))?;
    let waves_graph: Graph = gpu.capture(|g| w.forward(g, Mode::Waves))?;
    waves_graph.upload()?;
    let t_waves_graph = gpu.time_ms(20, reps, |_| waves_graph.replay())?;
    rows.push(row(w, Mode::PerOp, "per-op", t_op, reps, None));
    rows.push(row(w, Mode::PerOp, "cuda-graph", t_graph, reps, None));
    rows.push(row(w, Mode::Waves, "waves", t_waves, reps, Some(d_waves)));
    rows.push(row(
        w,
        Mode::Waves,
        "waves+graph",
        t_waves_graph,
        reps,
        Some(d_waves),
    ));
    for (i, label) in w.alternatives().into_iter().enumerate() {
        let d = diff(w, Mode::Alt(i))?;
        let t = gpu.time_ms(20, reps, |g| w.forward(g, Mode::Alt(i)))?;
        rows.push(row(w, Mode::Alt(i), &label, t, reps, Some(d)));
    }
    Ok(())
}

/// A workload that is one graph.
struct Single<T> {
    name: String,
    data: T,
    pair: Pair,
    outputs: fn(&T, &Gpu) -> Result<Vec<f32>>,
}

impl Pair {
    fn runner(&self, mode: Mode) -> &WaveRunner {
        match mode {
            Mode::PerOp => &self.per_op,
            Mode::Waves => &self.waves,
            Mode::Alt(i) => &self.alts[i].1,
        }
    }

    fn predicted_us(&self, mode: Mode) -> Option<f64> {
        match mode {
            Mode::PerOp => None,
            Mode::Waves => Some(self.schedule.predicted_us),
            Mode::Alt(i) => Some(self.alts[i].2.predicted_us),
        }
    }
}

impl<T> Workload for Single<T> {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn forward(&mut self, gpu: &Gpu, mode: Mode) -> Result<()> {
        self.pair.runner(mode).launch(gpu)
    }
    fn outputs(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        (self.outputs)(&self.data, gpu)
    }
    fn runners(&self, mode: Mode) -> (Vec<&WaveRunner>, usize) {
        (vec![self.pair.runner(mode)], 0)
    }
    fn predicted_us(&self, mode: Mode) -> Option<f64> {
        self.pair.predicted_us(mode)
    }
    fn alternatives(&self) -> Vec<String> {
        self.pair.alts.iter().map(|a| a.0.clone()).collect()
    }
}

/// The MiniLM layer: the QKV graph, attention, the post-attention graph.
struct Layer {
    layer: MiniLmLayer,
    pre: Pair,
    post: Pair,
}

impl Workload for Layer {
    fn name(&self) -> String {
        format!("MiniLM layer b1 seq{}", self.layer.seq)
    }
    fn forward(&mut self, gpu: &Gpu, mode: Mode) -> Result<()> {
        let (pre, post) = match mode {
            Mode::PerOp => (&self.pre.per_op, &self.post.per_op),
            _ => (&self.pre.waves, &self.post.waves),
        };
        pre.launch(gpu)?;
        self.layer.attention(gpu)?;
        post.launch(gpu)
    }
    fn outputs(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        self.layer.y.download_f32(gpu)
    }
    fn runners(&self, mode: Mode) -> (Vec<&WaveRunner>, usize) {
        let (pre, post) = self.runners_of(mode);
        (vec![pre, post], 1)
    }
    fn predicted_us(&self, mode: Mode) -> Option<f64> {
        match mode {
            Mode::PerOp => None,
            _ => Some(self.pre.schedule.predicted_us + self.post.schedule.predicted_us),
        }
    }
    fn alternatives(&self) -> Vec<String> {
        Vec::new()
    }
}

impl Layer {
    /// The pre- and post-attention runners of `mode` (no alternatives: the layer's operators
    /// share no tile shape).
    fn runners_of(&self, mode: Mode) -> (&WaveRunner, &WaveRunner) {
        match mode {
            Mode::PerOp => (&self.pre.per_op, &self.post.per_op),
            _ => (&self.pre.waves, &self.post.waves),
        }
    }
}

fn run(gpu: &Gpu) -> Result<Vec<WaveBenchRow>> {
    let mut r = rng("waves-bench");
    let mut fill = |n: usize| uniform(&mut r, n);
    let mut rows = Vec::new();

    // (a) Independent GEMMs.
    let mixed = [
        (256, 256, 256),
        (128, 512, 256),
        (512, 128, 384),
        (64, 1024, 256),
        (256, 768, 128),
        (32, 256, 1024),
        (384, 384, 384),
        (1024, 64, 512),
    ];
    for (name, shapes) in [
        ("8x gemm+bias+relu 256^3", vec![(256, 256, 256); 8]),
        ("8x gemm+bias+relu mixed", mixed.to_vec()),
    ] {
        let data = Gemms::new(gpu, &shapes, &mut fill)?;
        let pair = pair(gpu, &data.graph, &WAVES_BF16)?;
        eprintln!("{name}: {}", describe(&pair.schedule, &data.graph));
        let mut w = Single {
            name: name.into(),
            data,
            pair,
            outputs: |d: &Gemms, g: &Gpu| download_all(g, &d.c.iter().collect::<Vec<_>>()),
        };
        measure(gpu, &mut w, &mut rows)?;
    }

    // (b) MiniLM layer at batch 1.
    for seq in [16, 32, 64] {
        let layer = MiniLmLayer::new(gpu, seq, &mut fill)?;
        let pre = pair(gpu, &layer.pre, &WAVES_BF16_ROWS)?;
        let post = pair(gpu, &layer.post, &WAVES_BF16_ROWS)?;
        eprintln!(
            "MiniLM seq {seq}: pre {} ; post {}",
            describe(&pre.schedule, &layer.pre),
            describe(&post.schedule, &layer.post)
        );
        measure(gpu, &mut Layer { layer, pre, post }, &mut rows)?;
    }

    // (c) LSTM stacks.
    for batch in [1, 4] {
        let name = format!("LSTM 8x8 h256 b{batch}");
        let data = LstmStack::new(gpu, 8, 8, batch, 256, &mut fill)?;
        let pair = pair(gpu, &data.graph, &WAVES_BF16)?;
        eprintln!("{name}: {}", describe(&pair.schedule, &data.graph));
        let mut w = Single {
            name,
            data,
            pair,
            outputs: |d: &LstmStack, g: &Gpu| download_all(g, &[&d.d, &d.c]),
        };
        measure(gpu, &mut w, &mut rows)?;
    }
    Ok(rows)
}

fn date() -> String {
    std::process::Command::new("date")
        .arg("+%F")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "undated".into())
}

fn main() -> ExitCode {
    let gpu = match Gpu::new(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("waves: needs a GPU: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rows = match run(&gpu) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("waves: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{:<28} {:<11} {:>10} {:>9} {:>10} {:>12} {:>12}",
        "workload", "mode", "median ms", "launches", "occupancy", "vs per-op", "max |Δ|"
    );
    let mut base = 0.0;
    for r in &rows {
        if r.mode == "per-op" {
            base = r.median_ms;
        }
        println!(
            "{:<28} {:<11} {:>10.4} {:>9} {:>10.2} {:>11.2}x {:>12}",
            r.workload,
            r.mode,
            r.median_ms,
            r.launches,
            r.occupancy,
            base / r.median_ms,
            r.max_abs_diff_vs_per_op
                .map_or("-".into(), |d| format!("{d:.3e}"))
        );
    }
    let report = WaveBenchReport {
        command: COMMAND.into(),
        date: date(),
        device: gpu.name().to_owned(),
        rows,
    };
    let dir = results_dir("WAVES_RESULTS_DIR").join(device_slug(&report.device));
    let path = dir.join("waves.json");
    match std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, report.to_json())) {
        Ok(()) => eprintln!("waves: wrote {}", path.display()),
        Err(e) => {
            eprintln!("waves: could not write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
