//! `fused-gemm random-model`: a BERT model directory with random weights of the right shapes,
//! so that architectures whose trained weights are not at hand (BERT-base, BERT-large) run
//! through the same loader, forward pass and benchmarks as all-MiniLM-L6-v2.
//!
//! Weights follow BERT's initialization (Devlin et al. 2019, as Hugging Face's
//! `BertPreTrainedModel._init_weights`): linear and embedding weights with standard deviation
//! 0.02 (here uniform on ±0.02·√3, which has that deviation, rather than a normal), biases 0,
//! LayerNorm γ = 1 and β = 0. The values are only for timing and for exercising the code path;
//! their embeddings mean nothing.

use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use safetensors::tensor::TensorView;
use safetensors::{Dtype as StDtype, serialize};
use serde::Serialize;

use crate::backend::Dtype;
use crate::config::{Activation, MiniLmConfig};
use crate::embed::{Model, ModelFiles};
use crate::error::{Error, Result, read_model_file};
use crate::output::write_output;

/// Architectures with a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// BERT-base: 12 layers, d = 768, 12 heads, FFN 3072.
    BertBase,
    /// BERT-large: 24 layers, d = 1024, 16 heads, FFN 4096.
    BertLarge,
}

impl Preset {
    /// The preset's hyper-parameters (the uncased vocabulary of 30,522 tokens, 512 positions,
    /// 2 token types, erf-GELU, ε = 1e-12, as Google's checkpoints).
    pub fn config(self) -> MiniLmConfig {
        let (hidden_size, num_layers, num_heads) = match self {
            Preset::BertBase => (768, 12, 12),
            Preset::BertLarge => (1024, 24, 16),
        };
        MiniLmConfig {
            hidden_size,
            num_layers,
            num_heads,
            intermediate_size: 4 * hidden_size,
            ..MiniLmConfig::ALL_MINILM_L6_V2
        }
    }
}

/// `config.json` as Hugging Face's `BertConfig` writes the fields this tool reads.
#[derive(Serialize)]
struct RawConfig<'a> {
    architectures: [&'a str; 1],
    model_type: &'a str,
    position_embedding_type: &'a str,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    type_vocab_size: usize,
    layer_norm_eps: f32,
    hidden_act: &'a str,
    hidden_dropout_prob: f32,
    attention_probs_dropout_prob: f32,
    initializer_range: f32,
}

/// What a tensor of a BERT encoder starts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Init {
    /// Uniform with standard deviation 0.02.
    Random,
    Zeros,
    Ones,
}

/// Every tensor of a BERT encoder with `c`'s hyper-parameters: Hugging Face name (without the
/// `bert.` prefix), shape, and how it starts.
fn tensors(c: &MiniLmConfig) -> Vec<(String, Vec<usize>, Init)> {
    let (d, f) = (c.hidden_size, c.intermediate_size);
    let mut v = vec![
        (
            "embeddings.word_embeddings.weight".to_owned(),
            vec![c.vocab_size, d],
            Init::Random,
        ),
        (
            "embeddings.position_embeddings.weight".to_owned(),
            vec![c.max_position_embeddings, d],
            Init::Random,
        ),
        (
            "embeddings.token_type_embeddings.weight".to_owned(),
            vec![c.type_vocab_size, d],
            Init::Random,
        ),
    ];
    let norm = |v: &mut Vec<(String, Vec<usize>, Init)>, name: &str| {
        v.push((format!("{name}.weight"), vec![d], Init::Ones));
        v.push((format!("{name}.bias"), vec![d], Init::Zeros));
    };
    let linear = |v: &mut Vec<(String, Vec<usize>, Init)>, name: &str, n: usize, k: usize| {
        v.push((format!("{name}.weight"), vec![n, k], Init::Random));
        v.push((format!("{name}.bias"), vec![n], Init::Zeros));
    };
    norm(&mut v, "embeddings.LayerNorm");
    for i in 0..c.num_layers {
        let p = format!("encoder.layer.{i}");
        for qkv in ["query", "key", "value"] {
            linear(&mut v, &format!("{p}.attention.self.{qkv}"), d, d);
        }
        linear(&mut v, &format!("{p}.attention.output.dense"), d, d);
        norm(&mut v, &format!("{p}.attention.output.LayerNorm"));
        linear(&mut v, &format!("{p}.intermediate.dense"), f, d);
        linear(&mut v, &format!("{p}.output.dense"), d, f);
        norm(&mut v, &format!("{p}.output.LayerNorm"));
    }
    v
}

/// Largest weights file [`write_random_model`] writes: it holds the weights and their serialized
/// copy in memory (BERT-large in f32 is 1.3 GB).
pub const MAX_BYTES: usize = 4_000_000_000;

/// What [`write_random_model`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomModelReport {
    /// The weights file.
    pub weights: PathBuf,
    /// Tensors written.
    pub tensors: usize,
    /// Parameters (elements) written.
    pub parameters: usize,
    /// Bytes of the weights file.
    pub bytes: u64,
}

/// Writes `dst/config.json` for `config`, `dst/model.safetensors` with random weights of its
/// shapes in `dtype` (see the [module docs](self) for the values; `seed` fixes them), and a
/// copy of `tokenizer_from/tokenizer.json`; then loads the directory with [`Model::load`] to
/// check it. `dst` is created if missing; files are written atomically.
///
/// # Errors
/// [`Error::InvalidArgument`] when `config` fails [`MiniLmConfig::validate`], has fewer tokens
/// than the tokenizer or weights above [`MAX_BYTES`], or `dst` is the tokenizer's directory or
/// already holds a `model.safetensors`; [`Error::ModelFileMissing`] without
/// `tokenizer_from/tokenizer.json`, [`Error::Tokenizer`] when it does not parse;
/// [`Error::Io`] when `dst` cannot be written; any error of loading the result.
pub fn write_random_model(
    config: &MiniLmConfig,
    tokenizer_from: &Path,
    dst: &Path,
    dtype: Dtype,
    seed: u64,
) -> Result<RandomModelReport> {
    config.validate()?;
    let (from, to) = (ModelFiles::in_dir(tokenizer_from), ModelFiles::in_dir(dst));
    if let (Ok(a), Ok(b)) = (tokenizer_from.canonicalize(), dst.canonicalize())
        && a == b
    {
        return Err(Error::invalid(
            "--output",
            "a directory other than the tokenizer's",
            dst.display(),
        ));
    }
    if to.weights.exists() {
        return Err(Error::invalid(
            "--output",
            "a directory without a model.safetensors (random-model does not overwrite a model)",
            dst.display(),
        ));
    }
    let tokenizer = read_model_file(&from.tokenizer)?;
    let vocab = tokenizers::Tokenizer::from_bytes(&tokenizer)
        .map_err(|e| Error::Tokenizer {
            path: from.tokenizer.clone(),
            message: e.to_string(),
        })?
        .get_vocab_size(true);
    if config.vocab_size < vocab {
        return Err(Error::invalid(
            "vocab_size",
            format!("at least the tokenizer's {vocab} tokens"),
            config.vocab_size,
        ));
    }
    let size = match dtype {
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::Bf16 => 2,
    };
    let bytes: usize = tensors(config)
        .iter()
        .map(|(_, shape, _)| shape.iter().product::<usize>())
        .sum::<usize>()
        .saturating_mul(size);
    if bytes > MAX_BYTES {
        return Err(Error::invalid(
            "config",
            format!(
                "a model of at most {} GB of weights",
                MAX_BYTES / 1_000_000_000
            ),
            format!("{:.1} GB in {dtype}", bytes as f64 / 1e9),
        ));
    }
    std::fs::create_dir_all(dst).map_err(|e| Error::io("create", dst, e))?;

    let hidden_act = match config.activation {
        Activation::GeluErf => "gelu",
        Activation::GeluTanh => "gelu_new",
    };
    let raw = RawConfig {
        architectures: ["BertModel"],
        model_type: "bert",
        position_embedding_type: "absolute",
        vocab_size: config.vocab_size,
        hidden_size: config.hidden_size,
        num_hidden_layers: config.num_layers,
        num_attention_heads: config.num_heads,
        intermediate_size: config.intermediate_size,
        max_position_embeddings: config.max_position_embeddings,
        type_vocab_size: config.type_vocab_size,
        layer_norm_eps: config.layer_norm_eps,
        hidden_act,
        hidden_dropout_prob: 0.1,
        attention_probs_dropout_prob: 0.1,
        initializer_range: 0.02,
    };
    let json = serde_json::to_vec_pretty(&raw).map_err(|e| Error::Config {
        path: to.config.clone(),
        reason: e.to_string(),
    })?;

    let st_dtype = match dtype {
        Dtype::F32 => StDtype::F32,
        Dtype::F16 => StDtype::F16,
        Dtype::Bf16 => StDtype::BF16,
    };
    let encode = |v: f32, out: &mut Vec<u8>| match dtype {
        Dtype::F32 => out.extend_from_slice(&v.to_le_bytes()),
        Dtype::F16 => out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
        Dtype::Bf16 => out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
    };
    let bound = 0.02 * 3f32.sqrt();
    let mut rng = StdRng::seed_from_u64(seed);
    let specs = tensors(config);
    let mut datas = Vec::with_capacity(specs.len());
    let mut parameters = 0;
    for (_, shape, init) in &specs {
        let len: usize = shape.iter().product();
        parameters += len;
        let mut data = Vec::with_capacity(len * size);
        for _ in 0..len {
            let v = match init {
                Init::Random => rng.random_range(-bound..bound),
                Init::Zeros => 0.0,
                Init::Ones => 1.0,
            };
            encode(v, &mut data);
        }
        datas.push(data);
    }
    let views = specs
        .iter()
        .zip(&datas)
        .map(|((name, shape, _), data)| {
            TensorView::new(st_dtype, shape.clone(), data)
                .map(|v| (name.clone(), v))
                .map_err(|source| Error::SafeTensors {
                    path: to.weights.clone(),
                    source,
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let serialized = serialize(views, None).map_err(|source| Error::SafeTensors {
        path: to.weights.clone(),
        source,
    })?;
    write_output(Some(&to.weights), |w| w.write_all(&serialized))?;
    write_output(Some(&to.config), |w| w.write_all(&json))?;
    write_output(Some(&to.tokenizer), |w| w.write_all(&tokenizer))?;
    let loaded = Model::load(dst, 2)?;
    if loaded.config != *config {
        return Err(Error::Config {
            path: to.config.clone(),
            reason: format!("read back as {:?}, written as {config:?}", loaded.config),
        });
    }
    Ok(RandomModelReport {
        weights: to.weights,
        tensors: specs.len(),
        parameters,
        bytes: serialized.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_bert_shapes_and_parameter_counts() {
        let base = Preset::BertBase.config();
        assert_eq!(base.head_dim(), 64);
        let params = |c: &MiniLmConfig| {
            tensors(c)
                .iter()
                .map(|(_, s, _)| s.iter().product::<usize>())
                .sum::<usize>()
        };
        // Without the pooler (768·768 + 768): BERT-base has 109.48 M parameters with it.
        assert_eq!(params(&base) + 768 * 768 + 768, 109_482_240);
        let large = Preset::BertLarge.config();
        assert_eq!(
            (large.num_layers, large.hidden_size, large.head_dim()),
            (24, 1024, 64)
        );
        assert_eq!(params(&large) + 1024 * 1024 + 1024, 335_141_888);
        assert_eq!(tensors(&MiniLmConfig::ALL_MINILM_L6_V2).len(), 5 + 6 * 16);
    }
}
