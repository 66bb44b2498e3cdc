//! Our kernels for each (storage type, epilogue): adapters from [`FusedArgs`] to the
//! `#[fused_gemm]` launchers. An epilogue without an entry is reported as `n/a`.
//!
//! Each adapter runs the Hopper kernel (`fused_gemm::kernels::hopper`, `arch = sm_90`: TMA +
//! `wgmma`) on an H100/H200 and its `mma.sync` twin elsewhere. Which tile runs is the
//! launcher's business: the harness restricts it (`fused_gemm::host::gemm::with_overrides`)
//! for the forced-tile columns and installs an autotuner for the autotuned column.
//!
//! # Plugging a kernel in
//! Write a function with the signature [`FusedFn`] that computes the epilogue's contract
//! ([`Epilogue`] documents each) into `args.out` (and `args.rstd`), queued on `gpu.stream()`
//! without synchronizing, and list it in the table of its storage type.

use cudarc::driver::{CudaSlice, DeviceRepr};
use fused_gemm::host::cudarc;
use fused_gemm::host::gemm::MatRef;
use fused_gemm::host::tensor::HostElement;
use fused_gemm::kernels::{blocks, gemm, hopper, stages};
use fused_gemm::{Error, Gpu, Result};
use half::{bf16, f16};

use crate::epilogue::Epilogue;

/// What a fused kernel gets for one run: the problem and one rotation set's buffers. Every
/// buffer is a whole, contiguous allocation (leading dimension = row length).
#[derive(Debug)]
pub struct FusedArgs<'a, T> {
    /// Rows of A and `out`.
    pub m: usize,
    /// Columns of the GEMM (before SwiGLU halves them).
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// A, M×K row-major (activations).
    pub a: &'a CudaSlice<T>,
    /// B, N×K row-major (a `Linear` weight; for SwiGLU gate/up rows interleaved).
    pub b: &'a CudaSlice<T>,
    /// Bias, N values.
    pub bias: Option<&'a CudaSlice<T>>,
    /// Residual, M×N row-major.
    pub residual: Option<&'a CudaSlice<T>>,
    /// γ, N values.
    pub gamma: Option<&'a CudaSlice<T>>,
    /// β, N values.
    pub beta: Option<&'a CudaSlice<T>>,
    /// Per-row f32 values, M: rms-consumer's input, rms-producer's output.
    pub rstd: Option<&'a mut CudaSlice<f32>>,
    /// The output, M×`Epilogue::out_cols(N)` row-major.
    pub out: &'a mut CudaSlice<T>,
}

/// A fused GEMM + epilogue launcher.
pub type FusedFn<T> = fn(&Gpu, FusedArgs<'_, T>) -> Result<()>;

/// Our bf16 kernels. rms-producer has none: no stage writes per-row statistics yet.
pub const OURS_BF16: &[(Epilogue, FusedFn<bf16>)] = &[
    (Epilogue::Gemm, gemm_bf16),
    (Epilogue::Bias, bias_bf16),
    (Epilogue::BiasGelu, bias_gelu_bf16),
    (Epilogue::BiasGeluTanh, bias_gelu_tanh_bf16),
    (
        Epilogue::BiasResidualLayernorm,
        bias_residual_layer_norm_bf16,
    ),
    (Epilogue::Swiglu, swiglu_bf16),
    (Epilogue::RmsConsumer, rms_consumer_bf16),
];

/// Our f16 kernels.
pub const OURS_F16: &[(Epilogue, FusedFn<f16>)] = &[
    (Epilogue::Gemm, gemm_f16),
    (Epilogue::Bias, bias_f16),
    (Epilogue::BiasGelu, bias_gelu_f16),
    (
        Epilogue::BiasResidualLayernorm,
        bias_residual_layer_norm_f16,
    ),
    (Epilogue::Swiglu, swiglu_f16),
];

/// A (M×K), B (N×K) and `out` (M×`cols`) as matrix operands.
fn operands<'a, T: HostElement + DeviceRepr>(
    x: &'a FusedArgs<'_, T>,
    out_cols: usize,
) -> Result<(MatRef<'a, T>, MatRef<'a, T>, MatRef<'a, T>)> {
    Ok((
        MatRef::new(x.a, x.m, x.k)?,
        MatRef::new(x.b, x.n, x.k)?,
        MatRef::new(&*x.out, x.m, out_cols)?,
    ))
}

fn need<X>(v: Option<X>, what: &'static str) -> Result<X> {
    v.ok_or_else(|| Error::invalid(what, "an operand this epilogue reads", "none"))
}

/// Launchers without epilogue operands; `$cols` is the output width for a GEMM of width `n`.
macro_rules! no_operands {
    ($($name:ident: $t:ty, $cols:expr => $hopper:path, $launch:path;)*) => {$(
        fn $name(gpu: &Gpu, x: FusedArgs<'_, $t>) -> Result<()> {
            let cols: fn(usize) -> usize = $cols;
            let (a, b, mut c) = operands(&x, cols(x.n))?;
            if hopper::on_hopper(gpu) {
                $hopper(gpu, &a, &b, &mut c).map(|_| ())
            } else {
                $launch(gpu, &a, &b, &mut c).map(|_| ())
            }
        }
    )*};
}

no_operands! {
    gemm_bf16: bf16, |n| n => hopper::h_gemm_bf16, gemm::gemm_bf16;
    gemm_f16: f16, |n| n => hopper::h_gemm_f16, gemm::gemm_f16;
    swiglu_bf16: bf16, |n| n / 2 => hopper::h_swiglu, blocks::mlp_up_swiglu;
    swiglu_f16: f16, |n| n / 2 => hopper::h_swiglu_f16, blocks::mlp_up_swiglu_f16;
}

macro_rules! bias_act {
    ($($name:ident: $t:ty => $hopper:path, $launch:path;)*) => {$(
        fn $name(gpu: &Gpu, x: FusedArgs<'_, $t>) -> Result<()> {
            let bias = need(x.bias, "bias")?;
            let (a, b, mut c) = operands(&x, x.n)?;
            if hopper::on_hopper(gpu) {
                $hopper(gpu, &a, &b, &mut c, bias).map(|_| ())
            } else {
                $launch(gpu, &a, &b, &mut c, bias).map(|_| ())
            }
        }
    )*};
}

bias_act! {
    bias_bf16: bf16 => hopper::h_bias_bf16, stages::stage_bias;
    bias_f16: f16 => hopper::h_bias_f16, blocks::bias_f16;
    bias_gelu_bf16: bf16 => hopper::h_bias_gelu, blocks::ffn_up_bias_gelu;
    bias_gelu_f16: f16 => hopper::h_bias_gelu_f16, blocks::ffn_up_bias_gelu_f16;
    bias_gelu_tanh_bf16: bf16 => hopper::h_bias_gelu_tanh, blocks::ffn_up_bias_gelu_tanh;
}

macro_rules! layer_norm {
    ($($name:ident: $t:ty => $hopper:path, $launch:path;)*) => {$(
        fn $name(gpu: &Gpu, x: FusedArgs<'_, $t>) -> Result<()> {
            let bias = need(x.bias, "bias")?;
            let residual = MatRef::new(need(x.residual, "residual")?, x.m, x.n)?;
            let (gamma, beta) = (need(x.gamma, "gamma")?, need(x.beta, "beta")?);
            let (a, b, mut c) = operands(&x, x.n)?;
            if hopper::on_hopper(gpu) {
                $hopper(gpu, &a, &b, &mut c, bias, &residual, gamma, beta).map(|_| ())
            } else {
                $launch(gpu, &a, &b, &mut c, bias, &residual, gamma, beta).map(|_| ())
            }
        }
    )*};
}

layer_norm! {
    bias_residual_layer_norm_bf16: bf16 => hopper::h_bias_residual_layer_norm,
        blocks::proj_bias_residual_layer_norm;
    bias_residual_layer_norm_f16: f16 => hopper::h_bias_residual_layer_norm_f16,
        blocks::proj_bias_residual_layer_norm_f16;
}

/// The RMSNorm consumer: the GEMM with `scale(row)` by the given rstd.
fn rms_consumer_bf16(gpu: &Gpu, mut x: FusedArgs<'_, bf16>) -> Result<()> {
    let r = need(x.rstd.take(), "rstd")?;
    let (a, b, mut c) = operands(&x, x.n)?;
    if hopper::on_hopper(gpu) {
        hopper::h_row_scale(gpu, &a, &b, &mut c, &*r).map(|_| ())
    } else {
        blocks::rms_scaled_gemm(gpu, &a, &b, &mut c, &*r).map(|_| ())
    }
}

/// The table of a storage type.
pub trait Ours: Sized + 'static {
    /// The entries for this type.
    const TABLE: &'static [(Epilogue, FusedFn<Self>)];

    /// Our kernel for `e`, if there is one.
    fn fused(e: Epilogue) -> Option<FusedFn<Self>> {
        Self::TABLE.iter().find(|(x, _)| *x == e).map(|(_, f)| *f)
    }
}

impl Ours for bf16 {
    const TABLE: &'static [(Epilogue, FusedFn<bf16>)] = OURS_BF16;
}

impl Ours for f16 {
    const TABLE: &'static [(Epilogue, FusedFn<f16>)] = OURS_F16;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bf16_epilogue_but_the_producer_has_a_kernel() {
        for e in Epilogue::ALL {
            assert_eq!(
                bf16::fused(e).is_some(),
                e != Epilogue::RmsProducer,
                "{e:?}"
            );
        }
        assert!(f16::fused(Epilogue::Gemm).is_some());
        assert!(f16::fused(Epilogue::RmsConsumer).is_none());
    }
}
