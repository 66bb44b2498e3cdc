//! Tokenizer behaviour on the real vocabulary: known-faults #11 (accents, scripts, the empty
//! string) and truncation.

mod common;

use common::{model, model_dir};
use fused_gemm_cli::{CpuBackend, Dtype, MiniLmTokenizer, embed};

#[test]
fn accents_and_case_are_removed() {
    // known-faults #11: MiniLM is uncased and strips accents.
    let t = &model().tokenizer;
    let plain = t.encode("naive cafe in hokkaido, eire").unwrap();
    for s in [
        "Naïve café in Hokkaidō, Éire",
        "NAÏVE CAFÉ IN HOKKAIDŌ, ÉIRE",
        "nai\u{308}ve cafe\u{301} in hokkaido\u{304}, e\u{301}ire", // combining marks (NFD)
    ] {
        assert_eq!(t.encode(s).unwrap(), plain, "{s:?}");
    }
    assert!(plain.len() > 2);
}

#[test]
fn cjk_characters_become_single_character_tokens() {
    // known-faults #11: "的人有" → three single-character tokens between [CLS] and [SEP].
    let t = &model().tokenizer;
    let ids = t.encode("的人有").unwrap();
    let toks: Vec<String> = ids.iter().map(|&i| t.id_to_token(i).unwrap()).collect();
    assert_eq!(toks, ["[CLS]", "的", "人", "有", "[SEP]"]);
}

#[test]
fn empty_and_blank_strings_give_cls_sep_and_a_finite_embedding() {
    // known-faults #11: "" → only [CLS] [SEP], and a finite (unit) embedding.
    let m = model();
    let t = &m.tokenizer;
    let cls_sep = vec![
        t.token_to_id("[CLS]").unwrap(),
        t.token_to_id("[SEP]").unwrap(),
    ];
    for s in ["", "   \t  ", "\u{7}"] {
        assert_eq!(t.encode(s).unwrap(), cls_sep, "{s:?}");
    }
    let mut cpu = CpuBackend::new(m.weights.clone(), Dtype::F32).unwrap();
    let e = embed(&mut cpu, t, &[""], 1, |_, _| {}, None).unwrap();
    assert!(e.data.iter().all(|v| v.is_finite()));
    let norm = e.data.iter().map(|v| v * v).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
}

#[test]
fn truncation_keeps_cls_and_sep_within_max_seq_len() {
    let path = model_dir().join("tokenizer.json");
    let long = "tokens ".repeat(700);
    for max in [2usize, 3, 17, 128, 256, 512] {
        let t = MiniLmTokenizer::from_file(&path, max).unwrap();
        let ids = t.encode(&long).unwrap();
        assert_eq!(ids.len(), max, "max_seq_len {max}");
        assert_eq!(ids[0], t.token_to_id("[CLS]").unwrap());
        assert_eq!(*ids.last().unwrap(), t.token_to_id("[SEP]").unwrap());
        // A short input is neither truncated nor padded.
        assert_eq!(t.encode("short").unwrap().len(), max.min(3));
    }
}

#[test]
fn max_seq_len_below_two_is_rejected() {
    let path = model_dir().join("tokenizer.json");
    for bad in [0, 1] {
        let e = MiniLmTokenizer::from_file(&path, bad).unwrap_err();
        assert!(e.to_string().contains("--max-seq-len"), "{e}");
    }
}
