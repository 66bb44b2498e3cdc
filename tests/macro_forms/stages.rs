// Every stage, with the launcher parameters each one adds.
use fused_gemm::fused_gemm;
use fused_gemm::host::kernel::RopeArgs;
use fused_gemm::host::{Gpu, LaunchReport, Result, Tensor};

/// A user stage.
pub fn square(x: f32) -> f32 {
    x * x
}

mod activations {
    pub fn mish(x: f32) -> f32 {
        x * (1.0 + x.exp()).ln().tanh()
    }
}

#[fused_gemm(epilogue = [scale(alpha), scale(0.125), scale(row), scale(col), bias, bias(row), relu, gelu, gelu_tanh, silu, sigmoid, residual, accumulate])]
pub fn elementwise() {}

#[fused_gemm(epilogue = [rope(theta = 500000.0), bias, residual, swiglu, bias, scale(col), residual])]
pub fn pairs() {}

#[fused_gemm(epilogue = [bias, rms_norm(eps = 1e-6), rope(theta = 10000), gelu, cast(f16)], out = f32)]
pub fn norm_then_more() {}

#[fused_gemm(epilogue = [geglu, cast(bf16), square, self::activations::mish, crate::stages::square])]
pub fn user_stages() {}

// Parameter names that the launcher also uses internally are fine (hygiene).
#[fused_gemm(epilogue = [scale(call), scale(stats), bias, scale(bias_desc)])]
pub fn hygienic_names() {}

#[allow(dead_code, clippy::too_many_arguments)]
fn calls(gpu: &Gpu, t: &Tensor, out: &mut Tensor, rope: RopeArgs) -> Result<LaunchReport> {
    elementwise(gpu, t, t, out, 0.5, t, t, t, t, t)?;
    // Two `bias` and two `residual` stages: the second of each is `bias_2`, `residual_2`.
    pairs(gpu, t, t, out, rope, t, t, t, t, t)?;
    norm_then_more(gpu, t, t, out, t, t, rope)?;
    user_stages(gpu, t, t, out)?;
    hygienic_names(gpu, t, t, out, 1.0, 2.0, t, 3.0)
}

#[test]
fn every_stage_and_its_launcher_parameters() {
    assert_eq!(
        PAIRS.stages,
        "rope(theta = 500000), bias, residual, swiglu, bias, scale(col), residual"
    );
    assert!(ELEMENTWISE.accumulate);
    assert_eq!(
        NORM_THEN_MORE.norm_finish,
        Some("norm_then_more__norm_finish_f32")
    );
    assert_eq!(
        USER_STAGES.stages,
        "geglu, cast(bf16), square, self::activations::mish, crate::stages::square"
    );
    assert_eq!(activations::mish(0.0), 0.0);
}
