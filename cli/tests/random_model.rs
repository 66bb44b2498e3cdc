//! `random-model`: a model directory with random weights of a BERT architecture loads, embeds
//! on the CPU path, is reproducible from its seed, and reads back the configuration it was
//! written from.

mod common;

use std::process::Command;

use common::model_dir;
use fused_gemm_cli::config::{Activation, MiniLmConfig};
use fused_gemm_cli::random_model::{Preset, write_random_model};
use fused_gemm_cli::{CpuBackend, Dtype, Error, Model, embed};

/// A small BERT with the real vocabulary (so the real tokenizer's ids fit): 2 layers, d = 64,
/// 4 heads of 16, FFN 128, tanh GELU.
fn small() -> MiniLmConfig {
    MiniLmConfig {
        hidden_size: 64,
        num_layers: 2,
        num_heads: 4,
        intermediate_size: 128,
        activation: Activation::GeluTanh,
        ..MiniLmConfig::ALL_MINILM_L6_V2
    }
}

#[test]
fn random_models_load_embed_and_follow_their_seed() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let r = write_random_model(&small(), &model_dir(), a.path(), Dtype::Bf16, 7).unwrap();
    assert_eq!(r.tensors, 5 + 2 * 16);
    assert_eq!(std::fs::metadata(&r.weights).unwrap().len(), r.bytes);
    write_random_model(&small(), &model_dir(), b.path(), Dtype::Bf16, 7).unwrap();
    write_random_model(&small(), &model_dir(), c.path(), Dtype::Bf16, 8).unwrap();
    let weights =
        |d: &tempfile::TempDir| std::fs::read(d.path().join("model.safetensors")).unwrap();
    assert_eq!(weights(&a), weights(&b), "same seed, same weights");
    assert_ne!(weights(&a), weights(&c), "another seed, other weights");

    let m = Model::load(a.path(), 128).unwrap();
    assert_eq!(m.config, small());
    let up = &m.weights.layers[1].ffn_up;
    assert_eq!(up.weight.len(), 128 * 64);
    // Uniform on ±0.02·√3: standard deviation 0.02, every value inside the bound, in bf16.
    let bound = 0.02 * 3f32.sqrt() * (1.0 + 1.0 / 128.0);
    assert!(up.weight.iter().all(|v| v.abs() <= bound));
    let sd = (up.weight.iter().map(|v| v * v).sum::<f32>() / up.weight.len() as f32).sqrt();
    assert!((sd - 0.02).abs() < 0.002, "standard deviation {sd}");
    assert!(up.bias.iter().all(|&v| v == 0.0));
    assert!(
        m.weights.layers[0]
            .attn_norm
            .gamma
            .iter()
            .all(|&v| v == 1.0)
    );

    let mut cpu = CpuBackend::new(m.weights.clone(), Dtype::F32).unwrap();
    let texts = [
        "a first sentence",
        "another, longer sentence with more words",
        "x",
    ];
    let emb = embed(&mut cpu, &m.tokenizer, &texts, 2, |_, _| {}, None).unwrap();
    for i in 0..texts.len() {
        let row = emb.row(i);
        assert_eq!(row.len(), 64);
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "row {i}: norm {norm}");
    }
}

#[test]
fn a_bad_configuration_or_output_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = MiniLmConfig {
        num_heads: 5,
        ..small()
    };
    let e = write_random_model(&bad, &model_dir(), dir.path(), Dtype::F16, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = write_random_model(&small(), &model_dir(), &model_dir(), Dtype::F16, 0).unwrap_err();
    assert!(e.to_string().contains("--output"), "{e}");
    let e =
        write_random_model(&small(), dir.path(), &dir.path().join("m"), Dtype::F16, 0).unwrap_err();
    assert!(matches!(e, Error::ModelFileMissing { .. }), "{e}");
    // A model directory is not overwritten; a vocabulary smaller than the tokenizer's and
    // weights beyond the size limit are refused before anything is written.
    write_random_model(&small(), &model_dir(), dir.path(), Dtype::F16, 0).unwrap();
    let e = write_random_model(&small(), &model_dir(), dir.path(), Dtype::F16, 0).unwrap_err();
    assert!(e.to_string().contains("does not overwrite"), "{e}");
    let fresh = dir.path().join("other");
    let few = MiniLmConfig {
        vocab_size: 1000,
        ..small()
    };
    let e = write_random_model(&few, &model_dir(), &fresh, Dtype::F16, 0).unwrap_err();
    assert!(e.to_string().contains("vocab_size"), "{e}");
    let huge = MiniLmConfig {
        hidden_size: 65536,
        num_heads: 1,
        ..small()
    };
    let e = write_random_model(&huge, &model_dir(), &fresh, Dtype::F16, 0).unwrap_err();
    assert!(e.to_string().contains("GB"), "{e}");
    assert!(!fresh.exists(), "nothing written");
    assert_eq!(Preset::BertBase.config().intermediate_size, 3072);
}

#[test]
fn the_command_writes_a_model_from_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"model_type": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 512,
            "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"}"#,
    )
    .unwrap();
    let out_dir = dir.path().join("model");
    let bin = env!("CARGO_BIN_EXE_fused-gemm");
    let out = Command::new(bin)
        .env("FUSED_GEMM_MODEL_DIR", model_dir())
        .args(["random-model", "--config"])
        .arg(&config)
        .arg("-o")
        .arg(&out_dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("1 layers, d 32, 2 heads, FFN 64"),
        "{stderr}"
    );
    let m = Model::load(&out_dir, 16).unwrap();
    assert_eq!((m.config.hidden_size, m.config.num_layers), (32, 1));
    // Neither --preset nor --config: clap's usage error.
    let out = Command::new(bin)
        .args(["random-model", "-o"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
