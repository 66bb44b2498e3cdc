//! Weight layouts for the fused pairwise stages: GEMM with permuted weights plus the
//! interleaved stage equals GEMM with the checkpoint's weights plus the half-split stage (f64),
//! for RoPE (Q/K projections, with bias, full and partial rotary) and SwiGLU/GeGLU.

use fused_gemm_host::reference::epilogue::{
    HostElement, PairLayout, RefStage, RopeConfig, fused_gemm_reference, to_f64,
};
use fused_gemm_host::testing::{max_abs_diff, rng, uniform};
use fused_gemm_host::weights::{self, WeightLayoutError};
use half::{bf16, f16};
use rand::rngs::StdRng;

fn f64s(v: Vec<f32>) -> Vec<f64> {
    to_f64(&v)
}

/// Transposes a rows × cols row-major matrix.
fn transpose(w: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut t = vec![0.0; w.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = w[r * cols + c];
        }
    }
    t
}

/// Per-head attention scores S_h = Q_h·K_hᵀ of M×(heads·d) Q and K: heads × M × M.
fn scores(q: &[f64], k: &[f64], m: usize, heads: usize, d: usize) -> Vec<f64> {
    let w = heads * d;
    let mut s = Vec::with_capacity(heads * m * m);
    for h in 0..heads {
        for i in 0..m {
            for j in 0..m {
                s.push(
                    (0..d)
                        .map(|c| q[i * w + h * d + c] * k[j * w + h * d + c])
                        .sum(),
                );
            }
        }
    }
    s
}

struct RopeCase {
    heads: usize,
    head_dim: usize,
    rotary_dim: usize,
}

fn rope_case(r: &mut StdRng, c: &RopeCase) {
    let (m, k) = (7, 24);
    let n = c.heads * c.head_dim;
    let x = f64s(uniform(r, m * k));
    let cfg = |layout| RopeConfig {
        rotary_dim: c.rotary_dim,
        seq_len: 4,
        pos_offset: 3,
        ..RopeConfig::new(10000.0, c.head_dim, 4, layout)
    };
    let perm = weights::rope_interleave_permutation(n, c.head_dim, c.rotary_dim).unwrap();
    // Q and K projections as checkpoints store them: N×K weights, length-N biases.
    let mut outs = Vec::new();
    for _ in 0..2 {
        let w = f64s(uniform(r, n * k));
        let b = f64s(uniform(r, n));
        let half = fused_gemm_reference(
            m,
            n,
            k,
            &x,
            &w,
            true,
            &[
                RefStage::BiasCol(b.clone()),
                RefStage::Rope(cfg(PairLayout::HalfSplit)),
            ],
            None,
        )
        .unwrap();
        let wi = weights::rope_weight_to_interleaved(&w, n, k, c.head_dim, c.rotary_dim).unwrap();
        let bi = weights::rope_bias_to_interleaved(&b, c.head_dim, c.rotary_dim).unwrap();
        let inter_stages = [
            RefStage::BiasCol(bi.clone()),
            RefStage::Rope(cfg(PairLayout::Interleaved)),
        ];
        let inter = fused_gemm_reference(m, n, k, &x, &wi, true, &inter_stages, None).unwrap();
        // Output column `new` of the fused path is column perm[new] of the checkpoint path.
        let want = weights::permute_cols(&half, m, n, &perm).unwrap();
        let err = max_abs_diff(&inter, &want);
        assert!(err < 1e-12, "d={} rot={}: {err}", c.head_dim, c.rotary_dim);
        // The same with B stored K×N: permute its columns.
        let wt = transpose(&w, n, k);
        let wti = weights::permute_cols(&wt, k, n, &perm).unwrap();
        let inter_t = fused_gemm_reference(m, n, k, &x, &wti, false, &inter_stages, None).unwrap();
        assert!(max_abs_diff(&inter_t, &want) < 1e-12);
        // Back to the checkpoint layout.
        let back =
            weights::permute_cols(&inter, m, n, &weights::invert_permutation(&perm).unwrap())
                .unwrap();
        assert!(max_abs_diff(&back, &half) < 1e-12);
        outs.push((half, inter));
    }
    // Q and K permuted alike leave every head's attention scores unchanged.
    let (qh, qi) = &outs[0];
    let (kh, ki) = &outs[1];
    let s_half = scores(qh, kh, m, c.heads, c.head_dim);
    let s_inter = scores(qi, ki, m, c.heads, c.head_dim);
    let err = max_abs_diff(&s_half, &s_inter);
    println!(
        "rope d={} rot={}: score error {err:.1e}",
        c.head_dim, c.rotary_dim
    );
    assert!(err < 1e-11);
}

#[test]
fn rope_with_interleaved_weights_equals_half_split_rope_with_checkpoint_weights() {
    let mut r = rng("rope_weights");
    for c in [
        RopeCase {
            heads: 3,
            head_dim: 8,
            rotary_dim: 8,
        },
        RopeCase {
            heads: 2,
            head_dim: 64,
            rotary_dim: 64,
        },
        RopeCase {
            heads: 2,
            head_dim: 10,
            rotary_dim: 6,
        },
        RopeCase {
            heads: 1,
            head_dim: 65,
            rotary_dim: 64,
        },
        RopeCase {
            heads: 2,
            head_dim: 32,
            rotary_dim: 0,
        },
    ] {
        rope_case(&mut r, &c);
    }
}

#[test]
fn swiglu_and_geglu_with_interleaved_weights_equal_half_split_with_original_weights() {
    let mut r = rng("glu_weights");
    for (m, n, k) in [(1, 1, 1), (5, 3, 17), (4, 33, 8)] {
        let gate = f64s(uniform(&mut r, n * k));
        let up = f64s(uniform(&mut r, n * k));
        let (bg, bu) = (f64s(uniform(&mut r, n)), f64s(uniform(&mut r, n)));
        let x = f64s(uniform(&mut r, m * k));
        // Checkpoint path: [gate | up] weight (2N×K) and bias [bg | bu].
        let concat: Vec<f64> = gate.iter().chain(&up).copied().collect();
        let bias_concat: Vec<f64> = bg.iter().chain(&bu).copied().collect();
        let wi = weights::interleave_gate_up(&gate, &up, n, k).unwrap();
        assert_eq!(
            weights::interleave_gate_up_concat(&concat, n, k).unwrap(),
            wi
        );
        let bi = weights::interleave_gate_up_bias(&bg, &bu).unwrap();
        for glu in [RefStage::SwiGlu, RefStage::GeGlu] {
            let half = fused_gemm_reference(
                m,
                2 * n,
                k,
                &x,
                &concat,
                true,
                &[
                    RefStage::BiasCol(bias_concat.clone()),
                    glu(PairLayout::HalfSplit),
                ],
                None,
            )
            .unwrap();
            let inter = fused_gemm_reference(
                m,
                2 * n,
                k,
                &x,
                &wi,
                true,
                &[RefStage::BiasCol(bi.clone()), glu(PairLayout::Interleaved)],
                None,
            )
            .unwrap();
            assert_eq!(half.len(), m * n);
            let err = max_abs_diff(&inter, &half);
            assert!(err < 1e-12, "{m}×{n}×{k}: {err}");
            // Directly: silu(x·gᵀ + bg)·(x·uᵀ + bu) for one element.
            if matches!(glu(PairLayout::Interleaved), RefStage::SwiGlu(_)) {
                let (i, j) = (m - 1, n - 1);
                let dot = |w: &[f64]| (0..k).map(|kk| x[i * k + kk] * w[j * k + kk]).sum::<f64>();
                let g = dot(&gate) + bg[j];
                let u = dot(&up) + bu[j];
                let want = g / (1.0 + (-g).exp()) * u;
                assert!((inter[i * n + j] - want).abs() < 1e-12);
            }
        }
    }
}

/// Every transform and its inverse, on one element type: data movement only, so exact.
fn round_trips<T: HostElement + PartialEq + std::fmt::Debug>(r: &mut StdRng) {
    let (heads, head_dim, rotary_dim, k) = (3, 10, 6, 5);
    let n = heads * head_dim;
    let w: Vec<T> = uniform(r, n * k)
        .iter()
        .map(|&v| T::from_f64(v as f64))
        .collect();
    let b: Vec<T> = w[..n].to_vec();
    let wi = weights::rope_weight_to_interleaved(&w, n, k, head_dim, rotary_dim).unwrap();
    assert_ne!(wi, w);
    assert_eq!(
        weights::rope_weight_to_half_split(&wi, n, k, head_dim, rotary_dim).unwrap(),
        w
    );
    let bi = weights::rope_bias_to_interleaved(&b, head_dim, rotary_dim).unwrap();
    assert_eq!(
        weights::rope_bias_to_half_split(&bi, head_dim, rotary_dim).unwrap(),
        b
    );
    // Permuting then widening equals widening then permuting.
    let wi64 =
        weights::rope_weight_to_interleaved(&to_f64(&w), n, k, head_dim, rotary_dim).unwrap();
    assert_eq!(to_f64(&wi), wi64);
    // Gate/up: two N×K, concatenated, and back.
    let (gate, up) = (w[..n / 2 * k].to_vec(), w[n / 2 * k..].to_vec());
    let gu = weights::interleave_gate_up(&gate, &up, n / 2, k).unwrap();
    assert_eq!(
        weights::interleave_gate_up_concat(&w, n / 2, k).unwrap(),
        gu
    );
    assert_eq!(
        weights::deinterleave_gate_up(&gu, n / 2, k).unwrap(),
        (gate, up)
    );
    assert_eq!(weights::deinterleave_halves(&gu, n, k, n).unwrap(), w);
    // Head-wise halves (full rotary) equal the RoPE permutation with rotary = head_dim.
    assert_eq!(
        weights::interleave_halves(&w, n, k, head_dim).unwrap(),
        weights::rope_weight_to_interleaved(&w, n, k, head_dim, head_dim).unwrap()
    );
}

#[test]
fn transforms_round_trip_for_f32_f16_bf16() {
    let mut r = rng("weights_round_trip");
    round_trips::<f32>(&mut r);
    round_trips::<f16>(&mut r);
    round_trips::<bf16>(&mut r);
}

#[test]
fn bad_shapes_never_panic() {
    let w = vec![f16::ONE; 24];
    // Rows not a whole number of heads; concatenated weight of the wrong size; zero head_dim.
    assert_eq!(
        weights::rope_weight_to_interleaved(&w, 12, 2, 8, 8),
        Err(WeightLayoutError::RowsNotMultipleOfBlock { rows: 12, block: 8 })
    );
    assert!(matches!(
        weights::interleave_gate_up_concat(&w, 5, 2),
        Err(WeightLayoutError::Length { .. })
    ));
    assert!(matches!(
        weights::deinterleave_gate_up(&w, 5, 2),
        Err(WeightLayoutError::Length { .. })
    ));
    assert!(matches!(
        weights::rope_bias_to_half_split(&w, 0, 0),
        Err(WeightLayoutError::ZeroDim { .. })
    ));
    assert!(matches!(
        weights::permute_cols(&w, 4, 6, &[0, 1, 2, 3, 4, 9]),
        Err(WeightLayoutError::NotAPermutation { .. })
    ));
    assert!(matches!(
        weights::permute_cols(&w, 4, 6, &[0, 1, 2]),
        Err(WeightLayoutError::Length { .. })
    ));
    // Errors print what went wrong.
    let msg = weights::interleave_halves(&w, 24, 1, 7)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("7"), "{msg}");
    // Empty inputs are fine.
    assert_eq!(
        weights::interleave_gate_up::<f32>(&[], &[], 0, 4).unwrap(),
        Vec::<f32>::new()
    );
    assert_eq!(
        weights::interleave_gate_up_concat::<f32>(&[], 0, 4).unwrap(),
        Vec::<f32>::new()
    );
}

/// An empty weight passes the shape check with any K; 2·K must not be computed then (it
/// overflows for K ≥ 2⁶³ and would make a zero chunk size).
#[test]
fn deinterleaving_an_empty_weight_with_a_huge_k_is_empty() {
    let (gate, up) = weights::deinterleave_gate_up::<f32>(&[], 0, 1 << 63).unwrap();
    assert!(gate.is_empty() && up.is_empty());
    assert!(weights::deinterleave_gate_up::<f32>(&[1.0], 1, 1 << 63).is_err());
}
