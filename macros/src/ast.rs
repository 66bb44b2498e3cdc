//! The typed form of one `#[fused_gemm(...)]` attribute, every node keeping its span.

use proc_macro2::Span;

/// An input or output element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    Bf16,
    F16,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
        }
    }
    pub fn device_type(self) -> proc_macro2::TokenStream {
        match self {
            Dtype::F32 => quote::quote!(f32),
            Dtype::Bf16 => quote::quote!(::fused_gemm::__private::device::types::Bf16),
            Dtype::F16 => quote::quote!(::fused_gemm::__private::device::types::F16),
        }
    }
    pub fn host_dtype(self) -> proc_macro2::TokenStream {
        match self {
            Dtype::F32 => quote::quote!(::fused_gemm::__private::device::types::DType::F32),
            Dtype::Bf16 => quote::quote!(::fused_gemm::__private::device::types::DType::Bf16),
            Dtype::F16 => quote::quote!(::fused_gemm::__private::device::types::DType::F16),
        }
    }
}

/// Target architecture of the mainloop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Sm80,
    Sm90,
}

/// Where `scale`/`bias` vectors run along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    Row,
    Col,
}

/// `scale(...)`'s factor.
#[derive(Clone, Debug)]
pub enum ScaleArg {
    /// A launch-time scalar with this parameter name.
    Param(syn::Ident),
    /// A literal baked into the launcher.
    Const(f64),
    /// A per-row or per-column f32 vector.
    Vector(Axis),
}

/// One stage of the epilogue.
#[derive(Clone, Debug)]
pub enum StageKind {
    Scale(ScaleArg),
    Bias(Axis),
    Relu,
    Gelu,
    GeluTanh,
    Silu,
    Sigmoid,
    Residual,
    Accumulate,
    LayerNorm { eps: f64 },
    RmsNorm { eps: f64 },
    SwiGlu,
    GeGlu,
    Rope { theta: f64 },
    Cast(Dtype),
    User(syn::Path),
}

/// A stage and where it was written.
#[derive(Clone, Debug)]
pub struct Stage {
    pub kind: StageKind,
    pub span: Span,
}

impl Stage {
    pub fn name(&self) -> &'static str {
        match &self.kind {
            StageKind::Scale(_) => "scale",
            StageKind::Bias(_) => "bias",
            StageKind::Relu => "relu",
            StageKind::Gelu => "gelu",
            StageKind::GeluTanh => "gelu_tanh",
            StageKind::Silu => "silu",
            StageKind::Sigmoid => "sigmoid",
            StageKind::Residual => "residual",
            StageKind::Accumulate => "accumulate",
            StageKind::LayerNorm { .. } => "layer_norm",
            StageKind::RmsNorm { .. } => "rms_norm",
            StageKind::SwiGlu => "swiglu",
            StageKind::GeGlu => "geglu",
            StageKind::Rope { .. } => "rope",
            StageKind::Cast(_) => "cast",
            StageKind::User(_) => "user function",
        }
    }

    pub fn is_norm(&self) -> bool {
        matches!(
            self.kind,
            StageKind::LayerNorm { .. } | StageKind::RmsNorm { .. }
        )
    }

    pub fn is_pairwise_reducing(&self) -> bool {
        matches!(self.kind, StageKind::SwiGlu | StageKind::GeGlu)
    }
}

/// Layout of B.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BLayout {
    /// K×N row-major.
    Row,
    /// N×K row-major (PyTorch `Linear` weights).
    Col,
}

/// The whole attribute.
#[derive(Clone, Debug)]
pub struct KernelAttr {
    pub stages: Vec<Stage>,
    pub dtype: Dtype,
    pub dtype_span: Span,
    pub out: Option<(Dtype, Span)>,
    pub b_layout: BLayout,
    pub arch: Arch,
    pub tile: Option<((u32, u32, u32), Span)>,
}

impl KernelAttr {
    pub fn out_dtype(&self) -> Dtype {
        self.out.map(|(d, _)| d).unwrap_or(self.dtype)
    }
}
