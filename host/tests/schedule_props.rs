//! Property tests of the wave scheduler on random dataflow graphs (no GPU): every schedule
//! passes `verify`, and a simulated execution under random CTA interleavings never deadlocks
//! and never runs a task before the tasks whose bytes it reads (or overwrites) are done — an
//! oracle computed from byte ranges, independent of the scheduler's row-block bookkeeping.

use std::collections::BTreeMap;

use fused_gemm_device::gemm::{GemmArgs, TileShape};
use fused_gemm_device::kernel::persistent::{self, EPI_WORDS, INLINE_WAITS, NO_SIGNAL};
use fused_gemm_device::types::DType;
use fused_gemm_host::gpu::DeviceProps;
use fused_gemm_host::module::PtxSet;
use fused_gemm_host::plan::Problem;
use fused_gemm_host::schedule::table::{SplitScratch, encode};
use fused_gemm_host::schedule::verify::verify;
use fused_gemm_host::schedule::{
    Access, Arm, Family, OpSpec, Program, Region, Schedule, ScheduleOptions, VDevice, WaveGraph,
    per_op, schedule,
};
use fused_gemm_host::tensor::MatrixDesc;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

static NO_PTX: PtxSet = PtxSet::new("schedule-test", &[]);

const T16: TileShape = TileShape::new(16, 64, 64, 1, 4, 4);
const T64: TileShape = TileShape::new(64, 64, 32, 2, 2, 4);
const T128: TileShape = TileShape::new(128, 64, 32, 2, 2, 4);
const TROW: TileShape = TileShape::new(32, 384, 32, 1, 4, 3);

static FAMILY: Family = Family {
    entry: "test_family",
    ptx: &NO_PTX,
    input: DType::Bf16,
    output: DType::Bf16,
    threads: 128,
    smem_bytes: persistent::smem_bytes(&[T16, T64, T128, TROW]),
    min_ctas_per_sm: 2,
    arms: &[
        Arm {
            kind: "plain",
            tile: T16,
            grid_entry: "plain_t16",
        },
        Arm {
            kind: "plain",
            tile: T64,
            grid_entry: "plain_t64",
        },
        Arm {
            kind: "plain",
            tile: T128,
            grid_entry: "plain_t128",
        },
        Arm {
            kind: "norm",
            tile: TROW,
            grid_entry: "norm_t32x384",
        },
    ],
};

fn props(sms: u32) -> DeviceProps {
    DeviceProps {
        sm_count: sms,
        ..DeviceProps::h200()
    }
}

/// Fake device memory: a bump allocator of addresses.
struct Mem {
    next: u64,
}

impl Mem {
    fn alloc(&mut self, rows: usize, cols: usize) -> MatrixDesc {
        let ld = cols.next_multiple_of(8);
        let d = MatrixDesc::new(self.next, rows, cols, ld, DType::Bf16);
        self.next += ((rows * ld * 2) as u64).next_multiple_of(256) + 256;
        d
    }
}

fn op(
    name: String,
    kind: &'static str,
    a: MatrixDesc,
    w: MatrixDesc,
    c: MatrixDesc,
    extra_reads: Vec<Region>,
) -> OpSpec {
    let (m, k, n) = (a.rows as u32, a.cols as u32, w.rows as u32);
    let mut problem = Problem::gemm(m, n, k, DType::Bf16);
    problem.row_norm = kind == "norm";
    let mut reads = vec![Region::rows(a), Region::whole(w)];
    reads.extend(extra_reads);
    OpSpec {
        name,
        kind,
        problem,
        args: GemmArgs {
            a: a.ptr,
            b: w.ptr,
            c: c.ptr,
            m,
            n,
            k,
            lda: a.ld as u32,
            ldb: w.ld as u32,
            ldc: c.ld as u32,
            splits: 1,
            ..Default::default()
        },
        epi: [0; EPI_WORDS],
        reads,
        writes: vec![Region::rows(c)],
    }
}

fn sub(d: &MatrixDesc, r0: usize, rows: usize, c0: usize, cols: usize) -> MatrixDesc {
    MatrixDesc::new(
        d.ptr + ((r0 * d.ld + c0) * d.dtype.size()) as u64,
        rows,
        cols,
        d.ld,
        d.dtype,
    )
}

/// A random graph: operators reading earlier outputs (row and column windows of them), writing
/// into windows of a shared wide buffer (several producers per consumer operand, overwrites),
/// norms with residuals (sometimes C itself).
fn random_graph(seed: u64, n_ops: usize) -> WaveGraph {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut mem = Mem { next: 0x1000_0000 };
    let wide = mem.alloc(160, 2048);
    let mut outs: Vec<MatrixDesc> = Vec::new();
    let mut g = WaveGraph::new();
    for i in 0..n_ops {
        let norm = rng.random_bool(0.25);
        let n = if norm {
            8 * rng.random_range(1..=48usize)
        } else {
            8 * rng.random_range(1..=64usize)
        };
        let a = if !outs.is_empty() && rng.random_bool(0.6) {
            let p = outs[rng.random_range(0..outs.len())];
            let q = rng.random_range(0..=p.rows / 2);
            let c0 = 8 * rng.random_range(0..p.cols / 8);
            let k = 8 * rng.random_range(1..=(p.cols - c0) / 8);
            sub(&p, q, p.rows - q, c0, k)
        } else if rng.random_bool(0.3) {
            let rows = rng.random_range(1..=160usize);
            let c0 = 8 * rng.random_range(0..200usize);
            let k = 8 * rng.random_range(1..=48usize);
            sub(&wide, 160 - rows, rows, c0, k)
        } else {
            mem.alloc(rng.random_range(1..=160), 8 * rng.random_range(1..=64))
        };
        let m = a.rows;
        let c = if rng.random_bool(0.35) && n <= 2048 {
            let c0 = 8 * rng.random_range(0..=(2048 - n) / 8);
            let r0 = rng.random_range(0..=160 - m);
            sub(&wide, r0, m, c0, n)
        } else {
            mem.alloc(m, n)
        };
        let w = mem.alloc(n, a.cols);
        let mut extra = vec![Region::whole(mem.alloc(1, n))];
        if norm && rng.random_bool(0.6) {
            let same: Vec<&MatrixDesc> =
                outs.iter().filter(|o| o.rows == m && o.cols == n).collect();
            let r = if rng.random_bool(0.3) {
                c
            } else if !same.is_empty() && rng.random_bool(0.5) {
                *same[rng.random_range(0..same.len())]
            } else {
                mem.alloc(m, n)
            };
            extra.push(Region::rows(r));
        }
        let kind = if norm { "norm" } else { "plain" };
        let spec = op(format!("op{i}"), kind, a, w, c, extra);
        // A random window may make an operator read what it writes; such operators are
        // rejected, which is itself checked.
        match g.add(spec) {
            Ok(_) => outs.push(c),
            Err(e) => assert!(
                matches!(e, fused_gemm_host::Error::Aliasing { .. }),
                "unexpected error {e}"
            ),
        }
    }
    g
}

/// Sorted, disjoint byte ranges `[lo, hi)`.
type Intervals = Vec<(u64, u64)>;

/// Byte intervals `[lo, hi)` of rows `r0..r1` of the operator's regions (all rows of `Whole`
/// ones), merged.
fn intervals(regions: &[Region], r0: usize, r1: usize) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for r in regions {
        let d = &r.desc;
        let (lo, hi) = match r.access {
            Access::Rows => (r0.min(d.rows), r1.min(d.rows)),
            Access::Whole => (0, d.rows),
        };
        let size = d.dtype.size() as u64;
        for row in lo..hi {
            let start = d.ptr + (row * d.ld) as u64 * size;
            v.push((start, start + d.cols as u64 * size));
        }
    }
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (lo, hi) in v {
        match out.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

fn meet(x: &[(u64, u64)], y: &[(u64, u64)]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < x.len() && j < y.len() {
        if x[i].1 <= y[j].0 {
            i += 1;
        } else if y[j].1 <= x[i].0 {
            j += 1;
        } else {
            return true;
        }
    }
    false
}

/// Simulates `s` under random interleavings of resident CTAs (the device semantics of ready
/// counters and waits) and checks every task against the byte-range oracle.
fn simulate(g: &WaveGraph, s: &Schedule, seed: u64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let ops = g.ops();
    // Per (op, row block): read and write intervals.
    let block = |op: usize, b: u32| {
        let v = &s.variants[op];
        let m = ops[op].problem.m as usize;
        let r0 = (b * v.tile.bm) as usize;
        let r1 = (r0 + v.tile.bm as usize).min(m);
        (
            intervals(&ops[op].reads, r0, r1),
            intervals(&ops[op].writes, r0, r1),
        )
    };
    let mut blocks: BTreeMap<(usize, u32), (Intervals, Intervals)> = BTreeMap::new();
    for op in 0..ops.len() {
        for b in 0..s.variants[op].tiles_m {
            blocks.insert((op, b), block(op, b));
        }
    }
    let conflicts = |j: usize, bj: u32, i: usize, bi: u32| {
        let (rj, wj) = &blocks[&(j, bj)];
        let (ri, wi) = &blocks[&(i, bi)];
        meet(rj, wi) || meet(wj, ri) || meet(wj, wi)
    };
    let mut program_of = vec![0; ops.len()];
    for (pi, p) in s.programs.iter().enumerate() {
        let o = match p {
            Program::Persistent(p) => p.ops.clone(),
            Program::Launches(o) => o.clone(),
        };
        for op in o {
            program_of[op] = pi;
        }
    }
    for (pi, p) in s.programs.iter().enumerate() {
        let Program::Persistent(p) = p else { continue };
        let mut counters = vec![0u32; p.counters as usize];
        let mut done_in_block: BTreeMap<(usize, u32), u32> = BTreeMap::new();
        let mut next = vec![0usize; p.cta_lists.len()];
        let mut left = p.tasks.len();
        while left > 0 {
            let runnable: Vec<usize> = (0..p.cta_lists.len())
                .filter(|&c| {
                    next[c] < p.cta_lists[c].len() && {
                        let t = &p.tasks[p.cta_lists[c][next[c]]];
                        t.waits.iter().all(|w| {
                            (w.first..w.first + w.count).all(|k| counters[k as usize] >= w.target)
                        })
                    }
                })
                .collect();
            if runnable.is_empty() {
                return Err(format!("program {pi}: deadlock with {left} tasks left"));
            }
            let c = runnable[rng.random_range(0..runnable.len())];
            let t = &p.tasks[p.cta_lists[c][next[c]]];
            // Oracle: every earlier operator's row block touching the same bytes is done.
            for (i, &prog_i) in program_of.iter().enumerate().take(t.op) {
                for bi in 0..s.variants[i].tiles_m {
                    if !conflicts(t.op, t.tile_m, i, bi) {
                        continue;
                    }
                    if prog_i > pi {
                        return Err(format!("op {} runs before op {i}", t.op));
                    }
                    if prog_i == pi {
                        let got = done_in_block.get(&(i, bi)).copied().unwrap_or(0);
                        if got < s.variants[i].tasks_per_row_block() {
                            return Err(format!(
                                "program {pi}: op {} row block {} ran before op {i} row block {bi} was done",
                                t.op, t.tile_m
                            ));
                        }
                    }
                }
            }
            *done_in_block.entry((t.op, t.tile_m)).or_default() += 1;
            if let Some(k) = t.signal {
                counters[k as usize] += 1;
            }
            next[c] += 1;
            left -= 1;
        }
    }
    Ok(())
}

fn check_tables(g: &WaveGraph, s: &Schedule) {
    for p in &s.programs {
        let Program::Persistent(p) = p else { continue };
        let t = encode(g, &s.variants, p, &|_| SplitScratch::default()).unwrap();
        assert_eq!(t.cta_offsets.len(), p.ctas as usize + 1);
        assert_eq!(*t.cta_offsets.last().unwrap() as usize, p.tasks.len());
        let mut k = 0;
        for (c, list) in p.cta_lists.iter().enumerate() {
            assert_eq!(t.cta_offsets[c] as usize, k);
            for &i in list {
                let (dev, host) = (&t.tasks[k], &p.tasks[i]);
                assert_eq!(
                    (dev.tile_m, dev.tile_n, dev.split),
                    (host.tile_m, host.tile_n, host.split)
                );
                assert_eq!(dev.arm as usize, s.variants[host.op].arm);
                assert_eq!(dev.signal, host.signal.unwrap_or(NO_SIGNAL));
                assert_eq!(dev.n_waits as usize, host.waits.len());
                for (j, w) in host.waits.iter().enumerate() {
                    let got = if j < INLINE_WAITS {
                        dev.waits[j]
                    } else {
                        t.overflow[dev.waits_overflow as usize + j - INLINE_WAITS]
                    };
                    assert_eq!(got, *w);
                }
                assert_eq!(dev.args.splits, s.variants[host.op].splits);
                k += 1;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_schedule_correctly(
        seed in any::<u64>(),
        n_ops in 1usize..10,
        sms in 1u32..12,
        per_sm in 1u32..4,
        max_r in 1u32..4,
        merge in any::<bool>(),
        fallback in any::<bool>(),
    ) {
        let g = random_graph(seed, n_ops);
        let vdev = VDevice { sms, ctas_per_sm: per_sm };
        let opts = ScheduleOptions { max_ctas_per_sm: max_r, merge, fallback, max_splits: 4, ..Default::default() };
        let s = schedule(&g, &FAMILY, &props(sms), vdev, &opts).unwrap();
        prop_assert_eq!(verify(&g, &FAMILY, &s), Ok(()));
        for k in 0..3 {
            prop_assert_eq!(simulate(&g, &s, seed ^ k), Ok(()));
        }
        check_tables(&g, &s);
        // The per-operator execution of the same variants is also a valid schedule.
        prop_assert_eq!(verify(&g, &FAMILY, &s.as_launches()), Ok(()));
        let base = per_op(&g, &FAMILY, &props(sms), vdev, &opts).unwrap();
        prop_assert_eq!(verify(&g, &FAMILY, &base), Ok(()));
    }
}

/// A chain of LSTM-like graphs through a shared diagonal buffer, as the LSTM workload lays it
/// out: every cell depends on exactly the cell below and the cell before.
fn lstm_graph(layers: usize, steps: usize, batch: usize, hidden: usize) -> WaveGraph {
    let mut mem = Mem { next: 0x2000_0000 };
    let cols = (layers + 1) * hidden;
    let d = mem.alloc((layers + steps) * batch, cols);
    let mut g = WaveGraph::new();
    for t in 0..steps {
        for l in 1..=layers {
            let u = l + t;
            let a = sub(&d, (u - 1) * batch, batch, (l - 1) * hidden, 2 * hidden);
            let h = sub(&d, u * batch, batch, l * hidden, hidden);
            let w = mem.alloc(4 * hidden, 2 * hidden);
            // N = 4H gate columns while C holds H: the cell's 4-to-1 epilogue.
            g.add(op(format!("l{l}t{t}"), "plain", a, w, h, vec![]))
                .unwrap();
        }
    }
    g
}

#[test]
fn lstm_cells_depend_on_the_cell_below_and_before() {
    let (layers, steps) = (3, 4);
    let g = lstm_graph(layers, steps, 4, 256);
    let idx = |l: usize, t: usize| t * layers + (l - 1);
    for t in 0..steps {
        for l in 1..=layers {
            let mut got: Vec<usize> = g.deps_of(idx(l, t)).map(|d| d.producer).collect();
            got.sort_unstable();
            let mut want = Vec::new();
            if t > 0 {
                want.push(idx(l, t - 1));
            }
            if l > 1 {
                want.push(idx(l - 1, t));
            }
            want.sort_unstable();
            assert_eq!(got, want, "cell l{l} t{t}");
        }
    }
    // Wavefront: wave w holds the cells with l − 1 + t = w.
    let waves = g.waves();
    assert_eq!(waves.len(), layers + steps - 1);
    assert_eq!(waves[2].len(), 3);
}

#[test]
fn lstm_stack_is_one_program_on_an_h200() {
    let g = lstm_graph(8, 8, 1, 256);
    let p = props(132);
    let vdev = VDevice::from_model(&p, &FAMILY);
    let s = schedule(&g, &FAMILY, &p, vdev, &ScheduleOptions::default()).unwrap();
    verify(&g, &FAMILY, &s).unwrap();
    simulate(&g, &s, 7).unwrap();
    assert_eq!(s.launches(), 1, "{:?}", s.programs.len());
    let base = per_op(&g, &FAMILY, &p, vdev, &ScheduleOptions::default()).unwrap();
    assert_eq!(base.launches(), 64);
    eprintln!(
        "LSTM 8×8 batch 1: predicted {:.1} µs in one program vs {:.1} µs per cell; wave variants {:?}",
        s.predicted_us,
        base.predicted_us,
        s.variants
            .iter()
            .map(|v| (v.tile.bm, v.splits))
            .collect::<Vec<_>>()
    );
    assert!(s.predicted_us < base.predicted_us);
}

#[test]
fn independent_gemms_fill_the_device_in_one_wave() {
    let mut mem = Mem { next: 0x3000_0000 };
    let mut g = WaveGraph::new();
    for i in 0..8 {
        let (a, w, c) = (
            mem.alloc(256, 256),
            mem.alloc(256, 256),
            mem.alloc(256, 256),
        );
        g.add(op(format!("g{i}"), "plain", a, w, c, vec![]))
            .unwrap();
    }
    let p = props(132);
    let vdev = VDevice::from_model(&p, &FAMILY);
    let s = schedule(&g, &FAMILY, &p, vdev, &ScheduleOptions::default()).unwrap();
    verify(&g, &FAMILY, &s).unwrap();
    assert_eq!(s.waves.len(), 1);
    assert_eq!(s.launches(), 1);
    let Program::Persistent(prog) = &s.programs[0] else {
        panic!("expected a persistent program")
    };
    // The wave's tasks occupy at least most of the SMs (the fastest-alone choice per operator
    // would give 8 × 4 = 32 tasks of 128×128 or 8 × 8 of 128×64).
    let tasks: u32 = s.variants.iter().map(|v| v.tasks()).sum();
    eprintln!(
        "8 × 256³: {tasks} tasks on {} CTAs, variants {:?}, predicted {:.1} µs",
        prog.ctas,
        s.variants
            .iter()
            .map(|v| (v.tile.bm, v.tile.bn, v.splits))
            .collect::<Vec<_>>(),
        s.predicted_us
    );
    assert!(
        tasks >= 100 && prog.ctas >= 100,
        "{tasks} tasks, {} CTAs",
        prog.ctas
    );
    let base = per_op(&g, &FAMILY, &p, vdev, &ScheduleOptions::default()).unwrap();
    assert!(s.predicted_us < base.predicted_us);
}

#[test]
fn operators_that_fill_the_gpu_fall_back_to_plain_launches() {
    let mut mem = Mem { next: 0x4000_0000 };
    let mut g = WaveGraph::new();
    for i in 0..2 {
        let (a, w, c) = (
            mem.alloc(4096, 4096),
            mem.alloc(4096, 4096),
            mem.alloc(4096, 4096),
        );
        g.add(op(format!("big{i}"), "plain", a, w, c, vec![]))
            .unwrap();
    }
    let p = props(132);
    let vdev = VDevice::from_model(&p, &FAMILY);
    let s = schedule(&g, &FAMILY, &p, vdev, &ScheduleOptions::default()).unwrap();
    verify(&g, &FAMILY, &s).unwrap();
    assert_eq!(s.programs, vec![Program::Launches(vec![0, 1])]);
    let base = per_op(&g, &FAMILY, &p, vdev, &ScheduleOptions::default()).unwrap();
    assert_eq!(s.variants, base.variants);
}

#[test]
fn a_chain_becomes_one_program_with_row_block_waits() {
    // out-proj (norm) → up (plain) → down (norm), MiniLM-shaped at 64 tokens.
    let mut mem = Mem { next: 0x5000_0000 };
    let x = mem.alloc(64, 384);
    let h1 = mem.alloc(64, 384);
    let f = mem.alloc(64, 1536);
    let y = mem.alloc(64, 384);
    let mut g = WaveGraph::new();
    let attn = mem.alloc(64, 384);
    g.add(op(
        "o".into(),
        "norm",
        attn,
        mem.alloc(384, 384),
        h1,
        vec![Region::rows(x)],
    ))
    .unwrap();
    g.add(op(
        "up".into(),
        "plain",
        h1,
        mem.alloc(1536, 384),
        f,
        vec![],
    ))
    .unwrap();
    g.add(op(
        "down".into(),
        "norm",
        f,
        mem.alloc(384, 1536),
        y,
        vec![Region::rows(h1)],
    ))
    .unwrap();
    assert_eq!(g.deps().len(), 3);
    let p = props(132);
    let vdev = VDevice::from_model(&p, &FAMILY);
    let s = schedule(&g, &FAMILY, &p, vdev, &ScheduleOptions::default()).unwrap();
    verify(&g, &FAMILY, &s).unwrap();
    simulate(&g, &s, 1).unwrap();
    assert_eq!(s.launches(), 1);
    let Program::Persistent(prog) = &s.programs[0] else {
        panic!("expected one persistent program")
    };
    // Every FFN-up task waits for exactly the out-proj row blocks of its rows.
    let (vo, vu) = (&s.variants[0], &s.variants[1]);
    for t in prog.tasks.iter().filter(|t| t.op == 1) {
        let r0 = t.tile_m * vu.tile.bm;
        let r1 = (r0 + vu.tile.bm).min(64);
        let blocks = (r1 - 1) / vo.tile.bm - r0 / vo.tile.bm + 1;
        assert_eq!(t.waits.len(), 1);
        assert_eq!(t.waits[0].count, blocks);
        assert_eq!(t.waits[0].target, vo.tasks_per_row_block());
    }
    eprintln!(
        "MiniLM chain: variants {:?}, {} CTAs, predicted {:.1} µs",
        s.variants
            .iter()
            .map(|v| (v.tile.bm, v.tile.bn, v.splits))
            .collect::<Vec<_>>(),
        prog.ctas,
        s.predicted_us
    );
}

#[test]
fn unschedulable_operators_are_typed_errors() {
    let mut mem = Mem { next: 0x6000_0000 };
    let mut g = WaveGraph::new();
    // A row norm over 512 columns: wider than the only row tile.
    g.add(op(
        "wide".into(),
        "norm",
        mem.alloc(8, 64),
        mem.alloc(512, 64),
        mem.alloc(8, 512),
        vec![],
    ))
    .unwrap();
    let p = props(132);
    let vdev = VDevice::from_model(&p, &FAMILY);
    let e = schedule(&g, &FAMILY, &p, vdev, &ScheduleOptions::default()).unwrap_err();
    assert!(e.to_string().contains("BN ≥ N"), "{e}");
    let mut g2 = WaveGraph::new();
    g2.add(op(
        "x".into(),
        "nope",
        mem.alloc(8, 64),
        mem.alloc(64, 64),
        mem.alloc(8, 64),
        vec![],
    ))
    .unwrap();
    assert!(schedule(&g2, &FAMILY, &p, vdev, &ScheduleOptions::default()).is_err());
    // No CTA slot at all.
    let mut g3 = WaveGraph::new();
    g3.add(op(
        "y".into(),
        "plain",
        mem.alloc(8, 64),
        mem.alloc(64, 64),
        mem.alloc(8, 64),
        vec![],
    ))
    .unwrap();
    let none = VDevice {
        sms: 132,
        ctas_per_sm: 0,
    };
    assert!(matches!(
        schedule(&g3, &FAMILY, &p, none, &ScheduleOptions::default()),
        Err(fused_gemm_host::Error::LaunchLimit(_))
    ));
    // An operator writing what it reads.
    let buf = mem.alloc(8, 128);
    let a = sub(&buf, 0, 8, 0, 64);
    let c = sub(&buf, 0, 8, 32, 64);
    assert!(matches!(
        g3.add(op("self".into(), "plain", a, mem.alloc(64, 64), c, vec![])),
        Err(fused_gemm_host::Error::Aliasing { .. })
    ));
}

#[test]
fn a_broken_schedule_is_caught() {
    let g = lstm_graph(2, 2, 2, 64);
    let p = props(8);
    let vdev = VDevice {
        sms: 8,
        ctas_per_sm: 2,
    };
    let s = schedule(&g, &FAMILY, &p, vdev, &ScheduleOptions::default()).unwrap();
    verify(&g, &FAMILY, &s).unwrap();
    let Program::Persistent(prog) = &s.programs[0] else {
        panic!("expected one persistent program")
    };
    // Drop a wait.
    let mut bad = s.clone();
    let Program::Persistent(bp) = &mut bad.programs[0] else {
        unreachable!()
    };
    let i = bp.tasks.iter().position(|t| !t.waits.is_empty()).unwrap();
    bp.tasks[i].waits.clear();
    assert!(verify(&g, &FAMILY, &bad).is_err());
    // Too many CTAs for the vDevice.
    let mut bad = s.clone();
    let Program::Persistent(bp) = &mut bad.programs[0] else {
        unreachable!()
    };
    bp.ctas = 17;
    assert!(verify(&g, &FAMILY, &bad).is_err());
    // A task listed twice.
    let mut bad = s.clone();
    let Program::Persistent(bp) = &mut bad.programs[0] else {
        unreachable!()
    };
    let first = bp.cta_lists[0][0];
    bp.cta_lists[0].push(first);
    assert!(verify(&g, &FAMILY, &bad).is_err());
    // A CTA list out of global order deadlocks in simulation and fails verification.
    let mut bad = s.clone();
    let Program::Persistent(bp) = &mut bad.programs[0] else {
        unreachable!()
    };
    if let Some(c) = bp.cta_lists.iter().position(|l| l.len() >= 2) {
        bp.cta_lists[c].reverse();
        assert!(verify(&g, &FAMILY, &bad).is_err());
    }
    assert!(prog.tasks.len() > 1);
}

/// The generator is not vacuous: most random graphs have dependencies, and most schedules
/// have persistent programs whose tasks wait on others (inline and overflow waits, split-K).
#[test]
fn random_graphs_exercise_waits() {
    let (mut with_deps, mut with_waits, mut overflow, mut split, mut whole) = (0, 0, 0, 0, 0);
    for seed in 0..60u64 {
        let g = random_graph(seed, 8);
        with_deps += (!g.deps().is_empty()) as u32;
        whole += g
            .deps()
            .iter()
            .any(|d| d.rows == fused_gemm_host::schedule::dag::DepRows::Whole)
            as u32;
        let vdev = VDevice {
            sms: 6,
            ctas_per_sm: 2,
        };
        let opts = ScheduleOptions {
            max_splits: 4,
            ..Default::default()
        };
        let s = schedule(&g, &FAMILY, &props(6), vdev, &opts).unwrap();
        verify(&g, &FAMILY, &s).unwrap();
        simulate(&g, &s, seed).unwrap();
        let tasks = s.programs.iter().flat_map(|p| match p {
            Program::Persistent(p) => p.tasks.clone(),
            Program::Launches(_) => Vec::new(),
        });
        let tasks: Vec<_> = tasks.collect();
        with_waits += tasks.iter().any(|t| !t.waits.is_empty()) as u32;
        overflow += tasks.iter().any(|t| t.waits.len() > INLINE_WAITS) as u32;
        split += s.variants.iter().any(|v| v.splits > 1) as u32;
    }
    eprintln!(
        "of 60 graphs: {with_deps} with dependencies ({whole} whole-operator), {with_waits} with waits, \
         {overflow} with overflow waits, {split} with split-K"
    );
    assert!(with_deps >= 40 && with_waits >= 30 && whole >= 5 && split >= 10);
}

/// A consumer of six producers' column slices waits on each: more waits than fit inline.
#[test]
fn concat_of_six_producers_uses_overflow_waits() {
    let mut mem = Mem { next: 0x7000_0000 };
    let cat = mem.alloc(40, 6 * 64);
    let mut g = WaveGraph::new();
    for i in 0..6 {
        let c = sub(&cat, 0, 40, 64 * i, 64);
        g.add(op(
            format!("p{i}"),
            "plain",
            mem.alloc(40, 32),
            mem.alloc(64, 32),
            c,
            vec![],
        ))
        .unwrap();
    }
    g.add(op(
        "cat".into(),
        "plain",
        cat,
        mem.alloc(64, 384),
        mem.alloc(40, 64),
        vec![],
    ))
    .unwrap();
    let vdev = VDevice {
        sms: 4,
        ctas_per_sm: 2,
    };
    let s = schedule(&g, &FAMILY, &props(4), vdev, &ScheduleOptions::default()).unwrap();
    verify(&g, &FAMILY, &s).unwrap();
    simulate(&g, &s, 3).unwrap();
    check_tables(&g, &s);
    let Program::Persistent(p) = &s.programs[0] else {
        panic!("expected one persistent program: {:?}", s.programs)
    };
    let last = p
        .tasks
        .iter()
        .filter(|t| t.op == 6)
        .map(|t| t.waits.len())
        .max();
    assert_eq!(last, Some(6));
}
