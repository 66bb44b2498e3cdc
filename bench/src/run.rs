//! The benchmark driver: for each (shape, epilogue), allocate rotation sets, check every path
//! once against the f64 reference (and ours against the unfused path), then time the paths
//! that passed.

use cudarc::driver::{DevicePtr, DevicePtrMut};
use fused_gemm::Gpu;
use fused_gemm::device::types::DType;
use fused_gemm::host::cudarc;
use fused_gemm::rowwise;
use indicatif::ProgressBar;

use crate::cublaslt::{Lt, LtPlan};
use crate::epilogue::{Epilogue, LtEpilogue};
use crate::error::{BenchError, Result};
use crate::ours::{FusedArgs, FusedFn};
use crate::problem::{
    BenchElement, Problem, Set, rel_error, rel_error_between, set_bytes, tolerance,
};
use crate::report::{CaseResult, PathKind, PathResult, Status};
use crate::shapes::Shape;
use crate::timing::{TimingConfig, rotation_sets, time_gpu};

/// What to run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// (shape, epilogue) pairs, in order.
    pub cases: Vec<(Shape, Epilogue)>,
    /// Warm-up and runs.
    pub timing: TimingConfig,
    /// Seed of the random inputs (each case derives its own from it).
    pub seed: u64,
    /// Most rotation sets per case.
    pub max_sets: usize,
}

/// The (shape, epilogue) pairs: each shape with its own epilogues, or with `epilogues` when
/// given.
pub fn cases(shapes: &[Shape], epilogues: Option<&[Epilogue]>) -> Vec<(Shape, Epilogue)> {
    shapes
        .iter()
        .flat_map(|s| {
            epilogues
                .unwrap_or(&s.epilogues)
                .iter()
                .map(move |&e| (s.clone(), e))
        })
        .collect()
}

/// cuBLASLt plans of one case.
struct Plans {
    /// Plain GEMM (the unfused path, and the cuBLASLt column where nothing is fused).
    gemm: LtPlan,
    /// The fused epilogue, where cuBLASLt has one.
    fused: Option<LtPlan>,
}

fn ptr<T>(b: &cudarc::driver::CudaSlice<T>, gpu: &Gpu) -> u64 {
    b.device_ptr(gpu.stream()).0
}

fn ptr_mut<T>(b: &mut cudarc::driver::CudaSlice<T>, gpu: &Gpu) -> u64 {
    b.device_ptr_mut(gpu.stream()).0
}

fn missing(what: &'static str) -> BenchError {
    BenchError::Usage {
        what: "operands",
        detail: format!("the epilogue needs {what}, which the set lacks"),
    }
}

/// Queues one run of `kind` on rotation set `set`.
#[allow(clippy::too_many_arguments)]
fn launch<T: BenchElement>(
    kind: PathKind,
    gpu: &Gpu,
    lt: Option<&mut Lt>,
    plans: Option<&Plans>,
    ours: Option<FusedFn<T>>,
    epi: Epilogue,
    (m, n, k): (usize, usize, usize),
    set: &mut Set<T>,
) -> Result<()> {
    match kind {
        PathKind::Ours => {
            let f = ours.ok_or(BenchError::Usage {
                what: "ours",
                detail: "no fused kernel".into(),
            })?;
            f(
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
                    eps: epi.eps(),
                    out: &mut set.out,
                    rstd: set.rstd.as_mut(),
                },
            )?;
        }
        PathKind::Cublaslt => {
            let (lt, plans) = lt.zip(plans).ok_or(BenchError::NoCublasLt)?;
            let plan = plans.fused.as_ref().unwrap_or(&plans.gemm);
            let bias = match (epi.cublaslt().0, &set.bias) {
                (LtEpilogue::None, _) => 0,
                (_, Some(b)) => ptr(b, gpu),
                (_, None) => return Err(missing("a bias")),
            };
            let (a, b) = (ptr(&set.a, gpu), ptr(&set.b, gpu));
            // Where nothing is fused the column is the bare GEMM; for SwiGLU its M×N result
            // goes to `tmp`, `out` being M×N/2.
            let d = match set.tmp.as_mut() {
                Some(t) if epi == Epilogue::Swiglu => ptr_mut(t, gpu),
                _ => ptr_mut(&mut set.out, gpu),
            };
            // SAFETY: the plan was built for (m, n, k) and T; the set's buffers hold M×K, N×K,
            // M×N (and N) elements and live until the stream is synchronized.
            unsafe { lt.run(plan, a, b, d, bias) }?;
        }
        PathKind::Unfused => {
            let (lt, plans) = lt.zip(plans).ok_or(BenchError::NoCublasLt)?;
            let b = ptr(&set.b, gpu);
            let (a, c) = match epi {
                // RMSNorm materialized first (unit γ: CODA folds γ into B), then the GEMM on it.
                Epilogue::RmsnormScale => {
                    let t = set
                        .tmp
                        .as_mut()
                        .ok_or_else(|| missing("a normalized-A buffer"))?;
                    let g = set.gamma.as_ref().ok_or_else(|| missing("a unit gamma"))?;
                    rowwise::rms_norm(gpu, m, k, &set.a, k, g, epi.eps(), t, k)?;
                    (ptr(t, gpu), ptr_mut(&mut set.out, gpu))
                }
                Epilogue::Swiglu => {
                    let t = set.tmp.as_mut().ok_or_else(|| missing("a GEMM buffer"))?;
                    (ptr(&set.a, gpu), ptr_mut(t, gpu))
                }
                _ => (ptr(&set.a, gpu), ptr_mut(&mut set.out, gpu)),
            };
            // SAFETY: as above; A is M×K (`a`, or its normalized copy in `tmp`), C is M×N
            // (`tmp` for SwiGLU, else `out`).
            unsafe { lt.run(&plans.gemm, a, b, c, 0) }?;
            let bias = set.bias.as_ref().map(|b| b as &dyn DevicePtr<T>);
            match epi {
                Epilogue::BiasGelu
                | Epilogue::BiasGeluTanh
                | Epilogue::BiasRelu
                | Epilogue::Bias => {
                    let act = epi.activation().expect("bias epilogues have an activation");
                    rowwise::bias_act_in_place(gpu, m, n, &mut set.out, n, bias, act)?;
                }
                Epilogue::BiasResidualLayernorm => {
                    let r = set.residual.as_ref().ok_or_else(|| missing("a residual"))?;
                    let g = set.gamma.as_ref().ok_or_else(|| missing("gamma"))?;
                    let be = set.beta.as_ref().ok_or_else(|| missing("beta"))?;
                    rowwise::layer_norm_in_place(
                        gpu,
                        m,
                        n,
                        &mut set.out,
                        n,
                        bias,
                        Some((r, n)),
                        g,
                        be,
                        epi.eps(),
                    )?;
                }
                Epilogue::Swiglu => {
                    let t = set.tmp.as_ref().ok_or_else(|| missing("a GEMM buffer"))?;
                    rowwise::swiglu(gpu, m, n, t, n, &mut set.out, n / 2)?;
                }
                Epilogue::RmsnormScale => {}
                Epilogue::RmsRstd => {
                    let r = set.rstd.as_mut().ok_or_else(|| missing("an rstd buffer"))?;
                    rowwise::rms_scale(gpu, m, n, &set.out, n, epi.eps(), r)?;
                }
            }
        }
    }
    Ok(())
}

/// What one path's check found.
struct Check<T> {
    err_ref: f64,
    nonfinite: usize,
    out: Vec<T>,
}

/// Runs `kind` once on set 0 (outputs poisoned first) and compares with the reference rows.
#[allow(clippy::too_many_arguments)]
fn check<T: BenchElement>(
    kind: PathKind,
    gpu: &Gpu,
    lt: Option<&mut Lt>,
    plans: Option<&Plans>,
    ours: Option<FusedFn<T>>,
    p: &mut Problem<T>,
    rows: &[usize],
    reference: &[(crate::epilogue::RowOutput, Vec<f64>)],
) -> Result<Check<T>> {
    p.poison_outputs(gpu)?;
    let (m, n, k, epi) = (p.m, p.n, p.k, p.epilogue);
    launch(kind, gpu, lt, plans, ours, epi, (m, n, k), &mut p.sets[0])?;
    gpu.synchronize()?;
    // The cuBLASLt column's bare GEMM for SwiGLU lands in `tmp` (see `launch`).
    let bare_gemm_in_tmp = kind == PathKind::Cublaslt && epi == Epilogue::Swiglu;
    let (out, cols) = match &p.sets[0].tmp {
        Some(t) if bare_gemm_in_tmp => (gpu.download(t)?, n),
        _ => (gpu.download(&p.sets[0].out)?, epi.out_cols(n)),
    };
    let mut got = Vec::new();
    let mut want = Vec::new();
    for (&r, (contract, lt_row)) in rows.iter().zip(reference) {
        got.extend_from_slice(&out[r * cols..(r + 1) * cols]);
        want.extend_from_slice(if kind == PathKind::Cublaslt {
            lt_row
        } else {
            &contract.out
        });
    }
    let mut err_ref = rel_error(&got, &want, |x: T| x.to_f32() as f64);
    let mut nonfinite = out.iter().filter(|x| !x.to_f32().is_finite()).count();
    if kind != PathKind::Cublaslt
        && epi == Epilogue::RmsRstd
        && let Some(rs) = &p.sets[0].rstd
    {
        let rstd = gpu.download(rs)?;
        nonfinite += rstd.iter().filter(|x| !x.is_finite()).count();
        let got: Vec<f32> = rows.iter().map(|&r| rstd[r]).collect();
        let want: Vec<f64> = reference
            .iter()
            .map(|(c, _)| c.rstd.unwrap_or(f64::NAN))
            .collect();
        err_ref = err_ref.max(rel_error(&got, &want, |x| x as f64));
    }
    Ok(Check {
        err_ref,
        nonfinite,
        out,
    })
}

fn dtype_of<T: BenchElement>() -> DType {
    T::DTYPE
}

/// Runs one case. Failures become statuses and notes; this never returns early without a
/// result for every path.
pub fn run_case<T: BenchElement>(
    gpu: &Gpu,
    cfg: &RunConfig,
    case_index: usize,
    (shape, epi): &(Shape, Epilogue),
    mut lt: Option<&mut Lt>,
    pb: &ProgressBar,
) -> CaseResult {
    let (m, n, k) = (shape.m, shape.n, shape.k);
    let dtype = dtype_of::<T>();
    let es = dtype.size();
    let mut case = CaseResult {
        shape: shape.name.clone(),
        m,
        n,
        k,
        epilogue: *epi,
        rotation_sets: 0,
        flops: Epilogue::flops(m, n, k),
        bytes_min: epi.bytes_min(m, n, k, es),
        checked_rows: Vec::new(),
        note: String::new(),
        paths: Vec::new(),
    };
    let lt_computes = epi.cublaslt().1;
    let computes = |kind| {
        if kind == PathKind::Cublaslt {
            lt_computes
        } else {
            "full"
        }
    };
    let fail_all = |case: &mut CaseResult, status: Status, note: String| {
        case.paths = PathKind::ALL
            .iter()
            .map(|&kind| PathResult::without_timing(kind, status, computes(kind), note.clone()))
            .collect();
        pb.inc(PathKind::ALL.len() as u64);
    };
    if let Some(why) = epi.check_width(n, k, rowwise::max_row_len(dtype)) {
        case.note = why.clone();
        fail_all(&mut case, Status::Error, why);
        return case;
    }

    // Rotation sets: at least twice the L2 together, within 80% of free memory (less 1 GiB
    // for cuBLASLt and the downloads' staging).
    let per_set = set_bytes(m, n, k, *epi, es);
    let free = gpu
        .context()
        .mem_get_info()
        .map(|(f, _)| f as u64)
        .unwrap_or(0);
    let budget = (free as f64 * 0.8) as u64 - (1u64 << 30).min(free / 2);
    let sets = rotation_sets(per_set, gpu.props().l2_bytes as u64, budget, cfg.max_sets);
    if sets == 0 {
        let e = BenchError::OutOfMemory {
            needed: per_set,
            free,
        };
        fail_all(&mut case, Status::Error, e.to_string());
        return case;
    }
    case.rotation_sets = sets;
    let seed = cfg.seed.wrapping_add(0x1000 * case_index as u64);
    let mut problem = match Problem::<T>::new(gpu, (m, n, k), *epi, sets, seed) {
        Ok(p) => p,
        Err(e) => {
            fail_all(&mut case, Status::Error, format!("setting up: {e}"));
            return case;
        }
    };

    let plans = match lt.as_deref() {
        None => None,
        Some(l) => {
            let bias = problem.sets[0].bias.as_ref().map_or(0, |b| ptr(b, gpu));
            let made = l
                .plan(dtype, m, n, k, LtEpilogue::None, 0)
                .and_then(|gemm| {
                    let fused = match epi.cublaslt().0 {
                        LtEpilogue::None => None,
                        e => Some(l.plan(dtype, m, n, k, e, bias)?),
                    };
                    Ok(Plans { gemm, fused })
                });
            match made {
                Ok(p) => Some(p),
                Err(e) => {
                    case.note = format!("cuBLASLt has no plan for this problem: {e}");
                    None
                }
            }
        }
    };

    let rows = problem.sample_rows();
    let reference = problem.reference(&rows);
    case.checked_rows = rows.clone();
    let tol = tolerance(dtype);
    let ours = T::fused(*epi);
    let mut unfused_out: Option<Vec<T>> = None;
    let mut results = Vec::new();
    // The unfused path first: ours is compared with its output.
    for kind in [PathKind::Unfused, PathKind::Cublaslt, PathKind::Ours] {
        pb.set_message(format!("{} {} {}", shape.name, epi.name(), kind.name()));
        let unavailable = match kind {
            PathKind::Ours if ours.is_none() => Some(format!(
                "no fused kernel plugged in for {} ({})",
                epi.name(),
                dtype.name()
            )),
            PathKind::Cublaslt | PathKind::Unfused if lt.is_none() => {
                Some("cuBLASLt not available".to_owned())
            }
            PathKind::Cublaslt | PathKind::Unfused if plans.is_none() => {
                Some("no cuBLASLt plan".to_owned())
            }
            _ => None,
        };
        if let Some(note) = unavailable {
            results.push(PathResult::without_timing(
                kind,
                Status::NotAvailable,
                computes(kind),
                note,
            ));
            pb.inc(1);
            continue;
        }
        let mut r = PathResult::without_timing(kind, Status::Ok, computes(kind), String::new());
        let checked = check(
            kind,
            gpu,
            lt.as_deref_mut(),
            plans.as_ref(),
            ours,
            &mut problem,
            &rows,
            &reference,
        );
        let c = match checked {
            Ok(c) => c,
            Err(e) => {
                r.status = Status::Error;
                r.note = format!("first run failed: {e}");
                results.push(r);
                pb.inc(1);
                continue;
            }
        };
        r.err_vs_reference = Some(c.err_ref);
        let mut wrong = Vec::new();
        if c.nonfinite > 0 {
            wrong.push(format!("{} outputs not written or not finite", c.nonfinite));
        }
        if c.err_ref.is_nan() || c.err_ref > tol {
            wrong.push(format!(
                "error {:.2e} vs the f64 reference exceeds {tol:.0e}",
                c.err_ref
            ));
        }
        if kind == PathKind::Ours
            && let Some(u) = &unfused_out
        {
            let (e, _) = rel_error_between(&c.out, u);
            r.err_vs_unfused = Some(e);
            if e.is_nan() || e > 2.0 * tol {
                wrong.push(format!(
                    "differs from the unfused path by {e:.2e} (> {:.0e})",
                    2.0 * tol
                ));
            }
        }
        if kind == PathKind::Unfused && wrong.is_empty() {
            unfused_out = Some(c.out);
        }
        if !wrong.is_empty() {
            r.status = Status::Wrong;
            r.note = format!("not timed: {}", wrong.join("; "));
            results.push(r);
            pb.inc(1);
            continue;
        }
        let nsets = problem.sets.len();
        let timed = time_gpu(gpu, &cfg.timing, |i| {
            launch(
                kind,
                gpu,
                lt.as_deref_mut(),
                plans.as_ref(),
                ours,
                *epi,
                (m, n, k),
                &mut problem.sets[i % nsets],
            )
        });
        match timed {
            Ok(t) => r.timing = Some(t.summary),
            Err(e) => {
                r.status = Status::Error;
                r.note = format!("timing failed: {e}");
            }
        }
        results.push(r);
        pb.inc(1);
    }
    // Table order: ours, cuBLASLt, unfused.
    results.sort_by_key(|r| PathKind::ALL.iter().position(|&k| k == r.path));
    case.paths = results;
    case.derive();
    case
}

/// One line per case for the log.
pub fn summary_line(c: &CaseResult) -> String {
    let parts: Vec<String> = c
        .paths
        .iter()
        .map(|p| match (p.status, p.timing) {
            (Status::Ok, Some(t)) => format!("{} {:.4} ms", p.path.name(), t.median_ms),
            (Status::NotAvailable, _) => format!("{} n/a", p.path.name()),
            (Status::Wrong, _) => format!("{} WRONG", p.path.name()),
            _ => format!("{} error", p.path.name()),
        })
        .collect();
    format!(
        "{} {} ({}×{}×{}): {}",
        c.shape,
        c.epilogue.name(),
        c.m,
        c.n,
        c.k,
        parts.join(" · ")
    )
}

/// Runs every case of `cfg` in order; `lt` is the cuBLASLt handle, if the library loaded.
pub fn run_all<T: BenchElement>(
    gpu: &Gpu,
    cfg: &RunConfig,
    mut lt: Option<&mut Lt>,
    pb: &ProgressBar,
) -> Vec<CaseResult> {
    let mut out = Vec::with_capacity(cfg.cases.len());
    for (i, case) in cfg.cases.iter().enumerate() {
        let r = run_case::<T>(gpu, cfg, i, case, lt.as_deref_mut(), pb);
        let line = summary_line(&r);
        pb.suspend(|| eprintln!("{line}"));
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes;

    #[test]
    fn cases_use_natural_or_given_epilogues() {
        let t = shapes::table();
        let s = shapes::select(
            &t,
            &["anchor.bert-ffn-up".into(), "llama3-8b.gate-up.m128".into()],
        )
        .unwrap();
        let natural = cases(&s, None);
        let names: Vec<(String, Epilogue)> =
            natural.iter().map(|(s, e)| (s.name.clone(), *e)).collect();
        assert_eq!(
            names,
            vec![
                ("llama3-8b.gate-up.m128".into(), Epilogue::Swiglu),
                ("anchor.bert-ffn-up".into(), Epilogue::BiasGelu),
                ("anchor.bert-ffn-up".into(), Epilogue::BiasResidualLayernorm),
            ]
        );
        let given = cases(&s, Some(&[Epilogue::Bias, Epilogue::RmsnormScale]));
        assert_eq!(given.len(), 4);
        assert!(
            given
                .iter()
                .all(|(_, e)| matches!(e, Epilogue::Bias | Epilogue::RmsnormScale))
        );
    }

    #[test]
    fn summary_line_names_every_path() {
        let r = crate::report::tests::sample();
        let l = summary_line(&r.cases[1]);
        assert!(
            l.starts_with("llama3-8b.gate-up.m128 swiglu (4096×3072×768)"),
            "{l}"
        );
        assert!(l.contains("ours n/a") && l.contains("cublaslt 0.0400 ms"));
    }
}
