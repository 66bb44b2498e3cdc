//! Properties of the planner: every plan it returns is launchable, the model is monotone where
//! it must be, and construction takes microseconds.

use std::time::Instant;

use fused_gemm_device::gemm::{ROW_TILES_SM80, TILES_SM80};
use fused_gemm_device::types::DType;
use fused_gemm_host::gpu::DeviceProps;
use fused_gemm_host::plan::{DEFAULT_MAX_WORKSPACE, MAX_SPLITS, NormPath, Plan, Planner, Problem};
use fused_gemm_host::validate::BLayout;
use proptest::prelude::*;

fn planner() -> Planner {
    Planner::new(DeviceProps::h200())
}

/// Everything a launcher relies on.
fn assert_launchable(p: &Problem, plan: &Plan, props: &DeviceProps) {
    plan.launch_shape().check(props).unwrap();
    let t = &plan.tile;
    assert!(plan.ctas() >= 1);
    assert!(plan.grid.1 <= props.max_grid_y && plan.grid.2 <= props.max_grid_y);
    assert_eq!(plan.grid.0, p.n.div_ceil(t.bn));
    assert_eq!(plan.grid.1, p.m.div_ceil(t.bm));
    assert_eq!(plan.grid.2, plan.splits);
    assert_eq!(plan.block, (t.threads(), 1, 1));
    assert!(plan.smem_bytes <= props.smem_per_block_optin);
    assert!((1..=MAX_SPLITS).contains(&plan.splits));
    assert_eq!(plan.k_per_split % t.bk, 0);
    let k = p.k as u64;
    let (s, kps) = (plan.splits as u64, plan.k_per_split as u64);
    assert!(s * kps >= k, "{s} splits of {kps} do not cover K = {k}");
    if k > 0 {
        assert!(
            (s - 1) * kps < k,
            "the last of {s} splits of {kps} is empty for K = {k}"
        );
    } else {
        assert_eq!((s, kps), (1, 0));
    }
    let tiles = plan.grid.0 as u64 * plan.grid.1 as u64;
    if s > 1 {
        assert_eq!(
            plan.workspace_bytes,
            tiles * s * t.bm as u64 * t.bn as u64 * 4
        );
        assert_eq!(plan.counter_bytes, tiles * 4);
    } else {
        assert_eq!((plan.workspace_bytes, plan.counter_bytes), (0, 0));
    }
    match plan.norm {
        NormPath::None => assert!(!p.row_norm),
        NormPath::InCta => assert!(p.row_norm && t.bn >= p.n),
        NormPath::Partials {
            tiles_n,
            stats_bytes,
        } => {
            assert!(p.row_norm && t.bn < p.n);
            assert_eq!(tiles_n, plan.grid.0);
            assert_eq!(stats_bytes, p.m as u64 * tiles_n as u64 * 16);
        }
        NormPath::Cluster { .. } | NormPath::GlobalExchange { .. } => {
            panic!("the sm_80 planner never plans row-norm clusters")
        }
    }
    assert!(plan.predicted_us.is_finite() && plan.predicted_us > 0.0);
    assert!(plan.model.ctas_per_sm >= 1 && plan.model.waves >= 1);
    assert!(plan.model.last_wave_fraction > 0.0 && plan.model.last_wave_fraction <= 1.0);
    assert!(plan.model.tile_efficiency > 0.0 && plan.model.tile_efficiency <= 1.0);
}

fn dtype() -> impl Strategy<Value = DType> {
    prop_oneof![Just(DType::Bf16), Just(DType::F16), Just(DType::F32)]
}

fn problem() -> impl Strategy<Value = Problem> {
    (
        prop_oneof![1u32..64, 1u32..5000, 1u32..(1 << 22)],
        prop_oneof![1u32..64, 1u32..5000, 1u32..(1 << 18)],
        prop_oneof![0u32..64, 0u32..5000, 0u32..(1 << 17)],
        dtype(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(m, n, k, dt, kxn, norm, pairs, vector)| {
            let mut p = Problem::gemm(m, if pairs { n * 2 } else { n }, k, dt);
            p.b_layout = if kxn { BLayout::KxN } else { BLayout::NxK };
            p.row_norm = norm;
            p.pairs = pairs;
            p.vector = vector;
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn plans_are_launchable(p in problem()) {
        let pl = planner();
        let plan = pl.plan(&p).unwrap();
        assert_launchable(&p, &plan, pl.props());
        let all = pl.candidates(&p).unwrap();
        prop_assert_eq!(all[0], plan);
        for c in &all {
            assert_launchable(&p, c, pl.props());
            prop_assert!(c.predicted_us >= plan.predicted_us);
        }
    }

    /// One candidate's predicted time never drops when the problem grows.
    #[test]
    fn each_candidate_is_monotone(
        p in problem(),
        tile in 0..TILES_SM80.len(),
        dm in 0u32..5000,
        dn in 0u32..5000,
        dk in 0u32..5000,
    ) {
        let pl = planner();
        let t = TILES_SM80[tile];
        let Some(base) = pl.evaluate(&p, &t, 1) else { return Ok(()) };
        for q in [
            Problem { m: p.m.saturating_add(dm), ..p },
            Problem { n: p.n.saturating_add(2 * dn), ..p },
            Problem { k: p.k.saturating_add(dk), ..p },
        ] {
            if let Some(grown) = pl.evaluate(&q, &t, 1) {
                prop_assert!(
                    grown.predicted_us >= base.predicted_us - 1e-9,
                    "{:?} {}×{}×{}: {} µs < {} µs at {}×{}×{}",
                    t, q.m, q.n, q.k, grown.predicted_us, base.predicted_us, p.m, p.n, p.k
                );
            }
        }
    }

    /// Without a row norm the candidate set does not depend on M or N, so the best prediction
    /// is monotone in both.
    #[test]
    fn the_best_plan_is_monotone_in_m_and_n(
        p in problem(),
        dm in 0u32..5000,
        dn in 0u32..5000,
    ) {
        let p = Problem { row_norm: false, ..p };
        let pl = planner();
        let base = pl.plan(&p).unwrap().predicted_us;
        for q in [
            Problem { m: p.m.saturating_add(dm), ..p },
            Problem { n: p.n.saturating_add(2 * dn), ..p },
        ] {
            let grown = pl.plan(&q).unwrap().predicted_us;
            prop_assert!(grown >= base - 1e-9, "{}×{}×{}: {grown} < {base}", q.m, q.n, q.k);
        }
    }
}

#[test]
fn compute_bound_predictions_follow_the_roofline() {
    let pl = planner();
    let peak = pl.roofline.peak_tflops;
    for s in [4096u32, 8192, 16384] {
        let p = Problem::gemm(s, s, s, DType::Bf16);
        let plan = pl.plan(&p).unwrap();
        let ideal_us = p.flops() / (peak * 1e6);
        let r = plan.predicted_us / ideal_us;
        println!(
            "{s}³: predicted {:.0} µs, ideal {:.0} µs ({r:.2}×)",
            plan.predicted_us, ideal_us
        );
        assert!((1.0..1.6).contains(&r), "{s}: {r}");
    }
    // Doubling every dimension of a large GEMM costs about 8× (wave quantization aside).
    let t1 = pl
        .plan(&Problem::gemm(4096, 4096, 4096, DType::Bf16))
        .unwrap()
        .predicted_us;
    let t2 = pl
        .plan(&Problem::gemm(8192, 8192, 8192, DType::Bf16))
        .unwrap()
        .predicted_us;
    assert!((6.0..10.0).contains(&(t2 / t1)), "{}", t2 / t1);
}

#[test]
fn tiny_problems_cost_about_a_launch() {
    let pl = planner();
    let plan = pl.plan(&Problem::gemm(16, 16, 16, DType::Bf16)).unwrap();
    let floor = pl.roofline.launch_us + pl.roofline.wave_fixed_us;
    assert!(
        plan.predicted_us >= floor && plan.predicted_us < 2.0 * floor,
        "{plan:?}"
    );
    assert_eq!(plan.splits, 1);
}

#[test]
fn small_problems_use_smaller_tiles_to_fill_the_gpu() {
    let pl = planner();
    let big = pl
        .plan(&Problem::gemm(8192, 8192, 4096, DType::Bf16))
        .unwrap();
    let small = pl
        .plan(&Problem::gemm(512, 512, 4096, DType::Bf16))
        .unwrap();
    println!(
        "8192²: {:?}/s{}; 512²: {:?}/s{}",
        big.tile, big.splits, small.tile, small.splits
    );
    // 512² with 128×128 tiles is 16 CTAs on 132 SMs; the plan must use more parallelism.
    assert!(small.ctas() >= 64, "{small:?}");
    assert!(small.tile.bm * small.tile.bn * small.splits <= big.tile.bm * big.tile.bn * 16);
}

#[test]
fn decode_shapes_split_k_to_pull_more_bandwidth() {
    let pl = planner();
    for (n, k) in [(4096u32, 4096u32), (6144, 4096), (4096, 14336)] {
        let p = Problem::gemm(1, n, k, DType::Bf16);
        let plan = pl.plan(&p).unwrap();
        let unsplit = pl
            .candidates(&p)
            .unwrap()
            .into_iter()
            .find(|c| c.splits == 1)
            .unwrap();
        println!(
            "M=1 N={n} K={k}: {:?}/s{} {:.1} µs (best unsplit {:.1} µs)",
            plan.tile, plan.splits, plan.predicted_us, unsplit.predicted_us
        );
        assert!(plan.splits > 1 || plan.ctas() >= 132, "{plan:?}");
        // The weights are read once: at least B / DRAM bandwidth.
        let b_us = n as f64 * k as f64 * 2.0 / (pl.roofline.dram_tbs * 1e6);
        assert!(plan.predicted_us >= b_us);
    }
}

#[test]
fn split_k_workspace_is_capped() {
    let pl = planner();
    let p = Problem::gemm(8192, 28672, 4096, DType::Bf16);
    let all = pl.candidates(&p).unwrap();
    assert!(
        all.iter()
            .all(|c| c.workspace_bytes <= DEFAULT_MAX_WORKSPACE)
    );
    assert!(
        all.iter().all(|c| c.splits == 1),
        "8192×28672 fills the GPU without splits"
    );
    let tight = planner().with_max_workspace(1 << 20);
    let q = Problem::gemm(64, 1024, 8192, DType::Bf16);
    for c in tight.candidates(&q).unwrap() {
        assert!(c.workspace_bytes <= 1 << 20, "{c:?}");
    }
}

#[test]
fn row_tiles_are_only_for_row_norms() {
    let pl = planner();
    let p = Problem::gemm(4096, 768, 768, DType::Bf16);
    for c in pl.candidates(&p).unwrap() {
        assert!(!ROW_TILES_SM80.contains(&c.tile), "{:?}", c.tile);
    }
    let p = Problem {
        row_norm: true,
        ..p
    };
    for c in pl.candidates(&p).unwrap() {
        assert!(c.tile.bn >= 768, "{:?}", c.tile);
    }
}

#[test]
fn construction_takes_microseconds() {
    let pl = planner();
    let shapes = fused_gemm_host::sweep::sweep_shapes();
    let start = Instant::now();
    let mut n = 0;
    for _ in 0..5 {
        for s in &shapes {
            std::hint::black_box(pl.plan(&Problem::gemm(s.m, s.n, s.k, DType::Bf16)).unwrap());
            n += 1;
        }
    }
    let per = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("construction: {per:.1} µs per shape (mean over {n}, this build profile)");
    // Loose on purpose (debug builds, shared CI machines): Roller's point is µs vs seconds.
    assert!(per < 5_000.0, "{per} µs");
}

/// M·N·K of u32::MAX-scale problems reaches 2⁹⁶: the model must not overflow (a debug panic)
/// or wrap (in release, executed FLOPs wrapped to 0 and the efficiency read 1).
#[test]
fn u32_max_scale_dimensions_give_finite_sane_models() {
    let props = DeviceProps::h200();
    let pl = planner();
    let unlimited = DeviceProps {
        max_grid_y: u32::MAX,
        ..props
    };
    let wide = Planner::new(unlimited).with_max_workspace(u64::MAX);
    for dtype in [DType::Bf16, DType::F32] {
        let gemm = Problem::gemm(65_535 * 64, u32::MAX, u32::MAX, dtype);
        let cases = [
            gemm,
            Problem::gemm(1, u32::MAX, u32::MAX, dtype),
            Problem::gemm(u32::MAX, u32::MAX, u32::MAX, dtype),
            Problem {
                row_norm: true,
                pairs: true,
                ..gemm
            },
        ];
        for p in cases {
            for planner in [&pl, &wide] {
                for t in TILES_SM80.iter().chain(ROW_TILES_SM80) {
                    for s in 1..=MAX_SPLITS {
                        let Some(plan) = planner.evaluate(&p, t, s) else {
                            continue;
                        };
                        let m = &plan.model;
                        for v in [
                            plan.predicted_us,
                            m.sm_us,
                            m.l2_us,
                            m.dram_us,
                            m.overhead_us,
                        ] {
                            assert!(v.is_finite() && v >= 0.0, "{p:?} {t:?} ×{s}: {m:?}");
                        }
                        assert!(plan.predicted_us > 0.0);
                        let e = m.tile_efficiency;
                        assert!(e > 0.0 && e <= 1.0, "{p:?} {t:?} ×{s}: efficiency {e}");
                        // The same ratio formed directly in f64.
                        let padded =
                            |x: u32, tiles: u64, b: u32| x as f64 / (tiles as f64 * b as f64);
                        let k_tiles_per_split = (p.k.div_ceil(t.bk) as u64).div_ceil(s as u64);
                        let want = padded(p.m, plan.grid.1 as u64, t.bm)
                            * padded(p.n, plan.grid.0 as u64, t.bn)
                            * padded(p.k, k_tiles_per_split * s as u64, t.bk);
                        assert!((e - want).abs() < 1e-12, "{e} vs {want}");
                        assert!(m.last_wave_fraction > 0.0 && m.last_wave_fraction <= 1.0);
                    }
                }
            }
        }
        // One split of K = u32::MAX: k_per_split saturates, still covering K.
        let plan = pl.plan(&gemm).unwrap();
        assert!(plan.splits as u64 * plan.k_per_split as u64 >= gemm.k as u64);
        // With K a multiple of every BK, the choice is launchable and wastes little work.
        let whole = Problem {
            k: u32::MAX - 127,
            ..gemm
        };
        let plan = pl.plan(&whole).unwrap();
        assert_launchable(&whole, &plan, &props);
        assert!(plan.model.tile_efficiency > 0.99, "{:?}", plan.model);
    }
}
