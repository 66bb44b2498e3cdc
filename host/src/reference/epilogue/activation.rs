//! Element-wise activations in f64, and the mapping from a model config's activation name.

use super::stage::{RefStage, ReferenceError};

/// `relu`: max(x, 0); NaN stays NaN (as the device stage).
pub fn relu(x: f64) -> f64 {
    if x < 0.0 { 0.0 } else { x }
}

/// Logistic sigmoid 1/(1 + e^−x).
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// SiLU (a.k.a. swish): x·sigmoid(x) (Elfwing, Uchibe, Doya 2017; Ramachandran et al. 2017).
pub fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

/// Exact GELU: x·Φ(x) = ½·x·erfc(−x/√2), Φ the standard normal CDF (Hendrycks & Gimpel 2016,
/// "Gaussian Error Linear Units"). What BERT/MiniLM configs call `"gelu"`. Written with erfc so
/// that large negative x does not cancel.
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
}

/// GELU, tanh approximation: ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (Hendrycks & Gimpel
/// 2016, §2). Configs call it `"gelu_new"`, `"gelu_pytorch_tanh"`, `"gelu_fast"`; it is also
/// cuBLASLt's GELU epilogue.
pub fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// An element-wise activation of the stage vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// `relu`.
    Relu,
    /// `gelu` (erf).
    Gelu,
    /// `gelu_tanh`.
    GeluTanh,
    /// `silu`.
    Silu,
    /// `sigmoid`.
    Sigmoid,
}

impl Activation {
    /// Maps a Hugging Face config's `hidden_act` / `hidden_activation` / `activation_function`
    /// to the stage computing it:
    ///
    /// | config name | stage |
    /// |---|---|
    /// | `gelu`, `gelu_python` | `gelu` (erf) |
    /// | `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast` | `gelu_tanh` |
    /// | `relu` | `relu` |
    /// | `silu`, `swish` | `silu` |
    /// | `sigmoid` | `sigmoid` |
    ///
    /// # Errors
    /// [`ReferenceError::UnknownActivation`] for any other name (e.g. `quick_gelu`, which is
    /// x·sigmoid(1.702x) and none of these), rather than a silent substitute.
    pub fn from_config_name(name: &str) -> Result<Activation, ReferenceError> {
        Ok(match name {
            "gelu" | "gelu_python" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            "sigmoid" => Activation::Sigmoid,
            _ => return Err(ReferenceError::UnknownActivation(name.to_string())),
        })
    }

    /// The name in the `#[fused_gemm(epilogue = [...])]` vocabulary.
    pub fn stage_name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
            Activation::Sigmoid => "sigmoid",
        }
    }

    /// The reference stage.
    pub fn stage(self) -> RefStage {
        match self {
            Activation::Relu => RefStage::Relu,
            Activation::Gelu => RefStage::Gelu,
            Activation::GeluTanh => RefStage::GeluTanh,
            Activation::Silu => RefStage::Silu,
            Activation::Sigmoid => RefStage::Sigmoid,
        }
    }

    /// The function.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Activation::Relu => relu(x),
            Activation::Gelu => gelu_erf(x),
            Activation::GeluTanh => gelu_tanh(x),
            Activation::Silu => silu(x),
            Activation::Sigmoid => sigmoid(x),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_tails_and_symmetry() {
        // Φ(x) + Φ(−x) = 1, so gelu(x) − gelu(−x) = x.
        for i in -80..=80 {
            let x = i as f64 * 0.1;
            assert!((gelu_erf(x) - gelu_erf(-x) - x).abs() < 1e-14, "{x}");
            assert!((gelu_tanh(x) - gelu_tanh(-x) - x).abs() < 1e-14, "{x}");
        }
        // Deep negative tail: tiny and negative, not 0 from cancellation nor NaN.
        let g = gelu_erf(-10.0);
        assert!(g < 0.0 && g > -1e-20, "{g}");
        assert_eq!(relu(-0.5), 0.0);
        assert!(relu(f64::NAN).is_nan());
        assert!((silu(2.0) - 2.0 / (1.0 + (-2.0f64).exp())).abs() < 1e-15);
    }
}
