//! The launcher behind every `#[fused_gemm]` kernel: validate, choose the mainloop and plan,
//! provide workspaces, launch. Decisions made with default options are cached per kernel and
//! problem class, so a repeated launch plans nothing.

use std::collections::HashMap;
use std::sync::Mutex;

use fused_gemm_device::gemm::{TileShape, is_row_tile};
use fused_gemm_device::params::KernelParam;
use fused_gemm_device::types::DType;

use super::entry::{GemmParams, Kernel};
use super::norm_finish::{launch_norm_finish, norm_finish_grid};
use super::report::LaunchReport;
use super::workspace::{grow, row_stats};
use crate::kernel::{GemmKernelSpec, KernelVariant};
use crate::options::LaunchOptions;
use crate::plan::{Plan, Planner, Problem};
use crate::validate::{BLayout, Checked, GemmCall, Work, check_gemm};
use crate::{Error, Gpu, Result};

/// Launches a fused GEMM described by `call`: `C = epilogue(A·B)`.
///
/// `build(stats)` returns the epilogue's parameters and, when the spec has a row norm, the
/// finishing kernel's (norm, post-stage) parameters; `stats` is the device address of the
/// row-statistics workspace, or 0 when the plan finishes the norm in the CTA. It is called once
/// per launch, and, when an autotuner measures the Hopper candidates, once per launch it makes
/// or records in a graph while doing so.
///
/// The launch follows `gpu`'s [`LaunchOptions`] ([`Gpu::with_options`]) and returns what ran: the
/// variant, its mainloop and plan, and why that mainloop ([`LaunchReport`]); a report without a
/// variant when M or N is 0 (nothing to do).
///
/// `spec` is a static (what `#[fused_gemm]` generates): the device caches the kernel's functions
/// and decisions under its address.
///
/// # Errors
/// Validation errors naming the operand ([`check_gemm`]); [`Error::Misaligned`] when operands
/// need the bounds-checked path and the kernel was compiled without it; planning and driver
/// errors.
pub fn launch<P, N, Q>(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    call: &GemmCall<'_>,
    build: impl Fn(u64) -> (P, Option<(N, Q)>),
) -> Result<LaunchReport>
where
    P: KernelParam,
    N: KernelParam,
    Q: KernelParam,
{
    let checked = check_gemm(call)?;
    if checked.work == Work::Empty {
        return Ok(LaunchReport::nothing(spec.name));
    }
    let (variant, plan, why) = match decide(gpu, spec, call, &checked)? {
        Decision::Sm90(candidates, why) => {
            let (variant, plan) =
                super::tune::pick_sm90(gpu, spec, call, &checked, candidates, &build)?;
            return super::sm90::launch(gpu, spec, call, &checked, variant, plan, build, why);
        }
        Decision::Sm80(variant, plan, why) => (variant, plan, why),
    };

    let function = spec.resolve(gpu, variant, &plan.norm)?;
    // The GEMM and its finishing kernel are queued as one: see `Gpu::queue_lock`.
    let _queued = gpu.queue_lock();
    let cell = gpu.workspace();
    let mut ws = cell
        .lock()
        .map_err(|_| Error::LaunchLimit("GEMM workspace lock poisoned".into()))?;
    let (workspace, counters) = if plan.splits > 1 {
        let p = grow(gpu, &mut ws.partials, plan.workspace_bytes)?;
        let c = grow(gpu, &mut ws.counters, plan.counter_bytes)?;
        (p, c)
    } else {
        (0, 0)
    };
    let (stats, tiles_n) = row_stats(gpu, &mut ws, &plan.norm)?;
    // Checked before the GEMM writes C.
    let finish_grid = (stats != 0)
        .then(|| norm_finish_grid::<Q>(gpu, spec, call, &checked))
        .transpose()?;
    let (params, finish) = build(stats);

    let args = GemmParams {
        args: plan.gemm_args(&checked, call, workspace, counters),
        epilogue: params,
    };
    // SAFETY: `#[fused_gemm]` declares the sm_80 variants with (GemmArgs, E::Params), and the
    // launcher it generates passes `E::Params` as `P`.
    let kernel = unsafe { Kernel::<GemmParams<P>>::from_function(function) };
    let cfg = plan.launch_shape().prepare(&kernel, gpu.props())?;
    // SAFETY: `check_gemm` validated every operand against the shapes the kernel reads and
    // writes, and the workspaces were sized by the plan.
    unsafe { kernel.launch(gpu, cfg, &args) }?;

    let mut report = LaunchReport::ran(spec.name, variant, plan, why);
    if let Some(shape) = finish_grid {
        report.finish_dependent =
            launch_norm_finish(gpu, spec, call, &checked, tiles_n, shape, finish)?;
    }
    Ok(report)
}

/// What a launch decides before its operands' addresses matter: the mainloop, and the plan or
/// the Hopper path's candidates.
#[derive(Clone, Debug)]
enum Decision {
    /// The Hopper path's candidates, the model's fastest first, and why this path.
    Sm90(Vec<(&'static KernelVariant, Plan)>, String),
    /// The sm_80 path's variant and plan, and why not the Hopper path.
    Sm80(&'static KernelVariant, Plan, String),
}

/// Everything [`decide`] depends on besides the kernel: the problem as planned and the
/// operands' alignment class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ProblemClass {
    kernel: usize,
    mnk: (u32, u32, u32),
    dtypes: (DType, DType),
    b_layout: BLayout,
    pairs: bool,
    row_norm: bool,
    epilogue_read_bits: u64,
    vector: (bool, bool),
    epilogue_tma: bool,
    work: Work,
}

/// The decisions of a device's launches made with default options, per kernel and
/// [`ProblemClass`] ([`Gpu::state`]): a repeated launch skips planning. Emptied when it holds
/// [`Self::CAPACITY`] entries (shapes that vary without end, such as sequence lengths).
#[derive(Default)]
struct Decisions(Mutex<HashMap<ProblemClass, Decision>>);

impl Decisions {
    const CAPACITY: usize = 4096;
}

/// The mainloop and plan for `call`: from the device's cache when the handle has default
/// options, else (and on a miss) from the planners.
fn decide(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    call: &GemmCall<'_>,
    checked: &Checked,
) -> Result<Decision> {
    if !gpu.options().is_default() {
        return plan_decision(gpu, spec, call, checked);
    }
    let p = Problem::from_call(call, checked, spec.accumulate);
    let key = ProblemClass {
        kernel: spec as *const GemmKernelSpec as usize,
        mnk: (p.m, p.n, p.k),
        dtypes: (p.in_dtype, p.out_dtype),
        b_layout: p.b_layout,
        pairs: p.pairs,
        row_norm: p.row_norm,
        epilogue_read_bits: p.epilogue_read_bytes_per_output.to_bits(),
        vector: (p.vector, checked.vector.mainloop()),
        epilogue_tma: p.epilogue_tma,
        work: checked.work,
    };
    let cache = gpu.state::<Decisions>();
    if let Some(d) = cache.0.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(d.clone());
    }
    let d = plan_decision(gpu, spec, call, checked)?;
    let mut map = cache.0.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() >= Decisions::CAPACITY {
        map.clear();
    }
    map.insert(key, d.clone());
    Ok(d)
}

/// [`decide`] without the cache.
fn plan_decision(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    call: &GemmCall<'_>,
    checked: &Checked,
) -> Result<Decision> {
    let why = match super::sm90::choose(gpu, spec, call, checked)? {
        super::sm90::Choice::Sm90(candidates, why) => return Ok(Decision::Sm90(candidates, why)),
        super::sm90::Choice::Sm80(why) => why,
    };
    let mut vec = checked.vector.mainloop();
    if !vec && !spec.variants.iter().any(|v| !v.vec) {
        checked.require_vector()?;
    }
    if vec && !spec.variants.iter().any(|v| v.vec) {
        vec = false;
    }
    let plan = choose(
        &spec.planner(gpu, vec),
        &Problem::from_call(call, checked, spec.accumulate),
        gpu.options(),
    )?;
    let variant = spec.variant(&plan.tile, vec).ok_or_else(|| {
        Error::LaunchLimit(format!(
            "`{}` has no compiled variant for tile {:?}",
            spec.name, plan.tile
        ))
    })?;
    Ok(Decision::Sm80(variant, plan, why))
}

/// The sm_80 path's plan for `problem`: the planner's, or the fastest predicted that matches
/// the tile and split-K factor `o` forces.
fn choose(planner: &Planner, problem: &Problem, o: &LaunchOptions) -> Result<Plan> {
    let no_match = || Error::LaunchLimit(format!("no launchable plan matches the options {o:?}"));
    match (o.tile, o.splits) {
        (None, None) => planner.plan(problem),
        // A forced tile bypasses the planner's preference for row-spanning tiles, so tests and
        // sweeps can reach the partial-statistics path too.
        (Some(t), Some(s)) => planner.evaluate(problem, &t, s).ok_or_else(no_match),
        (Some(t), None) => {
            let (tiles, rows): (&[TileShape], &[TileShape]) = if is_row_tile(&t) {
                (&[], &[t])
            } else {
                (&[t], &[])
            };
            planner
                .clone()
                .with_tiles(tiles, rows)
                .plan(problem)
                .map_err(|_| no_match())
        }
        (None, Some(s)) => planner
            .candidates(problem)?
            .into_iter()
            .find(|p| p.splits == s)
            .ok_or_else(no_match),
    }
}
