//! `MiniLmConfig::from_file` accepts the configs of real BERT-family sentence models (their
//! fields written out here) and unusual but valid ones, and rejects nonsense with an error,
//! never a panic.

use std::panic::{AssertUnwindSafe, catch_unwind};

use fused_gemm_cli::config::MiniLmConfig;

fn bert(hidden: usize, layers: usize, heads: usize, inter: usize, extra: &str) -> String {
    format!(
        r#"{{"_name_or_path": "x", "architectures": ["BertModel"],
 "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": false, "hidden_act": "gelu",
 "hidden_dropout_prob": 0.1, "hidden_size": {hidden}, "initializer_range": 0.02,
 "intermediate_size": {inter}, "layer_norm_eps": 1e-12, "max_position_embeddings": 512,
 "model_type": "bert", "num_attention_heads": {heads}, "num_hidden_layers": {layers},
 "pad_token_id": 0, "position_embedding_type": "absolute", "transformers_version": "4.8.2",
 "type_vocab_size": 2, "use_cache": true, "vocab_size": 30522{extra}}}"#
    )
}

fn load(json: &str) -> Result<MiniLmConfig, String> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    std::fs::write(&p, json).unwrap();
    match catch_unwind(AssertUnwindSafe(|| MiniLmConfig::from_file(&p))) {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("PANIC".into()),
    }
}

#[test]
fn real_and_unusual_configs_are_accepted() {
    let mini = bert(384, 6, 12, 1536, "");
    let r = |a: &str, b: &str| mini.replace(a, b);
    let max_pos = |v: &str| {
        r(
            "\"max_position_embeddings\": 512",
            &format!("\"max_position_embeddings\": {v}"),
        )
    };
    let cases = [
        ("all-MiniLM-L6-v2", mini.clone()),
        ("all-MiniLM-L12-v2", bert(384, 12, 12, 1536, "")),
        ("paraphrase-MiniLM-L3-v2", bert(384, 3, 12, 1536, "")),
        ("bert-base-uncased", bert(768, 12, 12, 3072, "")),
        ("bert-large", bert(1024, 24, 16, 4096, "")),
        ("bert-tiny", bert(128, 2, 2, 512, "")),
        ("bert-mini", bert(256, 4, 4, 1024, "")),
        // Older configs: no model_type / position_embedding_type / type_vocab_size.
        (
            "old-style",
            r#"{"hidden_act": "gelu", "hidden_size": 384, "intermediate_size": 1536,
             "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "num_attention_heads": 12,
             "num_hidden_layers": 6, "vocab_size": 30522}"#
                .to_string(),
        ),
        ("gelu_new", r("\"gelu\"", "\"gelu_new\"")),
        ("eps 1e-5", r("1e-12", "1e-5")),
        ("eps 1e-6 as 0.000001", r("1e-12", "0.000001")),
        ("eps 0", r("1e-12", "0")),
        ("eps 1e-50 (f32 underflow)", r("1e-12", "1e-50")),
        ("eps 1.0", r("1e-12", "1.0")),
        ("position_embedding_type null", r("\"absolute\"", "null")),
        (
            "model_type null",
            r("\"model_type\": \"bert\"", "\"model_type\": null"),
        ),
        (
            "mBERT vocab",
            bert(768, 12, 12, 3072, "").replace("30522", "119547"),
        ),
        ("head_dim 1", bert(384, 1, 384, 1, "")),
        ("one head", bert(384, 1, 1, 1536, "")),
        (
            "type_vocab 1",
            r("\"type_vocab_size\": 2", "\"type_vocab_size\": 1"),
        ),
        ("max_pos 2", max_pos("2")),
        ("max_pos 8192", max_pos("8192")),
        ("hidden 65536 heads 64", bert(65536, 1, 64, 8, "")),
        ("vocab 4194304", r("30522", "4194304")),
        (
            "deep nesting in extra field",
            bert(
                384,
                6,
                12,
                1536,
                &format!(r#", "x": {}{}"#, "[".repeat(100_000), "]".repeat(100_000)),
            ),
        ),
        ("layers 1024", bert(8, 1024, 2, 8, "")),
        (
            "extra nested fields",
            bert(
                384,
                6,
                12,
                1536,
                r#", "id2label": {"0": "A"}, "torch_dtype": "float32", "classifier_dropout": null, "chunk_size_feed_forward": 0"#,
            ),
        ),
    ];
    let mut bad = Vec::new();
    for (name, json) in &cases {
        match load(json) {
            Ok(c) => eprintln!("{name}: ok {c:?}"),
            Err(e) => bad.push(format!("{name}: {e}")),
        }
    }
    assert!(bad.is_empty(), "rejected:\n{}", bad.join("\n"));
}

#[test]
fn nonsense_is_rejected_without_panic() {
    let base = bert(384, 6, 12, 1536, "");
    let r = |a: &str, b: &str| base.replace(a, b);
    let cases = [
        ("empty", String::new()),
        ("not json", "hello".into()),
        ("array", "[]".into()),
        ("null", "null".into()),
        ("vocab 0", r("30522", "0")),
        ("vocab negative", r("30522", "-1")),
        ("vocab float", r("30522", "30522.0")),
        ("vocab string", r("30522", "\"30522\"")),
        ("vocab huge", r("30522", "18446744073709551615")),
        ("vocab > u64", r("30522", "18446744073709551616")),
        ("vocab 1e30", r("30522", "1e30")),
        ("hidden 0", bert(0, 6, 12, 1536, "")),
        ("heads 0", bert(384, 6, 0, 1536, "")),
        ("heads not divisor", bert(384, 6, 7, 1536, "")),
        ("heads > hidden", bert(384, 6, 768, 1536, "")),
        ("layers 0", bert(384, 0, 12, 1536, "")),
        ("layers 1025", bert(384, 1025, 12, 1536, "")),
        ("inter 0", bert(384, 6, 12, 0, "")),
        (
            "max_pos 0",
            r(
                "\"max_position_embeddings\": 512",
                "\"max_position_embeddings\": 0",
            ),
        ),
        (
            "max_pos 1",
            r(
                "\"max_position_embeddings\": 512",
                "\"max_position_embeddings\": 1",
            ),
        ),
        (
            "type_vocab 0",
            r("\"type_vocab_size\": 2", "\"type_vocab_size\": 0"),
        ),
        ("eps negative", r("1e-12", "-1e-12")),
        ("eps 2", r("1e-12", "2")),
        ("eps 1e39 (f32 inf)", r("1e-12", "1e39")),
        ("eps 1e400", r("1e-12", "1e400")),
        ("eps string", r("1e-12", "\"1e-12\"")),
        ("eps null", r("1e-12", "null")),
        ("act relu", r("\"gelu\"", "\"relu\"")),
        ("act GELU", r("\"gelu\"", "\"GELU\"")),
        ("act null", r("\"gelu\"", "null")),
        (
            "model_type roberta",
            r("\"model_type\": \"bert\"", "\"model_type\": \"roberta\""),
        ),
        (
            "model_type number",
            r("\"model_type\": \"bert\"", "\"model_type\": 5"),
        ),
        ("relative_key", r("\"absolute\"", "\"relative_key\"")),
        ("missing hidden_act", r("\"hidden_act\": \"gelu\",", "")),
        (
            "missing layer_norm_eps",
            r("\"layer_norm_eps\": 1e-12,", ""),
        ),
        ("truncated", base[..base.len() / 2].to_string()),
        (
            "deep nesting",
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        ),
    ];
    let mut bad = Vec::new();
    for (name, json) in &cases {
        match load(json) {
            Ok(c) => bad.push(format!("{name}: ACCEPTED {c:?}")),
            Err(e) if e == "PANIC" => bad.push(format!("{name}: PANIC")),
            Err(e) => eprintln!("{name}: {}", e.chars().take(250).collect::<String>()),
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
