//! A sentence's embedding does not depend on the batch it is in or on the padding around it.

mod common;

use common::{fixture, model};
use fused_gemm::host::testing::max_abs_diff;
use fused_gemm_cli::{CpuBackend, Dtype, Embeddings, embed};

fn run(texts: &[&str], batch_size: usize) -> Embeddings {
    let m = model();
    let mut cpu = CpuBackend::new(m.weights.clone(), Dtype::F32).unwrap();
    embed(&mut cpu, &m.tokenizer, texts, batch_size, |_, _| {}, None).unwrap()
}

#[test]
fn embeddings_do_not_depend_on_batch_or_padding() {
    let fx = fixture("embeddings_256.json");
    // Short, blank, non-ASCII and the 256-token input, so short ones get padded to 256.
    let texts: Vec<&str> = fx
        .sentences
        .iter()
        .filter(|s| s.ids.len() <= 20 || s.ids.len() == 256)
        .map(|s| s.text.as_str())
        .take(12)
        .collect();
    assert!(texts.len() >= 8);
    let alone: Vec<Embeddings> = texts.iter().map(|t| run(&[t], 1)).collect();
    let mut worst = 0.0f64;
    for batch_size in [2, 3, texts.len()] {
        let together = run(&texts, batch_size);
        for (i, a) in alone.iter().enumerate() {
            let d = max_abs_diff(together.row(i), a.row(0));
            worst = worst.max(d);
            assert!(
                d <= 1e-5,
                "sentence {i} {:?}: batch {batch_size} differs from alone by {d}",
                texts[i]
            );
        }
    }
    println!("largest difference alone vs batched: {worst:.3e}");
}

#[test]
fn order_of_sentences_is_preserved() {
    let texts = [
        "A man is eating food.",
        "",
        "The girl is carrying a baby.",
        "A",
    ];
    let fwd = run(&texts, 2);
    let rev: Vec<&str> = texts.iter().rev().copied().collect();
    let bwd = run(&rev, 2);
    for i in 0..texts.len() {
        let d = max_abs_diff(fwd.row(i), bwd.row(texts.len() - 1 - i));
        assert!(d <= 1e-5, "sentence {i}: {d}");
    }
    // Different sentences have different embeddings (the rows are not mixed up).
    assert!(max_abs_diff(fwd.row(0), fwd.row(2)) > 1e-2);
}
