//! Each stage of the fused reference against its formula written out element by element, on
//! random inputs with M ≠ N; width halving after a gated unit; reading `c_in`; the typed errors;
//! the dtype helpers a GPU test uses.

use fused_gemm_device::types::DType;
use fused_gemm_host::reference::epilogue::{
    HostElement, PairLayout, RefStage, ReferenceError, RopeConfig, apply_stages, from_f64,
    fused_gemm_reference, gelu_erf, gelu_tanh, output_width, round_slice, round_to, to_f64,
    unit_roundoff,
};
use fused_gemm_host::reference::gemm;
use fused_gemm_host::testing::{rng, uniform};
use half::{bf16, f16};

const M: usize = 5;
const N: usize = 6;
const K: usize = 7;

fn f64s(v: Vec<f32>) -> Vec<f64> {
    to_f64(&v)
}

struct Case {
    a: Vec<f64>,
    b: Vec<f64>,
    p: Vec<f64>,
}

fn case(test: &str) -> (Case, rand::rngs::StdRng) {
    let mut r = rng(test);
    let a = f64s(uniform(&mut r, M * K));
    let b = f64s(uniform(&mut r, N * K));
    let p = gemm(M, N, K, &a, &b, true);
    (Case { a, b, p }, r)
}

fn run(c: &Case, stages: &[RefStage], c_in: Option<&[f64]>) -> Vec<f64> {
    fused_gemm_reference(M, N, K, &c.a, &c.b, true, stages, c_in).unwrap()
}

fn check(got: &[f64], want: impl Fn(usize, usize) -> f64, width: usize, what: &str) {
    assert_eq!(got.len(), M * width, "{what}: shape");
    for i in 0..M {
        for j in 0..width {
            let w = want(i, j);
            let g = got[i * width + j];
            assert!(
                (g - w).abs() <= 1e-13 * w.abs().max(1.0),
                "{what} ({i},{j}): {g} vs {w}"
            );
        }
    }
}

#[test]
fn elementwise_stages_follow_their_formulas() {
    let (c, _) = case("elementwise_stages");
    let p = &c.p;
    let at = |i: usize, j: usize| p[i * N + j];
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    check(&run(&c, &[], None), at, N, "none");
    check(
        &run(&c, &[RefStage::Relu], None),
        |i, j| at(i, j).max(0.0),
        N,
        "relu",
    );
    check(
        &run(&c, &[RefStage::Gelu], None),
        |i, j| gelu_erf(at(i, j)),
        N,
        "gelu",
    );
    check(
        &run(&c, &[RefStage::GeluTanh], None),
        |i, j| gelu_tanh(at(i, j)),
        N,
        "gelu_tanh",
    );
    check(
        &run(&c, &[RefStage::Silu], None),
        |i, j| at(i, j) * sig(at(i, j)),
        N,
        "silu",
    );
    check(
        &run(&c, &[RefStage::Sigmoid], None),
        |i, j| sig(at(i, j)),
        N,
        "sigmoid",
    );
    fn cube(x: f64) -> f64 {
        x * x * x
    }
    check(
        &run(&c, &[RefStage::User(cube)], None),
        |i, j| cube(at(i, j)),
        N,
        "user",
    );
    let cast = run(&c, &[RefStage::Cast(DType::Bf16)], None);
    check(
        &cast,
        |i, j| half::bf16::from_f32(at(i, j) as f32).to_f64(),
        N,
        "cast(bf16)",
    );
    // Erf-GELU at 0 is 0 and at large x is x: the stage is not an identity by accident.
    assert!(run(&c, &[RefStage::Gelu], None) != run(&c, &[], None));
}

#[test]
fn vector_and_matrix_stages_follow_their_formulas() {
    let (c, mut r) = case("vector_stages");
    let at = |i: usize, j: usize| c.p[i * N + j];
    let bias = f64s(uniform(&mut r, N));
    let res = f64s(uniform(&mut r, M * N));
    let c_in = f64s(uniform(&mut r, M * N));
    let stages = [
        RefStage::BiasCol(bias.clone()),
        RefStage::Residual(res.clone()),
        RefStage::Relu,
        RefStage::Accumulate,
    ];
    let got = run(&c, &stages, Some(&c_in));
    check(
        &got,
        |i, j| (at(i, j) + bias[j] + res[i * N + j]).max(0.0) + c_in[i * N + j],
        N,
        "bias, residual, relu, accumulate",
    );
    // Wrong shapes are errors, not panics.
    let errs = [
        fused_gemm_reference(
            M,
            N,
            K,
            &c.a,
            &c.b,
            true,
            &[RefStage::Residual(res[1..].to_vec())],
            None,
        ),
        fused_gemm_reference(
            M,
            N,
            K,
            &c.a,
            &c.b,
            true,
            &[RefStage::Accumulate],
            Some(&c_in[..N]),
        ),
        fused_gemm_reference(M, N, K, &c.a[1..], &c.b, true, &[], None),
        fused_gemm_reference(M, N, K, &c.a, &c.b[1..], true, &[], None),
    ];
    for e in errs {
        assert!(matches!(e, Err(ReferenceError::Length { .. })), "{e:?}");
    }
}

#[test]
fn norm_stages_follow_their_formulas() {
    let (c, mut r) = case("norm_stages");
    let gamma = f64s(uniform(&mut r, N));
    let beta = f64s(uniform(&mut r, N));
    let eps = 1e-5;
    let row = |i: usize| &c.p[i * N..(i + 1) * N];
    let ln = run(
        &c,
        &[RefStage::LayerNorm {
            gamma: gamma.clone(),
            beta: beta.clone(),
            eps,
        }],
        None,
    );
    check(
        &ln,
        |i, j| {
            let mu = row(i).iter().sum::<f64>() / N as f64;
            let var = row(i).iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / N as f64;
            (row(i)[j] - mu) / (var + eps).sqrt() * gamma[j] + beta[j]
        },
        N,
        "layer_norm",
    );
    let rms = run(
        &c,
        &[RefStage::RmsNorm {
            gamma: gamma.clone(),
            eps,
        }],
        None,
    );
    check(
        &rms,
        |i, j| {
            let ms = row(i).iter().map(|v| v * v).sum::<f64>() / N as f64;
            row(i)[j] / (ms + eps).sqrt() * gamma[j]
        },
        N,
        "rms_norm",
    );
    let bad = [RefStage::RmsNorm {
        gamma: gamma[..N - 1].to_vec(),
        eps,
    }];
    assert!(matches!(
        fused_gemm_reference(M, N, K, &c.a, &c.b, true, &bad, None),
        Err(ReferenceError::Length { what: "gamma", .. })
    ));
}

#[test]
fn gated_units_halve_the_width_and_later_vectors_follow() {
    let (c, mut r) = case("gated_units");
    let at = |i: usize, j: usize| c.p[i * N + j];
    let d = N / 2;
    let bias2 = f64s(uniform(&mut r, d));
    let c_in = f64s(uniform(&mut r, M * d));
    let silu = |x: f64| x / (1.0 + (-x).exp());
    for (layout, g, u) in [
        (PairLayout::Interleaved, 0usize, 1usize),
        (PairLayout::HalfSplit, 0, d),
    ] {
        let pair = |j: usize| match layout {
            PairLayout::Interleaved => (2 * j + g, 2 * j + u),
            PairLayout::HalfSplit => (j + g, j + u),
        };
        let stages = [
            RefStage::SwiGlu(layout),
            RefStage::BiasCol(bias2.clone()),
            RefStage::Accumulate,
        ];
        assert_eq!(output_width(N, &stages), d);
        let got = run(&c, &stages, Some(&c_in));
        check(
            &got,
            |i, j| {
                let (gj, uj) = pair(j);
                silu(at(i, gj)) * at(i, uj) + bias2[j] + c_in[i * d + j]
            },
            d,
            &format!("swiglu {layout:?}"),
        );
        let ge = run(&c, &[RefStage::GeGlu(layout)], None);
        check(
            &ge,
            |i, j| {
                let (gj, uj) = pair(j);
                gelu_erf(at(i, gj)) * at(i, uj)
            },
            d,
            &format!("geglu {layout:?}"),
        );
        // A full-width vector after the halving is a shape error.
        let bad = [RefStage::SwiGlu(layout), RefStage::BiasCol(vec![0.0; N])];
        assert!(matches!(
            fused_gemm_reference(M, N, K, &c.a, &c.b, true, &bad, None),
            Err(ReferenceError::Length { what: "bias", .. })
        ));
    }
    // N odd cannot be split into pairs.
    let odd = fused_gemm_reference(
        1,
        3,
        1,
        &[1.0],
        &[1.0; 3],
        false,
        &[RefStage::SwiGlu(PairLayout::Interleaved)],
        None,
    );
    assert_eq!(odd, Err(ReferenceError::OddPairWidth { width: 3 }));
}

#[test]
fn rope_stage_rotates_each_head_of_each_row_at_its_position() {
    let (c, _) = case("rope_stage");
    let cfg = RopeConfig {
        pos_offset: 11,
        ..RopeConfig::new(500000.0, 3 * 2, 2, PairLayout::Interleaved)
    };
    let got = run(&c, &[RefStage::Rope(cfg)], None);
    // N = 6: one head of 6, pairs (0,1), (2,3), (4,5), row i at position i % 2 + 11.
    check(
        &got,
        |i, j| {
            let pos = (i % 2 + 11) as f64;
            let pair = j / 2;
            let angle = pos * 500000f64.powf(-((2 * pair) as f64) / 6.0);
            let (x, y) = (c.p[i * N + 2 * pair], c.p[i * N + 2 * pair + 1]);
            if j % 2 == 0 {
                x * angle.cos() - y * angle.sin()
            } else {
                y * angle.cos() + x * angle.sin()
            }
        },
        N,
        "rope",
    );
    let not_whole_heads = RopeConfig {
        head_dim: 4,
        rotary_dim: 4,
        ..cfg
    };
    assert_eq!(
        fused_gemm_reference(
            M,
            N,
            K,
            &c.a,
            &c.b,
            true,
            &[RefStage::Rope(not_whole_heads)],
            None
        ),
        Err(ReferenceError::WidthNotMultipleOfHead {
            width: 6,
            head_dim: 4
        })
    );
}

/// What a GPU test does: widen the stored inputs, run the reference, round to the output type;
/// a correctly rounded result is within one unit roundoff of the f64 value.
fn stored_inputs_round_trip<T: HostElement>(dtype: DType) {
    let mut r = rng("stored_inputs");
    let a: Vec<T> = from_f64(&f64s(uniform(&mut r, M * K)));
    let b: Vec<T> = from_f64(&f64s(uniform(&mut r, N * K)));
    let bias: Vec<T> = from_f64(&f64s(uniform(&mut r, N)));
    let stages = [RefStage::BiasCol(to_f64(&bias)), RefStage::Gelu];
    let want =
        fused_gemm_reference(M, N, K, &to_f64(&a), &to_f64(&b), true, &stages, None).unwrap();
    let stored: Vec<T> = from_f64(&want);
    let u = unit_roundoff(dtype);
    for (s, w) in to_f64(&stored).iter().zip(&want) {
        assert!(
            (s - w).abs() <= u * w.abs() + f64::MIN_POSITIVE,
            "{dtype:?}: {s} vs {w}"
        );
    }
    assert_eq!(to_f64(&stored), round_slice(dtype, &want));
    assert_eq!(T::DTYPE, Some(dtype));
}

#[test]
fn host_dtypes_widen_and_round() {
    stored_inputs_round_trip::<f32>(DType::F32);
    stored_inputs_round_trip::<f16>(DType::F16);
    stored_inputs_round_trip::<bf16>(DType::Bf16);
    stored_inputs_round_trip::<fused_gemm_device::types::F16>(DType::F16);
    stored_inputs_round_trip::<fused_gemm_device::types::Bf16>(DType::Bf16);
    // bf16 spacing at 3 is 1/64: ties go to the even neighbour.
    assert_eq!(round_to(DType::Bf16, 3.0 + 1.0 / 64.0), 3.0 + 1.0 / 64.0);
    assert_eq!(round_to(DType::Bf16, 3.0 + 1.0 / 128.0), 3.0);
    assert_eq!(round_to(DType::Bf16, 3.0 + 3.0 / 128.0), 3.0 + 1.0 / 32.0);
    assert_eq!(round_to(DType::F16, 65520.0), f64::INFINITY);
}

#[test]
fn apply_stages_checks_the_accumulator_shape() {
    assert_eq!(
        apply_stages(2, 3, &[0.0; 5], &[], None),
        Err(ReferenceError::Length {
            what: "accumulator",
            expected: 6,
            actual: 5
        })
    );
    // Empty problems are fine.
    assert_eq!(
        fused_gemm_reference(0, 4, 3, &[], &[0.0; 12], false, &[RefStage::Gelu], None),
        Ok(vec![])
    );
    assert_eq!(
        fused_gemm_reference(
            2,
            2,
            0,
            &[],
            &[],
            false,
            &[RefStage::BiasCol(vec![1.0, 2.0])],
            None
        ),
        Ok(vec![1.0, 2.0, 1.0, 2.0])
    );
}
