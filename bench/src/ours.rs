//! The slot for our fused kernels: one function per (storage type, epilogue). An epilogue
//! without an entry is reported as `n/a`.
//!
//! # Plugging a fused kernel in
//! Write a launcher with the signature [`FusedFn`] that computes the epilogue's contract
//! ([`Epilogue`] documents each) into `args.out` (and `args.rstd`), queued on `gpu.stream()`
//! without synchronizing, and list it in the table of its storage type, e.g.
//! `(Epilogue::BiasGelu, bias_gelu_bf16)` in [`OURS_BF16`]. The adapters below wrap the
//! `#[fused_gemm]` launchers of `fused_gemm::kernels::{blocks, stages}`: the buffers become
//! operands through `host::gemm::MatRef` (matrices) and `CudaSlice`'s `AsVector` (vectors).
//!
//! The harness checks each once per shape against the f64 reference and the unfused path (and
//! refuses to time it if it is wrong), then times it beside cuBLASLt and the unfused path.
//! Epilogues without a kernel yet: `bias-relu`, `rms-rstd` (bf16 and f16); `bias-gelu-tanh` and
//! `rmsnorm-scale` for f16.

use cudarc::driver::{CudaSlice, DeviceRepr};
use fused_gemm::host::cudarc;
use fused_gemm::host::gemm::MatRef;
use fused_gemm::host::tensor::HostElement;
use fused_gemm::kernels::{blocks, hopper, stages};
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
    /// Bias, N values (bias epilogues and LayerNorm).
    pub bias: Option<&'a CudaSlice<T>>,
    /// Residual, M×N row-major (LayerNorm).
    pub residual: Option<&'a CudaSlice<T>>,
    /// γ, N values (LayerNorm).
    pub gamma: Option<&'a CudaSlice<T>>,
    /// β, N values (LayerNorm).
    pub beta: Option<&'a CudaSlice<T>>,
    /// ε of the norm epilogues ([`Epilogue::eps`]).
    pub eps: f32,
    /// The output, M×`Epilogue::out_cols(N)` row-major.
    pub out: &'a mut CudaSlice<T>,
    /// Per-row f32 buffer, M values: rms-rstd's output, rmsnorm-scale's scratch for r.
    pub rstd: Option<&'a mut CudaSlice<f32>>,
}

/// A fused GEMM + epilogue launcher.
pub type FusedFn<T> = fn(&Gpu, FusedArgs<'_, T>) -> Result<()>;

/// Our bf16 kernels, one entry per epilogue they implement (`fused_gemm::kernels::blocks`,
/// `stages`).
pub const OURS_BF16: &[(Epilogue, FusedFn<bf16>)] = &[
    (Epilogue::BiasGelu, bias_gelu_bf16),
    (Epilogue::BiasGeluTanh, bias_gelu_tanh_bf16),
    (Epilogue::Bias, bias_bf16),
    (
        Epilogue::BiasResidualLayernorm,
        bias_residual_layer_norm_bf16,
    ),
    (Epilogue::Swiglu, swiglu_bf16),
    (Epilogue::RmsnormScale, rmsnorm_scale_bf16),
];

/// Our f16 kernels, one entry per epilogue they implement.
pub const OURS_F16: &[(Epilogue, FusedFn<f16>)] = &[
    (Epilogue::BiasGelu, bias_gelu_f16),
    (Epilogue::Bias, bias_f16),
    (
        Epilogue::BiasResidualLayernorm,
        bias_residual_layer_norm_f16,
    ),
    (Epilogue::Swiglu, swiglu_f16),
];

// ---- adapters from `FusedArgs` to the `#[fused_gemm]` launchers ------------------------------

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

// Each adapter runs the Hopper twin (`arch = sm_90`: TMA + wgmma where the launcher's model
// prefers it) on an H100/H200 and the sm_80 kernel elsewhere.

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
    bias_gelu_bf16: bf16 => hopper::h_bias_gelu, blocks::ffn_up_bias_gelu;
    bias_gelu_f16: f16 => hopper::h_bias_gelu_f16, blocks::ffn_up_bias_gelu_f16;
    bias_gelu_tanh_bf16: bf16 => hopper::h_bias_gelu_tanh, blocks::ffn_up_bias_gelu_tanh;
    bias_bf16: bf16 => hopper::h_bias_bf16, stages::stage_bias;
    bias_f16: f16 => hopper::h_bias_f16, blocks::bias_f16;
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

macro_rules! swiglu {
    ($($name:ident: $t:ty => $hopper:path, $launch:path;)*) => {$(
        fn $name(gpu: &Gpu, x: FusedArgs<'_, $t>) -> Result<()> {
            let (a, b, mut c) = operands(&x, x.n / 2)?;
            if hopper::on_hopper(gpu) {
                $hopper(gpu, &a, &b, &mut c).map(|_| ())
            } else {
                $launch(gpu, &a, &b, &mut c).map(|_| ())
            }
        }
    )*};
}

swiglu! {
    swiglu_bf16: bf16 => hopper::h_swiglu, blocks::mlp_up_swiglu;
    swiglu_f16: f16 => hopper::h_swiglu_f16, blocks::mlp_up_swiglu_f16;
}

/// RMSNorm-scale: r = 1/rms of A's rows by the row kernel (in a model the previous GEMM's
/// epilogue provides it), then the GEMM with `scale(row)`.
fn rmsnorm_scale_bf16(gpu: &Gpu, mut x: FusedArgs<'_, bf16>) -> Result<()> {
    let r = need(x.rstd.take(), "rstd")?;
    fused_gemm::rowwise::rms_scale(gpu, x.m, x.k, x.a, x.k, x.eps, r)?;
    let (a, b, mut c) = operands(&x, x.n)?;
    blocks::rms_scaled_gemm(gpu, &a, &b, &mut c, &*r).map(|_| ())
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

    struct Probe;

    fn fake(_: &Gpu, _: FusedArgs<'_, Probe>) -> fused_gemm::Result<()> {
        Ok(())
    }

    impl Ours for Probe {
        const TABLE: &'static [(Epilogue, FusedFn<Probe>)] = &[(Epilogue::Swiglu, fake)];
    }

    #[test]
    fn lookup_finds_exactly_the_listed_epilogues() {
        for e in Epilogue::ALL {
            assert_eq!(Probe::fused(e).is_some(), e == Epilogue::Swiglu, "{e:?}");
            assert_eq!(
                bf16::fused(e).is_some(),
                OURS_BF16.iter().any(|(x, _)| *x == e)
            );
            assert_eq!(
                f16::fused(e).is_some(),
                OURS_F16.iter().any(|(x, _)| *x == e)
            );
        }
    }
}
