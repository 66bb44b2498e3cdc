//! Tokenizer behaviour on the real vocabulary: accents and case (MiniLM is uncased and strips
//! accents), CJK scripts, the empty string, and truncation.

mod common;

use common::{model, model_dir, reference_tokenizer};
use fused_gemm_cli::{CpuBackend, Dtype, MiniLmTokenizer, embed};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

#[test]
fn accents_and_case_are_removed() {
    // MiniLM is uncased and strips accents: these spellings give the same ids.
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
    // "的人有" → three single-character tokens between [CLS] and [SEP].
    let t = &model().tokenizer;
    let ids = t.encode("的人有").unwrap();
    let toks: Vec<String> = ids.iter().map(|&i| t.id_to_token(i).unwrap()).collect();
    assert_eq!(toks, ["[CLS]", "的", "人", "有", "[SEP]"]);
}

#[test]
fn empty_and_blank_strings_give_cls_sep_and_a_finite_embedding() {
    // "" → only [CLS] [SEP], and a finite (unit) embedding.
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

/// `encode_all` names exactly the sentences whose whole tokenization is longer than
/// `max_seq_len`, on both the prefix path (text longer than the first prefix) and the whole-text
/// path, including one of exactly `max_seq_len` tokens followed by a long run of spaces (its
/// prefixes fill `max_seq_len` without being cut).
#[test]
fn encode_all_names_the_truncated_sentences() {
    let path = model_dir().join("tokenizer.json");
    for max in [2usize, 8, 17] {
        let t = MiniLmTokenizer::from_file(&path, max).unwrap();
        let exact = "word ".repeat(max - 2);
        let texts = [
            "short".to_owned(),
            "tokens ".repeat(700),
            exact.clone(),
            format!("{exact}{}", " ".repeat(40 * max)),
            format!("{exact}{}x", " ".repeat(40 * max)),
            "word ".repeat(max - 1),
            String::new(),
        ];
        let r = reference_tokenizer(1 << 20);
        let want: Vec<usize> = (0..texts.len())
            .filter(|&i| r.encode(texts[i].as_str(), true).unwrap().len() > max)
            .collect();
        let got = t.encode_all(&texts).unwrap();
        assert_eq!(got.truncated, want, "max_seq_len {max}");
        assert!(want.contains(&1) && !want.contains(&2), "max_seq_len {max}");
        for (ids, text) in got.ids.iter().zip(&texts) {
            assert_eq!(ids, &t.encode(text).unwrap());
        }
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

/// Long inputs are tokenized by prefixes cut before a space; the ids must be those of the
/// whole text. The pieces put at a cut what could change the tokens before it: combining marks
/// after a space, CJK characters (the normalizer pads them with spaces), special tokens,
/// control and other whitespace characters, words over WordPiece's 100 characters, characters
/// whose lowercase is longer, unknown characters, and long runs without a space.
#[test]
fn long_inputs_give_the_ids_of_the_whole_text() {
    let pieces = [
        "word",
        "tokenization",
        "The",
        "ÉIRE",
        "\u{301}",
        "e\u{301}",
        "的人",
        "有",
        "[MASK]",
        "[CLS]",
        "[mask]",
        "[",
        "]",
        ",",
        "...",
        "\t",
        "\u{a0}",
        "\u{3000}",
        "\u{7}",
        "\u{0}",
        "\u{fffd}",
        "İstanbul",
        "ΣΑΣ",
        "🙂",
        "x",
        "supercalifragilisticexpialidocious",
        "-",
        "'s",
        "\u{200b}",
        "ﬁ",
    ];
    let long_word = "a".repeat(150);
    // Fixed seed: the same texts every run.
    let mut rng = StdRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
    let mut next = move |n: usize| rng.random_range(0..n);
    let path = model_dir().join("tokenizer.json");
    let mut checked_long = 0;
    for max in [2usize, 3, 9, 40, 256] {
        let t = MiniLmTokenizer::from_file(&path, max).unwrap();
        let r = reference_tokenizer(max);
        let reference_ids = |text: &str| r.encode(text, true).unwrap().get_ids().to_vec();
        for case in 0..60 {
            // Up to ~12 KB: past the first prefix (16 bytes per token) for every max here.
            let target = 1 + next(12_000);
            let mut text = String::new();
            while text.len() < target {
                match next(20) {
                    0 => text.push_str(&long_word),
                    1 => text.push_str(&"b".repeat(next(3000))),
                    _ => text.push_str(pieces[next(pieces.len())]),
                }
                text.push_str([" ", " ", " ", "", "  ", "\n"][next(6)]);
            }
            let want = reference_ids(&text);
            assert_eq!(
                t.encode(&text).unwrap(),
                want,
                "max {max}, case {case}: {text:?}"
            );
            checked_long += usize::from(text.len() > 16 * max);
        }
        // A space only at the very start, and none at all.
        for text in [format!(" {}", "c".repeat(40 * max)), "d".repeat(40 * max)] {
            assert_eq!(t.encode(&text).unwrap(), reference_ids(&text));
        }
    }
    assert!(checked_long > 200, "{checked_long} long cases");
}

/// `encode_all` tokenizes on several threads; its rows stay in input order and equal
/// `encode` one sentence at a time, over thousands of sentences of random lengths (some cut).
#[test]
fn encode_all_keeps_input_order_over_many_sentences() {
    let path = model_dir().join("tokenizer.json");
    let t = MiniLmTokenizer::from_file(&path, 64).unwrap();
    let r = reference_tokenizer(1 << 20);
    let words = [
        "the",
        "Naïve",
        "café",
        "的人",
        "GPU",
        "kernels,",
        "x",
        "tokenization",
    ];
    let mut rng = StdRng::seed_from_u64(11);
    let texts: Vec<String> = (0..3000)
        .map(|_| {
            let n = rng.random_range(0..120);
            (0..n)
                .map(|_| words[rng.random_range(0..words.len())])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let got = t.encode_all(&texts).unwrap();
    assert_eq!(got.ids.len(), texts.len());
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(got.ids[i], t.encode(text).unwrap(), "sentence {i}");
    }
    let truncated: Vec<usize> = (0..texts.len())
        .filter(|&i| r.encode(texts[i].as_str(), true).unwrap().len() > 64)
        .collect();
    assert_eq!(got.truncated, truncated);
    assert!(!truncated.is_empty() && truncated.len() < texts.len());
}
