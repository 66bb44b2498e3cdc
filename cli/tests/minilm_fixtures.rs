//! The CPU backend and the tokenizer against sentence-transformers (fixtures made by
//! `scripts/make_fixtures.py`): identical token ids, embeddings at cosine ≥ 0.9999 each.

mod common;

use common::{Fixture, fixture, model, model_dir};
use fused_gemm::host::testing::{max_abs_diff, nan_max, nan_min};
use fused_gemm_cli::embed::cosine;
use fused_gemm_cli::{CpuBackend, DEFAULT_MAX_SEQ_LEN, Dtype, MiniLmTokenizer, Model, embed};

const MIN_COSINE: f64 = 0.9999;

fn check_ids(fx: &Fixture, tok: &MiniLmTokenizer) {
    assert_eq!(tok.max_seq_len(), fx.max_seq_length);
    for s in &fx.sentences {
        let ids = tok.encode(&s.text).unwrap();
        assert_eq!(ids, s.ids, "token ids of {:?}", s.text);
    }
}

/// Embeds the fixture's sentences with `batch_size` and returns per-sentence cosines.
fn check_embeddings(fx: &Fixture, m: &Model, batch_size: usize) -> Vec<f64> {
    let texts: Vec<&str> = fx.sentences.iter().map(|s| s.text.as_str()).collect();
    let mut cpu = CpuBackend::new(m.weights.clone(), Dtype::F32).unwrap();
    let t0 = std::time::Instant::now();
    let emb = embed(&mut cpu, &m.tokenizer, &texts, batch_size, |_, _| {}, None).unwrap();
    let elapsed = t0.elapsed();
    let cos: Vec<f64> = fx
        .sentences
        .iter()
        .enumerate()
        .map(|(i, s)| cosine(emb.row(i), &s.embedding))
        .collect();
    let worst = nan_min(cos.iter().copied());
    let max_abs = nan_max(
        fx.sentences
            .iter()
            .enumerate()
            .map(|(i, s)| max_abs_diff(emb.row(i), &s.embedding)),
    );
    println!(
        "max_seq_len {} batch {batch_size}: {} sentences in {:.0} ms, min cosine {worst:.9} \
         (1 - cos = {:.2e}), max |difference| {max_abs:.2e}",
        fx.max_seq_length,
        texts.len(),
        elapsed.as_secs_f64() * 1e3,
        1.0 - worst
    );
    for (s, c) in fx.sentences.iter().zip(&cos) {
        let short: String = s.text.chars().take(40).collect();
        println!(
            "  1 - cos {:.2e}  ({:>3} tokens) {short:?}",
            1.0 - c,
            s.ids.len()
        );
        assert!(
            *c >= MIN_COSINE,
            "cosine {c} < {MIN_COSINE} for {:?} (batch {batch_size})",
            s.text
        );
    }
    cos
}

#[test]
fn token_ids_match_sentence_transformers_at_256() {
    let fx = fixture("embeddings_256.json");
    assert_eq!(fx.max_seq_length, 256);
    check_ids(&fx, &model().tokenizer);
    // The fixture reaches past both truncation lengths.
    assert!(fx.sentences.iter().any(|s| s.ids.len() == 256));
    assert!(
        fx.sentences
            .iter()
            .any(|s| (129..256).contains(&s.ids.len()))
    );
}

#[test]
fn token_ids_match_sentence_transformers_at_128() {
    let fx = fixture("embeddings_128.json");
    let tok = MiniLmTokenizer::from_file(&model_dir().join("tokenizer.json"), 128).unwrap();
    check_ids(&fx, &tok);
    assert!(fx.sentences.iter().any(|s| s.ids.len() == 128));
}

#[test]
fn cpu_embeddings_match_sentence_transformers_at_256() {
    let fx = fixture("embeddings_256.json");
    println!("reference versions: {:?}", fx.versions);
    // The reference's own batching (4, sorted by length) and a coarser one that pads short
    // sentences beside the 256-token ones.
    check_embeddings(&fx, model(), fx.batch_size);
    check_embeddings(&fx, model(), 8);
}

#[test]
fn cpu_embeddings_match_sentence_transformers_at_128() {
    let fx = fixture("embeddings_128.json");
    let m = Model::load(&model_dir(), 128).unwrap();
    check_embeddings(&fx, &m, fx.batch_size);
}

#[test]
fn truncation_at_128_changes_long_embeddings() {
    // Guards against the 128-token truncation in tokenizer.json leaking into the default.
    let long = fixture("embeddings_128.json")
        .sentences
        .into_iter()
        .find(|s| s.ids.len() == 128)
        .unwrap();
    let at_256 = fixture("embeddings_256.json")
        .sentences
        .into_iter()
        .find(|s| s.text == long.text)
        .unwrap();
    assert!(at_256.ids.len() > 128);
    let c = cosine(&long.embedding, &at_256.embedding);
    println!("cosine between the 128- and 256-token truncations: {c:.6}");
    assert!(c < MIN_COSINE, "{c}");
}

#[test]
fn default_max_seq_len_is_sentence_transformers_value() {
    let p = model_dir().join("sentence_bert_config.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    assert_eq!(v["max_seq_length"], DEFAULT_MAX_SEQ_LEN);
}
