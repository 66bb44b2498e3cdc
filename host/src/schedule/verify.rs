//! Checks of a [`Schedule`] against its graph, independent of how it was built: what the device
//! needs for a correct, deadlock-free run.
//!
//! - every operator is in exactly one program, after the programs of its producers; its variant
//!   is an arm of its kind (a row norm's tile spans the row);
//! - in a persistent program, every task of every operator is placed exactly once, on a CTA
//!   within the vDevice (no more CTAs than `SMs × CTAs per SM`), each CTA's list in global order;
//! - every ready counter is signalled by the tasks of one (operator, row block) only, and every
//!   wait's target is the number of tasks signalling it;
//! - for every dependency inside a program, every producer task in a row block the consumer's
//!   tile reads is placed before the consumer in global order and covered by one of its waits.
//!
//! The last two make the device's waits sufficient (no read before its producer's write) and
//! the order makes them deadlock-free (see `fused_gemm_device::kernel::persistent`).

use std::collections::BTreeMap;

use super::dag::{WaveGraph, producer_rows};
use super::family::Family;
use super::waves::{Program, Schedule};

/// Checks `s` (see the [module docs](self)); the error says what is wrong.
pub fn verify(graph: &WaveGraph, family: &Family, s: &Schedule) -> Result<(), String> {
    let n = graph.ops().len();
    if s.variants.len() != n {
        return Err(format!("{} variants for {n} operators", s.variants.len()));
    }
    for (op, v) in s.variants.iter().enumerate() {
        let spec = &graph.ops()[op];
        let arm = family
            .arms
            .get(v.arm)
            .ok_or_else(|| format!("op {op}: arm {} out of range", v.arm))?;
        if arm.kind != spec.kind || arm.tile != v.tile {
            return Err(format!(
                "op {op} (`{}`) runs on arm {} ({}, {:?})",
                spec.kind, v.arm, arm.kind, arm.tile
            ));
        }
        let p = &spec.problem;
        if p.row_norm && v.tile.bn < p.n {
            return Err(format!(
                "op {op}: row norm over N = {} on BN = {}",
                p.n, v.tile.bn
            ));
        }
        if v.tiles_m != p.m.div_ceil(v.tile.bm) || v.tiles_n != p.n.div_ceil(v.tile.bn) {
            return Err(format!("op {op}: tile counts {}×{}", v.tiles_m, v.tiles_n));
        }
        if v.splits == 0 || (v.splits > 1 && (v.k_per_split as u64 * v.splits as u64) < p.k as u64)
        {
            return Err(format!(
                "op {op}: {} splits of {} cover K = {}",
                v.splits, v.k_per_split, p.k
            ));
        }
    }
    let mut program_of = vec![usize::MAX; n];
    for (pi, prog) in s.programs.iter().enumerate() {
        let ops: &[usize] = match prog {
            Program::Persistent(p) => &p.ops,
            Program::Launches(o) => o,
        };
        for &op in ops {
            if op >= n {
                return Err(format!("program {pi}: op {op} out of range"));
            }
            if program_of[op] != usize::MAX {
                return Err(format!("op {op} in programs {} and {pi}", program_of[op]));
            }
            program_of[op] = pi;
        }
        if let Program::Launches(o) = prog
            && o.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(format!("program {pi}: launches out of program order"));
        }
    }
    if let Some(op) = program_of.iter().position(|&p| p == usize::MAX) {
        return Err(format!("op {op} is in no program"));
    }
    for d in graph.deps() {
        if program_of[d.producer] > program_of[d.consumer] {
            return Err(format!(
                "op {} (program {}) runs before its producer {} (program {})",
                d.consumer, program_of[d.consumer], d.producer, program_of[d.producer]
            ));
        }
    }
    for (pi, prog) in s.programs.iter().enumerate() {
        if let Program::Persistent(p) = prog {
            check_persistent(graph, s, pi, p, &program_of)?;
        }
    }
    Ok(())
}

fn check_persistent(
    graph: &WaveGraph,
    s: &Schedule,
    pi: usize,
    p: &super::waves::PersistentProgram,
    program_of: &[usize],
) -> Result<(), String> {
    let cap = s.vdevice.sms as u64 * s.vdevice.ctas_per_sm as u64;
    if p.ctas == 0 || p.ctas as u64 > cap || p.ctas_per_sm > s.vdevice.ctas_per_sm {
        return Err(format!(
            "program {pi}: {} CTAs ({} per SM) on a vDevice of {cap}",
            p.ctas, p.ctas_per_sm
        ));
    }
    if p.cta_lists.len() != p.ctas as usize {
        return Err(format!(
            "program {pi}: {} lists for {} CTAs",
            p.cta_lists.len(),
            p.ctas
        ));
    }
    // Each task exactly once, on the CTA whose list holds it.
    let mut seen = vec![false; p.tasks.len()];
    for (c, list) in p.cta_lists.iter().enumerate() {
        if list.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "program {pi}: CTA {c}'s list is not in global order"
            ));
        }
        for &i in list {
            let t = p
                .tasks
                .get(i)
                .ok_or(format!("program {pi}: task {i} out of range"))?;
            if seen[i] || t.cta as usize != c {
                return Err(format!(
                    "program {pi}: task {i} listed twice or on the wrong CTA"
                ));
            }
            seen[i] = true;
        }
    }
    if seen.iter().any(|x| !x) {
        return Err(format!("program {pi}: a task is on no CTA's list"));
    }
    let mut by_tile: BTreeMap<(usize, u32, u32, u32), usize> = BTreeMap::new();
    for (i, t) in p.tasks.iter().enumerate() {
        if program_of[t.op] != pi {
            return Err(format!(
                "program {pi}: task of op {} from another program",
                t.op
            ));
        }
        let v = &s.variants[t.op];
        if t.tile_m >= v.tiles_m || t.tile_n >= v.tiles_n || t.split >= v.splits {
            return Err(format!(
                "program {pi}: task {i} outside op {}'s tiles",
                t.op
            ));
        }
        if by_tile
            .insert((t.op, t.tile_m, t.tile_n, t.split), i)
            .is_some()
        {
            return Err(format!("program {pi}: op {} tile placed twice", t.op));
        }
    }
    let expected: u64 = p.ops.iter().map(|&op| s.variants[op].tasks() as u64).sum();
    if expected != p.tasks.len() as u64 {
        return Err(format!(
            "program {pi}: {} tasks placed, {expected} expected",
            p.tasks.len()
        ));
    }
    // Counters: one (op, row block) each; count the signallers.
    let mut owner: BTreeMap<u32, (usize, u32)> = BTreeMap::new();
    let mut signals: BTreeMap<u32, u32> = BTreeMap::new();
    for t in &p.tasks {
        if let Some(c) = t.signal {
            if c >= p.counters {
                return Err(format!("program {pi}: counter {c} ≥ {}", p.counters));
            }
            if *owner.entry(c).or_insert((t.op, t.tile_m)) != (t.op, t.tile_m) {
                return Err(format!(
                    "program {pi}: counter {c} shared by two row blocks"
                ));
            }
            *signals.entry(c).or_default() += 1;
        }
    }
    for (i, t) in p.tasks.iter().enumerate() {
        for w in &t.waits {
            for c in w.first..w.first + w.count {
                let got = signals.get(&c).copied().unwrap_or(0);
                if got != w.target || got == 0 {
                    return Err(format!(
                        "program {pi}: task {i} waits for counter {c} to reach {} but {got} tasks signal it",
                        w.target
                    ));
                }
            }
        }
    }
    // Every in-program producer tile a task reads: earlier and waited for.
    for (i, t) in p.tasks.iter().enumerate() {
        let v = &s.variants[t.op];
        let m = graph.ops()[t.op].problem.m;
        let (r0, r1) = (t.tile_m * v.tile.bm, ((t.tile_m + 1) * v.tile.bm).min(m));
        for d in graph.deps_of(t.op) {
            if program_of[d.producer] != pi {
                continue;
            }
            let pv = &s.variants[d.producer];
            let pm = graph.ops()[d.producer].problem.m;
            for (lo, hi) in producer_rows(&d.rows, r0, r1, pm) {
                for b in lo / pv.tile.bm..=(hi - 1) / pv.tile.bm {
                    for tn in 0..pv.tiles_n {
                        for sp in 0..pv.splits {
                            let j = by_tile[&(d.producer, b, tn, sp)];
                            if j >= i {
                                return Err(format!(
                                    "program {pi}: task {i} (op {}) placed before its producer task {j} (op {})",
                                    t.op, d.producer
                                ));
                            }
                            let Some(c) = p.tasks[j].signal else {
                                return Err(format!(
                                    "program {pi}: producer task {j} of task {i} signals nothing"
                                ));
                            };
                            if !t
                                .waits
                                .iter()
                                .any(|w| (w.first..w.first + w.count).contains(&c))
                            {
                                return Err(format!(
                                    "program {pi}: task {i} (op {}) does not wait for counter {c} of op {} row block {b}",
                                    t.op, d.producer
                                ));
                            }
                        }
                    }
                }
            }
        }
        // No wait on a counter whose signallers come later.
        for w in &t.waits {
            for c in w.first..w.first + w.count {
                let (op, b) = owner[&c];
                let pv = &s.variants[op];
                for tn in 0..pv.tiles_n {
                    for sp in 0..pv.splits {
                        if by_tile[&(op, b, tn, sp)] >= i {
                            return Err(format!(
                                "program {pi}: task {i} waits on a task placed after it"
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
