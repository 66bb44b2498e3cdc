//! Unfused element-wise and row kernels (bodies in `fused_gemm_device::kernel::rowwise`), one
//! entry point per storage type and variant. Host launchers: `fused_gemm::rowwise`.
//!
//! Names: `fg_<op>[_<activation>]_<dtype>`. Parameters are the fields of the op's struct in
//! `fused_gemm_device::kernel::rowwise` (`BiasActArgs`, `SwigluArgs`, `LayerNormArgs`,
//! `RmsNormArgs`, `RmsScaleArgs`): `u32` sizes and leading dimensions (elements), `u64` device
//! addresses (0 = operand absent) and `f32` scalars, in the order of the body's signature.

#[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
use crate::device::kernel::rowwise as rw;
#[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
use crate::device::types::{Bf16, F16};

macro_rules! bias_act_entries {
    ($($konst:ident = $name:ident <$e:ty, $act:ident>;)*) => {$(
        entry! {
            #[doc = concat!("`y = ", stringify!($act), "(x + bias)`, storage `", stringify!($e),
                "` (`rowwise::bias_act`).")]
            $konst = fn $name(p: crate::device::kernel::rowwise::BiasActArgs {
                m: u32, n: u32, x: u64, ldx: u32, bias: u64, y: u64, ldy: u32, lanes_log2: u32,
                vec: u32,
            }) {
                unsafe { rw::bias_act::<$e, { rw::act::$act }>(m, n, x, ldx, bias, y, ldy, lanes_log2, vec) }
            }
        }
    )*};
}

bias_act_entries! {
    BIAS_F32 = fg_bias_f32<f32, NONE>;
    BIAS_RELU_F32 = fg_bias_relu_f32<f32, RELU>;
    BIAS_GELU_F32 = fg_bias_gelu_f32<f32, GELU>;
    BIAS_GELU_TANH_F32 = fg_bias_gelu_tanh_f32<f32, GELU_TANH>;
    BIAS_SILU_F32 = fg_bias_silu_f32<f32, SILU>;
    BIAS_BF16 = fg_bias_bf16<Bf16, NONE>;
    BIAS_RELU_BF16 = fg_bias_relu_bf16<Bf16, RELU>;
    BIAS_GELU_BF16 = fg_bias_gelu_bf16<Bf16, GELU>;
    BIAS_GELU_TANH_BF16 = fg_bias_gelu_tanh_bf16<Bf16, GELU_TANH>;
    BIAS_SILU_BF16 = fg_bias_silu_bf16<Bf16, SILU>;
    BIAS_F16 = fg_bias_f16<F16, NONE>;
    BIAS_RELU_F16 = fg_bias_relu_f16<F16, RELU>;
    BIAS_GELU_F16 = fg_bias_gelu_f16<F16, GELU>;
    BIAS_GELU_TANH_F16 = fg_bias_gelu_tanh_f16<F16, GELU_TANH>;
    BIAS_SILU_F16 = fg_bias_silu_f16<F16, SILU>;
}

macro_rules! row_entries {
    ($($swiglu:ident = $swiglu_fn:ident, $ln:ident = $ln_fn:ident, $rms:ident = $rms_fn:ident,
       $scale:ident = $scale_fn:ident: $e:ty;)*) => {$(
        entry! {
            #[doc = concat!("SwiGLU on interleaved columns, storage `", stringify!($e),
                "` (`rowwise::swiglu`).")]
            $swiglu = fn $swiglu_fn(p: crate::device::kernel::rowwise::SwigluArgs {
                m: u32, n_in: u32, x: u64, ldx: u32, y: u64, ldy: u32, lanes_log2: u32, vec: u32,
            }) {
                unsafe { rw::swiglu::<$e>(m, n_in, x, ldx, y, ldy, lanes_log2, vec) }
            }
        }
        entry! {
            #[doc = concat!("Bias + residual + LayerNorm, storage `", stringify!($e),
                "` (`rowwise::layer_norm`).")]
            $ln = fn $ln_fn(p: crate::device::kernel::rowwise::LayerNormArgs {
                m: u32, n: u32, x: u64, ldx: u32, bias: u64, res: u64, ldr: u32, gamma: u64,
                beta: u64, eps: f32, y: u64, ldy: u32, group: u32, vec: u32,
            }) {
                unsafe { rw::layer_norm::<$e>(m, n, x, ldx, bias, res, ldr, gamma, beta, eps, y, ldy, group, vec) }
            }
        }
        entry! {
            #[doc = concat!("RMSNorm, storage `", stringify!($e),
                "` (`rowwise::rms_norm`).")]
            $rms = fn $rms_fn(p: crate::device::kernel::rowwise::RmsNormArgs {
                m: u32, n: u32, x: u64, ldx: u32, gamma: u64, eps: f32, y: u64, ldy: u32,
                group: u32, vec: u32,
            }) {
                unsafe { rw::rms_norm::<$e>(m, n, x, ldx, gamma, eps, y, ldy, group, vec) }
            }
        }
        entry! {
            #[doc = concat!("Per-row 1/RMS (f32 out), storage `", stringify!($e),
                "` (`rowwise::rms_scale`).")]
            $scale = fn $scale_fn(p: crate::device::kernel::rowwise::RmsScaleArgs {
                m: u32, n: u32, x: u64, ldx: u32, eps: f32, rstd: u64, group: u32, vec: u32,
            }) {
                unsafe { rw::rms_scale::<$e>(m, n, x, ldx, eps, rstd, group, vec) }
            }
        }
    )*};
}

row_entries! {
    SWIGLU_F32 = fg_swiglu_f32, LAYER_NORM_F32 = fg_layer_norm_f32, RMS_NORM_F32 = fg_rms_norm_f32,
        RMS_SCALE_F32 = fg_rms_scale_f32: f32;
    SWIGLU_BF16 = fg_swiglu_bf16, LAYER_NORM_BF16 = fg_layer_norm_bf16, RMS_NORM_BF16 = fg_rms_norm_bf16,
        RMS_SCALE_BF16 = fg_rms_scale_bf16: Bf16;
    SWIGLU_F16 = fg_swiglu_f16, LAYER_NORM_F16 = fg_layer_norm_f16, RMS_NORM_F16 = fg_rms_norm_f16,
        RMS_SCALE_F16 = fg_rms_scale_f16: F16;
}

entry! {
    /// Busy-waits `ns` nanoseconds in one thread (`kernel::timing::spin_ns`); launch (1, 1).
    /// Used by the benchmark timing to let the host queue a batch of runs ahead of the GPU.
    SPIN_NS = fn fg_spin_ns(ns: u64) {
        unsafe { crate::device::kernel::timing::spin_ns(ns) }
    }
}

/// Every entry point of this module (for PTX checks).
pub const ALL: &[&str] = &[
    BIAS_F32,
    BIAS_RELU_F32,
    BIAS_GELU_F32,
    BIAS_GELU_TANH_F32,
    BIAS_SILU_F32,
    BIAS_BF16,
    BIAS_RELU_BF16,
    BIAS_GELU_BF16,
    BIAS_GELU_TANH_BF16,
    BIAS_SILU_BF16,
    BIAS_F16,
    BIAS_RELU_F16,
    BIAS_GELU_F16,
    BIAS_GELU_TANH_F16,
    BIAS_SILU_F16,
    SWIGLU_F32,
    LAYER_NORM_F32,
    RMS_NORM_F32,
    RMS_SCALE_F32,
    SWIGLU_BF16,
    LAYER_NORM_BF16,
    RMS_NORM_BF16,
    RMS_SCALE_BF16,
    SWIGLU_F16,
    LAYER_NORM_F16,
    RMS_NORM_F16,
    RMS_SCALE_F16,
    SPIN_NS,
];
