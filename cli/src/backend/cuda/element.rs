//! The storage dtypes the CUDA backend runs and, for each, the three fused GEMM kernels of a
//! BERT layer.
//!
//! Every GEMM is `C = epilogue(A·Bᵀ)` with A `[M, K]` row-major activations, B a PyTorch
//! `nn.Linear` weight `[N, K]` row-major (`b_layout = col`), C `[M, N]`, all in the element
//! type, f32 accumulation. Epilogue vectors (bias, γ, β) and the residual are in the element
//! type too. The kernels are declared with `#[fused_gemm]` in `fused_gemm::kernels`; adding a
//! dtype (e.g. f32 once there is an f32 mainloop) means declaring its three kernels and
//! implementing [`GpuElement`] with them.

use fused_gemm::bert::BertElement;
use fused_gemm::host::cudarc::driver::{CudaSlice, ValidAsZeroBits};
use fused_gemm::host::kernel::MatRef;
use fused_gemm::host::tensor::HostElement;
use fused_gemm::host::{Gpu, LaunchReport, Result};
use fused_gemm::kernels::blocks;

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
}

/// The LayerNorm ε compiled into [`GpuElement::gemm_bias_residual_layer_norm`]'s kernels.
pub const LAYER_NORM_EPS: f32 = 1e-12;

// One kernel per epilogue: on an H100/H200 its launcher takes the TMA + `wgmma` variants of
// the sm_90a module where it can, the `mma.sync` ones elsewhere.
macro_rules! gpu_element {
    ($t:ty, $dtype:expr, bias: $b:path, bias_gelu: $g:path, layer_norm: $l:path) => {
        impl GpuElement for $t {
            const CLI_DTYPE: Dtype = $dtype;

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
        }
    };
}

gpu_element!(half::f16, Dtype::F16,
    bias: blocks::bias_f16,
    bias_gelu: blocks::ffn_up_bias_gelu_f16,
    layer_norm: blocks::proj_bias_residual_layer_norm_f16);
gpu_element!(half::bf16, Dtype::Bf16,
    bias: blocks::bias_bf16,
    bias_gelu: blocks::ffn_up_bias_gelu,
    layer_norm: blocks::proj_bias_residual_layer_norm);
