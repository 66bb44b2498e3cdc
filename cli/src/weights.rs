//! Model weights read from `model.safetensors`, checked against the config, and packed the way
//! the kernels consume them.
//!
//! Layout conventions (shared by the CPU and GPU backends):
//! - every linear layer keeps PyTorch's `nn.Linear` layout: weight `[N = out_features,
//!   K = in_features]` row-major, bias `[N]`; the layer computes `y = x·Wᵀ + b` for row-major
//!   activations `x: [M = tokens, K]`. In GEMM terms B = Wᵀ is K×N column-major (a "TN" GEMM).
//! - Q, K and V are packed into one linear layer: weight `[3·d, d]` (rows `0..d` are Q, `d..2d`
//!   K, `2d..3d` V) and bias `[3·d]`, so the QKV projection is one GEMM whose output row holds
//!   `[q | k | v]`, each `[num_heads, head_dim]`.
//! - weights are held in f32 on the host; [`Linear::weight_as`] and [`HostElement`] give f16 and
//!   bf16 copies (round to nearest even) for GPU upload.

use std::path::{Path, PathBuf};

use safetensors::{Dtype as StDtype, SafeTensors};

use crate::config::MiniLmConfig;
use crate::error::{Error, Result, read_model_file};

/// An element type weights can be converted to for upload: f32, [`half::f16`], [`half::bf16`].
pub trait HostElement: Copy + Send + Sync + 'static {
    /// Converts from f32, rounding to nearest even where the type is narrower.
    fn from_f32(v: f32) -> Self;
}

impl HostElement for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl HostElement for half::f16 {
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
}

impl HostElement for half::bf16 {
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
}

/// Converts a slice of f32 to `T` element by element.
pub fn convert<T: HostElement>(v: &[f32]) -> Vec<T> {
    v.iter().map(|&x| T::from_f32(x)).collect()
}

/// A linear layer `y = x·Wᵀ + b`: weight `[out_features, in_features]` row-major, bias
/// `[out_features]`, f32.
#[derive(Clone, Debug)]
pub struct Linear {
    /// Output width N.
    pub out_features: usize,
    /// Input width K.
    pub in_features: usize,
    /// `[N, K]` row-major.
    pub weight: Vec<f32>,
    /// `[N]`.
    pub bias: Vec<f32>,
}

impl Linear {
    /// The weight converted to `T` (same `[N, K]` row-major layout).
    pub fn weight_as<T: HostElement>(&self) -> Vec<T> {
        convert(&self.weight)
    }

    /// The bias converted to `T`.
    pub fn bias_as<T: HostElement>(&self) -> Vec<T> {
        convert(&self.bias)
    }

    /// Stacks linear layers with the same input width along the output dimension:
    /// weight `[ΣN_i, K]`, bias `[ΣN_i]`, rows in argument order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the input widths differ or `parts` is empty.
    pub fn concat_rows(parts: &[&Linear]) -> Result<Linear> {
        let first = parts
            .first()
            .ok_or_else(|| Error::invalid("linear layers to concatenate", "at least one", 0))?;
        let k = first.in_features;
        if let Some(p) = parts.iter().find(|p| p.in_features != k) {
            return Err(Error::invalid(
                "linear layers to concatenate",
                format!("equal in_features {k}"),
                p.in_features,
            ));
        }
        Ok(Linear {
            out_features: parts.iter().map(|p| p.out_features).sum(),
            in_features: k,
            weight: parts
                .iter()
                .flat_map(|p| p.weight.iter().copied())
                .collect(),
            bias: parts.iter().flat_map(|p| p.bias.iter().copied()).collect(),
        })
    }
}

/// LayerNorm parameters: `y = (x − mean)/√(var + eps)·gamma + beta` over the last dimension
/// (width d), f32.
#[derive(Clone, Debug)]
pub struct LayerNormWeights {
    /// `[d]` scale.
    pub gamma: Vec<f32>,
    /// `[d]` shift.
    pub beta: Vec<f32>,
}

/// The embedding block: three lookup tables summed, then LayerNorm.
#[derive(Clone, Debug)]
pub struct EmbeddingWeights {
    /// `[vocab_size, d]` row-major.
    pub word: Vec<f32>,
    /// `[max_position_embeddings, d]` row-major.
    pub position: Vec<f32>,
    /// `[type_vocab_size, d]` row-major.
    pub token_type: Vec<f32>,
    /// LayerNorm after the sum.
    pub layer_norm: LayerNormWeights,
}

/// One post-LayerNorm BERT layer, in the order its fused kernels run.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    /// Packed Q|K|V projection: weight `[3·d, d]`, bias `[3·d]`.
    pub qkv: Linear,
    /// Attention output projection: weight `[d, d]`, bias `[d]`.
    pub attn_out: Linear,
    /// LayerNorm after attention output + residual.
    pub attn_norm: LayerNormWeights,
    /// FFN up projection: weight `[F, d]`, bias `[F]` (F = intermediate_size).
    pub ffn_up: Linear,
    /// FFN down projection: weight `[d, F]`, bias `[d]`.
    pub ffn_down: Linear,
    /// LayerNorm after FFN down + residual.
    pub ffn_norm: LayerNormWeights,
}

/// All weights of the encoder (the pooler is not used by sentence-transformers and not loaded).
#[derive(Clone, Debug)]
pub struct ModelWeights {
    /// The config the shapes were checked against.
    pub config: MiniLmConfig,
    /// Embedding tables and their LayerNorm.
    pub embeddings: EmbeddingWeights,
    /// `config.num_layers` layers.
    pub layers: Vec<LayerWeights>,
}

impl ModelWeights {
    /// Reads `path` (a Hugging Face BERT `model.safetensors`; tensor names with or without a
    /// `bert.` prefix; dtypes F32, F16 or BF16, converted to f32) and checks every tensor's shape
    /// against `config`.
    ///
    /// # Errors
    /// [`Error::ModelFileMissing`] if the file does not exist, [`Error::Io`] if it cannot be
    /// read, [`Error::SafeTensors`] if it is corrupt or truncated, [`Error::MissingTensor`],
    /// [`Error::TensorShape`] (naming the tensor, expected and actual shape),
    /// [`Error::TensorDtype`], and [`Error::LayerCount`] when the file has tensors of more
    /// encoder layers than `config.num_layers`.
    pub fn load(path: &Path, config: &MiniLmConfig) -> Result<Self> {
        let bytes = read_model_file(path)?;
        Self::from_bytes(&bytes, path, config)
    }

    /// As [`ModelWeights::load`], from the bytes of a safetensors file; `path` is only used in
    /// error messages.
    ///
    /// # Errors
    /// As [`ModelWeights::load`], except the file-system errors; [`MiniLmConfig::validate`]'s
    /// error for a config out of range.
    pub fn from_bytes(bytes: &[u8], path: &Path, config: &MiniLmConfig) -> Result<Self> {
        config.validate()?;
        let st = SafeTensors::deserialize(bytes).map_err(|source| Error::SafeTensors {
            path: path.to_owned(),
            source,
        })?;
        let prefix = if st.tensor("embeddings.word_embeddings.weight").is_err()
            && st.tensor("bert.embeddings.word_embeddings.weight").is_ok()
        {
            "bert."
        } else {
            ""
        };
        let r = Reader {
            st: &st,
            path: path.to_owned(),
            prefix,
        };
        let c = config;
        let (d, f) = (c.hidden_size, c.intermediate_size);
        let ln = |name: &str| -> Result<LayerNormWeights> {
            Ok(LayerNormWeights {
                gamma: r.get(&format!("{name}.weight"), &[d])?,
                beta: r.get(&format!("{name}.bias"), &[d])?,
            })
        };
        let linear = |name: &str, n: usize, k: usize| -> Result<Linear> {
            Ok(Linear {
                out_features: n,
                in_features: k,
                weight: r.get(&format!("{name}.weight"), &[n, k])?,
                bias: r.get(&format!("{name}.bias"), &[n])?,
            })
        };
        let embeddings = EmbeddingWeights {
            word: r.get("embeddings.word_embeddings.weight", &[c.vocab_size, d])?,
            position: r.get(
                "embeddings.position_embeddings.weight",
                &[c.max_position_embeddings, d],
            )?,
            token_type: r.get(
                "embeddings.token_type_embeddings.weight",
                &[c.type_vocab_size, d],
            )?,
            layer_norm: ln("embeddings.LayerNorm")?,
        };
        // A file with more layers than the config is another model: running its first layers
        // would give wrong embeddings without a word.
        let file_layers = st
            .names()
            .iter()
            .filter_map(|n| {
                let rest = n.strip_prefix(prefix)?.strip_prefix("encoder.layer.")?;
                rest.split('.').next()?.parse::<usize>().ok()
            })
            .map(|i| i.saturating_add(1))
            .max()
            .unwrap_or(0);
        if file_layers > c.num_layers {
            return Err(Error::LayerCount {
                path: path.to_owned(),
                config: c.num_layers,
                file: file_layers,
            });
        }
        // Grows with the layers found in the file, never sized from the config alone.
        let mut layers = Vec::new();
        for i in 0..c.num_layers {
            let p = format!("encoder.layer.{i}");
            let q = linear(&format!("{p}.attention.self.query"), d, d)?;
            let k = linear(&format!("{p}.attention.self.key"), d, d)?;
            let v = linear(&format!("{p}.attention.self.value"), d, d)?;
            layers.push(LayerWeights {
                qkv: Linear::concat_rows(&[&q, &k, &v])?,
                attn_out: linear(&format!("{p}.attention.output.dense"), d, d)?,
                attn_norm: ln(&format!("{p}.attention.output.LayerNorm"))?,
                ffn_up: linear(&format!("{p}.intermediate.dense"), f, d)?,
                ffn_down: linear(&format!("{p}.output.dense"), d, f)?,
                ffn_norm: ln(&format!("{p}.output.LayerNorm"))?,
            });
        }
        Ok(ModelWeights {
            config: config.clone(),
            embeddings,
            layers,
        })
    }
}

impl ModelWeights {
    /// Checks what [`ModelWeights::load`] guarantees, for weights built by hand: that
    /// `num_attention_heads` divides `hidden_size`, and that every embedding table, LayerNorm
    /// and linear layer of [`ModelWeights::layers`] has the shape the config implies. The
    /// number of layers is not checked: the backends check the layer index of each step.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`num_attention_heads`) for a head count that does not divide
    /// the hidden size; [`Error::TensorShape`] naming the first tensor of the wrong shape (its
    /// actual shape given as `[rows, cols]` for linear weights, `[elements]` otherwise).
    pub fn check_shapes(&self) -> Result<()> {
        let c = &self.config;
        if c.num_heads == 0 || !c.hidden_size.is_multiple_of(c.num_heads) {
            return Err(Error::invalid(
                "num_attention_heads",
                format!("a divisor of hidden_size {}", c.hidden_size),
                c.num_heads,
            ));
        }
        let (d, f) = (c.hidden_size, c.intermediate_size);
        let table = |name: &str, data: &[f32], shape: &[usize]| -> Result<()> {
            match shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b)) {
                Some(n) if n == data.len() => Ok(()),
                _ => Err(Error::TensorShape {
                    name: name.to_owned(),
                    expected: shape.to_vec(),
                    actual: vec![data.len()],
                }),
            }
        };
        let norm = |name: &str, ln: &LayerNormWeights| -> Result<()> {
            table(&format!("{name}.weight"), &ln.gamma, &[d])?;
            table(&format!("{name}.bias"), &ln.beta, &[d])
        };
        let linear = |name: &str, l: &Linear, n: usize, k: usize| -> Result<()> {
            if (l.out_features, l.in_features) != (n, k) {
                return Err(Error::TensorShape {
                    name: format!("{name}.weight"),
                    expected: vec![n, k],
                    actual: vec![l.out_features, l.in_features],
                });
            }
            table(&format!("{name}.weight"), &l.weight, &[n, k])?;
            table(&format!("{name}.bias"), &l.bias, &[n])
        };
        let e = &self.embeddings;
        table(
            "embeddings.word_embeddings.weight",
            &e.word,
            &[c.vocab_size, d],
        )?;
        table(
            "embeddings.position_embeddings.weight",
            &e.position,
            &[c.max_position_embeddings, d],
        )?;
        table(
            "embeddings.token_type_embeddings.weight",
            &e.token_type,
            &[c.type_vocab_size, d],
        )?;
        norm("embeddings.LayerNorm", &e.layer_norm)?;
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("encoder.layer.{i}");
            linear(
                &format!("{p}.attention.self.qkv"),
                &l.qkv,
                d.saturating_mul(3),
                d,
            )?;
            linear(&format!("{p}.attention.output.dense"), &l.attn_out, d, d)?;
            norm(&format!("{p}.attention.output.LayerNorm"), &l.attn_norm)?;
            linear(&format!("{p}.intermediate.dense"), &l.ffn_up, f, d)?;
            linear(&format!("{p}.output.dense"), &l.ffn_down, d, f)?;
            norm(&format!("{p}.output.LayerNorm"), &l.ffn_norm)?;
        }
        Ok(())
    }
}

struct Reader<'a> {
    st: &'a SafeTensors<'a>,
    path: PathBuf,
    prefix: &'static str,
}

impl Reader<'_> {
    /// The tensor `name` as f32, after checking that its shape is `shape`.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let full = format!("{}{name}", self.prefix);
        let t = self.st.tensor(&full).map_err(|_| Error::MissingTensor {
            path: self.path.clone(),
            name: full.clone(),
        })?;
        if t.shape() != shape {
            return Err(Error::TensorShape {
                name: full,
                expected: shape.to_vec(),
                actual: t.shape().to_vec(),
            });
        }
        let data = t.data();
        let v = match t.dtype() {
            StDtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            StDtype::F16 => data
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            StDtype::BF16 => data
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(Error::TensorDtype {
                    name: full,
                    actual: format!("{other:?}"),
                });
            }
        };
        Ok(v)
    }
}
