//! The storage dtypes the CUDA backend runs and, for each, the fused GEMM kernels of a BERT
//! layer: three with each LayerNorm in the GEMM that produces its input, five more with the
//! LayerNorms deferred to the GEMMs that read them (CODA's reparameterisation).
//!
//! Every GEMM is `C = epilogue(A·Bᵀ)` with A `[M, K]` row-major activations, B a PyTorch
//! `nn.Linear` weight `[N, K]` row-major (`b_layout = col`), C `[M, N]`, all in the element
//! type, f32 accumulation. Epilogue vectors (bias, γ, β) and the residual are in the element
//! type too; row statistics, column sums and offsets of the deferred norms are f32. The kernels
//! are declared with `#[fused_gemm]` in `fused_gemm::kernels::blocks`; adding a dtype (e.g. f32
//! once there is an f32 mainloop) means declaring its kernels and implementing [`GpuElement`]
//! with them.
//!
//! # Deferred LayerNorm operands
//! - *moments*: `[M, 4·⌈N/64⌉]` f32, written by a `row_moments` producer beside its output
//!   `h′` (each row of a CTA's tile stored less the tile's row mean): per 64 output columns the
//!   count, mean, M2 and shift of what was stored.
//! - *folded weights* (`fused_gemm::host::weights::fold_layer_norm`): `B′ = B·diag(γ)` in the
//!   element type, `colsum` `[⌈K/64⌉, N]` f32 (column sums of B′ per 64 rows of K) and
//!   `offset` `[N]` f32 (`β·Bᵀ + bias`).

use fused_gemm::bert::BertElement;
use fused_gemm::host::cudarc::driver::{CudaSlice, ValidAsZeroBits};
use fused_gemm::host::kernel::MatRef;
use fused_gemm::host::tensor::HostElement;
use fused_gemm::host::{Gpu, LaunchReport, Result};
use fused_gemm::kernels::{blocks, gemm};

use crate::backend::Dtype;

/// A row-major matrix operand: a typed device buffer seen through [`MatRef`].
pub type Mat<'a, T> = MatRef<'a, T>;

/// A storage dtype of the CUDA backend with its fused GEMMs.
///
/// Each launcher validates its operands (shapes, dtypes, alignment) and reports what ran
/// (mainloop, plan: tile, split-K), with no plan when M or N is 0.
pub trait GpuElement: BertElement + HostElement + ValidAsZeroBits {
    /// The CLI's name for the dtype.
    const CLI_DTYPE: Dtype;

    /// `c = a·bᵀ`, no epilogue (the benchmark's reference for what an epilogue costs).
    ///
    /// # Errors
    /// As [`GpuElement::gemm_bias`].
    fn gemm(
        gpu: &Gpu,
        a: &Mat<'_, Self>,
        b: &Mat<'_, Self>,
        c: &mut Mat<'_, Self>,
    ) -> Result<LaunchReport>;

    /// `c = a·bᵀ + bias` (QKV projection).
    ///
    /// # Errors
    /// Validation, planning and driver errors of the launcher.
    fn gemm_bias(
        gpu: &Gpu,
        a: &Mat<'_, Self>,
        b: &Mat<'_, Self>,
        c: &mut Mat<'_, Self>,
        bias: &CudaSlice<Self>,
    ) -> Result<LaunchReport>;

    /// `c = GELU(a·bᵀ + bias)`, erf GELU (BERT's `"gelu"`; FFN up).
    ///
    /// # Errors
    /// As [`GpuElement::gemm_bias`].
    fn gemm_bias_gelu(
        gpu: &Gpu,
        a: &Mat<'_, Self>,
        b: &Mat<'_, Self>,
        c: &mut Mat<'_, Self>,
        bias: &CudaSlice<Self>,
    ) -> Result<LaunchReport>;

    /// `c = LayerNorm(a·bᵀ + bias + residual)·γ + β` with ε = 1e-12 (BERT's; attention output
    /// projection and FFN down).
    ///
    /// # Errors
    /// As [`GpuElement::gemm_bias`].
    #[allow(clippy::too_many_arguments)]
    fn gemm_bias_residual_layer_norm(
        gpu: &Gpu,
        a: &Mat<'_, Self>,
        b: &Mat<'_, Self>,
        c: &mut Mat<'_, Self>,
        bias: &CudaSlice<Self>,
        residual: &Mat<'_, Self>,
        gamma: &CudaSlice<Self>,
        beta: &CudaSlice<Self>,
    ) -> Result<LaunchReport>;
    /// `c = a·bᵀ + bias + residual` stored centred, its row statistics into `moments` (the
    /// producer of a deferred LayerNorm; attention output projection of the first layer).
    ///
    /// # Errors
    /// As [`GpuElement::gemm_bias`].
    #[allow(clippy::too_many_arguments)]
    fn gemm_bias_residual_moments(
        gpu: &Gpu,
        a: &Mat<'_, Self>,
        b: &Mat<'_, Self>,
        c: &mut Mat<'_, Self>,
        bias: &CudaSlice<Self>,
        residual: &Mat<'_, Self>,
        moments: &mut Mat<'_, f32>,
    ) -> Result<LaunchReport>;

    /// `c = a·bᵀ + bias + LayerNorm(r)·γ + β`, with `r` a deferred producer's centred output and
    /// `r_moments` its statistics, stored centred with its row statistics into `moments`
    /// (attention output projection and FFN down between deferred norms).
    ///
    /// # Errors
    /// As [`GpuElement::gemm_bias`].
    #[allow(clippy::too_many_arguments)]
    fn gemm_bias_normed_residual_moments(
        gpu: &Gpu,
        a: &Mat<'_, Self>,
        b: &Mat<'_, Self>,
        c: &mut Mat<'_, Self>,
        bias: &CudaSlice<Self>,
        r: &Mat<'_, Self>,
        r_moments: &Mat<'_, f32>,
        gamma: &CudaSlice<Self>,
        beta: &CudaSlice<Self>,
        moments: &mut Mat<'_, f32>,
    ) -> Result<LaunchReport>;

    /// `c = LayerNorm(a·bᵀ + bias + LayerNorm(r)·γᵣ + βᵣ)·γ + β`: the last layer's FFN down
    /// when the norms before it were deferred, normalized in full for pooling.
    ///
    /// # Errors
    /// As [`GpuElement::gemm_bias`].
    #[allow(clippy::too_many_arguments)]
    fn gemm_bias_normed_residual_layer_norm(
        gpu: &Gpu,
        a: &Mat<'_, Self>,
        b: &Mat<'_, Self>,
        c: &mut Mat<'_, Self>,
        bias: &CudaSlice<Self>,
        r: &Mat<'_, Self>,
        r_moments: &Mat<'_, f32>,
        gamma_r: &CudaSlice<Self>,
        beta_r: &CudaSlice<Self>,
        gamma: &CudaSlice<Self>,
        beta: &CudaSlice<Self>,
    ) -> Result<LaunchReport>;

    /// `c = LayerNorm(a)·Bᵀ + bias` from a deferred producer's centred `a`, its `a_moments`,
    /// and the folded weights `b′`, `colsum`, `offset` (QKV projection after a deferred norm).
    ///
    /// # Errors
    /// As [`GpuElement::gemm_bias`].
    fn folded_gemm(
        gpu: &Gpu,
        a: &Mat<'_, Self>,
        b: &Mat<'_, Self>,
        c: &mut Mat<'_, Self>,
        a_moments: &Mat<'_, f32>,
        colsum: &Mat<'_, f32>,
        offset: &CudaSlice<f32>,
    ) -> Result<LaunchReport>;

    /// `c = GELU(LayerNorm(a)·Bᵀ + bias)`, erf GELU, as [`GpuElement::folded_gemm`] (FFN up
    /// after a deferred norm).
    ///
    /// # Errors
    /// As [`GpuElement::gemm_bias`].
    fn folded_gemm_gelu(
        gpu: &Gpu,
        a: &Mat<'_, Self>,
        b: &Mat<'_, Self>,
        c: &mut Mat<'_, Self>,
        a_moments: &Mat<'_, f32>,
        colsum: &Mat<'_, f32>,
        offset: &CudaSlice<f32>,
    ) -> Result<LaunchReport>;
}

/// The LayerNorm ε compiled into [`GpuElement::gemm_bias_residual_layer_norm`]'s kernels.
pub const LAYER_NORM_EPS: f32 = 1e-12;

// One kernel per epilogue: on an H100/H200 its launcher takes the TMA + `wgmma` variants of
// the sm_90a module where it can, the `mma.sync` ones elsewhere.
macro_rules! gpu_element {
    ($t:ty, $dtype:expr, gemm: $p:path, bias: $b:path, bias_gelu: $g:path, layer_norm: $l:path,
     moments: $m:path, normed_moments: $nm:path, normed_layer_norm: $nl:path,
     folded: $f:path, folded_gelu: $fg:path) => {
        impl GpuElement for $t {
            const CLI_DTYPE: Dtype = $dtype;

            fn gemm(
                gpu: &Gpu,
                a: &Mat<'_, Self>,
                b: &Mat<'_, Self>,
                c: &mut Mat<'_, Self>,
            ) -> Result<LaunchReport> {
                $p(gpu, a, b, c)
            }

            fn gemm_bias(
                gpu: &Gpu,
                a: &Mat<'_, Self>,
                b: &Mat<'_, Self>,
                c: &mut Mat<'_, Self>,
                bias: &CudaSlice<Self>,
            ) -> Result<LaunchReport> {
                $b(gpu, a, b, c, bias)
            }

            fn gemm_bias_gelu(
                gpu: &Gpu,
                a: &Mat<'_, Self>,
                b: &Mat<'_, Self>,
                c: &mut Mat<'_, Self>,
                bias: &CudaSlice<Self>,
            ) -> Result<LaunchReport> {
                $g(gpu, a, b, c, bias)
            }

            fn gemm_bias_residual_layer_norm(
                gpu: &Gpu,
                a: &Mat<'_, Self>,
                b: &Mat<'_, Self>,
                c: &mut Mat<'_, Self>,
                bias: &CudaSlice<Self>,
                residual: &Mat<'_, Self>,
                gamma: &CudaSlice<Self>,
                beta: &CudaSlice<Self>,
            ) -> Result<LaunchReport> {
                $l(gpu, a, b, c, bias, residual, gamma, beta)
            }

            fn gemm_bias_residual_moments(
                gpu: &Gpu,
                a: &Mat<'_, Self>,
                b: &Mat<'_, Self>,
                c: &mut Mat<'_, Self>,
                bias: &CudaSlice<Self>,
                residual: &Mat<'_, Self>,
                moments: &mut Mat<'_, f32>,
            ) -> Result<LaunchReport> {
                $m(gpu, a, b, c, bias, residual, moments)
            }

            fn gemm_bias_normed_residual_moments(
                gpu: &Gpu,
                a: &Mat<'_, Self>,
                b: &Mat<'_, Self>,
                c: &mut Mat<'_, Self>,
                bias: &CudaSlice<Self>,
                r: &Mat<'_, Self>,
                r_moments: &Mat<'_, f32>,
                gamma: &CudaSlice<Self>,
                beta: &CudaSlice<Self>,
                moments: &mut Mat<'_, f32>,
            ) -> Result<LaunchReport> {
                $nm(gpu, a, b, c, bias, r, r_moments, gamma, beta, moments)
            }

            fn gemm_bias_normed_residual_layer_norm(
                gpu: &Gpu,
                a: &Mat<'_, Self>,
                b: &Mat<'_, Self>,
                c: &mut Mat<'_, Self>,
                bias: &CudaSlice<Self>,
                r: &Mat<'_, Self>,
                r_moments: &Mat<'_, f32>,
                gamma_r: &CudaSlice<Self>,
                beta_r: &CudaSlice<Self>,
                gamma: &CudaSlice<Self>,
                beta: &CudaSlice<Self>,
            ) -> Result<LaunchReport> {
                $nl(
                    gpu, a, b, c, bias, r, r_moments, gamma_r, beta_r, gamma, beta,
                )
            }

            fn folded_gemm(
                gpu: &Gpu,
                a: &Mat<'_, Self>,
                b: &Mat<'_, Self>,
                c: &mut Mat<'_, Self>,
                a_moments: &Mat<'_, f32>,
                colsum: &Mat<'_, f32>,
                offset: &CudaSlice<f32>,
            ) -> Result<LaunchReport> {
                $f(gpu, a, b, c, a_moments, colsum, offset)
            }

            fn folded_gemm_gelu(
                gpu: &Gpu,
                a: &Mat<'_, Self>,
                b: &Mat<'_, Self>,
                c: &mut Mat<'_, Self>,
                a_moments: &Mat<'_, f32>,
                colsum: &Mat<'_, f32>,
                offset: &CudaSlice<f32>,
            ) -> Result<LaunchReport> {
                $fg(gpu, a, b, c, a_moments, colsum, offset)
            }
        }
    };
}

gpu_element!(half::f16, Dtype::F16,
    gemm: gemm::gemm_f16,
    bias: blocks::bias_f16,
    bias_gelu: blocks::ffn_up_bias_gelu_f16,
    layer_norm: blocks::proj_bias_residual_layer_norm_f16,
    moments: blocks::proj_bias_residual_moments_f16,
    normed_moments: blocks::proj_bias_normed_residual_moments_f16,
    normed_layer_norm: blocks::proj_bias_normed_residual_layer_norm_f16,
    folded: blocks::folded_ln_linear_f16,
    folded_gelu: blocks::folded_ln_ffn_up_gelu_f16);
gpu_element!(half::bf16, Dtype::Bf16,
    gemm: gemm::gemm_bf16,
    bias: blocks::bias_bf16,
    bias_gelu: blocks::ffn_up_bias_gelu,
    layer_norm: blocks::proj_bias_residual_layer_norm,
    moments: blocks::proj_bias_residual_moments,
    normed_moments: blocks::proj_bias_normed_residual_moments,
    normed_layer_norm: blocks::proj_bias_normed_residual_layer_norm,
    folded: blocks::folded_ln_linear,
    folded_gelu: blocks::folded_ln_ffn_up_gelu);
