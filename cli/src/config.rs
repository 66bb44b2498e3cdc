//! The model's hyper-parameters, read from the Hugging Face `config.json`.

use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result, read_model_file};

/// The FFN activation, mapped from the config's `hidden_act` name.
///
/// BERT-family configs call erf-GELU `"gelu"` and the tanh approximation `"gelu_new"`,
/// `"gelu_pytorch_tanh"` or `"gelu_fast"`; mixing them up costs ~4e-4 per value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `x·Φ(x) = 0.5·x·(1 + erf(x/√2))` (Hendrycks & Gimpel, arXiv:1606.08415).
    GeluErf,
    /// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
    GeluTanh,
}

impl Activation {
    /// Maps a Hugging Face `hidden_act` string; `None` for activations this code does not run.
    pub fn from_hf_name(name: &str) -> Option<Self> {
        match name {
            "gelu" => Some(Activation::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Activation::GeluTanh),
            _ => None,
        }
    }

    /// Applies the activation to one f32 value.
    #[inline]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::GeluErf => {
                0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
            }
            Activation::GeluTanh => {
                const C: f32 = 0.797_884_6; // sqrt(2/pi)
                0.5 * x * (1.0 + libm::tanhf(C * (x + 0.044_715 * x * x * x)))
            }
        }
    }
}

/// Hyper-parameters of a BERT encoder with post-LayerNorm (the all-MiniLM-L6-v2 architecture).
#[derive(Clone, Debug, PartialEq)]
pub struct MiniLmConfig {
    /// Vocabulary size (rows of the word-embedding table).
    pub vocab_size: usize,
    /// Hidden width d.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_layers: usize,
    /// Attention heads; `hidden_size / num_heads` is the head dimension.
    pub num_heads: usize,
    /// FFN inner width.
    pub intermediate_size: usize,
    /// Rows of the position-embedding table: the longest sequence the model accepts.
    pub max_position_embeddings: usize,
    /// Rows of the token-type table.
    pub type_vocab_size: usize,
    /// LayerNorm epsilon (added to the variance).
    pub layer_norm_eps: f32,
    /// FFN activation.
    pub activation: Activation,
}

impl MiniLmConfig {
    /// all-MiniLM-L6-v2: 6 layers, d = 384, 12 heads, FFN 1536, erf-GELU, eps 1e-12,
    /// vocab 30522, 512 positions, 2 token types.
    pub const ALL_MINILM_L6_V2: MiniLmConfig = MiniLmConfig {
        vocab_size: 30522,
        hidden_size: 384,
        num_layers: 6,
        num_heads: 12,
        intermediate_size: 1536,
        max_position_embeddings: 512,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        activation: Activation::GeluErf,
    };

    /// Head dimension, `hidden_size / num_heads` (32 for MiniLM); 0 for the invalid
    /// `num_heads` 0.
    pub fn head_dim(&self) -> usize {
        self.hidden_size.checked_div(self.num_heads).unwrap_or(0)
    }

    /// Reads a Hugging Face BERT `config.json`.
    ///
    /// # Errors
    /// [`Error::ModelFileMissing`] when the file is absent; [`Error::Config`] when it is not
    /// JSON, lacks a field, is not a BERT with absolute positions, names an unknown activation,
    /// or fails [`MiniLmConfig::validate`] (the message names the field).
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = read_model_file(path)?;
        let bad = |reason: String| Error::Config {
            path: path.to_owned(),
            reason,
        };
        let raw: RawConfig = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        if let Some(t) = raw.model_type.as_deref()
            && t != "bert"
        {
            return Err(bad(format!("model_type `{t}` is not `bert`")));
        }
        if let Some(p) = raw.position_embedding_type.as_deref()
            && p != "absolute"
        {
            return Err(bad(format!(
                "position_embedding_type `{p}` is not `absolute`"
            )));
        }
        let activation = Activation::from_hf_name(&raw.hidden_act)
            .ok_or_else(|| bad(format!("unsupported hidden_act `{}`", raw.hidden_act)))?;
        let cfg = MiniLmConfig {
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            num_layers: raw.num_hidden_layers,
            num_heads: raw.num_attention_heads,
            intermediate_size: raw.intermediate_size,
            max_position_embeddings: raw.max_position_embeddings,
            type_vocab_size: raw.type_vocab_size,
            layer_norm_eps: raw.layer_norm_eps,
            activation,
        };
        cfg.validate().map_err(|e| bad(e.to_string()))?;
        Ok(cfg)
    }
}

/// Inclusive bounds of the integer hyper-parameters, with the name `config.json` gives them.
/// Generous (10× to 100× the largest BERTs), but small enough that no size derived from them
/// overflows and a corrupt config fails here instead of in an allocation.
const LIMITS: [(&str, usize, usize); 7] = [
    ("vocab_size", 1, 1 << 22),
    ("hidden_size", 1, 1 << 16),
    ("num_hidden_layers", 1, 1024),
    ("num_attention_heads", 1, 1 << 16),
    ("intermediate_size", 1, 1 << 18),
    // [CLS] and [SEP] take two positions.
    ("max_position_embeddings", 2, 1 << 20),
    ("type_vocab_size", 1, 1 << 16),
];

impl MiniLmConfig {
    /// Checks that every hyper-parameter is in range (see the bounds in the source: e.g.
    /// `num_hidden_layers` in `1..=1024`, `hidden_size` in `1..=65536`), that `hidden_size` is
    /// divisible by `num_attention_heads`, and that `layer_norm_eps` is finite and in `[0, 1]`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] whose `arg` is the `config.json` name of the first bad field.
    pub fn validate(&self) -> Result<()> {
        let values = [
            self.vocab_size,
            self.hidden_size,
            self.num_layers,
            self.num_heads,
            self.intermediate_size,
            self.max_position_embeddings,
            self.type_vocab_size,
        ];
        for ((name, lo, hi), v) in LIMITS.into_iter().zip(values) {
            if !(lo..=hi).contains(&v) {
                return Err(Error::invalid(name, format!("{lo}..={hi}"), v));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_heads) {
            return Err(Error::invalid(
                "num_attention_heads",
                format!(
                    "a divisor of hidden_size {} (hidden_size must be divisible by the head count)",
                    self.hidden_size
                ),
                self.num_heads,
            ));
        }
        if !(0.0..=1.0).contains(&self.layer_norm_eps) {
            return Err(Error::invalid(
                "layer_norm_eps",
                "a finite value in [0, 1]",
                self.layer_norm_eps,
            ));
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    position_embedding_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    type_vocab_size: usize,
    layer_norm_eps: f32,
    hidden_act: String,
}

fn default_type_vocab() -> usize {
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_variants_match_float64_values() {
        // Erf- and tanh-GELU differ by up to ~4e-4; values computed in float64.
        let xs = [-3.0f32, -1.5, 1.0, 3.0];
        let erf = [-0.0040497, -0.1002108, 0.8413447, 2.9959503];
        let tanh = [-0.0036374, -0.1004284, 0.841192, 2.9963626];
        for ((&x, &e), &t) in xs.iter().zip(&erf).zip(&tanh) {
            let ge = Activation::GeluErf.apply(x);
            let gt = Activation::GeluTanh.apply(x);
            assert!((ge - e).abs() < 1e-6, "gelu_erf({x}) = {ge}, want {e}");
            assert!((gt - t).abs() < 1e-6, "gelu_tanh({x}) = {gt}, want {t}");
        }
    }

    #[test]
    fn hf_activation_names_map_to_the_right_variant() {
        assert_eq!(Activation::from_hf_name("gelu"), Some(Activation::GeluErf));
        for n in ["gelu_new", "gelu_pytorch_tanh", "gelu_fast"] {
            assert_eq!(
                Activation::from_hf_name(n),
                Some(Activation::GeluTanh),
                "{n}"
            );
        }
        assert_eq!(Activation::from_hf_name("relu"), None);
    }
}
