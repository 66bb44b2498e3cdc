//! Shared test support: the real model (fetched on first use), the committed fixtures, and a
//! tiny synthetic model for error cases.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use fused_gemm_cli::Model;
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

/// The model directory: `FUSED_GEMM_MODEL_DIR` if set, else the cache that
/// `scripts/fetch-model.sh` fills (run here when missing; it is idempotent and locked).
pub fn model_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(d) = std::env::var_os("FUSED_GEMM_MODEL_DIR") {
            return PathBuf::from(d);
        }
        let script = repo_root().join("scripts/fetch-model.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg("--print-dir")
            .output()
            .expect("run scripts/fetch-model.sh");
        assert!(
            out.status.success(),
            "scripts/fetch-model.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert_eq!(dir, fused_gemm_cli::default_model_dir());
        dir
    })
    .clone()
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The real model, loaded once per test binary with the default truncation (256).
pub fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| Model::load(&model_dir(), 256).expect("load the real model"))
}

/// One fixture sentence.
#[derive(Deserialize, Clone, Debug)]
pub struct FixtureSentence {
    pub text: String,
    pub ids: Vec<u32>,
    pub embedding: Vec<f32>,
}

/// A fixture file made by `scripts/make_fixtures.py`.
#[derive(Deserialize, Clone, Debug)]
pub struct Fixture {
    pub max_seq_length: usize,
    pub batch_size: usize,
    pub versions: HashMap<String, String>,
    pub sentences: Vec<FixtureSentence>,
}

/// Reads `cli/tests/fixtures/minilm/<name>`.
pub fn fixture(name: &str) -> Fixture {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/minilm")
        .join(name);
    let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("parse {}: {e}", p.display()))
}

/// A tiny BERT config (d = 4, 2 heads, 1 layer, FFN 8, vocab 10, 8 positions) as JSON.
pub const TINY_CONFIG: &str = r#"{"model_type": "bert", "hidden_act": "gelu",
 "hidden_size": 4, "num_attention_heads": 2, "num_hidden_layers": 1, "intermediate_size": 8,
 "vocab_size": 10, "max_position_embeddings": 8, "type_vocab_size": 2,
 "layer_norm_eps": 1e-12, "position_embedding_type": "absolute"}"#;

/// The tensors of [`TINY_CONFIG`], name → shape, with `overrides` replacing some shapes.
pub fn tiny_shapes(overrides: &[(&str, Vec<usize>)]) -> Vec<(String, Vec<usize>)> {
    let (d, f) = (4, 8);
    let mut v: Vec<(String, Vec<usize>)> = vec![
        ("embeddings.word_embeddings.weight".into(), vec![10, d]),
        ("embeddings.position_embeddings.weight".into(), vec![8, d]),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, d]),
        ("embeddings.LayerNorm.weight".into(), vec![d]),
        ("embeddings.LayerNorm.bias".into(), vec![d]),
    ];
    let p = "encoder.layer.0";
    for (name, shape) in [
        ("attention.self.query.weight", vec![d, d]),
        ("attention.self.query.bias", vec![d]),
        ("attention.self.key.weight", vec![d, d]),
        ("attention.self.key.bias", vec![d]),
        ("attention.self.value.weight", vec![d, d]),
        ("attention.self.value.bias", vec![d]),
        ("attention.output.dense.weight", vec![d, d]),
        ("attention.output.dense.bias", vec![d]),
        ("attention.output.LayerNorm.weight", vec![d]),
        ("attention.output.LayerNorm.bias", vec![d]),
        ("intermediate.dense.weight", vec![f, d]),
        ("intermediate.dense.bias", vec![f]),
        ("output.dense.weight", vec![d, f]),
        ("output.dense.bias", vec![d]),
        ("output.LayerNorm.weight", vec![d]),
        ("output.LayerNorm.bias", vec![d]),
    ] {
        v.push((format!("{p}.{name}"), shape));
    }
    for (name, shape) in overrides {
        let slot = v
            .iter_mut()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no tensor {name}"));
        slot.1 = shape.clone();
    }
    v
}

/// Serializes f32 tensors with the given shapes; element `i` of tensor `t` holds a value
/// derived from `t` and `i` so that every tensor is distinguishable.
pub fn safetensors_bytes(shapes: &[(String, Vec<usize>)]) -> Vec<u8> {
    let datas: Vec<Vec<u8>> = shapes
        .iter()
        .enumerate()
        .map(|(t, (_, s))| {
            (0..s.iter().product::<usize>())
                .flat_map(|i| ((t * 1000 + i) as f32 * 1e-3).to_le_bytes())
                .collect()
        })
        .collect();
    let views: Vec<(String, TensorView)> = shapes
        .iter()
        .zip(&datas)
        .map(|((n, s), d)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), d).unwrap(),
            )
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// Writes a model directory under `dir`: `config` as config.json, `weights` as
/// model.safetensors, and the real tokenizer.json.
pub fn write_model_dir(dir: &Path, config: &str, weights: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), config).unwrap();
    std::fs::write(dir.join("model.safetensors"), weights).unwrap();
    std::fs::copy(
        model_dir().join("tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
}

/// The tokenizers crate truncating as sentence-transformers does, run on the whole text: what
/// `MiniLmTokenizer::encode` must return, however it gets there.
pub fn reference_tokenizer(max_seq_len: usize) -> Tokenizer {
    let mut t = Tokenizer::from_file(model_dir().join("tokenizer.json")).unwrap();
    t.with_truncation(Some(TruncationParams {
        direction: TruncationDirection::Right,
        max_length: max_seq_len,
        strategy: TruncationStrategy::LongestFirst,
        stride: 0,
    }))
    .unwrap();
    t.with_padding(None);
    t
}
