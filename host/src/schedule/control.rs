//! Device-side control flow (Grinder, published as Cocktailer: Zhang et al., "Cocktailer:
//! Analyzing and Optimizing Dynamic Control Flow in Deep Learning", OSDI'23): a loop whose body
//! is a small graph of fused-GEMM operators runs inside one persistent launch, and gates
//! computed on the device skip guarded operators with no host round trip.
//!
//! # Use
//! 1. Describe the body with a function from the iteration index to its operators
//!    ([`BodyOp`]: an [`OpSpec`] at that iteration, an optional guard naming a gate operator of
//!    the body, and the residual to copy when skipped). [`LoopBody::new`] calls it for the first
//!    iterations and the last, derives each operator's per-iteration address strides and
//!    checks they are affine (iteration `it` = iteration 0 + `it`·stride), and finds the
//!    dependencies within an iteration and between consecutive iterations (through memory, as
//!    [`WaveGraph`] does).
//! 2. [`plan_loop`] schedules one iteration with the wave scheduler (one persistent program)
//!    ([`plan_loop_tuned`] picks among the model's plan and uniform tile/split-K choices by
//!    timing them on the device) and encodes the loop tables: epoch-indexed waits, the self-wait per task, per-operator
//!    strides and guards ([`fused_gemm_device::kernel::control`] has the device side and the
//!    deadlock argument). [`simulate`] replays a plan on the CPU under adversarial CTA
//!    interleavings and checks that it finishes and that every task starts after its
//!    producers.
//! 3. [`ControlRunner`] uploads a plan and launches it for a trip count given on the host or
//!    read from device memory; [`HostDriven`] runs the same operators the way a framework does:
//!    one launch per operator per step, reading each predicate back with a sync before deciding.

use std::collections::BTreeSet;

use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig};
use fused_gemm_device::gemm::GemmArgs;
use fused_gemm_device::kernel::control::{
    GATE_SMEM_BYTES, GateParams, LoopArgs, LoopTask, LoopWait, OpLoop,
};
use fused_gemm_device::kernel::persistent::{EPI_WORDS, INLINE_WAITS};
use serde::Serialize;

use super::dag::{Dep, DepRows, OpSpec, Region, WaveGraph, producer_rows};
use super::family::{EpiWords, Family};
use super::table::{SplitScratch, gemm_args, split_scratch_bytes};
use super::waves::{FixedArms, Program, ScheduleOptions, VDevice, Variant, schedule};
use crate::gpu::DeviceProps;
use crate::launch::{GemmParams, Kernel, LaunchShape};
use crate::tensor::MatrixDesc;
use crate::{Error, Gpu, Result};

/// The kind name of gate operators (the family's gate arm).
pub const GATE_KIND: &str = "gate";

/// One operator of a loop or branch body, at one iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct BodyOp {
    /// The operator (for a gate: kind [`GATE_KIND`], `args.a` the M×K input, `args.b` the 1×K
    /// gate vector, `args.c` two `u32` (predicate, gate value), epilogue words a
    /// [`GateParams`]; its only write region is the predicate).
    pub spec: OpSpec,
    /// Index (in the body) of the gate whose predicate guards this operator.
    pub guard: Option<usize>,
    /// Residual copied to C (same shape and dtype as C) when the guard skips the operator.
    pub skip_copy: Option<MatrixDesc>,
}

/// Per-iteration address strides of one operator (bytes; see [`OpLoop`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Strides {
    /// A.
    pub a: i64,
    /// C.
    pub c: i64,
    /// Each epilogue word.
    pub epi: [i64; EPI_WORDS],
    /// The skip copy's source.
    pub copy: i64,
}

/// A loop body: its operators at iteration 0, their strides, and its dependencies.
#[derive(Clone, Debug)]
pub struct LoopBody {
    /// Operators at iteration 0, in program order.
    pub ops: Vec<BodyOp>,
    /// Per operator, its strides.
    pub strides: Vec<Strides>,
    /// Iterations the buffers hold (the largest trip count a launch may ask for).
    pub max_trips: u32,
    /// One iteration (guarded operators read their predicate's region).
    pub graph: WaveGraph,
    /// Two consecutive iterations: operators `n..2n` are iteration 1's.
    pub graph2: WaveGraph,
}

fn diff(a: u64, b: u64) -> i64 {
    b.wrapping_sub(a) as i64
}

/// The body's graph over `ops`: each guarded operator also reads its gate's predicate.
fn add_ops(g: &mut WaveGraph, ops: &[BodyOp]) -> Result<()> {
    for (i, op) in ops.iter().enumerate() {
        let mut spec = op.spec.clone();
        if let Some(gi) = op.guard {
            let gate = ops.get(gi).filter(|_| gi < i).ok_or_else(|| {
                Error::invalid(
                    "guard",
                    "the index of an earlier gate operator of the body",
                    format!("{gi} for `{}` (operator {i})", op.spec.name),
                )
            })?;
            if gate.spec.kind != GATE_KIND || gate.spec.writes.len() != 1 {
                return Err(Error::invalid(
                    "guard",
                    format!("a `{GATE_KIND}` operator writing one predicate region"),
                    format!("`{}` ({})", gate.spec.name, gate.spec.kind),
                ));
            }
            // Guarded tasks evaluate the gate themselves: they read what the gate reads.
            spec.reads.extend(gate.spec.reads.iter().cloned());
        }
        if let Some(src) = &op.skip_copy {
            if op.guard.is_none() {
                return Err(Error::invalid(
                    "skip_copy",
                    "a guarded operator",
                    format!("`{}` has no guard", op.spec.name),
                ));
            }
            let c = &op
                .spec
                .writes
                .first()
                .ok_or_else(|| {
                    Error::invalid(
                        "skip_copy",
                        "an operator writing C (its first write region) to copy into",
                        format!("`{}` writes nothing", op.spec.name),
                    )
                })?
                .desc;
            if (src.rows, src.cols, src.dtype) != (c.rows, c.cols, c.dtype) {
                return Err(Error::shape(
                    "skip_copy",
                    format!("C's {} {:?}", c.shape_str(), c.dtype),
                    format!("{} {:?}", src.shape_str(), src.dtype),
                ));
            }
            spec.reads.push(Region::rows(*src));
        }
        g.add(spec)?;
    }
    Ok(())
}

impl LoopBody {
    /// Builds the body from `at(it)`, the operators at iteration `it`, called for iterations
    /// 0, 1, 2 (those below `max_trips`) and `max_trips − 1` (which also validates the last
    /// iteration's operands).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `max_trips` = 0, an empty body, iterations that differ
    /// in anything but affinely moving addresses (operator count, kinds, shapes, B, guards,
    /// strides changing from one iteration to the next), a guard not naming an earlier gate,
    /// a skip copy on an unguarded operator or on one without a write region, a dependency
    /// reaching back two iterations; [`Error::ShapeMismatch`] for a skip copy unlike C;
    /// whatever `at` or [`WaveGraph::add`] return.
    pub fn new(max_trips: u32, at: &mut dyn FnMut(u32) -> Result<Vec<BodyOp>>) -> Result<Self> {
        if max_trips == 0 {
            return Err(Error::invalid("max_trips", "at least 1", 0));
        }
        let its: Vec<u32> = (0..max_trips.min(3)).collect();
        let iters: Vec<Vec<BodyOp>> = its.iter().map(|&i| at(i)).collect::<Result<_>>()?;
        let ops = iters[0].clone();
        if ops.is_empty() {
            return Err(Error::invalid("body", "at least one operator", 0));
        }
        for (it, v) in iters.iter().enumerate().skip(1) {
            if v.len() != ops.len() {
                return Err(Error::invalid(
                    "body",
                    format!("{} operators at every iteration", ops.len()),
                    format!("{} at iteration {it}", v.len()),
                ));
            }
        }
        let mut strides = vec![Strides::default(); ops.len()];
        for (j, op) in ops.iter().enumerate() {
            let s = &mut strides[j];
            if let Some(o1) = iters.get(1).map(|v| &v[j]) {
                s.a = diff(op.spec.args.a, o1.spec.args.a);
                s.c = diff(op.spec.args.c, o1.spec.args.c);
                for w in 0..EPI_WORDS {
                    s.epi[w] = diff(op.spec.epi[w], o1.spec.epi[w]);
                }
                if let (Some(x), Some(y)) = (&op.skip_copy, &o1.skip_copy) {
                    s.copy = diff(x.ptr, y.ptr);
                }
            }
            for (it, v) in iters.iter().enumerate().skip(1) {
                let o = &v[j];
                let it = it as i64;
                let moved = |a: u64, stride: i64| a.wrapping_add((it * stride) as u64);
                let (p0, p) = (&op.spec.args, &o.spec.args);
                let same = o.spec.kind == op.spec.kind
                    && o.guard == op.guard
                    && o.skip_copy.is_some() == op.skip_copy.is_some()
                    && (p.b, p.m, p.n, p.k, p.lda, p.ldb, p.ldc)
                        == (p0.b, p0.m, p0.n, p0.k, p0.lda, p0.ldb, p0.ldc)
                    && p.a == moved(p0.a, s.a)
                    && p.c == moved(p0.c, s.c)
                    && (0..EPI_WORDS).all(|w| o.spec.epi[w] == moved(op.spec.epi[w], s.epi[w]))
                    && match (&op.skip_copy, &o.skip_copy) {
                        (Some(x), Some(y)) => y.ptr == moved(x.ptr, s.copy) && y.ld == x.ld,
                        _ => true,
                    };
                if !same {
                    return Err(Error::invalid(
                        "body",
                        "iterations that differ only in addresses moving by a fixed stride",
                        format!("operator {j} (`{}`) at iteration {it}", o.spec.name),
                    ));
                }
            }
        }
        if max_trips > 3 {
            // Validates the last iteration's operands (at returns typed errors).
            let last = at(max_trips - 1)?;
            if last.len() != ops.len() {
                return Err(Error::invalid(
                    "body",
                    format!("{} operators at every iteration", ops.len()),
                    format!("{} at iteration {}", last.len(), max_trips - 1),
                ));
            }
        }
        let mut graph = WaveGraph::new();
        add_ops(&mut graph, &ops)?;
        let mut graph2 = WaveGraph::new();
        add_ops(&mut graph2, &ops)?;
        if let Some(o1) = iters.get(1) {
            add_ops(&mut graph2, o1)?;
        }
        if let Some(o2) = iters.get(2) {
            let mut g3 = graph2.clone();
            add_ops(&mut g3, o2)?;
            let n = ops.len();
            if let Some(d) = g3
                .deps()
                .iter()
                .find(|d| d.consumer >= 2 * n && d.producer < n)
            {
                return Err(Error::invalid(
                    "body",
                    "dependencies only within an iteration or on the previous one",
                    format!(
                        "operator {} reads or overwrites memory of operator {} two iterations back",
                        d.consumer - 2 * n,
                        d.producer
                    ),
                ));
            }
        }
        Ok(LoopBody {
            ops,
            strides,
            max_trips,
            graph,
            graph2,
        })
    }
}

/// A loop program ready to encode and launch.
/// What a [`LoopPlan`] depends on in its body, without the addresses: per operator its kind,
/// guard, skip copy, GEMM shape (M, N, K, batch stride and leading dimensions) and
/// per-iteration strides, the dependencies within an iteration and on the previous one, and
/// `max_trips`. Two bodies with equal signatures can share a plan (the plan cache's premise);
/// [`ControlRunner::new`] and [`HostDriven::new`] refuse a body whose signature differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodySignature {
    ops: Vec<OpSignature>,
    deps: Vec<Dep>,
    deps2: Vec<Dep>,
    max_trips: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct OpSignature {
    kind: String,
    guard: Option<usize>,
    skip_copy_ld: Option<usize>,
    /// M, N, K, lda, ldb, ldc.
    dims: [u64; 6],
    strides: Strides,
}

impl LoopBody {
    /// The body's [`BodySignature`].
    pub fn signature(&self) -> BodySignature {
        BodySignature {
            ops: self
                .ops
                .iter()
                .zip(&self.strides)
                .map(|(op, s)| {
                    let a = &op.spec.args;
                    OpSignature {
                        kind: op.spec.kind.to_string(),
                        guard: op.guard,
                        skip_copy_ld: op.skip_copy.map(|c| c.ld),
                        dims: [
                            a.m as u64,
                            a.n as u64,
                            a.k as u64,
                            a.lda as u64,
                            a.ldb as u64,
                            a.ldc as u64,
                        ],
                        strides: *s,
                    }
                })
                .collect(),
            deps: self.graph.deps().to_vec(),
            deps2: self.graph2.deps().to_vec(),
            max_trips: self.max_trips,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct LoopPlan {
    /// Per operator, its variant (arm, splits, tiles).
    pub variants: Vec<Variant>,
    /// Persistent CTAs.
    pub ctas: u32,
    /// vEUs per SM the placement assumed.
    pub ctas_per_sm: u32,
    /// One iteration's tasks, CTA by CTA.
    pub tasks: Vec<LoopTask>,
    /// `ctas + 1` offsets into `tasks`.
    pub cta_offsets: Vec<u32>,
    /// Overflow waits.
    pub overflow: Vec<LoopWait>,
    /// Per operator, the device's [`OpLoop`].
    pub ops: Vec<OpLoop>,
    /// Ready counters (the done counter follows).
    pub counters: u32,
    /// Largest trip count.
    pub max_trips: u32,
    /// Model time of one iteration, µs.
    pub iteration_us: f64,
    /// The planned body's signature: the plan serves every body with this signature.
    pub signature: BodySignature,
}

impl LoopPlan {
    /// Checks that `body` has the signature this plan was made for.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the first difference.
    pub fn check_body(&self, body: &LoopBody) -> Result<()> {
        let got = body.signature();
        if got == self.signature {
            return Ok(());
        }
        let (want, got) = (&self.signature, &got);
        let what = if want.max_trips != got.max_trips {
            format!(
                "max_trips {} (planned for {})",
                got.max_trips, want.max_trips
            )
        } else if want.ops.len() != got.ops.len() {
            format!(
                "{} operators (planned for {})",
                got.ops.len(),
                want.ops.len()
            )
        } else if let Some(j) = (0..want.ops.len()).find(|&j| want.ops[j] != got.ops[j]) {
            format!(
                "operator {j} (`{}`) differs in shape, guard or strides",
                body.ops[j].spec.name
            )
        } else {
            "the dependencies between operators differ".to_string()
        };
        Err(Error::invalid(
            "body",
            "the body the plan was made for, up to addresses",
            what,
        ))
    }

    /// The tasks and per-operator tables with `body`'s addresses (and gate thresholds), split-K
    /// scratch per operator from `scratch`.
    fn bind(
        &self,
        body: &LoopBody,
        scratch: &[SplitScratch],
    ) -> Result<(Vec<LoopTask>, Vec<OpLoop>)> {
        self.check_body(body)?;
        let tasks = self
            .tasks
            .iter()
            .map(|t| {
                let j = t.op as usize;
                LoopTask {
                    args: gemm_args(&body.graph, j, &self.variants[j], scratch[j]),
                    epi: body.ops[j].spec.epi,
                    ..*t
                }
            })
            .collect();
        Ok((tasks, op_loops(body, &self.variants)))
    }

    /// Tasks per iteration.
    pub fn tasks_per_iteration(&self) -> usize {
        self.tasks.len()
    }
}

/// Options of [`plan_loop`]: the wave scheduler's, with merging forced on (one program) and
/// the fall-back to plain launches off.
pub fn loop_options(body: &LoopBody, family: &Family, base: &ScheduleOptions) -> ScheduleOptions {
    let gate_arm = family.arms_of(GATE_KIND).next().map(|(i, _)| i);
    let mut o = base.clone();
    o.merge = true;
    o.fallback = false;
    // A launch inside the loop does not exist: merging is always right.
    o.roofline.launch_us = base.roofline.launch_us.max(1e6);
    o.fixed.resize(body.ops.len(), None);
    for (j, op) in body.ops.iter().enumerate() {
        if op.spec.kind == GATE_KIND {
            o.fixed[j] = gate_arm.map(|a| (a, 1));
        }
    }
    o
}

/// The row-block waits of consumer rows `r0..r1` on `producer` under `rows`.
fn block_waits(
    rows: &DepRows,
    r0: u32,
    r1: u32,
    pm: u32,
    pv: &Variant,
    base: u32,
    target: u32,
) -> Vec<LoopWait> {
    let mut blocks = vec![false; pv.tiles_m as usize];
    for (lo, hi) in producer_rows(rows, r0, r1, pm) {
        for b in lo / pv.tile.bm..=(hi - 1) / pv.tile.bm {
            blocks[b as usize] = true;
        }
    }
    let mut out = Vec::new();
    let mut b = 0;
    while b < blocks.len() {
        if !blocks[b] {
            b += 1;
            continue;
        }
        let first = b;
        while b < blocks.len() && blocks[b] {
            b += 1;
        }
        out.push(LoopWait {
            first: base + first as u32,
            count: (b - first) as u32,
            target,
            step: pv.tasks_per_row_block(),
        });
    }
    out
}

/// Schedules one iteration of `body` on `family` as one persistent program and encodes the
/// loop tables (see the [module docs](self)).
///
/// # Errors
/// [`Error::LaunchLimit`] when the family lacks a gate arm the body needs, an operator has no
/// launchable variant, or the scheduler splits the body into several programs;
/// [`Error::TooLarge`] when tasks × `max_trips` or a table index exceeds 32 bits, or the
/// vDevice has more than [`super::waves::MAX_VEUS`] vEUs; [`Error::InvalidArgument`] for an
/// inconsistent family.
pub fn plan_loop(
    body: &LoopBody,
    family: &Family,
    props: &DeviceProps,
    vdev: VDevice,
    base: &ScheduleOptions,
) -> Result<LoopPlan> {
    let opts = loop_options(body, family, base);
    for (j, op) in body.ops.iter().enumerate() {
        if op.spec.kind == GATE_KIND && opts.fixed[j].is_none() {
            return Err(Error::LaunchLimit(format!(
                "`{}` has no `{GATE_KIND}` arm for `{}`",
                family.entry, op.spec.name
            )));
        }
    }
    let s = schedule(&body.graph, family, props, vdev, &opts)?;
    let prog = match s.programs.as_slice() {
        [Program::Persistent(p)] => p,
        other => {
            return Err(Error::LaunchLimit(format!(
                "the loop body must be one persistent program, the scheduler made {} programs",
                other.len()
            )));
        }
    };
    let n = body.ops.len();
    let vars = &s.variants;
    let mut base_of = vec![0u32; n];
    let mut counters = 0u32;
    for j in 0..n {
        base_of[j] = counters;
        counters += vars[j].tiles_m;
    }
    let too_large = |what: &'static str, v: u64| Error::TooLarge {
        arg: what,
        max: u32::MAX as u64,
        actual: v,
    };
    let total = prog.tasks.len() as u64 * body.max_trips as u64;
    if total > u32::MAX as u64 {
        return Err(too_large("tasks × max_trips", total));
    }
    let mut tasks = Vec::with_capacity(prog.tasks.len());
    let mut offsets = Vec::with_capacity(prog.cta_lists.len() + 1);
    let mut overflow: Vec<LoopWait> = Vec::new();
    for list in &prog.cta_lists {
        offsets.push(tasks.len() as u32);
        for &i in list {
            let t = &prog.tasks[i];
            let v = &vars[t.op];
            let m = body.ops[t.op].spec.problem.m;
            let (r0, r1) = (t.tile_m * v.tile.bm, ((t.tile_m + 1) * v.tile.bm).min(m));
            let mut waits: Vec<LoopWait> = Vec::new();
            for d in body.graph.deps_of(t.op) {
                let pv = &vars[d.producer];
                let pm = body.ops[d.producer].spec.problem.m;
                let tpr = pv.tasks_per_row_block();
                waits.extend(block_waits(
                    &d.rows,
                    r0,
                    r1,
                    pm,
                    pv,
                    base_of[d.producer],
                    tpr,
                ));
            }
            for d in body.graph2.deps_of(t.op + n) {
                if d.producer >= n {
                    continue;
                }
                let pv = &vars[d.producer];
                let pm = body.ops[d.producer].spec.problem.m;
                waits.extend(block_waits(&d.rows, r0, r1, pm, pv, base_of[d.producer], 0));
            }
            // The self-wait: this row block finished the previous iteration.
            waits.push(LoopWait {
                first: base_of[t.op] + t.tile_m,
                count: 1,
                target: 0,
                step: v.tasks_per_row_block(),
            });
            let mut seen = BTreeSet::new();
            waits.retain(|w| seen.insert((w.first, w.count, w.target, w.step)));
            let mut inline = [LoopWait::default(); INLINE_WAITS];
            for (a, b) in inline.iter_mut().zip(&waits) {
                *a = *b;
            }
            let waits_overflow = u32::try_from(overflow.len())
                .map_err(|_| too_large("waits", overflow.len() as u64))?;
            overflow.extend(waits.iter().skip(INLINE_WAITS).copied());
            tasks.push(LoopTask {
                args: gemm_args(&body.graph, t.op, v, SplitScratch::default()),
                arm: v.arm as u32,
                tile_m: t.tile_m,
                tile_n: t.tile_n,
                split: t.split,
                tiles_n: v.tiles_n,
                signal: base_of[t.op] + t.tile_m,
                n_waits: waits.len() as u32,
                waits_overflow,
                waits: inline,
                epi: body.ops[t.op].spec.epi,
                op: t.op as u32,
                _pad: 0,
            });
        }
    }
    offsets.push(tasks.len() as u32);
    let ops = op_loops(body, vars);
    Ok(LoopPlan {
        variants: s.variants.clone(),
        ctas: prog.ctas,
        ctas_per_sm: prog.ctas_per_sm,
        tasks,
        cta_offsets: offsets,
        overflow,
        ops,
        counters,
        max_trips: body.max_trips,
        iteration_us: prog.makespan_us,
        signature: body.signature(),
    })
}

/// Every uniform variant choice for `body` on `family`: per tile shape (BM×BN) of its non-gate
/// arms and split-K factor 1, 2, 4 or 8, a label (`"16x64 s2"`) and, per operator, the arm of
/// its kind with that tile and the factor (`None` where its kind has no such arm), for
/// [`ScheduleOptions::fixed`]. Some choices cannot be planned (e.g. more splits than K
/// allows); [`plan_loop`] says so.
pub fn uniform_variants(body: &LoopBody, family: &Family) -> Vec<(String, FixedArms)> {
    let mut tiles: Vec<_> = family
        .arms
        .iter()
        .filter(|a| a.kind != GATE_KIND)
        .map(|a| (a.tile.bm, a.tile.bn))
        .collect();
    tiles.sort_unstable();
    tiles.dedup();
    let mut out = Vec::new();
    for &(bm, bn) in &tiles {
        for splits in [1u32, 2, 4, 8] {
            let fixed = body
                .ops
                .iter()
                .map(|op| {
                    family
                        .arms_of(op.spec.kind)
                        .find(|(_, a)| (a.tile.bm, a.tile.bn) == (bm, bn))
                        .map(|(i, _)| (i, splits))
                })
                .collect();
            out.push((format!("{bm}x{bn} s{splits}"), fixed));
        }
    }
    out
}

/// What [`plan_loop_tuned`] timed: per candidate, its label and median time of the timed
/// iterations, ms.
pub type TuneLog = Vec<(String, f32)>;

/// [`plan_loop`] with the choice made by measurement (a plan is specialized per case and
/// cached, so a one-time search is affordable): the model's plan and every uniform variant
/// (each non-gate operator on one tile shape of its kind with one split factor) are run on
/// `body` for `trips` iterations (`reps` times after a warm-up) and the fastest is returned,
/// with the log. The runs write `body`'s outputs, so `body` must not read what it writes from
/// an earlier run (true of loops that read only their inputs and previous iterations).
///
/// # Errors
/// As [`plan_loop`] for the model's plan (candidates that cannot be planned are skipped);
/// [`Error::InvalidArgument`] for 0 trips or reps; launch and driver errors.
pub fn plan_loop_tuned(
    gpu: &Gpu,
    body: &LoopBody,
    family: &Family,
    base: &ScheduleOptions,
    trips: u32,
    reps: usize,
) -> Result<(LoopPlan, TuneLog)> {
    if trips == 0 || reps == 0 {
        return Err(Error::invalid(
            "trips, reps",
            "both at least 1",
            format!("{trips}, {reps}"),
        ));
    }
    let trips = trips.min(body.max_trips);
    let vdev = super::exec::vdevice(gpu, family)?;
    let mut candidates = vec![(
        "model".to_string(),
        plan_loop(body, family, gpu.props(), vdev, base)?,
    )];
    for (label, fixed) in uniform_variants(body, family) {
        let opts = ScheduleOptions {
            fixed,
            ..base.clone()
        };
        if let Ok(p) = plan_loop(body, family, gpu.props(), vdev, &opts) {
            candidates.push((label, p));
        }
    }
    let mut log = Vec::with_capacity(candidates.len());
    let mut best: Option<(f32, LoopPlan)> = None;
    for (label, plan) in candidates {
        let runner = match ControlRunner::new(gpu, family, &plan, body) {
            Ok(r) => r,
            // More CTAs than are co-resident: not a candidate on this device.
            Err(Error::LaunchLimit(_)) => continue,
            Err(e) => return Err(e),
        };
        let ms = gpu.time_ms(1, reps, |g| runner.launch(g, Trips::Fixed(trips)))?;
        log.push((label, ms));
        if best.as_ref().is_none_or(|(b, _)| ms < *b) {
            best = Some((ms, plan));
        }
    }
    let (_, plan) = best.ok_or_else(|| {
        Error::LaunchLimit("no candidate loop plan fits the device's co-resident CTAs".into())
    })?;
    Ok((plan, log))
}

/// Per operator, the device's [`OpLoop`] (strides, guard, skip copy) with `body`'s addresses.
fn op_loops(body: &LoopBody, vars: &[Variant]) -> Vec<OpLoop> {
    body.ops
        .iter()
        .enumerate()
        .map(|(j, op)| {
            let st = &body.strides[j];
            let (gate, gate_a_stride, gate_threshold) = match op.guard {
                Some(g) => {
                    let spec = &body.ops[g].spec;
                    let threshold = read_gate(&spec.epi).threshold;
                    (spec.args, body.strides[g].a, threshold)
                }
                None => (GemmArgs::default(), 0, 0.0),
            };
            OpLoop {
                a_stride: st.a,
                c_stride: st.c,
                epi_stride: st.epi,
                gate,
                gate_a_stride,
                gate_threshold,
                _pad: 0,
                copy_src: op.skip_copy.map_or(0, |c| c.ptr),
                copy_stride: st.copy,
                copy_ld: op.skip_copy.map_or(0, |c| c.ld as u32),
                copy: op.skip_copy.is_some() as u32,
                bm: vars[j].tile.bm,
                bn: vars[j].tile.bn,
            }
        })
        .collect()
}

/// All waits of a task (inline then overflow).
fn task_waits(plan: &LoopPlan, t: &LoopTask) -> Vec<LoopWait> {
    (0..t.n_waits as usize)
        .map(|j| {
            if j < INLINE_WAITS {
                t.waits[j]
            } else {
                plan.overflow[t.waits_overflow as usize + j - INLINE_WAITS]
            }
        })
        .collect()
}

/// Replays `plan` for `trips` iterations on the CPU with the device's counter semantics: each
/// step, one CTA chosen by `pick` (from those whose next task's waits hold) runs its next task.
/// Checks that the program finishes (no deadlock: some CTA can always move) and that each task
/// starts only after every producer task its dependencies name (in `body`) finished, at the
/// right iteration.
///
/// # Errors
/// A description of the first violation.
pub fn simulate(
    body: &LoopBody,
    plan: &LoopPlan,
    trips: u32,
    pick: &mut dyn FnMut(usize) -> usize,
) -> std::result::Result<(), String> {
    let ctas = plan.cta_offsets.len() - 1;
    let n = body.ops.len();
    let mut counters = vec![0u32; plan.counters as usize];
    // done[(op, row block)] per iteration: finished tasks.
    let mut done: Vec<Vec<Vec<u32>>> = plan
        .variants
        .iter()
        .map(|v| vec![vec![0u32; trips as usize]; v.tiles_m as usize])
        .collect();
    let mut pos = vec![(0u32, 0u32); ctas]; // (iteration, index within the CTA's list)
    let list = |c: usize| plan.cta_offsets[c] as usize..plan.cta_offsets[c + 1] as usize;
    loop {
        let ready: Vec<usize> = (0..ctas)
            .filter(|&c| {
                let (it, k) = pos[c];
                if it >= trips || list(c).is_empty() {
                    return false;
                }
                let t = &plan.tasks[list(c).start + k as usize];
                task_waits(plan, t).iter().all(|w| {
                    (w.first..w.first + w.count)
                        .all(|i| counters[i as usize] >= w.target + it * w.step)
                })
            })
            .collect();
        if ready.is_empty() {
            let unfinished: Vec<usize> = (0..ctas)
                .filter(|&c| pos[c].0 < trips && !list(c).is_empty())
                .collect();
            if unfinished.is_empty() {
                return Ok(());
            }
            return Err(format!("deadlock: CTAs {unfinished:?} all wait"));
        }
        let c = ready[pick(ready.len()) % ready.len()];
        let (it, k) = pos[c];
        let t = plan.tasks[list(c).start + k as usize];
        let op = t.op as usize;
        let v = &plan.variants[op];
        let m = body.ops[op].spec.problem.m;
        let (r0, r1) = (t.tile_m * v.tile.bm, ((t.tile_m + 1) * v.tile.bm).min(m));
        // Producers within this iteration and in the previous one must be complete.
        let mut need: Vec<(usize, u32, u32)> = Vec::new();
        for d in body.graph.deps_of(op) {
            need.push((d.producer, it, 0));
            let pv = &plan.variants[d.producer];
            let pm = body.ops[d.producer].spec.problem.m;
            for (lo, hi) in producer_rows(&d.rows, r0, r1, pm) {
                for b in lo / pv.tile.bm..=(hi - 1) / pv.tile.bm {
                    if done[d.producer][b as usize][it as usize] < pv.tasks_per_row_block() {
                        return Err(format!(
                            "op {op} tile {} it {it} started before op {} row block {b} finished",
                            t.tile_m, d.producer
                        ));
                    }
                }
            }
        }
        if it > 0 {
            let carried = body
                .graph2
                .deps_of(op + n)
                .filter(|d| d.producer < n)
                .map(|d| (d.producer, d.rows.clone()))
                .chain(std::iter::once((
                    op,
                    DepRows::Shifts(vec![super::dag::RowShift {
                        offset: 0,
                        extra: 0,
                    }]),
                )));
            for (p, rows) in carried {
                let pv = &plan.variants[p];
                let pm = body.ops[p].spec.problem.m;
                for (lo, hi) in producer_rows(&rows, r0, r1, pm) {
                    for b in lo / pv.tile.bm..=(hi - 1) / pv.tile.bm {
                        if done[p][b as usize][it as usize - 1] < pv.tasks_per_row_block() {
                            return Err(format!(
                                "op {op} tile {} it {it} started before op {p} row block {b} \
                                 finished iteration {}",
                                t.tile_m,
                                it - 1
                            ));
                        }
                    }
                }
            }
        }
        done[op][t.tile_m as usize][it as usize] += 1;
        counters[t.signal as usize] += 1;
        pos[c].1 += 1;
        if pos[c].1 as usize == list(c).len() {
            pos[c] = (it + 1, 0);
        }
    }
}

/// The trip count of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trips {
    /// Given on the host.
    Fixed(u32),
    /// A `u32` in device memory at this address, read by the kernel (clamped to the plan's
    /// `max_trips`; 0 runs nothing).
    Device(u64),
}

fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: only called on `LoopTask`, `LoopWait`, `OpLoop` and `u32` slices: `#[repr(C)]`
    // integers without implicit padding (sizes asserted in the device crate).
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

fn addr<T>(gpu: &Gpu, b: &CudaSlice<T>) -> u64 {
    b.device_ptr(gpu.stream()).0
}

fn alloc_scratch(
    gpu: &Gpu,
    variants: &[Variant],
    buffers: &mut Vec<CudaSlice<u8>>,
) -> Result<Vec<SplitScratch>> {
    let mut scratch = vec![SplitScratch::default(); variants.len()];
    for (op, v) in variants.iter().enumerate() {
        let (pb, cb) = split_scratch_bytes(v);
        if pb > 0 {
            let p = gpu.zeros::<u8>(pb as usize)?;
            let c = gpu.zeros::<u8>(cb as usize)?;
            scratch[op] = SplitScratch {
                partials: addr(gpu, &p),
                counters: addr(gpu, &c),
            };
            buffers.push(p);
            buffers.push(c);
        }
    }
    Ok(scratch)
}

/// A [`LoopPlan`] on the GPU: tables uploaded, split-K scratch allocated, occupancy checked.
///
/// Dropping it waits for the device's work first. A CUDA graph that recorded its launches
/// holds the addresses of its tables: drop the graph before the runner.
pub struct ControlRunner {
    kernel: Kernel<LoopArgs>,
    cfg: LaunchConfig,
    args: LoopArgs,
    /// CTAs launched and CTA slots of the device.
    pub ctas: u32,
    /// Co-resident CTAs the device holds.
    pub slots: u64,
    _buffers: Vec<CudaSlice<u8>>,
}

impl Drop for ControlRunner {
    fn drop(&mut self) {
        super::exec::drop_after_device_work(&self._buffers);
    }
}

impl std::fmt::Debug for ControlRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlRunner")
            .field("ctas", &self.ctas)
            .field("slots", &self.slots)
            .field("max_trips", &self.args.max_trips)
            .finish()
    }
}

impl ControlRunner {
    /// Uploads `plan` bound to `body`'s buffers for `family`'s persistent loop entry point.
    /// `body` may be another body than the one planned (a plan-cache hit) when its
    /// [`BodySignature`] is the same: the tasks take `body`'s addresses and gate thresholds.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `body`'s signature differs from the plan's;
    /// [`Error::LaunchLimit`] when the plan has more CTAs than the device holds at once (it
    /// could deadlock) or the launch exceeds a limit; allocation and driver errors.
    pub fn new(gpu: &Gpu, family: &Family, plan: &LoopPlan, body: &LoopBody) -> Result<Self> {
        family.check()?;
        plan.check_body(body)?;
        let props = *gpu.props();
        // SAFETY: a control family's persistent entry point takes `LoopArgs`
        // (`fused_gemm::kernels::control`).
        let kernel =
            unsafe { Kernel::<LoopArgs>::from_function(gpu.function(family.ptx, family.entry)?) };
        let shape = LaunchShape {
            grid: (plan.ctas, 1, 1),
            block: (family.threads, 1, 1),
            smem_bytes: family.smem_bytes,
        };
        let cfg = shape.prepare(&kernel, &props)?;
        let per_sm = kernel.occupancy_max_active_blocks_per_multiprocessor(
            family.threads,
            family.smem_bytes as usize,
            None,
        )?;
        let slots = per_sm as u64 * props.sm_count as u64;
        if plan.ctas as u64 > slots {
            return Err(Error::LaunchLimit(format!(
                "loop program of {} CTAs, but only {slots} of `{}` are co-resident ({per_sm} per \
                 SM): it could deadlock; plan with the driver's occupancy (`exec::vdevice`)",
                plan.ctas, family.entry
            )));
        }
        let mut buffers = Vec::new();
        let scratch = alloc_scratch(gpu, &plan.variants, &mut buffers)?;
        let (tasks, ops) = plan.bind(body, &scratch)?;
        let t = gpu.upload(as_bytes(&tasks))?;
        let o = gpu.upload(as_bytes(&plan.cta_offsets))?;
        let w = if plan.overflow.is_empty() {
            gpu.zeros::<u8>(std::mem::size_of::<LoopWait>())?
        } else {
            gpu.upload(as_bytes(&plan.overflow))?
        };
        let ops = gpu.upload(as_bytes(&ops))?;
        let counters = gpu.zeros::<u8>((plan.counters as usize + 1) * 4)?;
        let args = LoopArgs {
            tasks: addr(gpu, &t),
            cta_offsets: addr(gpu, &o),
            waits: addr(gpu, &w),
            counters: addr(gpu, &counters),
            ops: addr(gpu, &ops),
            trips_ptr: 0,
            n_counters: plan.counters,
            trips: 0,
            max_trips: plan.max_trips,
            _pad: 0,
        };
        buffers.extend([t, o, w, ops, counters]);
        Ok(ControlRunner {
            kernel,
            cfg,
            args,
            ctas: plan.ctas,
            slots,
            _buffers: buffers,
        })
    }

    /// Enqueues one launch running `trips` iterations on `gpu`'s stream (may be capturing).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `Trips::Fixed(0)` or a null trip-count address;
    /// [`Error::TooLarge`] for a fixed trip count above the plan's `max_trips`; driver errors.
    pub fn launch(&self, gpu: &Gpu, trips: Trips) -> Result<()> {
        let mut args = self.args;
        match trips {
            Trips::Fixed(0) => return Err(Error::invalid("trips", "at least 1", 0)),
            Trips::Fixed(t) if t > self.args.max_trips => {
                return Err(Error::TooLarge {
                    arg: "trips",
                    max: self.args.max_trips as u64,
                    actual: t as u64,
                });
            }
            Trips::Fixed(t) => args.trips = t,
            Trips::Device(0) => {
                return Err(Error::NullPointer {
                    arg: "trips",
                    elements: 1,
                });
            }
            Trips::Device(p) if p % 4 != 0 => {
                return Err(Error::Misaligned {
                    arg: "trips",
                    what: "address",
                    align: 4,
                    actual: p,
                });
            }
            Trips::Device(p) => args.trips_ptr = p,
        }
        // SAFETY: the tables were encoded from a plan over validated operators (every iteration
        // up to `max_trips`), the kernel clamps the trip count to `max_trips`, and the grid fits
        // the co-resident CTAs (checked in `new`).
        unsafe { self.kernel.launch(gpu, self.cfg, &args) }?;
        Ok(())
    }

    /// Kernel launches per forward: 1.
    pub fn launches(&self) -> usize {
        1
    }
}

/// What [`HostDriven`] launched in its last run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostStats {
    /// Kernel launches.
    pub launches: usize,
    /// Predicates read back (each a device-to-host copy and a sync).
    pub syncs: usize,
    /// Guarded operators skipped.
    pub skipped: usize,
    /// Skip copies.
    pub copies: usize,
}

struct HostOp {
    kernel: HostKernel,
    cfg: LaunchConfig,
    args: GemmArgs,
    epi: [u64; EPI_WORDS],
}

/// The grid entry point of a [`HostOp`]'s arm: the gate's takes its parameters as
/// [`GateParams`] (read from the epilogue words at every launch), the others the words.
enum HostKernel {
    Gate(Kernel<GemmParams<GateParams>>),
    Grid(Kernel<GemmParams<EpiWords>>),
}

/// The host-driven execution of a body (what Cocktailer compares to): per iteration, per
/// operator, one grid launch of the same arm and split factor as the plan; for a guarded
/// operator, the predicate is copied to the host (a sync) and the operator launched or, if
/// skipped, its skip copy done with device-to-device row copies.
pub struct HostDriven {
    ops: Vec<HostOp>,
    body: LoopBody,
    _buffers: Vec<CudaSlice<u8>>,
}

impl std::fmt::Debug for HostDriven {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDriven")
            .field("ops", &self.ops.len())
            .finish()
    }
}

impl HostDriven {
    /// Prepares `body` with `plan`'s variants (so results match the loop program bit for bit).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `body`'s signature differs from the plan's;
    /// module-loading, allocation and launch-limit errors.
    pub fn new(gpu: &Gpu, family: &Family, body: &LoopBody, plan: &LoopPlan) -> Result<Self> {
        plan.check_body(body)?;
        let props = *gpu.props();
        let mut buffers = Vec::new();
        let scratch = alloc_scratch(gpu, &plan.variants, &mut buffers)?;
        let mut ops = Vec::new();
        for (j, op) in body.ops.iter().enumerate() {
            let v = &plan.variants[j];
            let arm = &family.arms[v.arm];
            let grid = arm.grid_kernel(gpu, family.ptx)?;
            let is_gate = op.spec.kind == GATE_KIND;
            let shape = if is_gate {
                LaunchShape {
                    grid: (1, 1, 1),
                    block: (family.threads, 1, 1),
                    smem_bytes: GATE_SMEM_BYTES,
                }
            } else {
                LaunchShape {
                    grid: (v.tiles_n, v.tiles_m, v.splits),
                    block: (family.threads, 1, 1),
                    smem_bytes: arm.tile.smem_bytes(true),
                }
            };
            let cfg = shape.prepare(&grid, &props)?;
            let kernel = if is_gate {
                // SAFETY: the gate's grid entry point takes (GemmArgs, GateParams)
                // (`fused_gemm::kernels::control::GATE_ENTRY`).
                HostKernel::Gate(unsafe { Kernel::from_function((*grid).clone()) })
            } else {
                HostKernel::Grid(grid)
            };
            ops.push(HostOp {
                kernel,
                cfg,
                args: gemm_args(&body.graph, j, v, scratch[j]),
                epi: op.spec.epi,
            });
        }
        Ok(HostDriven {
            ops,
            body: body.clone(),
            _buffers: buffers,
        })
    }

    /// Runs `trips` iterations from the host and waits for them.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 trips, [`Error::TooLarge`] above `max_trips`; driver
    /// errors.
    pub fn run(&self, gpu: &Gpu, trips: u32) -> Result<HostStats> {
        if trips == 0 {
            return Err(Error::invalid("trips", "at least 1", 0));
        }
        if trips > self.body.max_trips {
            return Err(Error::TooLarge {
                arg: "trips",
                max: self.body.max_trips as u64,
                actual: trips as u64,
            });
        }
        let mut st = HostStats::default();
        let stream = gpu.stream();
        let mut pred: Vec<Option<bool>> = vec![None; self.ops.len()];
        for it in 0..trips {
            let it64 = it as i64;
            let mv = |a: u64, s: i64| a.wrapping_add((it64 * s) as u64);
            pred.iter_mut().for_each(|p| *p = None);
            for (j, op) in self.ops.iter().enumerate() {
                let b = &self.body.ops[j];
                let s = &self.body.strides[j];
                let mut args = op.args;
                args.a = mv(args.a, s.a);
                args.c = mv(args.c, s.c);
                if let Some(g) = b.guard {
                    let run = match pred[g] {
                        Some(r) => r,
                        None => {
                            let gate = &self.ops[g];
                            let at = mv(gate.args.c, self.body.strides[g].c);
                            let mut host = [0u32; 2];
                            // SAFETY: the gate's predicate is two u32 at `at` (validated when the
                            // body was built); the copy is synchronized before `host` is read.
                            unsafe {
                                cudarc::driver::result::memcpy_dtoh_async(
                                    &mut host[..],
                                    at,
                                    stream.cu_stream(),
                                )
                            }?;
                            stream.synchronize()?;
                            st.syncs += 1;
                            pred[g] = Some(host[0] != 0);
                            host[0] != 0
                        }
                    };
                    if !run {
                        st.skipped += 1;
                        if let Some(src) = &b.skip_copy {
                            let from = mv(src.ptr, s.copy);
                            let row = args.n as usize * 2;
                            for r in 0..args.m as u64 {
                                // SAFETY: both are validated M×N bf16 matrices at this
                                // iteration.
                                unsafe {
                                    cudarc::driver::result::memcpy_dtod_async(
                                        args.c + r * args.ldc as u64 * 2,
                                        from + r * src.ld as u64 * 2,
                                        row,
                                        stream.cu_stream(),
                                    )
                                }?;
                            }
                            st.copies += 1;
                        }
                        continue;
                    }
                }
                let mut epi = op.epi;
                for (w, e) in epi.iter_mut().enumerate() {
                    *e = mv(*e, s.epi[w]);
                }
                match &op.kernel {
                    HostKernel::Gate(k) => {
                        let p = GemmParams {
                            args,
                            epilogue: read_gate(&epi),
                        };
                        // SAFETY: operands validated at every iteration.
                        unsafe { k.launch(gpu, op.cfg, &p) }
                    }
                    HostKernel::Grid(k) => {
                        let p = GemmParams {
                            args,
                            epilogue: EpiWords(epi),
                        };
                        // SAFETY: as above.
                        unsafe { k.launch(gpu, op.cfg, &p) }
                    }
                }?;
                st.launches += 1;
            }
        }
        stream.synchronize()?;
        Ok(st)
    }
}

/// The gate parameters stored in a gate operator's epilogue words.
pub fn read_gate(epi: &[u64; EPI_WORDS]) -> GateParams {
    GateParams {
        threshold: f32::from_bits(epi[0] as u32),
        _pad: 0,
    }
}

/// The epilogue words of a gate with `threshold`.
pub fn gate_words(threshold: f32) -> [u64; EPI_WORDS] {
    let mut w = [0u64; EPI_WORDS];
    w[0] = threshold.to_bits() as u64;
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Problem;
    use crate::validate::BLayout;
    use fused_gemm_device::gemm::TileShape;
    use fused_gemm_device::types::DType;
    use rand::{RngExt, SeedableRng};

    const T16: TileShape = TileShape::new(16, 64, 64, 1, 4, 4);
    static ARMS: [super::super::family::Arm; 3] = [
        super::super::family::Arm {
            kind: "bias_relu",
            tile: T16,
            grid_entry: "relu",
        },
        super::super::family::Arm {
            kind: "lstm",
            tile: T16,
            grid_entry: "lstm",
        },
        super::super::family::Arm {
            kind: GATE_KIND,
            tile: T16,
            grid_entry: "gate",
        },
    ];
    static SET: crate::module::PtxSet = crate::module::PtxSet::new("none", &[]);
    static FAM: Family = Family {
        entry: "loop",
        ptx: &SET,
        input: DType::Bf16,
        output: DType::Bf16,
        threads: 128,
        smem_bytes: 64 * 1024,
        min_ctas_per_sm: 2,
        arms: &ARMS,
    };

    fn md(ptr: u64, rows: usize, cols: usize, ld: usize, dt: DType) -> MatrixDesc {
        MatrixDesc::new(ptr, rows, cols, ld, dt)
    }

    fn op(
        name: &str,
        kind: &'static str,
        a: MatrixDesc,
        w: MatrixDesc,
        c: MatrixDesc,
        extra_w: Vec<Region>,
    ) -> OpSpec {
        let (m, k, n) = (a.rows as u32, a.cols as u32, w.rows as u32);
        let out_n = if kind == "lstm" { n } else { c.cols as u32 };
        OpSpec {
            name: name.into(),
            kind,
            problem: Problem {
                m,
                n: out_n,
                k,
                in_dtype: DType::Bf16,
                out_dtype: DType::Bf16,
                b_layout: BLayout::NxK,
                pairs: false,
                row_norm: false,
                epilogue_read_bytes_per_output: 0.0,
                vector: true,
                epilogue_tma: true,
            },
            args: GemmArgs {
                a: a.ptr,
                b: w.ptr,
                c: c.ptr,
                workspace: 0,
                counters: 0,
                m,
                n: out_n,
                k,
                lda: a.ld as u32,
                ldb: w.ld as u32,
                ldc: c.ld as u32,
                splits: 1,
                k_per_split: 0,
            },
            epi: [0; EPI_WORDS],
            reads: vec![Region::rows(a), Region::whole(w)],
            writes: [vec![Region::rows(c)], extra_w].concat(),
        }
    }

    /// An LSTM-like recurrence: step t reads block t of X (B × 2H: [x_t | h_{t−1}]) and
    /// writes h_t into block t + 1's right half.
    fn rnn_body(batch: usize, h: usize, trips: u32) -> LoopBody {
        let blk = (batch * 2 * h * 2) as u64;
        let x = 0x1000_0000u64;
        let w = 0x2000_0000u64;
        LoopBody::new(trips, &mut |it| {
            let a = md(x + it as u64 * blk, batch, 2 * h, 2 * h, DType::Bf16);
            let c = md(
                x + (it as u64 + 1) * blk + (h * 2) as u64,
                batch,
                h,
                2 * h,
                DType::Bf16,
            );
            let wd = md(w, 4 * h, 2 * h, 2 * h, DType::Bf16);
            Ok(vec![BodyOp {
                spec: op("cell", "lstm", a, wd, c, vec![]),
                guard: None,
                skip_copy: None,
            }])
        })
        .unwrap()
    }

    /// Gated residual blocks: gate_i on x_i, up_i = relu(x_i W1ᵀ) guarded, x_{i+1} = up_i
    /// W2ᵀ + x_i guarded (skip copies x_i).
    fn gated_body(blocks: usize, batch: usize, d: usize) -> LoopBody {
        gated_body_at(blocks, batch, d, 0, 0.0)
    }

    /// [`gated_body`] with every address moved by `off` bytes and gate threshold `theta`.
    fn gated_body_at(blocks: usize, batch: usize, d: usize, off: u64, theta: f32) -> LoopBody {
        let md = |ptr: u64, rows, cols, ld, dt| md(ptr + off, rows, cols, ld, dt);
        let xs = |i: usize| {
            md(
                0x1000_0000 + (i * batch * d * 2) as u64,
                batch,
                d,
                d,
                DType::Bf16,
            )
        };
        let up = |i: usize| {
            md(
                0x3000_0000 + (i * batch * 2 * d * 2) as u64,
                batch,
                2 * d,
                2 * d,
                DType::Bf16,
            )
        };
        let pred = |i: usize| md(0x5000_0000 + (i * 8) as u64, 1, 2, 2, DType::F32);
        LoopBody::new(1, &mut |_| {
            let mut ops = Vec::new();
            for i in 0..blocks {
                let w1 = md(0x6000_0000 + (i << 20) as u64, 2 * d, d, d, DType::Bf16);
                let w2 = md(0x7000_0000 + (i << 20) as u64, d, 2 * d, 2 * d, DType::Bf16);
                let g = md(0x8000_0000 + (i << 12) as u64, 1, d, d, DType::Bf16);
                let gi = ops.len();
                let mut gate = op("gate", GATE_KIND, xs(i), g, pred(i), vec![]);
                gate.writes = vec![Region::whole(pred(i))];
                gate.problem.n = 8;
                gate.args.n = 8;
                gate.epi = gate_words(theta);
                ops.push(BodyOp {
                    spec: gate,
                    guard: None,
                    skip_copy: None,
                });
                ops.push(BodyOp {
                    spec: op("up", "bias_relu", xs(i), w1, up(i), vec![]),
                    guard: Some(gi),
                    skip_copy: None,
                });
                let mut down = op("down", "bias_relu", up(i), w2, xs(i + 1), vec![]);
                down.reads.push(Region::rows(xs(i)));
                ops.push(BodyOp {
                    spec: down,
                    guard: Some(gi),
                    skip_copy: Some(xs(i)),
                });
            }
            Ok(ops)
        })
        .unwrap()
    }

    fn props() -> DeviceProps {
        DeviceProps::h200()
    }

    #[test]
    fn plan_binds_another_body_of_the_same_signature() {
        let a = gated_body_at(4, 1, 64, 0, -1.0);
        let off = 1u64 << 40;
        let b = gated_body_at(4, 1, 64, off, 0.5);
        let vdev = VDevice {
            sms: 132,
            ctas_per_sm: 2,
        };
        let plan = plan_loop(&a, &FAM, &props(), vdev, &ScheduleOptions::default()).unwrap();
        assert_eq!(a.signature(), b.signature());
        let scratch = vec![SplitScratch::default(); b.ops.len()];
        let (tasks, ops) = plan.bind(&b, &scratch).unwrap();
        assert_eq!(tasks.len(), plan.tasks.len());
        for (t, p) in tasks.iter().zip(&plan.tasks) {
            // Everything but the addresses and the gate threshold is the plan's.
            assert_eq!(
                (t.arm, t.tile_m, t.tile_n, t.split),
                (p.arm, p.tile_m, p.tile_n, p.split)
            );
            assert_eq!(
                (t.signal, t.n_waits, t.waits),
                (p.signal, p.n_waits, p.waits)
            );
            assert_eq!(t.args.a, p.args.a + off);
            assert_eq!(t.args.b, p.args.b + off);
            assert_eq!(t.args.c, p.args.c + off);
            if b.ops[t.op as usize].spec.kind == GATE_KIND {
                assert_eq!(read_gate(&t.epi).threshold, 0.5);
                assert_eq!(read_gate(&p.epi).threshold, -1.0);
            }
        }
        for (o, p) in ops.iter().zip(&plan.ops) {
            assert_eq!(o.gate.a, if p.gate.a == 0 { 0 } else { p.gate.a + off });
            assert_eq!(o.gate.b, if p.gate.b == 0 { 0 } else { p.gate.b + off });
            if p.gate.a != 0 {
                assert_eq!((o.gate_threshold, p.gate_threshold), (0.5, -1.0));
            }
            assert_eq!(
                o.copy_src,
                if p.copy_src == 0 { 0 } else { p.copy_src + off }
            );
            assert_eq!(
                (o.a_stride, o.c_stride, o.bm, o.bn),
                (p.a_stride, p.c_stride, p.bm, p.bn)
            );
        }
        // Other shapes, block counts or trip counts are refused, not run with stale tables.
        for other in [
            gated_body(4, 1, 128),
            gated_body(3, 1, 64),
            gated_body(4, 2, 64),
        ] {
            let e = plan.bind(&other, &scratch).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        }
        let e = plan.check_body(&rnn_body(1, 64, 1)).unwrap_err();
        assert!(e.to_string().contains("operators"), "{e}");
    }

    fn check(body: &LoopBody, trips: u32, vdev: VDevice) -> LoopPlan {
        let plan = plan_loop(body, &FAM, &props(), vdev, &ScheduleOptions::default()).unwrap();
        for seed in 0..4u64 {
            let mut r = rand::rngs::StdRng::seed_from_u64(seed);
            simulate(body, &plan, trips, &mut |n| r.random_range(0..n)).unwrap();
        }
        // Lowest-index and highest-index CTA first: extreme interleavings.
        simulate(body, &plan, trips, &mut |_| 0).unwrap();
        simulate(body, &plan, trips, &mut |n| n - 1).unwrap();
        plan
    }

    #[test]
    fn recurrence_strides_and_carried_waits() {
        let body = rnn_body(3, 64, 10);
        assert_eq!(body.strides[0].a, 3 * 128 * 2);
        assert_eq!(body.strides[0].c, 3 * 128 * 2);
        // Iteration 1 reads what iteration 0 wrote: one loop-carried dependency.
        let carried: Vec<_> = body
            .graph2
            .deps()
            .iter()
            .filter(|d| d.consumer == 1)
            .collect();
        assert_eq!(carried.len(), 1);
        let plan = check(
            &body,
            10,
            VDevice {
                sms: 8,
                ctas_per_sm: 2,
            },
        );
        for t in &plan.tasks {
            // The carried wait (target 0, on every task of the row block) and the self-wait.
            let w = task_waits(&plan, t);
            assert!(
                w.iter()
                    .any(|w| w.target == 0 && w.step == plan.variants[0].tiles_n)
            );
        }
    }

    #[test]
    fn gated_blocks_plan_is_one_program_and_never_deadlocks() {
        let body = gated_body(4, 1, 256);
        assert_eq!(body.ops.len(), 12);
        let plan = check(
            &body,
            1,
            VDevice {
                sms: 4,
                ctas_per_sm: 1,
            },
        );
        assert!(plan.ops[2].copy == 1 && plan.ops[2].gate.a == body.ops[0].spec.args.a);
        assert_eq!(plan.ops[1].gate, body.ops[0].spec.args);
        assert_eq!(plan.ops[1].copy, 0);
        assert_eq!(plan.ops[0].gate.a, 0);
        // Guarded tasks evaluate their gate themselves: none waits for a gate task's counter.
        let mut base = vec![0u32; body.ops.len()];
        for j in 1..body.ops.len() {
            base[j] = base[j - 1] + plan.variants[j - 1].tiles_m;
        }
        let gate_counters: Vec<u32> = (0..body.ops.len()).step_by(3).map(|j| base[j]).collect();
        for t in plan.tasks.iter().filter(|t| t.op % 3 != 0) {
            for w in task_waits(&plan, t) {
                assert!(
                    !gate_counters
                        .iter()
                        .any(|c| (w.first..w.first + w.count).contains(c)),
                    "operator {} waits for a gate: {w:?}",
                    t.op
                );
            }
        }
        // Gates run as one task on the gate arm.
        assert_eq!(plan.variants[0].arm, 2);
        assert_eq!(plan.variants[0].tasks(), 1);
    }

    #[test]
    fn simulator_catches_a_missing_self_wait() {
        // Dropping every wait of a recurrence lets iteration 1 start early.
        let body = rnn_body(2, 64, 3);
        let mut plan = check(
            &body,
            3,
            VDevice {
                sms: 4,
                ctas_per_sm: 1,
            },
        );
        for t in &mut plan.tasks {
            t.n_waits = 0;
        }
        let r = simulate(&body, &plan, 3, &mut |n| n - 1);
        assert!(r.is_err(), "{r:?}");
    }

    #[test]
    fn self_wait_keeps_epoch_counters_exact() {
        // y_t = relu(X·W1ᵀ) (X loop-invariant: no carried dependency), z_t = relu(y_t·W2ᵀ).
        let body = LoopBody::new(6, &mut |it| {
            let x = md(0x1000_0000, 32, 64, 64, DType::Bf16);
            let w = md(0x2000_0000, 256, 64, 64, DType::Bf16);
            let y = md(
                0x3000_0000 + it as u64 * 0x10_0000,
                32,
                256,
                256,
                DType::Bf16,
            );
            let w2 = md(0x4000_0000, 64, 256, 256, DType::Bf16);
            let z = md(0x5000_0000 + it as u64 * 0x10_0000, 32, 64, 64, DType::Bf16);
            Ok(vec![
                BodyOp {
                    spec: op("y", "bias_relu", x, w, y, vec![]),
                    guard: None,
                    skip_copy: None,
                },
                BodyOp {
                    spec: op("z", "bias_relu", y, w2, z, vec![]),
                    guard: None,
                    skip_copy: None,
                },
            ])
        })
        .unwrap();
        assert!(
            body.graph2
                .deps()
                .iter()
                .all(|d| d.consumer < 2 || d.producer >= 2)
        );
        let vdev = VDevice {
            sms: 8,
            ctas_per_sm: 1,
        };
        let mut plan = check(&body, 6, vdev);
        // Without the self-waits, a fast CTA's iteration-1 tasks inflate the counter and a
        // consumer of iteration 0 starts early under some interleaving.
        let orig = plan.clone();
        for t in &mut plan.tasks {
            let keep: Vec<LoopWait> = task_waits(&orig, t)
                .into_iter()
                .filter(|w| !(w.first == t.signal && w.count == 1 && w.target == 0))
                .collect();
            assert!(keep.len() <= INLINE_WAITS);
            t.n_waits = keep.len() as u32;
            for (a, b) in t.waits.iter_mut().zip(&keep) {
                *a = *b;
            }
        }
        let caught = (0..64u64).any(|seed| {
            let mut r = rand::rngs::StdRng::seed_from_u64(seed);
            simulate(&body, &plan, 6, &mut |n| r.random_range(0..n)).is_err()
        });
        assert!(caught, "dropping the self-waits went unnoticed");
    }

    #[test]
    fn non_affine_bodies_and_bad_guards_are_typed_errors() {
        let e = LoopBody::new(0, &mut |_| Ok(vec![])).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        // C moves by 0, 1, 3 blocks: not affine.
        let e = LoopBody::new(5, &mut |it| {
            let k = [0u64, 1, 3, 4, 5][it as usize];
            let a = md(0x1000, 1, 64, 64, DType::Bf16);
            let w = md(0x9000, 64, 64, 64, DType::Bf16);
            let c = md(0x100000 + k * 4096, 1, 64, 64, DType::Bf16);
            Ok(vec![BodyOp {
                spec: op("x", "bias_relu", a, w, c, vec![]),
                guard: None,
                skip_copy: None,
            }])
        })
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        // A guard naming a later operator.
        let e = LoopBody::new(1, &mut |_| {
            let a = md(0x1000, 1, 64, 64, DType::Bf16);
            let w = md(0x9000, 64, 64, 64, DType::Bf16);
            let c = md(0x100000, 1, 64, 64, DType::Bf16);
            Ok(vec![BodyOp {
                spec: op("x", "bias_relu", a, w, c, vec![]),
                guard: Some(0),
                skip_copy: None,
            }])
        })
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        // Reading what was written two iterations back.
        let e = LoopBody::new(4, &mut |it| {
            let blk = 4096u64;
            let a = md(0x100000 + it as u64 * blk, 1, 64, 64, DType::Bf16);
            let w = md(0x9000, 64, 64, 64, DType::Bf16);
            let c = md(0x100000 + (it as u64 + 2) * blk, 1, 64, 64, DType::Bf16);
            Ok(vec![BodyOp {
                spec: op("x", "bias_relu", a, w, c, vec![]),
                guard: None,
                skip_copy: None,
            }])
        })
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        // A guarded skip copy on an operator that writes nothing (indexed `writes[0]`).
        let e = LoopBody::new(1, &mut |_| {
            let x = md(0x1000, 1, 64, 64, DType::Bf16);
            let g = md(0x9000, 1, 64, 64, DType::Bf16);
            let pred = md(0x5000, 1, 2, 2, DType::F32);
            let mut gate = op("gate", GATE_KIND, x, g, pred, vec![]);
            gate.writes = vec![Region::whole(pred)];
            gate.problem.n = 8;
            gate.args.n = 8;
            let w = md(0x20000, 64, 64, 64, DType::Bf16);
            let c = md(0x100000, 1, 64, 64, DType::Bf16);
            let mut up = op("up", "bias_relu", x, w, c, vec![]);
            up.writes.clear();
            Ok(vec![
                BodyOp {
                    spec: gate,
                    guard: None,
                    skip_copy: None,
                },
                BodyOp {
                    spec: up,
                    guard: Some(0),
                    skip_copy: Some(md(0x200000, 1, 64, 64, DType::Bf16)),
                },
            ])
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    arg: "skip_copy",
                    ..
                }
            ),
            "{e}"
        );
    }
}
