//! The pieces every reference stage shares: the stage list's element ([`RefStage`]), the error
//! type, the shape checks and RoPE's configuration.

use fused_gemm_device::types::DType;

/// Bad input to a reference function.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReferenceError {
    /// A buffer's length does not match its shape.
    #[error("`{what}` has {actual} elements, expected {expected}")]
    Length {
        /// The buffer.
        what: &'static str,
        /// Length its shape implies.
        expected: usize,
        /// Length given.
        actual: usize,
    },
    /// A dimension that must be positive is 0.
    #[error("{what} must be at least 1")]
    ZeroDim {
        /// The dimension.
        what: &'static str,
    },
    /// RoPE rotates pairs, so the rotary dimension must be even.
    #[error("rotary dimension {rotary_dim} is odd: RoPE rotates pairs of columns")]
    OddRotaryDim {
        /// The dimension given.
        rotary_dim: usize,
    },
    /// The rotary dimension is wider than a head.
    #[error("rotary dimension {rotary_dim} exceeds head_dim {head_dim}")]
    RotaryDimTooLarge {
        /// The rotary dimension.
        rotary_dim: usize,
        /// The head dimension.
        head_dim: usize,
    },
    /// RoPE's base must be finite and positive.
    #[error("RoPE theta must be finite and > 0, got {theta}")]
    InvalidTheta {
        /// The base given.
        theta: f64,
    },
    /// RoPE's input rows must hold whole heads.
    #[error("row width {width} is not a multiple of head_dim {head_dim}")]
    WidthNotMultipleOfHead {
        /// Columns per row.
        width: usize,
        /// Columns per head.
        head_dim: usize,
    },
    /// A pair-reducing stage (SwiGLU, GeGLU) needs an even number of columns.
    #[error("a gated unit needs an even width (gate and up halves), got {width}")]
    OddPairWidth {
        /// The width it got.
        width: usize,
    },
    /// A stage is not allowed where it is in the list.
    #[error("stage `{stage}` at position {index}: {reason}")]
    StageOrder {
        /// The stage.
        stage: &'static str,
        /// Its index in the list.
        index: usize,
        /// Why.
        reason: &'static str,
    },
    /// `accumulate` is in the list but no `c_in` was given.
    #[error("stage `accumulate` reads the output buffer, but no c_in was given")]
    MissingCIn,
    /// A model config names an activation that has no stage.
    #[error(
        "unknown activation `{0}` (known: gelu, gelu_python, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish, sigmoid)"
    )]
    UnknownActivation(String),
    /// A shape whose element count overflows `usize`, a result too large to allocate, or a
    /// RoPE position beyond `usize`.
    #[error("`{what}` is too large: {detail}")]
    TooLarge {
        /// The buffer or quantity.
        what: &'static str,
        /// Its size, and what it exceeds.
        detail: String,
    },
}

pub(crate) fn check_len(
    what: &'static str,
    expected: usize,
    actual: usize,
) -> Result<(), ReferenceError> {
    if expected == actual {
        Ok(())
    } else {
        Err(ReferenceError::Length {
            what,
            expected,
            actual,
        })
    }
}

pub(crate) fn too_large(what: &'static str, rows: usize, cols: usize) -> ReferenceError {
    ReferenceError::TooLarge {
        what,
        detail: format!("{rows}×{cols} elements do not fit in host memory"),
    }
}

/// `rows · cols`, or [`ReferenceError::TooLarge`] when it overflows.
pub(crate) fn elements(
    what: &'static str,
    rows: usize,
    cols: usize,
) -> Result<usize, ReferenceError> {
    rows.checked_mul(cols)
        .ok_or_else(|| too_large(what, rows, cols))
}

/// Checks that a buffer of `actual` elements holds a `rows × cols` shape.
pub(crate) fn check_shape(
    what: &'static str,
    rows: usize,
    cols: usize,
    actual: usize,
) -> Result<(), ReferenceError> {
    check_len(what, elements(what, rows, cols)?, actual)
}

/// A zeroed `rows × cols` buffer, or [`ReferenceError::TooLarge`] when it cannot be allocated
/// (an allocation failure would abort the process instead).
pub(crate) fn zeros(
    what: &'static str,
    rows: usize,
    cols: usize,
) -> Result<Vec<f64>, ReferenceError> {
    let len = elements(what, rows, cols)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| too_large(what, rows, cols))?;
    v.resize(len, 0.0);
    Ok(v)
}

/// Which columns of a row form the pairs of a pairwise stage (RoPE, SwiGLU, GeGLU).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PairLayout {
    /// Pair i is columns `(2i, 2i + 1)`: what the fused kernel computes (one thread holds both).
    Interleaved,
    /// Pair i is columns `(i, i + d/2)` of a block of d columns (a RoPE head's rotary part, or
    /// a `[gate | up]` row): what checkpoints and unfused PyTorch code use.
    HalfSplit,
}

/// One epilogue stage, in f64. `x` is the value entering the stage at output element `(r, c)`
/// and W the tile width at that point (N, or N/2 after a pair-reducing stage).
#[derive(Clone, Debug)]
pub enum RefStage {
    /// `scale(alpha)`: x·alpha.
    Scale(f64),
    /// `scale(row)`: `x·s[r]`, s of length M.
    ScaleRow(Vec<f64>),
    /// `scale(col)`: `x·s[c]`, s of length W.
    ScaleCol(Vec<f64>),
    /// `bias`: `x + b[c]`, b of length W (per column, broadcast down the rows: `Linear`'s bias).
    BiasCol(Vec<f64>),
    /// `bias(row)`: `x + b[r]`, b of length M.
    BiasRow(Vec<f64>),
    /// `relu`: max(x, 0).
    Relu,
    /// `gelu`: erf-GELU ([`gelu_erf`](super::gelu_erf)).
    Gelu,
    /// `gelu_tanh`: tanh-approximate GELU ([`gelu_tanh`](super::gelu_tanh)).
    GeluTanh,
    /// `silu`: x·sigmoid(x).
    Silu,
    /// `sigmoid`: 1/(1 + e^−x).
    Sigmoid,
    /// `residual`: `x + R[r, c]`, R an M×W row-major matrix.
    Residual(Vec<f64>),
    /// `accumulate`: `c_in[r, c]` + x, `c_in` the output buffer's prior contents (M×W).
    /// Must be the last stage.
    Accumulate,
    /// `layer_norm(eps)` over each row's W values ([`layer_norm_rows`](super::layer_norm_rows));
    /// gamma, beta of length W.
    LayerNorm {
        /// Scale γ.
        gamma: Vec<f64>,
        /// Shift β.
        beta: Vec<f64>,
        /// ε added to the variance.
        eps: f64,
    },
    /// `rms_norm(eps)` over each row's W values ([`rms_norm_rows`](super::rms_norm_rows)); gamma of
    /// length W.
    RmsNorm {
        /// Scale γ.
        gamma: Vec<f64>,
        /// ε added to the mean square.
        eps: f64,
    },
    /// `swiglu`: silu(gate)·up over column pairs in the given layout ([`swiglu`](super::swiglu)); W
    /// halves. The device stage is [`PairLayout::Interleaved`].
    SwiGlu(PairLayout),
    /// `geglu`: gelu(gate)·up ([`geglu`](super::geglu)); W halves.
    GeGlu(PairLayout),
    /// `rope(theta)` ([`rope`](super::rope)); the device stage is [`PairLayout::Interleaved`]. Must
    /// come before any pair-reducing stage.
    Rope(RopeConfig),
    /// `cast(dtype)`: rounds x to the dtype and back ([`round_to`](super::round_to)).
    Cast(DType),
    /// A user element-wise function.
    User(fn(f64) -> f64),
}

impl RefStage {
    /// The stage's name in the `#[fused_gemm(epilogue = [...])]` vocabulary.
    pub fn name(&self) -> &'static str {
        match self {
            RefStage::Scale(_) => "scale",
            RefStage::ScaleRow(_) => "scale(row)",
            RefStage::ScaleCol(_) => "scale(col)",
            RefStage::BiasCol(_) => "bias",
            RefStage::BiasRow(_) => "bias(row)",
            RefStage::Relu => "relu",
            RefStage::Gelu => "gelu",
            RefStage::GeluTanh => "gelu_tanh",
            RefStage::Silu => "silu",
            RefStage::Sigmoid => "sigmoid",
            RefStage::Residual(_) => "residual",
            RefStage::Accumulate => "accumulate",
            RefStage::LayerNorm { .. } => "layer_norm",
            RefStage::RmsNorm { .. } => "rms_norm",
            RefStage::SwiGlu(_) => "swiglu",
            RefStage::GeGlu(_) => "geglu",
            RefStage::Rope(_) => "rope",
            RefStage::Cast(_) => "cast",
            RefStage::User(_) => "user",
        }
    }

    /// Whether the stage halves the width.
    pub fn pairs(&self) -> bool {
        matches!(self, RefStage::SwiGlu(_) | RefStage::GeGlu(_))
    }
}

/// Output columns of the fused operation: N, halved by a pair-reducing stage (integer
/// division; an odd N is rejected when the stage runs).
pub fn output_width(n: usize, stages: &[RefStage]) -> usize {
    if stages.iter().any(RefStage::pairs) {
        n / 2
    } else {
        n
    }
}

/// A rotary embedding over the rows of an M × width matrix holding `width / head_dim` heads
/// per row. Row r is the token at position `r % seq_len + pos_offset` (rows are `seq_len`-token
/// sequences stacked, each starting at the KV-cache offset `pos_offset`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeConfig {
    /// Frequency base θ (10000 for LLaMA-2 and BERT-era models, 500000 for LLaMA-3).
    pub theta: f64,
    /// Columns per head.
    pub head_dim: usize,
    /// Rotated columns at the start of each head: even, ≤ `head_dim`.
    pub rotary_dim: usize,
    /// Tokens per sequence (≥ 1).
    pub seq_len: usize,
    /// Position of each sequence's first row.
    pub pos_offset: usize,
    /// Which columns form a pair.
    pub layout: PairLayout,
}

impl RopeConfig {
    /// Full-width rotation of one sequence of `seq_len` tokens from position 0.
    pub fn new(theta: f64, head_dim: usize, seq_len: usize, layout: PairLayout) -> RopeConfig {
        RopeConfig {
            theta,
            head_dim,
            rotary_dim: head_dim,
            seq_len,
            pos_offset: 0,
            layout,
        }
    }

    /// Checks the configuration on its own.
    ///
    /// # Errors
    /// [`ReferenceError::ZeroDim`] for `head_dim` or `seq_len` of 0,
    /// [`ReferenceError::OddRotaryDim`], [`ReferenceError::RotaryDimTooLarge`],
    /// [`ReferenceError::InvalidTheta`] unless θ is finite and > 0, and
    /// [`ReferenceError::TooLarge`] if the last position, `pos_offset + seq_len − 1`, overflows
    /// `usize`.
    pub fn validate(&self) -> Result<(), ReferenceError> {
        if self.head_dim == 0 {
            return Err(ReferenceError::ZeroDim { what: "head_dim" });
        }
        if self.seq_len == 0 {
            return Err(ReferenceError::ZeroDim { what: "seq_len" });
        }
        if !self.rotary_dim.is_multiple_of(2) {
            return Err(ReferenceError::OddRotaryDim {
                rotary_dim: self.rotary_dim,
            });
        }
        if self.rotary_dim > self.head_dim {
            return Err(ReferenceError::RotaryDimTooLarge {
                rotary_dim: self.rotary_dim,
                head_dim: self.head_dim,
            });
        }
        if !(self.theta.is_finite() && self.theta > 0.0) {
            return Err(ReferenceError::InvalidTheta { theta: self.theta });
        }
        if self.pos_offset.checked_add(self.seq_len - 1).is_none() {
            return Err(ReferenceError::TooLarge {
                what: "pos_offset + seq_len − 1",
                detail: format!("{} + {} − 1 overflows usize", self.pos_offset, self.seq_len),
            });
        }
        Ok(())
    }

    /// Position of row `r`; saturates at `usize::MAX` (never for a configuration that passes
    /// [`validate`](RopeConfig::validate)), and `seq_len = 0` counts as 1.
    pub fn position(&self, r: usize) -> usize {
        (r % self.seq_len.max(1)).saturating_add(self.pos_offset)
    }

    /// Columns (within a head) of pair `i`, for `i < rotary_dim / 2`.
    pub fn pair(&self, i: usize) -> (usize, usize) {
        match self.layout {
            PairLayout::Interleaved => (2 * i, 2 * i + 1),
            PairLayout::HalfSplit => (i, i + self.rotary_dim / 2),
        }
    }

    /// ω_i = θ^(−2i/d).
    pub fn inv_freq(&self, i: usize) -> f64 {
        self.theta.powf(-((2 * i) as f64) / self.rotary_dim as f64)
    }

    /// Rotates one head (`head.len() == head_dim`) in place as the token at `pos`.
    /// The configuration must be valid ([`validate`](RopeConfig::validate)).
    pub fn rotate_head(&self, head: &mut [f64], pos: usize) {
        for i in 0..self.rotary_dim / 2 {
            let (a, b) = self.pair(i);
            let (s, c) = (pos as f64 * self.inv_freq(i)).sin_cos();
            let (x, y) = (head[a], head[b]);
            head[a] = x * c - y * s;
            head[b] = y * c + x * s;
        }
    }
}
