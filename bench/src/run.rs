//! The driver: for each row, allocate rotation sets, check every path once against the f64
//! reference (outputs poisoned first), then time the paths that passed in interleaved rounds.

use cudarc::driver::{DevicePtr, DevicePtrMut};
use fused_gemm::Gpu;
use fused_gemm::device::gemm::TileShape;
use fused_gemm::host::autotune::Autotuner;
use fused_gemm::host::cudarc;
use fused_gemm::host::testing::compare;
use fused_gemm::host::{LaunchOptions, LaunchReport};
use indicatif::ProgressBar;

use crate::cublaslt::{Lt, LtPlan};
use crate::epilogue::{Epilogue, LtEpilogue};
use crate::error::{BenchError, Result};
use crate::ours::{Fused, FusedArgs, describe};
use crate::problem::{BenchElement, Problem, Reference, Set, set_bytes, tolerance};
use crate::report::{PathKind, PathResult, RowResult, Status};
use crate::shapes::Row;
use crate::timing::{Summary, TimingConfig, rotation_sets, time_gpu};

/// What to run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The rows, in order.
    pub rows: Vec<Row>,
    /// Untimed runs of each path before its first round.
    pub warmup: usize,
    /// Interleaved rounds.
    pub rounds: usize,
    /// Timed runs of each path per round.
    pub runs_per_round: usize,
    /// Seed of the random inputs (each row derives its own from it).
    pub seed: u64,
    /// Most rotation sets per row.
    pub max_sets: usize,
    /// Time ours with each Hopper tile forced, besides the launcher's choice.
    pub tiles: bool,
}

/// cuBLASLt plans of one row.
struct Plans {
    /// The plain GEMM.
    gemm: LtPlan,
    /// The fused epilogue, where cuBLASLt has one.
    fused: Option<LtPlan>,
}

/// One column to check and time.
#[derive(Clone, Copy, Debug)]
struct Spec {
    kind: PathKind,
    tile: Option<TileShape>,
}

fn ptr<T>(b: &cudarc::driver::CudaSlice<T>, gpu: &Gpu) -> u64 {
    b.device_ptr(gpu.stream()).0
}

fn ptr_mut<T>(b: &mut cudarc::driver::CudaSlice<T>, gpu: &Gpu) -> u64 {
    b.device_ptr_mut(gpu.stream()).0
}

/// The column name of a forced tile: its shape and schedule.
pub fn tile_label(t: &TileShape) -> String {
    let schedule = match t.warps_m {
        4 => "ping-pong",
        8 => "cooperative",
        16 => "2-CTA cluster",
        _ => "other",
    };
    format!("tile {}x{}x{} {schedule}", t.bm, t.bn, t.bk)
}

/// Everything a launch needs besides the path and the set.
struct Ctx<'a, T> {
    gpu: &'a Gpu,
    lt: Option<&'a mut Lt>,
    plans: Option<&'a Plans>,
    ours: Option<Fused<T>>,
    tuner: &'a mut Option<Autotuner>,
    mnk: (usize, usize, usize),
}

impl<T: BenchElement> Ctx<'_, T> {
    /// Runs `f` in the path's setting with the handle to launch on: one with the tile forced,
    /// or the device's, with the run's autotuner installed for `ours` (the launcher's default)
    /// and none for the model's tile.
    fn within<R>(&mut self, spec: Spec, f: impl FnOnce(&mut Self, &Gpu) -> R) -> R {
        let gpu = self.gpu;
        match spec.kind {
            PathKind::Ours => {
                gpu.set_autotuner(self.tuner.take());
                let r = f(self, gpu);
                *self.tuner = gpu.set_autotuner(None);
                r
            }
            PathKind::OursTile => {
                let forced = gpu.with_options(LaunchOptions {
                    tile: spec.tile,
                    ..LaunchOptions::default()
                });
                f(self, &forced)
            }
            _ => f(self, gpu),
        }
    }

    /// Queues one run of `spec` on `set` through `gpu` (the handle [`Ctx::within`] gives);
    /// what ran for ours, `None` for cuBLAS.
    fn launch(&mut self, gpu: &Gpu, spec: Spec, set: &mut Set<T>) -> Result<Option<LaunchReport>> {
        let (m, n, k) = self.mnk;
        if spec.kind.is_ours() {
            let f = self.ours.ok_or(BenchError::Usage {
                what: "ours",
                detail: "no fused kernel".into(),
            })?;
            return Ok(Some((f.launch)(
                gpu,
                FusedArgs {
                    m,
                    n,
                    k,
                    a: &set.a,
                    b: &set.b,
                    bias: set.bias.as_ref(),
                    residual: set.residual.as_ref(),
                    gamma: set.gamma.as_ref(),
                    beta: set.beta.as_ref(),
                    rstd: set.rstd.as_mut(),
                    out: &mut set.out,
                },
            )?));
        }
        let (lt, plans) = self
            .lt
            .as_deref_mut()
            .zip(self.plans)
            .ok_or(BenchError::NoCublasLt)?;
        let (plan, bias) = if spec.kind == PathKind::Cublaslt {
            let plan = plans.fused.as_ref().ok_or(BenchError::NoCublasLt)?;
            let bias = set.bias.as_ref().ok_or(BenchError::Usage {
                what: "operands",
                detail: "a fused bias epilogue needs a bias".into(),
            })?;
            (plan, ptr(bias, gpu))
        } else {
            (&plans.gemm, 0)
        };
        let (a, b) = (ptr(&set.a, gpu), ptr(&set.b, gpu));
        // The plain GEMM of a SwiGLU row is M×N, wider than `out`.
        let d = match set.gemm_out.as_mut() {
            Some(t) if spec.kind == PathKind::Cublas => ptr_mut(t, gpu),
            _ => ptr_mut(&mut set.out, gpu),
        };
        // SAFETY: the plan was built for (m, n, k) and T; the set's buffers hold M×K, N×K,
        // M×N (and N) elements and live until the stream is synchronized.
        unsafe { lt.run(plan, a, b, d, bias) }?;
        Ok(None)
    }
}

/// What the f64 reference says `spec` must produce for one sampled row.
fn expected(spec: Spec, r: &Reference) -> &[f64] {
    match spec.kind {
        PathKind::Cublas => &r.gemm,
        PathKind::Cublaslt => &r.fused_lt,
        _ => &r.contract.out,
    }
}

/// One checked run: the output, the per-row rstd the epilogue wrote (if any), and the kernel.
type Ran<T> = (Vec<T>, Option<Vec<f32>>, Option<String>);

/// Runs `spec` once on set 0 (outputs poisoned first) and compares with the reference rows:
/// the result with its error measures, status `Wrong` when out of bounds.
fn check<T: BenchElement>(
    ctx: &mut Ctx<'_, T>,
    spec: Spec,
    p: &mut Problem<T>,
    rows: &[usize],
    reference: &[Reference],
    mut r: PathResult,
) -> PathResult {
    let gpu = ctx.gpu;
    let tol = tolerance(T::DTYPE);
    let ran = (|| -> Result<Ran<T>> {
        p.poison_outputs(gpu)?;
        let report = ctx.within(spec, |c, g| c.launch(g, spec, &mut p.sets[0]))?;
        let kernel = report.as_ref().map(describe);
        gpu.synchronize()?;
        let set = &p.sets[0];
        let out = match &set.gemm_out {
            Some(t) if spec.kind == PathKind::Cublas => gpu.download(t)?,
            _ => gpu.download(&set.out)?,
        };
        let rstd = match &set.rstd {
            Some(r) if p.epilogue.writes_rstd() && spec.kind.is_ours() => Some(gpu.download(r)?),
            _ => None,
        };
        Ok((out, rstd, kernel))
    })();
    let (out, rstd, kernel) = match ran {
        Ok(x) => x,
        Err(e) => {
            let status = match &e {
                // A forced tile the launcher cannot use for this problem.
                BenchError::Host(fused_gemm::Error::LaunchLimit(_))
                    if spec.kind == PathKind::OursTile =>
                {
                    Status::NotAvailable
                }
                _ => Status::Error,
            };
            return r.with_status(status, format!("first run failed: {e}"));
        }
    };
    if kernel.is_some() {
        r.kernel = kernel;
    }
    let cols = if spec.kind == PathKind::Cublas {
        p.n
    } else {
        p.epilogue.out_cols(p.n)
    };
    let mut got = Vec::with_capacity(rows.len() * cols);
    let mut want = Vec::with_capacity(rows.len() * cols);
    for (&row, re) in rows.iter().zip(reference) {
        got.extend(
            out[row * cols..(row + 1) * cols]
                .iter()
                .map(|x| x.to_f32() as f64),
        );
        want.extend_from_slice(expected(spec, re));
    }
    let a = compare(&got, &want, tol);
    let (mut frobenius, mut worst, mut passed) = (a.frobenius, a.worst, a.passed());
    let mut wrong = Vec::new();
    let unwritten = out.iter().filter(|x| !x.to_f32().is_finite()).count();
    if let Some(rstd) = &rstd {
        let got: Vec<f64> = rows.iter().map(|&i| rstd[i] as f64).collect();
        let want: Vec<f64> = reference
            .iter()
            .map(|re| re.contract.rstd.unwrap_or(f64::NAN))
            .collect();
        let s = compare(&got, &want, tol);
        frobenius = frobenius.max(s.frobenius);
        worst = worst.max(s.worst);
        passed &= s.passed();
        let bad = rstd.iter().filter(|x| !x.is_finite()).count();
        if bad > 0 {
            wrong.push(format!("{bad} rstd values not written or not finite"));
        }
    }
    r.err_vs_reference = Some(frobenius);
    r.worst_element = Some(worst);
    if unwritten > 0 {
        wrong.push(format!("{unwritten} outputs not written or not finite"));
    }
    if !passed {
        wrong.push(format!(
            "error {frobenius:.2e} (bound {tol:.0e}), worst element {worst:.2}× its bound"
        ));
    }
    if wrong.is_empty() {
        r
    } else {
        r.with_status(Status::Wrong, format!("not timed: {}", wrong.join("; ")))
    }
}

/// Times each candidate algorithm of cuBLAS's plan for this row briefly and keeps the fastest.
/// Returns the note `algorithm i of n`.
fn pick_algorithm<T: BenchElement>(
    ctx: &mut Ctx<'_, T>,
    kind: PathKind,
    sets: &mut [Set<T>],
) -> Result<String> {
    let gpu = ctx.gpu;
    let plans = ctx.plans.ok_or(BenchError::NoCublasLt)?;
    let plan = if kind == PathKind::Cublaslt {
        plans.fused.as_ref().ok_or(BenchError::NoCublasLt)?
    } else {
        &plans.gemm
    };
    let n = plan.candidates();
    let quick = TimingConfig {
        warmup: 2,
        runs: 10,
        ..TimingConfig::default()
    };
    let nsets = sets.len();
    let mut best = (0usize, f64::INFINITY);
    for i in 0..n {
        plan.select(i);
        let t = time_gpu(gpu, &quick, |j| {
            let spec = Spec { kind, tile: None };
            ctx.launch(gpu, spec, &mut sets[j % nsets]).map(drop)
        });
        // An algorithm the heuristic offered may still fail to run: skip it.
        if let Ok(t) = t
            && t.summary.median_ms < best.1
        {
            best = (i, t.summary.median_ms);
        }
    }
    plan.select(best.0);
    Ok(format!(
        "algorithm {} of {n} the heuristic offered",
        best.0 + 1
    ))
}

/// Runs one row. Failures become statuses and notes; this always returns a result for every
/// path.
pub fn run_row<T: BenchElement>(
    gpu: &Gpu,
    cfg: &RunConfig,
    index: usize,
    row: &Row,
    lt: Option<&mut Lt>,
    tuner: &mut Option<Autotuner>,
    pb: &ProgressBar,
) -> RowResult {
    let (m, n, k, epi) = (row.m, row.n, row.k, row.epilogue);
    let dtype = T::DTYPE;
    let mut result = RowResult {
        name: row.name.clone(),
        m,
        n,
        k,
        epilogue: epi,
        rotation_sets: 0,
        flops: Epilogue::flops(m, n, k),
        bytes_min: epi.bytes_min(m, n, k, dtype.size()),
        checked_rows: Vec::new(),
        note: String::new(),
        paths: Vec::new(),
    };
    if let Some(why) = epi.check_width(n) {
        result.note = why;
        return result;
    }

    // Rotation sets: at least twice the L2 together, within 80% of free memory (less 1 GiB
    // for cuBLASLt and the downloads' staging).
    let per_set = set_bytes(m, n, k, epi, dtype.size());
    let free = gpu
        .context()
        .mem_get_info()
        .map(|(f, _)| f as u64)
        .unwrap_or(0);
    let budget = ((free as f64 * 0.8) as u64).saturating_sub((1u64 << 30).min(free / 2));
    let sets = rotation_sets(per_set, gpu.props().l2_bytes as u64, budget, cfg.max_sets);
    if sets == 0 {
        result.note = BenchError::OutOfMemory {
            needed: per_set,
            free,
        }
        .to_string();
        return result;
    }
    result.rotation_sets = sets;
    let seed = cfg.seed.wrapping_add(0x1000 * index as u64);
    let mut problem = match Problem::<T>::new(gpu, (m, n, k), epi, sets, seed) {
        Ok(p) => p,
        Err(e) => {
            result.note = format!("setting up: {e}");
            return result;
        }
    };

    let plans = match lt.as_deref() {
        None => {
            result.note = "cuBLASLt not available".into();
            None
        }
        Some(l) => {
            let bias = problem.sets[0].bias.as_ref().map_or(0, |b| ptr(b, gpu));
            let made = l
                .plan(dtype, m, n, k, LtEpilogue::None, 0)
                .and_then(|gemm| {
                    let fused = match epi.cublaslt() {
                        None => None,
                        Some((e, _)) => Some(l.plan(dtype, m, n, k, e, bias)?),
                    };
                    Ok(Plans { gemm, fused })
                });
            match made {
                Ok(p) => Some(p),
                Err(e) => {
                    result.note = format!("cuBLASLt has no plan for this problem: {e}");
                    None
                }
            }
        }
    };

    let rows = problem.sample_rows();
    let reference = problem.reference(&rows);
    result.checked_rows = rows.clone();
    let ours = T::fused(epi);

    // The columns, in table order.
    let mut specs: Vec<(Spec, PathResult)> = Vec::new();
    let spec = |kind, tile| Spec { kind, tile };
    match ours {
        None => specs.push((
            spec(PathKind::Ours, None),
            PathResult::new(PathKind::Ours, "ours", "full").with_status(
                Status::NotAvailable,
                format!("no kernel for {} ({})", epi.name(), dtype.name()),
            ),
        )),
        Some(f) => {
            specs.push((
                spec(PathKind::Ours, None),
                PathResult::new(PathKind::Ours, "ours", "full"),
            ));
            if tuner.is_some() {
                specs.push((
                    spec(PathKind::OursModel, None),
                    PathResult::new(PathKind::OursModel, "ours, model's tile", "full"),
                ));
            }
            let tiles = if cfg.tiles {
                f.hopper_tiles(gpu)
            } else {
                Vec::new()
            };
            for t in &tiles {
                specs.push((
                    spec(PathKind::OursTile, Some(*t)),
                    PathResult::new(PathKind::OursTile, tile_label(t), "full"),
                ));
            }
        }
    }
    let cublas_computes = if epi == Epilogue::Gemm {
        "full"
    } else {
        "GEMM only"
    };
    let lt_missing = |kind, label: &str, computes: &str| {
        PathResult::new(kind, label, computes).with_status(
            Status::NotAvailable,
            if lt.is_none() {
                "cuBLASLt not available"
            } else {
                "no cuBLASLt plan"
            },
        )
    };
    if plans.is_some() {
        specs.push((
            spec(PathKind::Cublas, None),
            PathResult::new(PathKind::Cublas, "cuBLAS", cublas_computes),
        ));
    } else {
        specs.push((
            spec(PathKind::Cublas, None),
            lt_missing(PathKind::Cublas, "cuBLAS", cublas_computes),
        ));
    }
    if let Some((_, computes)) = epi.cublaslt() {
        let r = if plans.as_ref().is_some_and(|p| p.fused.is_some()) {
            PathResult::new(PathKind::Cublaslt, "cuBLASLt fused", computes)
        } else {
            lt_missing(PathKind::Cublaslt, "cuBLASLt fused", computes)
        };
        specs.push((spec(PathKind::Cublaslt, None), r));
    }

    let mut ctx = Ctx {
        gpu,
        lt,
        plans: plans.as_ref(),
        ours,
        tuner,
        mnk: (m, n, k),
    };

    // Check every path (cuBLAS picks its algorithm first).
    for (s, r) in specs.iter_mut() {
        if r.status != Status::Ok {
            continue;
        }
        pb.set_message(format!("{} {} (check)", row.name, r.label));
        if matches!(s.kind, PathKind::Cublas | PathKind::Cublaslt) {
            match pick_algorithm(&mut ctx, s.kind, &mut problem.sets) {
                Ok(note) => r.kernel = Some(note),
                Err(e) => {
                    *r = r
                        .clone()
                        .with_status(Status::Error, format!("choosing an algorithm: {e}"));
                    continue;
                }
            }
        }
        *r = check(&mut ctx, *s, &mut problem, &rows, &reference, r.clone());
    }

    // Time the paths that passed, in interleaved rounds.
    let timed: Vec<usize> = (0..specs.len())
        .filter(|&i| specs[i].1.status == Status::Ok)
        .collect();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); specs.len()];
    let nsets = problem.sets.len();
    for round in 0..cfg.rounds {
        pb.set_message(format!("{} (round {}/{})", row.name, round + 1, cfg.rounds));
        for j in 0..timed.len() {
            // Each round starts one path later, so no path always follows the same one.
            let i = timed[(j + round) % timed.len()];
            if specs[i].1.status != Status::Ok {
                continue;
            }
            let s = specs[i].0;
            let tc = TimingConfig {
                warmup: if round == 0 { cfg.warmup } else { 2 },
                runs: cfg.runs_per_round,
                ..TimingConfig::default()
            };
            let sets = &mut problem.sets;
            let t = ctx.within(s, |c, g| {
                time_gpu(g, &tc, |run| {
                    c.launch(g, s, &mut sets[run % nsets]).map(drop)
                })
            });
            match t {
                Ok(t) => samples[i].extend(t.samples),
                Err(e) => {
                    let r = &mut specs[i].1;
                    *r = r
                        .clone()
                        .with_status(Status::Error, format!("timing failed: {e}"));
                }
            }
        }
    }
    for (i, (_, r)) in specs.iter_mut().enumerate() {
        if r.status == Status::Ok {
            r.timing = Summary::from_samples(&samples[i]);
        }
    }
    result.paths = specs.into_iter().map(|(_, r)| r).collect();
    result
}

/// One line per row for the log: each timed path's median.
pub fn summary_line(r: &RowResult) -> String {
    let parts: Vec<String> = r
        .paths
        .iter()
        .map(|p| match (p.status, p.median_ms()) {
            (Status::Ok, Some(t)) => format!("{} {t:.4} ms", p.label),
            (Status::NotAvailable, _) => format!("{} n/a", p.label),
            (Status::Wrong, _) => format!("{} WRONG", p.label),
            _ => format!("{} error", p.label),
        })
        .collect();
    format!(
        "{} ({}×{}×{}): {}",
        r.name,
        r.m,
        r.n,
        r.k,
        parts.join(" · ")
    )
}

/// Runs every row of `cfg` in order; `lt` is the cuBLASLt handle, if the library loaded;
/// `tuner` the autotuner of the `ours` column (`None`: the model's tile there, and no column of
/// its own). `done` sees the rows so far after
/// each row (to save them).
pub fn run_all<T: BenchElement>(
    gpu: &Gpu,
    cfg: &RunConfig,
    mut lt: Option<&mut Lt>,
    tuner: &mut Option<Autotuner>,
    pb: &ProgressBar,
    mut done: impl FnMut(&[RowResult]),
) -> Vec<RowResult> {
    // Every path but `ours` runs without an autotuner (`Ctx::within` installs `tuner` for it).
    let device_tuner = gpu.set_autotuner(None);
    let mut out = Vec::with_capacity(cfg.rows.len());
    for (i, row) in cfg.rows.iter().enumerate() {
        let r = run_row::<T>(gpu, cfg, i, row, lt.as_deref_mut(), tuner, pb);
        let line = summary_line(&r);
        pb.suspend(|| eprintln!("{line}"));
        pb.inc(1);
        out.push(r);
        done(&out);
    }
    gpu.set_autotuner(device_tuner);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_gemm::device::gemm::sm90::TILES_SM90;

    #[test]
    fn tile_labels_name_shape_and_schedule() {
        let labels: Vec<String> = TILES_SM90.iter().map(tile_label).collect();
        assert!(
            labels.contains(&"tile 128x128x64 ping-pong".to_owned()),
            "{labels:?}"
        );
        assert!(
            labels.contains(&"tile 256x256x64 2-CTA cluster".to_owned()),
            "{labels:?}"
        );
        assert!(labels.iter().all(|l| !l.ends_with("other")), "{labels:?}");
    }

    #[test]
    fn summary_line_names_every_path() {
        let r = crate::report::tests::sample();
        let l = summary_line(&r.rows[0]);
        assert!(
            l.starts_with("bert-base.ffn-up.bias-gelu (4096×3072×768)"),
            "{l}"
        );
        assert!(
            l.contains("ours 0.0500 ms") && l.contains("tile 256x256 cluster n/a"),
            "{l}"
        );
    }
}
