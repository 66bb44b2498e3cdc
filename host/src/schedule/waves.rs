//! The wave scheduler (Rammer, OSDI'20, §4): waves, kernel-variant choice per wave, rTask
//! placement on vEUs, dependency waits, program merging, and the fall-back to plain launches.
//!
//! # Model
//! The vDevice is `SMs × r` vEUs, r persistent CTAs per SM (at most what occupancy allows;
//! every r from 1 up is tried and the fastest predicted schedule kept). A task's duration is the
//! performance model's time for one tile on an SM ([`crate::plan::model`]: tensor-core,
//! shared-memory and load time of the tile, plus the per-wave pipeline latency), stretched by
//! `r / (1 + co_resident_speedup·(r − 1))` because co-resident CTAs share their SM.
//!
//! # Algorithm
//! 1. Waves are the graph's breadth-first fringes ([`WaveGraph::waves`]).
//! 2. Per wave, each operator's variant (arm = epilogue kind × tile, and split-K factor) starts
//!    at the planner's fastest-alone choice; then, operator by operator, the variant that
//!    minimizes the *wave's* makespan (longest-task-first onto the vEUs) replaces it, until no
//!    change: a wave of small operators trades the fastest tile for one with more tasks when
//!    that fills the device (Rammer's 16-task vs 1,024-task MatMul).
//! 3. Tasks are placed in wave order, operator order, then row-major tile order, each on the vEU
//!    where it can start first (start = max(vEU free, producers' finish)); ties go to the vEU
//!    that freed last before the start (keeping early-free vEUs for others), then to the lowest
//!    index. A task waits for the row blocks of in-program producers its rows need
//!    ([`producer_rows`]); producers in earlier programs are complete at launch.
//! 4. A wave is merged into the current program while `t(P + W) ≤ t(P) + t(W)`, t = launch
//!    cost + makespan.
//! 5. A program whose operators each fill the device alone (or that has a single operator) is
//!    emitted as plain launches of the operators' fastest-alone variants.
//!
//! The global placement order is also the order of every CTA's task list, and every wait is on
//! tasks placed earlier: the property the device relies on to be deadlock-free
//! ([`fused_gemm_device::kernel::persistent`]); [`super::verify`] checks it.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use fused_gemm_device::gemm::TileShape;
use fused_gemm_device::kernel::persistent::Wait;
use serde::Serialize;

use super::dag::{WaveGraph, producer_rows};
use super::family::Family;
use crate::gpu::DeviceProps;
use crate::plan::model::ctas_per_sm;
use crate::plan::{Plan, Planner, Problem, Roofline};
use crate::{Error, Result};

/// Most vEUs (SMs × CTAs per SM) [`schedule`] places tasks on: far above any GPU (an H200 has
/// 132 SMs and at most 32 CTAs per SM), low enough that the per-vEU tables stay small.
pub const MAX_VEUS: u64 = 1 << 16;

/// The virtual device: SMs and how many persistent CTAs of the family fit on one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct VDevice {
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Co-resident CTAs of the persistent entry point per SM (occupancy).
    pub ctas_per_sm: u32,
}

impl VDevice {
    /// The model's occupancy of `family`'s persistent entry point on `props` (estimated
    /// registers). On a GPU, prefer the driver's figure (`super::exec::vdevice`).
    pub fn from_model(props: &DeviceProps, family: &Family) -> Self {
        let tile = family.arms.first().map(|a| a.tile);
        let per_sm = tile.map_or(0, |t| {
            ctas_per_sm(props, &t, family.smem_bytes, family.registers_estimate())
        });
        VDevice {
            sms: props.sm_count,
            ctas_per_sm: per_sm,
        }
    }
}

/// Knobs of [`schedule`].
#[derive(Clone, Debug)]
pub struct ScheduleOptions {
    /// Most vEUs per SM tried (also capped by the vDevice's occupancy).
    pub max_ctas_per_sm: u32,
    /// Largest split-K factor considered.
    pub max_splits: u32,
    /// Merge waves into programs (`false`: one program per wave).
    pub merge: bool,
    /// Emit programs whose operators fill the device alone as plain launches.
    pub fallback: bool,
    /// Throughput a further co-resident CTA adds to an SM, as a fraction of one CTA's.
    pub co_resident_speedup: f64,
    /// The performance model's constants.
    pub roofline: Roofline,
    /// Per operator, a fixed (arm, splits) instead of the choice (tests; benchmarks of a given
    /// variant). `None` entries are chosen as usual.
    pub fixed: FixedArms,
}

/// Per operator of a loop body or wave graph, in operator order: `Some((arm index in the
/// family, split-K factor))` to fix that operator's variant, `None` to let the schedule choose.
pub type FixedArms = Vec<Option<(usize, u32)>>;

impl Default for ScheduleOptions {
    fn default() -> Self {
        ScheduleOptions {
            max_ctas_per_sm: 2,
            max_splits: 16,
            merge: true,
            fallback: true,
            co_resident_speedup: 0.5,
            roofline: Roofline::default(),
            fixed: Vec::new(),
        }
    }
}

/// How one operator runs: an arm of the family and a split-K factor.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Variant {
    /// Index into [`Family::arms`].
    pub arm: usize,
    /// The arm's tile.
    #[serde(serialize_with = "ser_tile")]
    pub tile: TileShape,
    /// K splits.
    pub splits: u32,
    /// K per split (a multiple of BK).
    pub k_per_split: u32,
    /// ⌈M/BM⌉.
    pub tiles_m: u32,
    /// ⌈N/BN⌉.
    pub tiles_n: u32,
    /// Model time of one task alone on an SM, µs (the mainloop and epilogue of one K split).
    pub task_us: f64,
    /// Model time of the split-K reduction one tile's last-arriving task does after its own
    /// split, µs (0 without split-K): it reads the other splits' f32 partials serially.
    pub reduce_us: f64,
    /// Model time of the operator launched alone with this variant (launch included), µs.
    pub alone_us: f64,
    /// Whether the operator launched alone fills every CTA slot of the device at least once.
    pub fills: bool,
}

fn ser_tile<S: serde::Serializer>(t: &TileShape, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&format!(
        "{}x{}x{} w{}x{} s{}",
        t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages
    ))
}

impl Variant {
    /// Tasks (tiles × splits), saturating at `u32::MAX` (only reached by outputs larger than
    /// any device memory).
    pub fn tasks(&self) -> u32 {
        self.tiles_m
            .saturating_mul(self.tiles_n)
            .saturating_mul(self.splits)
    }

    /// Tasks per row block (the target of a ready counter), saturating at `u32::MAX`.
    pub fn tasks_per_row_block(&self) -> u32 {
        self.tiles_n.saturating_mul(self.splits)
    }
}

/// One placed rTask.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacedTask {
    /// Operator.
    pub op: usize,
    /// Tile row.
    pub tile_m: u32,
    /// Tile column.
    pub tile_n: u32,
    /// K split.
    pub split: u32,
    /// The CTA (vEU) that runs it.
    pub cta: u32,
    /// Model start, µs from the program's launch.
    pub start_us: f64,
    /// Model end, µs.
    pub end_us: f64,
    /// Ready-counter ranges to wait for.
    pub waits: Vec<Wait>,
    /// Ready counter to increment when done.
    pub signal: Option<u32>,
}

/// A program: one persistent launch, or plain launches.
#[derive(Clone, Debug, PartialEq)]
pub enum Program {
    /// One launch of the family's persistent entry point.
    Persistent(PersistentProgram),
    /// One grid launch per operator, in this order.
    Launches(Vec<usize>),
}

/// The tables of one persistent launch.
#[derive(Clone, Debug, PartialEq)]
pub struct PersistentProgram {
    /// Operators, in program order.
    pub ops: Vec<usize>,
    /// CTAs launched.
    pub ctas: u32,
    /// vEUs per SM the placement assumed.
    pub ctas_per_sm: u32,
    /// Tasks in global placement order.
    pub tasks: Vec<PlacedTask>,
    /// Per CTA, indices into `tasks`, increasing.
    pub cta_lists: Vec<Vec<usize>>,
    /// Ready counters.
    pub counters: u32,
    /// Model makespan, µs (launch excluded).
    pub makespan_us: f64,
}

/// The scheduler's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Per operator, the variant it runs with.
    pub variants: Vec<Variant>,
    /// Programs in launch order.
    pub programs: Vec<Program>,
    /// The graph's waves.
    pub waves: Vec<Vec<usize>>,
    /// The vDevice scheduled for.
    pub vdevice: VDevice,
    /// vEUs per SM chosen.
    pub ctas_per_sm: u32,
    /// Predicted time of the whole schedule, µs.
    pub predicted_us: f64,
}

impl Schedule {
    /// Kernel launches per execution.
    pub fn launches(&self) -> usize {
        self.programs
            .iter()
            .map(|p| match p {
                Program::Persistent(_) => 1,
                Program::Launches(ops) => ops.len(),
            })
            .sum()
    }

    /// The same variants, every operator launched on its own in program order: the per-operator
    /// execution a persistent schedule must match bit for bit.
    pub fn as_launches(&self) -> Schedule {
        let ops: Vec<usize> = (0..self.variants.len()).collect();
        Schedule {
            programs: vec![Program::Launches(ops)],
            predicted_us: self.variants.iter().map(|v| v.alone_us).sum(),
            ..self.clone()
        }
    }
}

/// Every launchable variant of operator `op` on `family`'s arms.
///
/// # Errors
/// [`Error::OutOfRange`] when `op` is not an operator of `graph`; [`Error::LaunchLimit`] when
/// no arm can run it (no arm of its kind, a row norm wider than every arm's tile, or no tile
/// within the device's limits).
pub fn candidates(
    graph: &WaveGraph,
    op: usize,
    family: &Family,
    props: &DeviceProps,
    opts: &ScheduleOptions,
) -> Result<Vec<Variant>> {
    let spec = graph.ops().get(op).ok_or_else(|| Error::OutOfRange {
        arg: "op",
        bounds: format!("0..{} (the graph's operators)", graph.ops().len()),
        actual: op.to_string(),
    })?;
    let p = &spec.problem;
    let planner = Planner::new(*props).with_roofline(opts.roofline);
    let fixed = opts.fixed.get(op).copied().flatten();
    let mut out = Vec::new();
    for (ai, arm) in family.arms_of(spec.kind) {
        if p.row_norm && arm.tile.bn < p.n {
            continue;
        }
        for s in 1..=opts.max_splits.max(1) {
            if fixed.is_some_and(|f| f != (ai, s)) {
                continue;
            }
            let Some(plan) = planner.evaluate(p, &arm.tile, s) else {
                continue;
            };
            out.push(variant(ai, &plan, p, props, opts));
        }
    }
    if out.is_empty() {
        return Err(Error::LaunchLimit(format!(
            "no arm of `{}` can run `{}` (kind `{}`, {}×{}×{}{}{})",
            family.entry,
            spec.name,
            spec.kind,
            p.m,
            p.n,
            p.k,
            if p.row_norm {
                ", a row norm needs BN ≥ N"
            } else {
                ""
            },
            match fixed {
                Some((a, s)) => format!(", fixed to arm {a} with {s} splits"),
                None => String::new(),
            }
        )));
    }
    Ok(out)
}

fn variant(
    arm: usize,
    plan: &Plan,
    p: &Problem,
    props: &DeviceProps,
    opts: &ScheduleOptions,
) -> Variant {
    let t = plan.tile;
    Variant {
        arm,
        tile: t,
        splits: plan.splits,
        k_per_split: plan.k_per_split,
        tiles_m: plan.grid.1,
        tiles_n: plan.grid.0,
        task_us: task_us(p, &t, plan, props, &opts.roofline),
        reduce_us: if plan.splits > 1 {
            (plan.splits - 1) as f64 * (t.bm * t.bn) as f64 * 4.0
                / (opts.roofline.sm_load_gbs * 1e3)
        } else {
            0.0
        },
        alone_us: plan.predicted_us,
        fills: plan.ctas() >= props.sm_count as u64 * plan.model.ctas_per_sm.max(1) as u64,
    }
}

/// Model time of one task of `plan` alone on an SM: the tile's (one K split's) model time on a
/// one-SM device without the launch.
fn task_us(p: &Problem, tile: &TileShape, plan: &Plan, props: &DeviceProps, r: &Roofline) -> f64 {
    let one = DeviceProps {
        sm_count: 1,
        ..*props
    };
    let k = if plan.splits > 1 {
        plan.k_per_split.min(p.k)
    } else {
        p.k
    };
    let sub = Problem {
        m: p.m.min(tile.bm),
        n: p.n.min(tile.bn),
        k,
        ..*p
    };
    match Planner::new(one).with_roofline(*r).evaluate(&sub, tile, 1) {
        Some(s) => s.model.sm_us.max(s.model.l2_us) + r.wave_fixed_us,
        None => plan.predicted_us / plan.ctas().max(1) as f64,
    }
}

/// A total order on non-negative times for the heaps.
#[derive(Clone, Copy, PartialEq)]
struct Time(f64);
impl Eq for Time {}
impl PartialOrd for Time {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Time {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// Longest-task-first makespan of independent tasks `(count, duration)` on `g` vEUs. Beyond
/// 32 tasks per vEU, Graham's list-scheduling bound (total / g + longest) stands in for the
/// simulation (big operators, which fall back to plain launches anyway).
fn lpt_makespan(groups: &[(u32, f64)], g: usize) -> f64 {
    let g = g.max(1);
    let tasks: u64 = groups.iter().map(|&(c, _)| c as u64).sum();
    if tasks > 32 * g as u64 {
        let total: f64 = groups.iter().map(|&(c, d)| c as f64 * d).sum();
        let longest = groups.iter().map(|&(_, d)| d).fold(0.0, f64::max);
        return total / g as f64 + longest;
    }
    let mut sorted: Vec<(u32, f64)> = groups.to_vec();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut heap: BinaryHeap<std::cmp::Reverse<Time>> = (0..g.max(1))
        .map(|_| std::cmp::Reverse(Time(0.0)))
        .collect();
    let mut end: f64 = 0.0;
    for (count, d) in sorted {
        for _ in 0..count {
            let std::cmp::Reverse(Time(t)) = heap.pop().expect("g ≥ 1");
            end = end.max(t + d);
            heap.push(std::cmp::Reverse(Time(t + d)));
        }
    }
    end
}

/// Per wave, the variant of each operator that minimizes the wave's makespan.
fn choose_wave_variants(wave: &[usize], cands: &[Vec<Variant>], g: usize, slow: f64) -> Vec<usize> {
    // Start from the fastest alone.
    let mut pick: Vec<usize> = wave
        .iter()
        .map(|&op| {
            let c = &cands[op];
            (0..c.len())
                .min_by(|&a, &b| c[a].alone_us.total_cmp(&c[b].alone_us))
                .expect("non-empty")
        })
        .collect();
    // The tasks, plus one reduction per split tile; no operator finishes before one split and
    // its reduction.
    let cost = |pick: &[usize]| {
        let mut groups: Vec<(u32, f64)> = Vec::new();
        let mut chain: f64 = 0.0;
        for (&op, &i) in wave.iter().zip(pick) {
            let v = &cands[op][i];
            groups.push((v.tasks(), v.task_us * slow));
            if v.splits > 1 {
                groups.push((v.tiles_m.saturating_mul(v.tiles_n), v.reduce_us * slow));
            }
            chain = chain.max((v.task_us + v.reduce_us) * slow);
        }
        lpt_makespan(&groups, g).max(chain)
    };
    let mut best = cost(&pick);
    for _round in 0..4 {
        let mut changed = false;
        for w in 0..wave.len() {
            for i in 0..cands[wave[w]].len() {
                if i == pick[w] {
                    continue;
                }
                let old = pick[w];
                pick[w] = i;
                let c = cost(&pick);
                // Strictly better, by a margin that ignores rounding noise.
                if c < best * (1.0 - 1e-9) {
                    best = c;
                    changed = true;
                } else {
                    pick[w] = old;
                }
            }
        }
        if !changed {
            break;
        }
    }
    pick
}

/// A dependency of a task on a producer's row blocks, before counters are numbered.
#[derive(Clone, Debug, PartialEq)]
struct Need {
    op: usize,
    first_block: u32,
    blocks: u32,
}

/// vEUs ordered by (free time, then index descending), for the placement rule in O(log G).
type FreeSet = BTreeSet<(Time, std::cmp::Reverse<usize>)>;

#[derive(Clone)]
struct Placer {
    free: Vec<f64>,
    by_free: FreeSet,
    /// Per in-program operator, the latest end of each row block.
    rb_end: BTreeMap<usize, Vec<f64>>,
    tasks: Vec<(PlacedTask, Vec<Need>)>,
    ops: Vec<usize>,
}

impl Placer {
    fn new(g: usize) -> Self {
        Placer {
            free: vec![0.0; g],
            by_free: (0..g).map(|e| (Time(0.0), std::cmp::Reverse(e))).collect(),
            rb_end: BTreeMap::new(),
            tasks: Vec::new(),
            ops: Vec::new(),
        }
    }

    /// The vEU where a task ready at `ready` starts first: among those free by then, the one
    /// that freed last (keeping earlier-free vEUs for others), lowest index on ties; if none is
    /// free by then, the one that frees first, lowest index on ties.
    fn pick(&self, ready: f64) -> usize {
        use std::cmp::Reverse;
        if let Some(&(_, Reverse(e))) = self.by_free.range(..=(Time(ready), Reverse(0))).next_back()
        {
            return e;
        }
        let (Time(f0), _) = *self.by_free.first().expect("g ≥ 1");
        let &(_, Reverse(e)) = self
            .by_free
            .range(..=(Time(f0), Reverse(0)))
            .next_back()
            .expect("the first entry is in range");
        e
    }

    fn makespan(&self) -> f64 {
        self.free.iter().copied().fold(0.0, f64::max)
    }

    fn place(&mut self, graph: &WaveGraph, wave: &[usize], vars: &[Option<Variant>], slow: f64) {
        for &op in wave {
            let v = vars[op].expect("variant chosen");
            let m = graph.ops()[op].problem.m;
            let mut ends = vec![0.0f64; v.tiles_m as usize];
            for tm in 0..v.tiles_m {
                // Saturating: the last row block may end past u32::MAX; it is clipped to M.
                let (r0, r1) = (
                    tm.saturating_mul(v.tile.bm),
                    (tm + 1).saturating_mul(v.tile.bm).min(m),
                );
                let mut needs: Vec<Need> = Vec::new();
                let mut ready: f64 = 0.0;
                for dep in graph.deps_of(op) {
                    let Some(done) = self.rb_end.get(&dep.producer) else {
                        continue;
                    };
                    let pv = vars[dep.producer].expect("producer placed first");
                    let pm = graph.ops()[dep.producer].problem.m;
                    let mut blocks = vec![false; pv.tiles_m as usize];
                    for (lo, hi) in producer_rows(&dep.rows, r0, r1, pm) {
                        for b in lo / pv.tile.bm..=(hi - 1) / pv.tile.bm {
                            blocks[b as usize] = true;
                        }
                    }
                    let mut b = 0;
                    while b < blocks.len() {
                        if !blocks[b] {
                            b += 1;
                            continue;
                        }
                        let first = b;
                        while b < blocks.len() && blocks[b] {
                            ready = ready.max(done[b]);
                            b += 1;
                        }
                        needs.push(Need {
                            op: dep.producer,
                            first_block: first as u32,
                            blocks: (b - first) as u32,
                        });
                    }
                }
                for tn in 0..v.tiles_n {
                    let first = self.tasks.len();
                    for s in 0..v.splits {
                        let d = v.task_us * slow;
                        let best = self.pick(ready);
                        let start = self.free[best].max(ready);
                        self.by_free
                            .remove(&(Time(self.free[best]), std::cmp::Reverse(best)));
                        self.free[best] = start + d;
                        self.by_free
                            .insert((Time(start + d), std::cmp::Reverse(best)));
                        ends[tm as usize] = ends[tm as usize].max(start + d);
                        self.tasks.push((
                            PlacedTask {
                                op,
                                tile_m: tm,
                                tile_n: tn,
                                split: s,
                                cta: best as u32,
                                start_us: start,
                                end_us: start + d,
                                waits: Vec::new(),
                                signal: None,
                            },
                            needs.clone(),
                        ));
                    }
                    if v.splits > 1 {
                        // The last split to finish reduces the tile: it and its vEU take longer.
                        let last = (first..self.tasks.len())
                            .max_by(|&a, &b| {
                                self.tasks[a].0.end_us.total_cmp(&self.tasks[b].0.end_us)
                            })
                            .expect("splits ≥ 2");
                        let (e, end) = (self.tasks[last].0.cta as usize, self.tasks[last].0.end_us);
                        let extended = end + v.reduce_us * slow;
                        self.tasks[last].0.end_us = extended;
                        if self.free[e] == end {
                            self.by_free.remove(&(Time(end), std::cmp::Reverse(e)));
                            self.free[e] = extended;
                            self.by_free.insert((Time(extended), std::cmp::Reverse(e)));
                        }
                        ends[tm as usize] = ends[tm as usize].max(extended);
                    }
                }
            }
            self.rb_end.insert(op, ends);
            self.ops.push(op);
        }
    }

    /// Numbers counters, resolves waits, compacts CTAs.
    fn finish(self, vars: &[Option<Variant>], ctas_per_sm: u32) -> PersistentProgram {
        let makespan_us = self.makespan();
        let mut waited: BTreeMap<usize, u32> = BTreeMap::new();
        for (_, needs) in &self.tasks {
            for n in needs {
                waited.insert(n.op, 0);
            }
        }
        let mut counters = 0u32;
        for (op, base) in waited.iter_mut() {
            *base = counters;
            counters += vars[*op].expect("placed").tiles_m;
        }
        let mut used: Vec<u32> = self.tasks.iter().map(|(t, _)| t.cta).collect();
        used.sort_unstable();
        used.dedup();
        let cta_of = |v: u32| used.binary_search(&v).expect("used") as u32;
        let mut cta_lists = vec![Vec::new(); used.len()];
        let tasks: Vec<PlacedTask> = self
            .tasks
            .into_iter()
            .enumerate()
            .map(|(i, (mut t, needs))| {
                t.cta = cta_of(t.cta);
                cta_lists[t.cta as usize].push(i);
                t.signal = waited.get(&t.op).map(|b| b + t.tile_m);
                t.waits = needs
                    .iter()
                    .map(|n| Wait {
                        first: waited[&n.op] + n.first_block,
                        count: n.blocks,
                        target: vars[n.op].expect("placed").tasks_per_row_block(),
                        _pad: 0,
                    })
                    .collect();
                t
            })
            .collect();
        let mut ops = self.ops;
        ops.sort_unstable();
        PersistentProgram {
            ops,
            ctas: used.len() as u32,
            ctas_per_sm,
            tasks,
            cta_lists,
            counters,
            makespan_us,
        }
    }
}

/// All candidates of every operator.
fn all_candidates(
    graph: &WaveGraph,
    family: &Family,
    props: &DeviceProps,
    opts: &ScheduleOptions,
) -> Result<Vec<Vec<Variant>>> {
    family.check()?;
    (0..graph.ops().len())
        .map(|op| candidates(graph, op, family, props, opts))
        .collect()
}

fn fastest_alone(c: &[Variant]) -> Variant {
    *c.iter()
        .min_by(|a, b| a.alone_us.total_cmp(&b.alone_us))
        .expect("non-empty")
}

/// Schedules `graph` on `family` (see the [module docs](self)).
///
/// # Errors
/// [`Error::LaunchLimit`] when an operator has no launchable variant or the vDevice has no
/// CTA slot; [`Error::TooLarge`] when `vdev.sms` × the CTAs per SM tried exceeds
/// [`MAX_VEUS`]; [`Error::InvalidArgument`] for an inconsistent family.
pub fn schedule(
    graph: &WaveGraph,
    family: &Family,
    props: &DeviceProps,
    vdev: VDevice,
    opts: &ScheduleOptions,
) -> Result<Schedule> {
    if vdev.sms == 0 || vdev.ctas_per_sm == 0 {
        return Err(Error::LaunchLimit(format!(
            "`{}` cannot be resident on this device ({} SMs × {} CTAs per SM)",
            family.entry, vdev.sms, vdev.ctas_per_sm
        )));
    }
    let max_r = opts.max_ctas_per_sm.clamp(1, vdev.ctas_per_sm);
    // Every r up to max_r gets a placement with per-vEU state: bound the largest.
    let veus = vdev.sms as u64 * max_r as u64;
    if veus > MAX_VEUS {
        return Err(Error::TooLarge {
            arg: "vdev.sms × CTAs per SM",
            max: MAX_VEUS,
            actual: veus,
        });
    }
    let cands = all_candidates(graph, family, props, opts)?;
    let waves = graph.waves();
    let launch = opts.roofline.launch_us;
    let mut best: Option<Schedule> = None;
    for r in 1..=max_r {
        // At most MAX_VEUS, checked above.
        let g = (vdev.sms as u64 * r as u64) as usize;
        let slow = r as f64 / (1.0 + opts.co_resident_speedup * (r - 1) as f64);
        let mut vars: Vec<Option<Variant>> = vec![None; graph.ops().len()];
        let mut programs: Vec<(Placer, f64)> = Vec::new();
        let mut cur: Option<Placer> = None;
        for wave in &waves {
            let pick = choose_wave_variants(wave, &cands, g, slow);
            for (&op, &i) in wave.iter().zip(&pick) {
                vars[op] = Some(cands[op][i]);
            }
            let mut alone = Placer::new(g);
            alone.place(graph, wave, &vars, slow);
            cur = Some(match cur.take() {
                None => alone,
                Some(p) => {
                    let mut merged = p.clone();
                    merged.place(graph, wave, &vars, slow);
                    let t_pw = launch + merged.makespan();
                    let t_sep = 2.0 * launch + p.makespan() + alone.makespan();
                    if opts.merge && t_pw <= t_sep {
                        merged
                    } else {
                        let m = p.makespan();
                        programs.push((p, m));
                        alone
                    }
                }
            });
        }
        if let Some(p) = cur {
            let m = p.makespan();
            programs.push((p, m));
        }
        let mut out = Vec::new();
        let mut predicted = 0.0;
        for (placer, makespan) in programs {
            let ops = {
                let mut o = placer.ops.clone();
                o.sort_unstable();
                o
            };
            let plain = opts.fallback
                && (ops.len() == 1 || ops.iter().all(|&op| fastest_alone(&cands[op]).fills));
            if plain {
                for &op in &ops {
                    let v = if opts.fixed.get(op).copied().flatten().is_some() {
                        vars[op].expect("chosen")
                    } else {
                        fastest_alone(&cands[op])
                    };
                    vars[op] = Some(v);
                    predicted += v.alone_us;
                }
                out.push(Program::Launches(ops));
            } else {
                predicted += launch + makespan;
                out.push(Program::Persistent(placer.finish(&vars, r)));
            }
        }
        let s = Schedule {
            variants: vars.into_iter().map(|v| v.expect("every op")).collect(),
            programs: out,
            waves: waves.clone(),
            vdevice: vdev,
            ctas_per_sm: r,
            predicted_us: predicted,
        };
        if best
            .as_ref()
            .is_none_or(|b| s.predicted_us < b.predicted_us * (1.0 - 1e-9))
        {
            best = Some(s);
        }
    }
    Ok(best.expect("r = 1 is always tried"))
}

/// The per-operator baseline: every operator launched alone, in program order, with its
/// fastest-alone variant (or the fixed one).
///
/// # Errors
/// As [`schedule`].
pub fn per_op(
    graph: &WaveGraph,
    family: &Family,
    props: &DeviceProps,
    vdev: VDevice,
    opts: &ScheduleOptions,
) -> Result<Schedule> {
    let cands = all_candidates(graph, family, props, opts)?;
    let variants: Vec<Variant> = cands.iter().map(|c| fastest_alone(c)).collect();
    Ok(Schedule {
        predicted_us: variants.iter().map(|v| v.alone_us).sum(),
        programs: vec![Program::Launches((0..variants.len()).collect())],
        variants,
        waves: graph.waves(),
        vdevice: vdev,
        ctas_per_sm: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::PtxSet;
    use crate::schedule::dag::{OpSpec, Region};
    use crate::schedule::family::Arm;
    use crate::tensor::MatrixDesc;
    use fused_gemm_device::gemm::GemmArgs;
    use fused_gemm_device::kernel::persistent::EPI_WORDS;
    use fused_gemm_device::types::DType;

    const T16: TileShape = TileShape::new(16, 64, 64, 1, 4, 4);
    static ARMS: [Arm; 1] = [Arm {
        kind: "bias_relu",
        tile: T16,
        grid_entry: "relu",
    }];
    static SET: PtxSet = PtxSet::new("none", &[]);
    static FAM: Family = Family {
        entry: "waves",
        ptx: &SET,
        input: DType::Bf16,
        output: DType::Bf16,
        threads: 128,
        smem_bytes: 64 * 1024,
        min_ctas_per_sm: 2,
        arms: &ARMS,
    };

    /// One 64×64×64 bf16 operator.
    fn one_op() -> WaveGraph {
        let md = |ptr, rows, cols| MatrixDesc::contiguous(ptr, rows, cols, DType::Bf16);
        let (a, w, c) = (
            md(0x10000, 64, 64),
            md(0x20000, 64, 64),
            md(0x30000, 64, 64),
        );
        let mut g = WaveGraph::new();
        g.add(OpSpec {
            name: "op".into(),
            kind: "bias_relu",
            problem: Problem::gemm(64, 64, 64, DType::Bf16),
            args: GemmArgs {
                a: a.ptr,
                b: w.ptr,
                c: c.ptr,
                m: 64,
                n: 64,
                k: 64,
                lda: 64,
                ldb: 64,
                ldc: 64,
                splits: 1,
                ..GemmArgs::default()
            },
            epi: [0; EPI_WORDS],
            reads: vec![Region::rows(a), Region::whole(w)],
            writes: vec![Region::rows(c)],
        })
        .unwrap();
        g
    }

    #[test]
    fn candidates_of_an_operator_not_in_the_graph_are_an_error() {
        let props = DeviceProps::h200();
        let opts = ScheduleOptions::default();
        let e = candidates(&WaveGraph::new(), 0, &FAM, &props, &opts).unwrap_err();
        assert!(
            matches!(&e, Error::OutOfRange { arg: "op", bounds, actual }
                if bounds.starts_with("0..0") && actual == "0"),
            "{e}"
        );
        let g = one_op();
        assert!(!candidates(&g, 0, &FAM, &props, &opts).unwrap().is_empty());
        assert!(matches!(
            candidates(&g, 1, &FAM, &props, &opts),
            Err(Error::OutOfRange { .. })
        ));
    }

    #[test]
    fn vdevices_beyond_the_veu_bound_are_an_error() {
        let props = DeviceProps::h200();
        let opts = ScheduleOptions::default();
        let g = one_op();
        // u32::MAX SMs × 2 overflowed u32, and asked for a slot table per vEU.
        for (sms, ctas_per_sm, veus) in [
            (u32::MAX, 2, 2 * u32::MAX as u64),
            (u32::MAX, 1, u32::MAX as u64),
            ((1 << 15) + 1, 2, (1 << 16) + 2),
        ] {
            let vdev = VDevice { sms, ctas_per_sm };
            let e = schedule(&g, &FAM, &props, vdev, &opts).unwrap_err();
            assert!(
                matches!(e, Error::TooLarge { max: MAX_VEUS, actual, .. } if actual == veus),
                "{sms} × {ctas_per_sm}: {e}"
            );
        }
        // The bound itself schedules.
        let vdev = VDevice {
            sms: 1 << 15,
            ctas_per_sm: 2,
        };
        let s = schedule(&g, &FAM, &props, vdev, &opts).unwrap();
        assert_eq!(s.variants.len(), 1);
        assert!(s.ctas_per_sm >= 1 && s.ctas_per_sm <= 2);
    }

    #[test]
    fn task_counts_saturate() {
        let v = Variant {
            arm: 0,
            tile: T16,
            splits: 16,
            k_per_split: 64,
            tiles_m: 65535,
            tiles_n: 1 << 26,
            task_us: 1.0,
            reduce_us: 0.0,
            alone_us: 1.0,
            fills: true,
        };
        assert_eq!(v.tasks(), u32::MAX);
        assert_eq!(v.tasks_per_row_block(), 1 << 30);
    }

    #[test]
    fn lpt_makespan_balances() {
        assert_eq!(lpt_makespan(&[(4, 1.0)], 4), 1.0);
        assert_eq!(lpt_makespan(&[(5, 1.0)], 4), 2.0);
        // 3 + 1 + 1 + 1 on two vEUs: {3}, {1, 1, 1}.
        assert_eq!(lpt_makespan(&[(1, 3.0), (3, 1.0)], 2), 3.0);
        assert_eq!(lpt_makespan(&[], 3), 0.0);
        // Many tasks per vEU: the bound.
        assert_eq!(lpt_makespan(&[(1000, 1.0)], 10), 101.0);
    }

    #[test]
    fn placement_prefers_the_latest_veu_free_by_the_ready_time() {
        let mut p = Placer::new(4);
        let set = |p: &mut Placer, e: usize, f: f64| {
            p.by_free.remove(&(Time(p.free[e]), std::cmp::Reverse(e)));
            p.free[e] = f;
            p.by_free.insert((Time(f), std::cmp::Reverse(e)));
        };
        assert_eq!(p.pick(0.0), 0);
        set(&mut p, 0, 5.0);
        set(&mut p, 1, 3.0);
        set(&mut p, 2, 3.0);
        set(&mut p, 3, 9.0);
        // Free by 4: vEUs 1 and 2 (3.0), the lower index wins.
        assert_eq!(p.pick(4.0), 1);
        // Free by 6: vEU 0 freed last (5.0).
        assert_eq!(p.pick(6.0), 0);
        // Nothing free by 1: the first to free, lowest index.
        assert_eq!(p.pick(1.0), 1);
    }
}
