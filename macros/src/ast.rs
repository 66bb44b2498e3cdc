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

/// Which GPUs a kernel is compiled for (the `arch` option) and so which mainloops it gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Targets {
    /// No `arch`: every module. `mma.sync` (f32: CUDA-core) variants everywhere, and in the
    /// sm_90a module also TMA + `wgmma` variants where the kernel allows them.
    All,
    /// `arch = sm_80`: only the `mma.sync` (f32: CUDA-core) variants, in every module.
    Sm80,
    /// `arch = sm_90`: Hopper only; both mainloops, in the sm_90a module.
    Sm90,
}

impl Targets {
    /// The smallest arch the variants run on, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Targets::All | Targets::Sm80 => "sm_80",
            Targets::Sm90 => "sm_90",
        }
    }

    /// Largest dynamic shared memory one CTA may opt in to on the smallest arch the
    /// `mma.sync` variants run on, bytes (CUDA C Programming Guide, "Technical Specifications
    /// per Compute Capability": 163 KB on sm_80, 227 KB on sm_90).
    pub fn smem_limit(self) -> u32 {
        match self {
            Targets::All | Targets::Sm80 => 163 * 1024,
            Targets::Sm90 => 227 * 1024,
        }
    }
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
    /// A literal baked into the kernel.
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
    RowMoments,
    FoldedLayerNorm { eps: f64 },
    NormedResidual { eps: f64 },
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
    /// The whole stage, arguments included.
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
            StageKind::RowMoments => "row_moments",
            StageKind::FoldedLayerNorm { .. } => "folded_layer_norm",
            StageKind::NormedResidual { .. } => "normed_residual",
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
    pub out: Option<(Dtype, Span)>,
    pub b_layout: BLayout,
    pub arch: Targets,
    /// `tile = (BM, BN, BK)` as written.
    pub tile: Option<((u32, u32, u32), Span)>,
}

impl KernelAttr {
    pub fn out_dtype(&self) -> Dtype {
        self.out.map(|(d, _)| d).unwrap_or(self.dtype)
    }
}

/// Names of the launcher's operands `gpu`, `a`, `b`, `c`, which stage parameters must not reuse.
pub const FIXED_PARAMS: &[(&str, &str)] = &[
    ("gpu", "the launcher's device parameter"),
    ("a", "the launcher's A operand"),
    ("b", "the launcher's B operand"),
    ("c", "the launcher's C operand"),
];

/// A launcher parameter that a stage adds.
#[derive(Clone, Debug)]
pub struct ParamName {
    /// Its name.
    pub name: String,
    /// Set when the user chose the name (`scale(alpha)`): where it was written.
    pub chosen: Option<Span>,
}

/// The launcher parameters each stage adds, in stage order. Generated names are made unique
/// among themselves (`bias`, `bias_2`, ...); names the user chose are kept as written, so
/// `validate` reports their collisions instead.
pub fn stage_params(stages: &[Stage]) -> Vec<Vec<ParamName>> {
    let mut taken: Vec<String> = FIXED_PARAMS.iter().map(|(n, _)| n.to_string()).collect();
    let mut generated = |base: &str| {
        let mut name = base.to_string();
        let mut i = 2;
        while taken.contains(&name) {
            name = format!("{base}_{i}");
            i += 1;
        }
        taken.push(name.clone());
        ParamName { name, chosen: None }
    };
    stages
        .iter()
        .map(|s| match &s.kind {
            StageKind::Scale(ScaleArg::Param(p)) => vec![ParamName {
                name: p.to_string(),
                chosen: Some(p.span()),
            }],
            StageKind::Scale(ScaleArg::Vector(Axis::Row)) => vec![generated("row_scale")],
            StageKind::Scale(ScaleArg::Vector(Axis::Col)) => vec![generated("col_scale")],
            StageKind::Bias(Axis::Row) => vec![generated("row_bias")],
            StageKind::Bias(Axis::Col) => vec![generated("bias")],
            StageKind::Residual => vec![generated("residual")],
            StageKind::LayerNorm { .. } => vec![generated("gamma"), generated("beta")],
            StageKind::RmsNorm { .. } => vec![generated("gamma")],
            StageKind::RowMoments => vec![generated("stats")],
            StageKind::NormedResidual { .. } => vec![
                generated("residual"),
                generated("residual_stats"),
                generated("residual_gamma"),
                generated("residual_beta"),
            ],
            StageKind::FoldedLayerNorm { .. } => vec![
                generated("input_stats"),
                generated("colsum"),
                generated("offset"),
            ],
            StageKind::Rope { .. } => vec![generated("rope")],
            _ => vec![],
        })
        .collect()
}
