//! GPU tests of the `#[fused_gemm]` forms that only the kernels at the end of
//! `src/kernels/stages.rs` use: a constant `scale` and a bare-identifier user stage,
//! `cast(bf16)`, operands and `accumulate` after a pair stage, stages after a row norm (which run
//! in the norm's finishing kernel when a row spans several CTA tiles), tiles the macro derived a
//! warp grid for (bf16 and f32), f16 inputs with B stored K×N and f32 output, and `arch = sm_90`.
//! Each is compared with the f64 reference of the stored inputs (relative Frobenius error and
//! each element, `compare`), output poisoned (NaN) first. Without a GPU every test prints why
//! it is skipped and passes (fails with `FUSED_GEMM_REQUIRE_GPU=1`).

use fused_gemm::device::types::DType;
use fused_gemm::host::LaunchReport;
use fused_gemm::host::kernel::RopeArgs;
use fused_gemm::host::plan::{NormPath, Plan};
use fused_gemm::host::reference::epilogue::{
    PairLayout, RefStage, RopeConfig, apply_stages, output_width, round_slice,
};
use fused_gemm::host::testing::{Tolerance, compare, gpu_or_skip, rng};
use fused_gemm::host::{Gpu, Result, Tensor};
use fused_gemm::kernels::stages;
use rand::RngExt;
use rand::rngs::StdRng;

/// Relative Frobenius error allowed for the input dtype (as `tests/gpu_gemm.rs`).
fn threshold(input: DType) -> f64 {
    match input {
        DType::Bf16 => 1e-2,
        DType::F16 => 2e-3,
        DType::F32 => 1e-5,
    }
}

struct Fx {
    gpu: Gpu,
    rng: StdRng,
}

/// A device tensor and the f64 values it holds.
struct Dev {
    t: Tensor,
    v: Vec<f64>,
}

impl Fx {
    fn new(test: &str) -> Option<Fx> {
        Some(Fx {
            gpu: gpu_or_skip(test)?,
            rng: rng(test),
        })
    }

    fn random(&mut self, rows: usize, cols: usize, dtype: DType) -> Dev {
        let data: Vec<f64> = (0..rows * cols)
            .map(|_| self.rng.random_range(-1.0..1.0))
            .collect();
        let v = round_slice(dtype, &data);
        let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        Dev {
            t: Tensor::from_f32(&self.gpu, rows, cols, dtype, &f).unwrap(),
            v,
        }
    }
}

fn gemm64(m: usize, n: usize, k: usize, a: &[f64], b: &[f64], b_col: bool) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|kk| a[i * k + kk] * if b_col { b[j * k + kk] } else { b[kk * n + j] })
                .sum();
        }
    }
    c
}

/// Random A (M×K) and B (N×K, or K×N), C poisoned or holding `c_in`, one launch, compared with
/// the reference. Returns the plan that ran.
#[allow(clippy::too_many_arguments)]
fn case(
    fx: &mut Fx,
    label: &str,
    (m, n, k): (usize, usize, usize),
    (input, output): (DType, DType),
    b_col: bool,
    stages: &[RefStage],
    c_in: Option<&Dev>,
    launch: impl FnOnce(&Gpu, &Tensor, &Tensor, &mut Tensor) -> Result<LaunchReport>,
) -> Plan {
    let a = fx.random(m, k, input);
    let b = if b_col {
        fx.random(n, k, input)
    } else {
        fx.random(k, n, input)
    };
    let width = output_width(n, stages);
    let mut c = match c_in {
        Some(ci) => {
            let f: Vec<f32> = ci.v.iter().map(|&x| x as f32).collect();
            Tensor::from_f32(&fx.gpu, m, width, output, &f).unwrap()
        }
        None => {
            let mut t = Tensor::zeros(&fx.gpu, m, width, output).unwrap();
            t.poison(&fx.gpu).unwrap();
            t
        }
    };
    let plan = launch(&fx.gpu, &a.t, &b.t, &mut c)
        .unwrap_or_else(|e| panic!("{label} {m}x{n}x{k}: launch failed: {e}"))
        .plan
        .expect("a non-empty problem launches");
    let got: Vec<f64> = c
        .download_f32(&fx.gpu)
        .unwrap()
        .iter()
        .map(|&x| x as f64)
        .collect();
    let acc = gemm64(m, n, k, &a.v, &b.v, b_col);
    let want = apply_stages(m, n, &acc, stages, c_in.map(|c| c.v.as_slice())).unwrap();
    let close = compare(
        &got,
        &want,
        Tolerance::rel(threshold(input)).for_stages(stages),
    );
    println!(
        "{label:<28} {m:>4}x{n:>4}x{k:>4} rel err {:.2e} worst element {:.2} of its bound  [tile {}x{}x{} splits {} norm {:?}]",
        close.frobenius,
        close.worst,
        plan.tile.bm,
        plan.tile.bn,
        plan.tile.bk,
        plan.splits,
        plan.norm
    );
    assert!(
        close.passed(),
        "{label} {m}x{n}x{k}: not close to the reference: {close}"
    );
    plan
}

fn square_plus_one(x: f64) -> f64 {
    x * x + 1.0
}

#[test]
fn constant_scale_user_stage_and_cast() {
    let Some(mut fx) = Fx::new("constant_scale_user_stage_and_cast") else {
        return;
    };
    let bf = DType::Bf16;
    for s in [(1, 1, 1), (17, 33, 65), (130, 200, 300)] {
        case(
            &mut fx,
            "scale(0.125), square_plus_one",
            s,
            (bf, bf),
            true,
            &[RefStage::Scale(0.125), RefStage::User(square_plus_one)],
            None,
            stages::stage_scale_const_user,
        );
        case(
            &mut fx,
            "gelu, cast(bf16) -> f32",
            s,
            (bf, DType::F32),
            true,
            &[RefStage::Gelu, RefStage::Cast(bf)],
            None,
            stages::stage_cast_bf16,
        );
    }
}

#[test]
fn operands_and_accumulate_after_a_pair_stage() {
    let Some(mut fx) = Fx::new("operands_and_accumulate_after_a_pair_stage") else {
        return;
    };
    let h = DType::F16;
    for (m, n, k) in [(1, 32, 1), (17, 96, 65), (130, 160, 300)] {
        let w = n / 2;
        let (bias, scale) = (fx.random(1, w, h), fx.random(1, w, DType::F32));
        let (res, c0) = (fx.random(m, w, h), fx.random(m, w, h));
        let seq_len = m.clamp(1, 7);
        let rope = RopeArgs {
            head_dim: 16,
            rotary_dim: 12,
            seq_len: seq_len as u32,
            pos_offset: 2,
        };
        let cfg = RopeConfig {
            theta: 10000.0,
            head_dim: 16,
            rotary_dim: 12,
            seq_len,
            pos_offset: 2,
            layout: PairLayout::Interleaved,
        };
        let reference = [
            RefStage::Rope(cfg),
            RefStage::SwiGlu(PairLayout::Interleaved),
            RefStage::BiasCol(bias.v.clone()),
            RefStage::ScaleCol(scale.v.clone()),
            RefStage::Residual(res.v.clone()),
            RefStage::Accumulate,
        ];
        case(
            &mut fx,
            "rope, swiglu, operands, acc",
            (m, n, k),
            (h, h),
            true,
            &reference,
            Some(&c0),
            |g, a, b, c| {
                stages::combo_pair_then_operands(g, a, b, c, rope, &bias.t, &scale.t, &res.t)
            },
        );
    }
}

#[test]
fn stages_after_a_norm_in_the_cta_and_in_the_finishing_kernel() {
    let Some(mut fx) = Fx::new("stages_after_a_norm") else {
        return;
    };
    let bf = DType::Bf16;
    // The kernel's one tile is 32×64: N = 48 finishes the norm in the CTA, N = 200 in the
    // finishing kernel, which also runs the four stages after the norm.
    for ((m, n, k), in_cta) in [((17, 48, 65), true), ((70, 200, 130), false)] {
        let (bias, gamma, beta) = (
            fx.random(1, n, DType::F32),
            fx.random(1, n, DType::F32),
            fx.random(1, n, DType::F32),
        );
        let res = fx.random(m, n, DType::F32);
        let alpha = -1.5f32;
        let rope = RopeArgs {
            head_dim: 8,
            rotary_dim: 6,
            seq_len: 5,
            pos_offset: 1,
        };
        let reference = [
            RefStage::BiasCol(bias.v.clone()),
            RefStage::LayerNorm {
                gamma: gamma.v.clone(),
                beta: beta.v.clone(),
                eps: 1e-5,
            },
            RefStage::GeluTanh,
            RefStage::Scale(alpha as f64),
            RefStage::Residual(res.v.clone()),
            RefStage::Rope(RopeConfig {
                theta: 10000.0,
                head_dim: 8,
                rotary_dim: 6,
                seq_len: 5,
                pos_offset: 1,
                layout: PairLayout::Interleaved,
            }),
        ];
        let plan = case(
            &mut fx,
            "bias, layer_norm, post stages",
            (m, n, k),
            (bf, DType::F32),
            true,
            &reference,
            None,
            |g, a, b, c| {
                stages::combo_norm_then_post(
                    g, a, b, c, &bias.t, &gamma.t, &beta.t, alpha, &res.t, rope,
                )
            },
        );
        assert_eq!(
            matches!(plan.norm, NormPath::InCta),
            in_cta,
            "N = {n}: {:?}",
            plan.norm
        );
    }
}

#[test]
fn derived_tiles_layouts_and_sm90() {
    let Some(mut fx) = Fx::new("derived_tiles_layouts_and_sm90") else {
        return;
    };
    let (bf, h, f) = (DType::Bf16, DType::F16, DType::F32);
    for s @ (_, n, _) in [(1, 1, 1), (17, 33, 65), (200, 190, 300)] {
        let bias = fx.random(1, n, bf);
        let plan = case(
            &mut fx,
            "bias, relu; tile 96x96x48",
            s,
            (bf, bf),
            true,
            &[RefStage::BiasCol(bias.v.clone()), RefStage::Relu],
            None,
            |g, a, b, c| stages::option_tile_derived(g, a, b, c, &bias.t),
        );
        assert_eq!((plan.tile.bm, plan.tile.bn, plan.tile.bk), (96, 96, 48));
        let bias = fx.random(1, n, f);
        case(
            &mut fx,
            "bias, silu; f16 K×N -> f32",
            s,
            (h, f),
            false,
            &[RefStage::BiasCol(bias.v.clone()), RefStage::Silu],
            None,
            |g, a, b, c| stages::option_f16_brow_f32(g, a, b, c, &bias.t),
        );
        let bias = fx.random(1, n, f);
        case(
            &mut fx,
            "bias, gelu; f32 tile 64x128x16",
            s,
            (f, f),
            true,
            &[RefStage::BiasCol(bias.v.clone()), RefStage::Gelu],
            None,
            |g, a, b, c| stages::option_f32_tile_derived(g, a, b, c, &bias.t),
        );
        // `arch = sm_90` kernels exist in the sm_90a module only, which runs on 9.0 alone.
        if fx.gpu.props().compute_capability == 90 {
            let bias = fx.random(1, n, bf);
            case(
                &mut fx,
                "bias, gelu; arch = sm_90",
                s,
                (bf, bf),
                true,
                &[RefStage::BiasCol(bias.v.clone()), RefStage::Gelu],
                None,
                |g, a, b, c| stages::option_sm90(g, a, b, c, &bias.t),
            );
        }
    }
}
