//! Properties of the f64 reference that hold for every input (proptest): normalization
//! statistics, tiling independence, RoPE as a rotation, layout permutations as bijections,
//! split-K independence.

use fused_gemm_host::reference::epilogue::{
    PairLayout, RefStage, RopeConfig, fused_gemm_reference, fused_gemm_split_k_reference,
    layer_norm_rows, layer_norm_rows_tiled, rms_norm_rows, rms_norm_rows_tiled, rope, swiglu,
};
use fused_gemm_host::weights;
use proptest::prelude::*;

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn var(xs: &[f64]) -> f64 {
    let m = mean(xs);
    xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64
}

/// A row of `2..=max` values in [−100, 100].
fn row(max: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(-100.0f64..100.0, 2..=max)
}

/// (head_dim, rotary_dim, heads) with rotary_dim even and ≤ head_dim (head_dim may be odd).
fn rope_shape() -> impl Strategy<Value = (usize, usize, usize)> {
    (1usize..=40, 1usize..=3).prop_flat_map(|(head_dim, heads)| {
        (Just(head_dim), 0..=head_dim / 2, Just(heads)).prop_map(|(d, half, h)| (d, 2 * half, h))
    })
}

fn layout() -> impl Strategy<Value = PairLayout> {
    prop_oneof![Just(PairLayout::HalfSplit), Just(PairLayout::Interleaved)]
}

proptest! {
    // gamma = 1: the output has beta's mean and, after removing beta, unit variance.
    #[test]
    fn layer_norm_output_has_beta_mean_and_unit_variance(
        x in row(300),
        seed_beta in prop::collection::vec(-2.0f64..2.0, 300),
    ) {
        prop_assume!(var(&x) > 1e-3);
        let n = x.len();
        let beta = &seed_beta[..n];
        let y = layer_norm_rows(1, n, &x, &vec![1.0; n], beta, 1e-12).unwrap();
        prop_assert!((mean(&y) - mean(beta)).abs() < 1e-9);
        let centered: Vec<f64> = y.iter().zip(beta).map(|(y, b)| y - b).collect();
        prop_assert!((mean(&centered)).abs() < 1e-9);
        prop_assert!((var(&centered) - 1.0).abs() < 1e-6, "variance {}", var(&centered));
    }

    #[test]
    fn rms_norm_output_has_unit_mean_square(x in row(300)) {
        prop_assume!(x.iter().any(|v| v.abs() > 1e-3));
        let n = x.len();
        let y = rms_norm_rows(1, n, &x, &vec![1.0; n], 0.0).unwrap();
        let ms = y.iter().map(|v| v * v).sum::<f64>() / n as f64;
        prop_assert!((ms - 1.0).abs() < 1e-12);
    }

    // Per-tile partial statistics merged give the same norm for any tile width.
    #[test]
    fn tiled_norms_equal_untiled(x in row(300), bn in 1usize..400, g in -2.0f64..2.0) {
        let n = x.len();
        let gamma: Vec<f64> = (0..n).map(|i| g + i as f64 * 0.01).collect();
        let beta: Vec<f64> = (0..n).map(|i| -g + i as f64 * 0.02).collect();
        let ln = layer_norm_rows(1, n, &x, &gamma, &beta, 1e-5).unwrap();
        let lnt = layer_norm_rows_tiled(1, n, &x, &gamma, &beta, 1e-5, bn).unwrap();
        let rms = rms_norm_rows(1, n, &x, &gamma, 1e-6).unwrap();
        let rmst = rms_norm_rows_tiled(1, n, &x, &gamma, 1e-6, bn).unwrap();
        for i in 0..n {
            prop_assert!((ln[i] - lnt[i]).abs() < 1e-10, "LN bn={} col {}", bn, i);
            prop_assert!((rms[i] - rmst[i]).abs() < 1e-10, "RMS bn={} col {}", bn, i);
        }
    }

    // LayerNorm of constant rows, the whole kind: any finite f32 constant, any width, any
    // tiling → beta.
    #[test]
    fn constant_rows_give_exactly_beta(c in any::<f32>(), n in 1usize..400, bn in 1usize..512) {
        prop_assume!(c.is_finite());
        let x = vec![c as f64; n];
        let gamma: Vec<f64> = (0..n).map(|i| 1.0 + i as f64).collect();
        let beta: Vec<f64> = (0..n).map(|i| i as f64 * -0.5).collect();
        prop_assert_eq!(&layer_norm_rows(1, n, &x, &gamma, &beta, 1e-5).unwrap(), &beta);
        prop_assert_eq!(&layer_norm_rows_tiled(1, n, &x, &gamma, &beta, 1e-5, bn).unwrap(), &beta);
    }

    // RoPE rotates pairs: each pair keeps its norm, unrotated columns are untouched.
    #[test]
    fn rope_preserves_pair_norms(
        (head_dim, rotary_dim, heads) in rope_shape(),
        layout in layout(),
        pos in 0usize..5000,
        theta in prop_oneof![Just(10000.0f64), Just(500000.0), 2.0f64..1e6],
        seed in prop::collection::vec(-10.0f64..10.0, 120),
    ) {
        let w = heads * head_dim;
        let x = &seed[..w];
        let cfg = RopeConfig { rotary_dim, pos_offset: pos, ..RopeConfig::new(theta, head_dim, 1, layout) };
        let y = rope(1, w, x, &cfg).unwrap();
        for h in 0..heads {
            let (xh, yh) = (&x[h * head_dim..][..head_dim], &y[h * head_dim..][..head_dim]);
            let mut touched = vec![false; head_dim];
            for i in 0..rotary_dim / 2 {
                let (a, b) = cfg.pair(i);
                touched[a] = true;
                touched[b] = true;
                let before = xh[a].hypot(xh[b]);
                let after = yh[a].hypot(yh[b]);
                prop_assert!((before - after).abs() <= 1e-12 * before.max(1.0));
            }
            prop_assert_eq!(touched.iter().filter(|&&t| t).count(), rotary_dim);
            for c in 0..head_dim {
                if !touched[c] {
                    prop_assert_eq!(yh[c], xh[c]);
                }
            }
        }
    }

    // R(p)·R(q) = R(p + q), and scores depend only on relative position (RoFormer §3.4.2).
    #[test]
    fn rope_composes_and_is_relative(
        (head_dim, rotary_dim, _) in rope_shape(),
        layout in layout(),
        p in 0usize..2000, q in 0usize..2000, s in 0usize..2000,
        seed in prop::collection::vec(-1.0f64..1.0, 80),
    ) {
        let (u, v) = (&seed[..head_dim], &seed[40..40 + head_dim]);
        let at = |x: &[f64], pos| {
            let cfg = RopeConfig { rotary_dim, pos_offset: pos, ..RopeConfig::new(10000.0, head_dim, 1, layout) };
            rope(1, head_dim, x, &cfg).unwrap()
        };
        let twice = at(&at(u, q), p);
        let once = at(u, p + q);
        for c in 0..head_dim {
            prop_assert!((twice[c] - once[c]).abs() < 1e-9);
        }
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let d1 = dot(&at(u, p), &at(v, q));
        let d2 = dot(&at(u, p + s), &at(v, q + s));
        prop_assert!((d1 - d2).abs() < 1e-9, "{} vs {}", d1, d2);
    }

    #[test]
    fn interleave_then_deinterleave_is_identity(
        blocks in 1usize..6, half in 1usize..20, cols in 0usize..5,
    ) {
        let block = 2 * half;
        let rows = blocks * block;
        let w: Vec<u32> = (0..(rows * cols) as u32).collect();
        let i = weights::interleave_halves(&w, rows, cols, block).unwrap();
        prop_assert_eq!(weights::deinterleave_halves(&i, rows, cols, block).unwrap(), w.clone());
        let d = weights::deinterleave_halves(&w, rows, cols, block).unwrap();
        prop_assert_eq!(weights::interleave_halves(&d, rows, cols, block).unwrap(), w);
    }

    #[test]
    fn rope_permutation_is_a_bijection_with_inverse(
        (head_dim, rotary_dim, heads) in rope_shape(), cols in 1usize..4,
    ) {
        let rows = heads * head_dim;
        let perm = weights::rope_interleave_permutation(rows, head_dim, rotary_dim).unwrap();
        let inv = weights::invert_permutation(&perm).unwrap();
        for i in 0..rows {
            prop_assert_eq!(inv[perm[i]], i);
        }
        let w: Vec<u16> = (0..(rows * cols) as u16).collect();
        let wi = weights::rope_weight_to_interleaved(&w, rows, cols, head_dim, rotary_dim).unwrap();
        prop_assert_eq!(
            weights::rope_weight_to_half_split(&wi, rows, cols, head_dim, rotary_dim).unwrap(),
            w
        );
    }

    #[test]
    fn gate_up_round_trip(n in 0usize..20, k in 0usize..6) {
        let gate: Vec<i32> = (0..(n * k) as i32).collect();
        let up: Vec<i32> = gate.iter().map(|v| -v - 1).collect();
        let wi = weights::interleave_gate_up(&gate, &up, n, k).unwrap();
        prop_assert_eq!(weights::deinterleave_gate_up(&wi, n, k).unwrap(), (gate, up));
    }

    #[test]
    fn swiglu_layouts_agree_through_the_permutation(
        rows in 1usize..4, d in 1usize..40, seed in prop::collection::vec(-4.0f64..4.0, 240),
    ) {
        let w = 2 * d;
        let x = &seed[..rows * w];
        let perm = weights::interleave_halves_permutation(w, w).unwrap();
        let xi = weights::permute_cols(x, rows, w, &perm).unwrap();
        prop_assert_eq!(
            swiglu(rows, w, x, PairLayout::HalfSplit).unwrap(),
            swiglu(rows, w, &xi, PairLayout::Interleaved).unwrap()
        );
    }

    // The epilogue runs once after split-K, the whole kind: any split count gives the unsplit
    // result.
    #[test]
    fn split_k_is_independent_of_the_split(
        m in 1usize..4, n in 1usize..5, k in 0usize..40, splits in 1usize..50,
        seed in prop::collection::vec(-1.0f64..1.0, 360),
    ) {
        let a = &seed[..m * k];
        let b = &seed[160..160 + k * n];
        let stages = [RefStage::BiasCol(vec![0.25; n]), RefStage::Gelu, RefStage::Scale(-1.5)];
        let want = fused_gemm_reference(m, n, k, a, b, false, &stages, None).unwrap();
        let got = fused_gemm_split_k_reference(m, n, k, a, b, false, splits, &stages, None).unwrap();
        for i in 0..m * n {
            prop_assert!((got[i] - want[i]).abs() < 1e-12);
        }
    }
}
