//! The fault cases of `docs/fault-cases.md` that have CPU semantics, checked on the f64
//! reference: the exact inputs and answers of each case, and the rest of its kind.

use fused_gemm_device::math as dmath;
use fused_gemm_device::types::DType;
use fused_gemm_host::reference::epilogue::{
    Activation, PairLayout, RefStage, ReferenceError, RopeConfig, apply_stages, from_f64,
    fused_gemm_reference, fused_gemm_split_k_reference, gelu_erf, gelu_tanh, gemm_k_slice,
    layer_norm_rows, layer_norm_rows_tiled, rms_norm_rows, rms_norm_rows_tiled, rope, round_slice,
    round_to, split_k_ranges, swiglu, to_f64,
};
use fused_gemm_host::testing::{max_abs_diff, rng, uniform};
use fused_gemm_host::weights;
use half::f16;

fn f64s(v: Vec<f32>) -> Vec<f64> {
    to_f64(&v)
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol,
            "{what}[{i}]: got {g}, want {w} (tol {tol})"
        );
    }
}

// ---- Scale and bias order ----

#[test]
fn scale_before_bias_is_10_after_is_9() {
    let (m, n, k) = (16, 16, 16);
    let ones = vec![1.0; 16 * 16];
    let bias = vec![2.0; n];
    let run = |stages: &[RefStage]| {
        fused_gemm_reference(m, n, k, &ones, &ones, false, stages, None).unwrap()
    };
    let scale_first = run(&[RefStage::Scale(0.5), RefStage::BiasCol(bias.clone())]);
    let bias_first = run(&[RefStage::BiasCol(bias.clone()), RefStage::Scale(0.5)]);
    assert!(scale_first.iter().all(|&v| v == 10.0), "{scale_first:?}");
    assert!(bias_first.iter().all(|&v| v == 9.0), "{bias_first:?}");
}

// The kind: every linear stage applies in list order, with per-row and per-column vectors in
// their own orientation (M ≠ N, so a transposed vector is a length error, not a silent pass).
#[test]
fn linear_stages_apply_in_list_order_and_orientation() {
    let mut r = rng("linear_stages_apply_in_list_order");
    let (m, n, k) = (5, 7, 3);
    let a = f64s(uniform(&mut r, m * k));
    let b = f64s(uniform(&mut r, k * n));
    let bias = f64s(uniform(&mut r, n));
    let srow = f64s(uniform(&mut r, m));
    let scol = f64s(uniform(&mut r, n));
    let brow = f64s(uniform(&mut r, m));
    let alpha = 0.37;
    let p = fused_gemm_host::reference::gemm(m, n, k, &a, &b, false);
    type Want<'a> = Box<dyn Fn(usize, usize) -> f64 + 'a>;
    let cases: Vec<(Vec<RefStage>, Want)> = vec![
        (
            vec![RefStage::Scale(alpha), RefStage::BiasCol(bias.clone())],
            Box::new(|i, j| alpha * p[i * n + j] + bias[j]),
        ),
        (
            vec![RefStage::BiasCol(bias.clone()), RefStage::Scale(alpha)],
            Box::new(|i, j| alpha * (p[i * n + j] + bias[j])),
        ),
        (
            vec![
                RefStage::ScaleRow(srow.clone()),
                RefStage::BiasCol(bias.clone()),
            ],
            Box::new(|i, j| srow[i] * p[i * n + j] + bias[j]),
        ),
        (
            vec![
                RefStage::BiasCol(bias.clone()),
                RefStage::ScaleRow(srow.clone()),
            ],
            Box::new(|i, j| srow[i] * (p[i * n + j] + bias[j])),
        ),
        (
            vec![
                RefStage::ScaleCol(scol.clone()),
                RefStage::BiasRow(brow.clone()),
            ],
            Box::new(|i, j| scol[j] * p[i * n + j] + brow[i]),
        ),
        (
            vec![
                RefStage::BiasRow(brow.clone()),
                RefStage::ScaleCol(scol.clone()),
            ],
            Box::new(|i, j| scol[j] * (p[i * n + j] + brow[i])),
        ),
    ];
    for (stages, want) in cases {
        let names: Vec<_> = stages.iter().map(RefStage::name).collect();
        let got = fused_gemm_reference(m, n, k, &a, &b, false, &stages, None).unwrap();
        for i in 0..m {
            for j in 0..n {
                let w = want(i, j);
                assert!(
                    (got[i * n + j] - w).abs() < 1e-14,
                    "{names:?} at ({i},{j}): {} vs {w}",
                    got[i * n + j]
                );
            }
        }
    }
    // Orientation: a column vector has length N, a row vector length M.
    for stages in [
        vec![RefStage::BiasCol(brow.clone())],
        vec![RefStage::ScaleCol(srow.clone())],
        vec![RefStage::BiasRow(bias.clone())],
        vec![RefStage::ScaleRow(scol.clone())],
    ] {
        let err = fused_gemm_reference(m, n, k, &a, &b, false, &stages, None).unwrap_err();
        assert!(matches!(err, ReferenceError::Length { .. }), "{err}");
    }
}

// ---- GELU variant: erf (BERT's "gelu") and the tanh approximation ("gelu_new") ----

const GELU_X: [f64; 4] = [-3.0, -1.5, 1.0, 3.0];
const GELU_ERF: [f64; 4] = [-0.0040497, -0.1002108, 0.8413447, 2.9959503];
const GELU_TANH: [f64; 4] = [-0.0036374, -0.1004284, 0.8411920, 2.9963626];

#[test]
fn gelu_erf_and_tanh_at_the_given_points() {
    for i in 0..4 {
        let x = GELU_X[i];
        let (e, t) = (gelu_erf(x), gelu_tanh(x));
        // Values are given to 7 decimals; f32 storage must keep them to 1e-6.
        assert!((e - GELU_ERF[i]).abs() < 1e-6, "gelu_erf({x}) = {e}");
        assert!((t - GELU_TANH[i]).abs() < 1e-6, "gelu_tanh({x}) = {t}");
        assert!((round_to(DType::F32, e) - GELU_ERF[i]).abs() < 1e-6);
        assert!((round_to(DType::F32, t) - GELU_TANH[i]).abs() < 1e-6);
        // The variants differ by far more than the tolerance: the test tells them apart.
        assert!((e - t).abs() > 1e-4, "variants too close at {x}");
    }
    // Through the fused reference: a 1×1 A times the 1×4 row of points is the points.
    let b = GELU_X.to_vec();
    for (stage, want) in [(RefStage::Gelu, GELU_ERF), (RefStage::GeluTanh, GELU_TANH)] {
        let got = fused_gemm_reference(1, 4, 1, &[1.0], &b, false, &[stage], None).unwrap();
        assert_close(&got, &want, 1e-6, "fused gelu");
    }
}

// The device formulas (host build of `fused_gemm_device::math`, f32) against the f64
// reference, at the given points and over a sweep: tanh-GELU to 1e-6, erf-GELU to its stated
// bound (`GELU_ERF_MAX_ERROR`, plus the given values' rounding at the points).
#[test]
fn device_gelu_formulas_match_reference_in_f32() {
    let erf_bound = dmath::GELU_ERF_MAX_ERROR as f64;
    for i in 0..4 {
        let x = GELU_X[i] as f32;
        assert!((dmath::gelu_erf(x) as f64 - GELU_ERF[i]).abs() < erf_bound + 1e-7);
        assert!((dmath::gelu_tanh(x) as f64 - GELU_TANH[i]).abs() < 1e-6);
    }
    let mut worst = (0.0f64, 0.0f64);
    for i in -1000..=1000 {
        let x = i as f32 * 0.01;
        let scale = (x.abs() as f64).max(1.0);
        let de = (dmath::gelu_erf(x) as f64 - gelu_erf(x as f64)).abs();
        let dt = (dmath::gelu_tanh(x) as f64 - gelu_tanh(x as f64)).abs();
        worst = (worst.0.max(de), worst.1.max(dt));
        assert!(de <= erf_bound * scale, "device gelu_erf({x}) off by {de}");
        assert!(dt <= 1e-6 * scale, "device gelu_tanh({x}) off by {dt}");
    }
    println!(
        "device gelu vs f64 on [-10, 10]: erf {:.2e}, tanh {:.2e}",
        worst.0, worst.1
    );
}

#[test]
fn config_activation_names_map_to_the_right_stage() {
    let table = [
        ("gelu", Activation::Gelu),
        ("gelu_python", Activation::Gelu),
        ("gelu_new", Activation::GeluTanh),
        ("gelu_pytorch_tanh", Activation::GeluTanh),
        ("gelu_fast", Activation::GeluTanh),
        ("relu", Activation::Relu),
        ("silu", Activation::Silu),
        ("swish", Activation::Silu),
        ("sigmoid", Activation::Sigmoid),
    ];
    for (name, want) in table {
        let act = Activation::from_config_name(name).unwrap();
        assert_eq!(act, want, "{name}");
        // The stage computes the function the name stands for.
        let got = apply_stages(1, 1, &[1.0], &[act.stage()], None).unwrap()[0];
        assert_eq!(got, act.apply(1.0));
    }
    assert_eq!(Activation::Gelu.stage_name(), "gelu");
    assert_eq!(Activation::GeluTanh.stage_name(), "gelu_tanh");
    assert!((Activation::Gelu.apply(1.0) - GELU_ERF[2]).abs() < 1e-6);
    assert!((Activation::GeluTanh.apply(1.0) - GELU_TANH[2]).abs() < 1e-6);
    for bad in ["quick_gelu", "GELU", "gelu_10", "tanh", "", "mish"] {
        assert_eq!(
            Activation::from_config_name(bad),
            Err(ReferenceError::UnknownActivation(bad.to_string())),
            "{bad:?}"
        );
    }
}

// ---- The epilogue runs once, after the whole split-K reduction ----

#[test]
fn zero_a_with_bias_is_exactly_bias_under_split_k() {
    let mut r = rng("zero_a_with_bias_under_split_k");
    let (m, n, k) = (3, 5, 4096);
    let a = vec![0.0; m * k];
    let b = f64s(uniform(&mut r, k * n));
    let stages = [RefStage::BiasCol(vec![0.1; n])];
    for splits in [1, 2, 4] {
        let c =
            fused_gemm_split_k_reference(m, n, k, &a, &b, false, splits, &stages, None).unwrap();
        assert!(c.iter().all(|&v| v == 0.1), "splits {splits}: {c:?}");
        // The fault this guards against: bias added per split gives 0.1·splits.
        let per_split: f64 = split_k_ranges(k, splits)
            .unwrap()
            .into_iter()
            .map(|ks| {
                let p = gemm_k_slice(m, n, k, &a, &b, false, ks).unwrap();
                apply_stages(m, n, &p, &stages, None).unwrap()[0]
            })
            .sum();
        if splits > 1 {
            assert!((per_split - 0.1).abs() > 0.05, "splits {splits}");
        }
    }
}

#[test]
fn split_k_partials_plus_and_minus_3_then_bias_and_gelu() {
    // A = [1, 1] (1×2), B = [3, −3]ᵀ (2×1): split 2 ways, the partials are +3 and −3.
    let (a, b) = ([1.0, 1.0], [3.0, -3.0]);
    let ranges = split_k_ranges(2, 2).unwrap();
    let partials: Vec<f64> = ranges
        .iter()
        .map(|ks| gemm_k_slice(1, 1, 2, &a, &b, false, ks.clone()).unwrap()[0])
        .collect();
    assert_eq!(partials, vec![3.0, -3.0]);
    let stages = [RefStage::BiasCol(vec![0.5]), RefStage::Gelu];
    let c = fused_gemm_split_k_reference(1, 1, 2, &a, &b, false, 2, &stages, None).unwrap();
    assert!((c[0] - 0.3457312).abs() < 1e-7, "{}", c[0]);
    // A per-split epilogue would give gelu(3.5) + gelu(−2.5): nowhere near.
    let wrong = gelu_erf(3.5) + gelu_erf(-2.5);
    assert!((wrong - 0.3457312).abs() > 1.0);
}

// The kind: for nonlinear stage lists, any split count (dividing K or not, more splits than K)
// equals the unsplit reference.
#[test]
fn split_k_equals_unsplit_for_nonlinear_epilogues() {
    let mut r = rng("split_k_equals_unsplit");
    let (m, n, k) = (4, 6, 37);
    let a = f64s(uniform(&mut r, m * k));
    let b = f64s(uniform(&mut r, n * k));
    let stages = [
        RefStage::BiasCol(f64s(uniform(&mut r, n))),
        RefStage::Gelu,
        RefStage::LayerNorm {
            gamma: f64s(uniform(&mut r, n)),
            beta: f64s(uniform(&mut r, n)),
            eps: 1e-5,
        },
        RefStage::Silu,
    ];
    let want = fused_gemm_reference(m, n, k, &a, &b, true, &stages, None).unwrap();
    for splits in [1, 2, 3, 4, 5, 8, 37, 40] {
        let got =
            fused_gemm_split_k_reference(m, n, k, &a, &b, true, splits, &stages, None).unwrap();
        assert_close(&got, &want, 1e-12, &format!("split {splits}"));
    }
}

// ---- Constant and extreme rows in LayerNorm ----

#[test]
fn layer_norm_of_constant_rows_is_beta() {
    let mut r = rng("layer_norm_of_constant_rows");
    let n = 384;
    let gamma = f64s(uniform(&mut r, n));
    let beta = f64s(uniform(&mut r, n));
    for c in [1234.0f32, 0.0, 8.5e37, -8.5e37] {
        // Stored as f32 (at 8.5e37 a plain f32 sum of the row overflows).
        let x = to_f64(&vec![c; n]);
        let y = layer_norm_rows(1, n, &x, &gamma, &beta, 1e-5).unwrap();
        assert_eq!(y, beta, "constant {c}");
        for bn in [64, 128, 383, 384, 512] {
            let yt = layer_norm_rows_tiled(1, n, &x, &gamma, &beta, 1e-5, bn).unwrap();
            assert_eq!(yt, beta, "constant {c}, tile {bn}");
        }
        // Through the fused path: a 1×1 A times a constant B row.
        let stage = RefStage::LayerNorm {
            gamma: gamma.clone(),
            beta: beta.clone(),
            eps: 1e-5,
        };
        let yf = fused_gemm_reference(1, n, 1, &[1.0], &x, false, &[stage], None).unwrap();
        assert_eq!(yf, beta, "fused, constant {c}");
    }
}

#[test]
fn row_norm_nan_poisons_only_its_row() {
    let mut r = rng("row_norm_nan");
    let (m, n) = (4, 384);
    let mut x = f64s(uniform(&mut r, m * n));
    x[2 * n + 17] = f64::NAN;
    let gamma = vec![1.0; n];
    let beta = vec![0.0; n];
    let results = [
        layer_norm_rows(m, n, &x, &gamma, &beta, 1e-5).unwrap(),
        layer_norm_rows_tiled(m, n, &x, &gamma, &beta, 1e-5, 128).unwrap(),
        rms_norm_rows(m, n, &x, &gamma, 1e-6).unwrap(),
        rms_norm_rows_tiled(m, n, &x, &gamma, 1e-6, 100).unwrap(),
    ];
    for y in &results {
        for (row, yr) in y.chunks(n).enumerate() {
            if row == 2 {
                assert!(yr.iter().all(|v| v.is_nan()), "row 2 must be all NaN");
            } else {
                assert!(yr.iter().all(|v| v.is_finite()), "row {row} must be finite");
            }
        }
    }
    // The clean rows are what they are without the NaN row.
    let clean = layer_norm_rows(1, n, &x[3 * n..], &gamma, &beta, 1e-5).unwrap();
    assert_eq!(&results[0][3 * n..], &clean[..]);
}

// ---- Rows narrower than the block, and rows split over tiles ----

#[test]
fn layer_norm_of_a_three_wide_row() {
    let x = [1.0, 2.0, 3.0];
    let want = [-1.2247357, 0.0, 1.2247357];
    let g = [1.0; 3];
    let b = [0.0; 3];
    let y = layer_norm_rows(1, 3, &x, &g, &b, 1e-5).unwrap();
    assert_close(&y, &want, 1e-7, "LN [1,2,3]");
    // Tiles wider than the row (padded lanes), and tiles of 1 and 2 columns.
    for bn in [1, 2, 3, 4, 8, 64, 128] {
        let yt = layer_norm_rows_tiled(1, 3, &x, &g, &b, 1e-5, bn).unwrap();
        assert_close(&yt, &want, 1e-7, &format!("LN [1,2,3] tile {bn}"));
    }
}

#[test]
fn layer_norm_of_a_row_of_384_split_over_tiles() {
    let n = 384;
    let x: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let (g, b) = (vec![1.0; n], vec![0.0; n]);
    // Closed form: mean (n−1)/2, biased variance (n² − 1)/12.
    let mean = (n as f64 - 1.0) / 2.0;
    let var = ((n * n) as f64 - 1.0) / 12.0;
    let want: Vec<f64> = x
        .iter()
        .map(|&v| (v - mean) / (var + 1e-5).sqrt())
        .collect();
    let y = layer_norm_rows(1, n, &x, &g, &b, 1e-5).unwrap();
    assert_close(&y, &want, 1e-12, "LN 0..384");
    let rms = rms_norm_rows(1, n, &x, &g, 1e-6).unwrap();
    for bn in [16, 32, 64, 100, 128, 256, 384, 512] {
        let yt = layer_norm_rows_tiled(1, n, &x, &g, &b, 1e-5, bn).unwrap();
        assert_close(&yt, &want, 1e-12, &format!("LN 0..384 tile {bn}"));
        let rmst = rms_norm_rows_tiled(1, n, &x, &g, 1e-6, bn).unwrap();
        assert_close(&rmst, &rms, 1e-12, &format!("RMS 0..384 tile {bn}"));
    }
}

// ---- f16 RMSNorm / LayerNorm with squares beyond f16's range ----

#[test]
fn f16_rms_norm_of_300s_is_one() {
    let n = 384;
    // The input has teeth: 300² = 90000 is beyond f16's max (65504).
    assert!(f16::from_f64(300.0 * 300.0).is_infinite());
    let x16: Vec<f16> = from_f64(&vec![300.0; n]);
    let g16: Vec<f16> = from_f64(&vec![1.0; n]);
    let (x, g) = (to_f64(&x16), to_f64(&g16));
    let y16 = round_slice(DType::F16, &rms_norm_rows(1, n, &x, &g, 1e-6).unwrap());
    assert!(y16.iter().all(|&v| v == 1.0), "{y16:?}");
    // As the fused stage, storing f16: a 1×1 A times the row.
    let stages = [
        RefStage::RmsNorm {
            gamma: g,
            eps: 1e-6,
        },
        RefStage::Cast(DType::F16),
    ];
    let yf = fused_gemm_reference(1, n, 1, &[1.0], &x, false, &stages, None).unwrap();
    assert!(yf.iter().all(|&v| v == 1.0), "{yf:?}");
}

#[test]
fn f16_layer_norm_of_alternating_300s_is_plus_minus_one() {
    let n = 384;
    let x: Vec<f64> = (0..n)
        .map(|i| if i % 2 == 0 { 300.0 } else { -300.0 })
        .collect();
    let x16: Vec<f16> = from_f64(&x);
    let y = layer_norm_rows(1, n, &to_f64(&x16), &vec![1.0; n], &vec![0.0; n], 1e-5).unwrap();
    let y16 = round_slice(DType::F16, &y);
    for (i, &v) in y16.iter().enumerate() {
        assert_eq!(v, if i % 2 == 0 { 1.0 } else { -1.0 }, "element {i}");
    }
}

// The kind: f16 rows anywhere in f16's range normalize to finite values of the right size,
// independent of the row's scale.
#[test]
fn f16_row_norms_across_the_range() {
    let mut r = rng("f16_row_norms_across_the_range");
    let n = 384;
    let ones = vec![1.0; n];
    let base = f64s(uniform(&mut r, n));
    for scale in [1.0, 300.0, 4096.0, 65504.0] {
        let x16: Vec<f16> = from_f64(&base.iter().map(|&u| u * scale).collect::<Vec<_>>());
        let x = to_f64(&x16);
        let rms = round_slice(DType::F16, &rms_norm_rows(1, n, &x, &ones, 1e-6).unwrap());
        assert!(rms.iter().all(|v| v.is_finite()), "scale {scale}");
        let ms = rms.iter().map(|v| v * v).sum::<f64>() / n as f64;
        assert!((ms - 1.0).abs() < 1e-2, "scale {scale}: mean square {ms}");
        let ln = layer_norm_rows(1, n, &x, &ones, &vec![0.0; n], 1e-5).unwrap();
        let ln = round_slice(DType::F16, &ln);
        assert!(
            ln.iter().all(|v| v.is_finite() && v.abs() < 20.0),
            "scale {scale}"
        );
        // Scaling the row does not change RMSNorm (up to f16 rounding of input and output).
        let unit = rms_norm_rows(1, n, &base, &ones, 0.0).unwrap();
        let err = max_abs_diff(&rms, &unit);
        assert!(err < 1e-2, "scale {scale}: {err}");
    }
}

// ---- RoPE layout: half-split and interleaved pairs ----

const ROPE_HALF: [f64; 8] = [
    -3.66705, 1.39101, 2.92985, 3.99200, 3.54298, 6.16969, 7.02965, 8.00400,
];
const ROPE_INTER: [f64; 8] = [
    -1.14264, 1.92208, 2.58568, 4.27952, 4.93975, 6.04970, 6.99200, 8.00700,
];

fn rope_cfg(layout: PairLayout, pos_offset: usize) -> RopeConfig {
    RopeConfig {
        pos_offset,
        ..RopeConfig::new(10000.0, 8, 1, layout)
    }
}

#[test]
fn rope_exact_values_in_both_layouts() {
    let x: Vec<f64> = (1..=8).map(f64::from).collect();
    for (layout, want) in [
        (PairLayout::HalfSplit, ROPE_HALF),
        (PairLayout::Interleaved, ROPE_INTER),
    ] {
        let y = rope(1, 8, &x, &rope_cfg(layout, 1)).unwrap();
        assert_close(&y, &want, 1e-5, &format!("{layout:?} at position 1"));
        // Position 0 is the identity (which is why it alone proves nothing).
        assert_eq!(rope(1, 8, &x, &rope_cfg(layout, 0)).unwrap(), x);
        // The fused stage: a 1×1 A times the row x is x.
        let stage = RefStage::Rope(rope_cfg(layout, 1));
        let yf = fused_gemm_reference(1, 8, 1, &[1.0], &x, false, &[stage], None).unwrap();
        assert_close(&yf, &want, 1e-5, &format!("fused {layout:?}"));
    }
}

// The kind: the layouts are the same rotation up to the column permutation that
// `weights::rope_interleave_permutation` applies to the weight rows, for any head count,
// rotary dimension and position; without it they disagree.
#[test]
fn rope_layouts_agree_through_the_permutation() {
    let mut r = rng("rope_layouts_agree");
    for (head_dim, rotary_dim) in [(8, 8), (64, 64), (10, 6), (65, 64), (128, 32)] {
        let heads = 3;
        let (rows, width) = (5, heads * head_dim);
        let x = f64s(uniform(&mut r, rows * width));
        let perm = weights::rope_interleave_permutation(width, head_dim, rotary_dim).unwrap();
        let cfg = |layout| RopeConfig {
            rotary_dim,
            pos_offset: 7,
            ..RopeConfig::new(10000.0, head_dim, rows, layout)
        };
        let half = rope(rows, width, &x, &cfg(PairLayout::HalfSplit)).unwrap();
        let x_il = weights::permute_cols(&x, rows, width, &perm).unwrap();
        let inter = rope(rows, width, &x_il, &cfg(PairLayout::Interleaved)).unwrap();
        let half_il = weights::permute_cols(&half, rows, width, &perm).unwrap();
        assert_close(
            &inter,
            &half_il,
            1e-12,
            &format!("d={head_dim} rot={rotary_dim}"),
        );
        let wrong = rope(rows, width, &x, &cfg(PairLayout::Interleaved)).unwrap();
        assert!(
            max_abs_diff(&wrong, &half) > 1e-3,
            "layouts indistinguishable at d={head_dim}"
        );
    }
}

// ---- RoPE dimensions and offsets ----

#[test]
fn rope_odd_rotary_dim_is_rejected() {
    for layout in [PairLayout::HalfSplit, PairLayout::Interleaved] {
        let cfg = RopeConfig {
            rotary_dim: 33,
            ..RopeConfig::new(10000.0, 64, 1, layout)
        };
        let want = Err(ReferenceError::OddRotaryDim { rotary_dim: 33 });
        assert_eq!(rope(1, 64, &[0.0; 64], &cfg), want);
        let stages = [RefStage::Rope(cfg)];
        let got = fused_gemm_reference(1, 64, 1, &[1.0], &[0.0; 64], false, &stages, None);
        assert_eq!(got, want);
    }
    assert_eq!(
        weights::rope_weight_to_interleaved(&[0.0f32; 64], 64, 1, 64, 33),
        Err(weights::WeightLayoutError::OddRotaryDim { rotary_dim: 33 })
    );
}

#[test]
fn rope_rotary_64_on_head_dim_65_leaves_last_element() {
    let mut r = rng("rope_rotary_64_on_head_dim_65");
    let (rows, heads) = (4, 2);
    for layout in [PairLayout::HalfSplit, PairLayout::Interleaved] {
        let x = f64s(uniform(&mut r, rows * heads * 65));
        let cfg = RopeConfig {
            rotary_dim: 64,
            pos_offset: 3,
            ..RopeConfig::new(10000.0, 65, rows, layout)
        };
        let y = rope(rows, heads * 65, &x, &cfg).unwrap();
        // The first 64 of each head rotate exactly as a 64-wide head would.
        let x64: Vec<f64> = x.chunks(65).flat_map(|h| h[..64].to_vec()).collect();
        let cfg64 = RopeConfig {
            head_dim: 64,
            ..cfg
        };
        let y64 = rope(rows, heads * 64, &x64, &cfg64).unwrap();
        for (h, (yh, y64h)) in y.chunks(65).zip(y64.chunks(64)).enumerate() {
            assert_eq!(
                yh[64],
                x[h * 65 + 64],
                "{layout:?}: head {h} last element moved"
            );
            assert_close(&yh[..64], y64h, 1e-15, &format!("{layout:?} head {h}"));
        }
        // And they did rotate (positions ≥ 3 are not the identity).
        assert!(max_abs_diff(&y, &x) > 1e-3);
    }
}

#[test]
fn rope_offsets_match_rows_of_a_longer_sequence() {
    let mut r = rng("rope_offsets");
    let width = 2 * 8;
    for layout in [PairLayout::HalfSplit, PairLayout::Interleaved] {
        let base = RopeConfig::new(10000.0, 8, 6, layout);
        let seq = f64s(uniform(&mut r, 6 * width));
        let full = rope(6, width, &seq, &base).unwrap();
        let at = |row: usize, pos_offset| {
            let one = RopeConfig {
                seq_len: 1,
                pos_offset,
                ..base
            };
            rope(1, width, &seq[row * width..(row + 1) * width], &one).unwrap()
        };
        assert_close(
            &at(5, 5),
            &full[5 * width..],
            1e-15,
            &format!("{layout:?} offset 5"),
        );
        assert!(
            max_abs_diff(&at(5, 5), &at(5, 6)) > 1e-3,
            "{layout:?}: offsets 5 and 6 agree"
        );
        // Stacked sequences: with seq_len 3 and offset 2, row r sits at r % 3 + 2.
        let stacked_cfg = RopeConfig {
            seq_len: 3,
            pos_offset: 2,
            ..base
        };
        let stacked = rope(6, width, &seq, &stacked_cfg).unwrap();
        for row in 0..6 {
            assert_close(
                &stacked[row * width..(row + 1) * width],
                &at(row, row % 3 + 2),
                1e-15,
                &format!("{layout:?} stacked row {row}"),
            );
        }
    }
}

// ---- SwiGLU with odd widths ----

#[test]
fn swiglu_half_split_f16_odd_widths() {
    const GATE: [f64; 3] = [0.0, 1.0, -1.0];
    const OUT: [f64; 3] = [0.0, 1.4621172, -0.5378828];
    let rows = 3;
    for d in [3, 1537, 3420] {
        // Row r's gate is the pattern shifted by r, so a wrong row start gives wrong values.
        let mut x = Vec::with_capacity(rows * 2 * d);
        for r in 0..rows {
            x.extend((0..d).map(|c| GATE[(c + r) % 3]));
            x.extend(std::iter::repeat_n(2.0, d));
        }
        let x16: Vec<f16> = from_f64(&x);
        let y = swiglu(rows, 2 * d, &to_f64(&x16), PairLayout::HalfSplit).unwrap();
        assert_eq!(y.len(), rows * d, "d={d}");
        let y16 = round_slice(DType::F16, &y);
        for r in 0..rows {
            for c in 0..d {
                let want = OUT[(c + r) % 3];
                let got = y[r * d + c];
                assert!(
                    (got - want).abs() < 1e-7,
                    "d={d} ({r},{c}): {got} vs {want}"
                );
                assert_eq!(
                    y16[r * d + c],
                    round_to(DType::F16, want),
                    "d={d} f16 ({r},{c})"
                );
            }
        }
        // The interleaved layout of the same columns gives the same output.
        let perm = weights::interleave_halves_permutation(2 * d, 2 * d).unwrap();
        let xi = weights::permute_cols(&to_f64(&x16), rows, 2 * d, &perm).unwrap();
        assert_eq!(
            swiglu(rows, 2 * d, &xi, PairLayout::Interleaved).unwrap(),
            y
        );
        // An odd total width cannot be split into gate and up.
        assert_eq!(
            swiglu(1, 2 * d + 1, &vec![0.0; 2 * d + 1], PairLayout::HalfSplit),
            Err(ReferenceError::OddPairWidth { width: 2 * d + 1 })
        );
    }
}
