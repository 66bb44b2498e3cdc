//! `MiniLmTokenizer::encode` tokenizes long sentences by prefixes cut before a space; it must
//! give the ids of the plain `tokenizers::Tokenizer` on the whole text (same truncation) for
//! any input: random mixes of scripts, combining marks after spaces, Unicode spaces, control
//! and zero-width characters, added-token text, over-long words, and cases at the cut point.

mod common;

use common::{model_dir, reference_tokenizer};
use fused_gemm_cli::MiniLmTokenizer;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokenizers::Tokenizer;

/// Draws indices for the generators below.
struct Rng(StdRng);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n)
    }
}

const PIECES: &[&str] = &[
    "word",
    "Tokenization",
    "THE",
    "ÉIRE",
    "naïve",
    "café",
    "Hokkaidō",
    "\u{301}",
    "\u{308}",
    "e\u{301}",
    "\u{301}\u{327}",
    "\u{327}\u{301}",
    "a\u{327}\u{301}",
    "的人",
    "有",
    "日本語",
    "ｶﾀｶﾅ",
    "한국어",
    "ไทย",
    "العربية",
    "עברית",
    "Русский",
    "Ελληνικά",
    "ΣΑΣ",
    "ß",
    "İstanbul",
    "ǅ",
    "ﬁ",
    "ﬀl",
    "Å",
    "Ω",
    "K",
    "[MASK]",
    "[CLS]",
    "[SEP]",
    "[PAD]",
    "[UNK]",
    "[mask]",
    "[ MASK ]",
    "[MASK",
    "MASK]",
    "[CLS][SEP]",
    "[",
    "]",
    ",",
    ".",
    "...",
    "!!!",
    "?!",
    "--",
    "—",
    "“",
    "”",
    "'s",
    "\"",
    "(",
    ")",
    "#",
    "##",
    "##ing",
    "@",
    "$",
    "%",
    "^",
    "&",
    "*",
    "\t",
    "\n",
    "\r",
    "\r\n",
    "\u{a0}",
    "\u{3000}",
    "\u{2003}",
    "\u{2009}",
    "\u{202f}",
    "\u{85}",
    "\u{2028}",
    "\u{2029}",
    "\u{1680}",
    "\u{7}",
    "\u{0}",
    "\u{1b}",
    "\u{7f}",
    "\u{9f}",
    "\u{fffd}",
    "\u{200b}",
    "\u{200c}",
    "\u{200d}",
    "\u{2060}",
    "\u{feff}",
    "\u{ad}",
    "\u{e000}",
    "\u{10ffff}",
    "🙂",
    "👩‍👩‍👧",
    "🇫🇷",
    "👍🏽",
    "𝔘𝔫𝔦",
    "x",
    "1",
    "3.14",
    "1,000,000",
    "supercalifragilisticexpialidocious",
    "antidisestablishmentarianism",
    "-",
    "_",
    "~",
    "`",
    "\u{fe0f}",
    "\u{20dd}",
    "\u{345}",
    "\u{e01}\u{e34}",
    "\u{93f}",
    "\u{915}\u{94d}\u{937}",
];

const SEPS: &[&str] = &[
    " ",
    " ",
    " ",
    " ",
    "",
    "  ",
    "   ",
    "\n",
    "\t",
    " \t ",
    "\u{a0}",
    "\u{3000}",
    "\u{2003}",
    " \u{301}",
    " \u{308}a",
    " \u{200b}",
    "\u{200b} ",
    " \u{0} ",
    "\r\n",
    " \u{345}",
];

fn random_char(rng: &mut Rng) -> char {
    loop {
        let c = match rng.below(6) {
            0 => rng.below(0x80) as u32,
            1 => 0x80 + rng.below(0x780) as u32,
            2 => 0x300 + rng.below(0x70) as u32, // combining marks
            3 => 0x3000 + rng.below(0x7000) as u32, // CJK and kana
            4 => rng.below(0x11_0000) as u32,
            _ => 0x2000 + rng.below(0x70) as u32, // general punctuation, spaces
        };
        if let Some(c) = char::from_u32(c) {
            return c;
        }
    }
}

fn gen_pieces(rng: &mut Rng, target: usize) -> Vec<String> {
    let mut v = Vec::new();
    let mut len = 0;
    while len < target {
        let p: String = match rng.below(24) {
            0 => "a".repeat(80 + rng.below(60)),
            1 => "é".repeat(90 + rng.below(30)),
            2 => "b".repeat(rng.below(400)),
            3 => (0..rng.below(8)).map(|_| random_char(rng)).collect(),
            4 => (0..rng.below(200)).map(|_| random_char(rng)).collect(),
            5 => " ".repeat(rng.below(50)),
            _ => PIECES[rng.below(PIECES.len())].to_string(),
        };
        len += p.len();
        v.push(p);
        let s = SEPS[rng.below(SEPS.len())];
        len += s.len();
        v.push(s.to_string());
    }
    v
}

fn mismatch(t: &MiniLmTokenizer, r: &Tokenizer, text: &str) -> bool {
    let want = r.encode(text, true).map(|e| e.get_ids().to_vec());
    let got = t.encode(text);
    match (got, want) {
        (Ok(g), Ok(w)) => g != w,
        (Err(_), Err(_)) => false,
        _ => true,
    }
}

fn shrink(t: &MiniLmTokenizer, r: &Tokenizer, mut pieces: Vec<String>) -> String {
    // Greedy: drop chunks of pieces, then characters.
    let mut chunk = pieces.len() / 2;
    while chunk >= 1 {
        let mut i = 0;
        while i < pieces.len() {
            let mut cand = pieces.clone();
            let end = (i + chunk).min(cand.len());
            cand.drain(i..end);
            if mismatch(t, r, &cand.concat()) {
                pieces = cand;
            } else {
                i += chunk;
            }
        }
        chunk /= 2;
    }
    let mut chars: Vec<char> = pieces.concat().chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let mut cand = chars.clone();
        cand.remove(i);
        if mismatch(t, r, &cand.iter().collect::<String>()) {
            chars = cand;
        } else {
            i += 1;
        }
    }
    chars.into_iter().collect()
}

/// Fresh random inputs each run (the seed is printed, and `TOKENIZER_PREFIX_SEED` repeats it);
/// a mismatch is shrunk to a minimal input.
#[test]
fn prefix_tokenization_matches_whole_text_on_random_inputs() {
    let path = model_dir().join("tokenizer.json");
    let cases = 20;
    let seed = std::env::var("TOKENIZER_PREFIX_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("TOKENIZER_PREFIX_SEED={seed}");
    let mut rng = Rng(StdRng::seed_from_u64(seed));
    let mut failures = Vec::new();
    let mut long = 0;
    for max in [2usize, 3, 4, 5, 9, 17, 33, 64, 128, 256, 512] {
        let t = MiniLmTokenizer::from_file(&path, max).unwrap();
        let r = reference_tokenizer(max);
        for case in 0..cases {
            let target = 1 + rng.below(20 * max + 2000).min(20_000);
            let pieces = gen_pieces(&mut rng, target);
            let text = pieces.concat();
            long += usize::from(text.len() > 16 * max);
            if mismatch(&t, &r, &text) {
                let small = shrink(&t, &r, pieces);
                let g = t.encode(&small).ok();
                let w = r
                    .encode(small.as_str(), true)
                    .ok()
                    .map(|e| e.get_ids().to_vec());
                failures.push(format!(
                    "max {max} case {case}: minimal {small:?}\n  got  {g:?}\n  want {w:?}"
                ));
                if failures.len() > 5 {
                    break;
                }
            }
        }
    }
    // Most inputs must be longer than the first prefix, or the prefix path went untested.
    assert!(long > cases * 11 / 2, "only {long} long inputs");
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

/// Hand-built cases around the cut point for small `max_seq_len`.
#[test]
fn prefix_tokenization_matches_at_the_cut_point() {
    let path = model_dir().join("tokenizer.json");
    let mut fails = Vec::new();
    let fillers = [
        "w ",
        "a ",
        "的 ",
        ". ",
        "[MASK] ",
        "x\u{301} ",
        "ab\tcd ",
        "\u{a0}y ",
    ];
    let tails = [
        " \u{301}abc",
        " \u{308}",
        "\u{301} z",
        "[MASK]",
        " [MASK]",
        "的人",
        " 的",
        "\u{3000}x",
        "\u{a0}x",
        "\u{200b} x",
        &"q".repeat(101),
        &"q".repeat(100),
        " ##a",
        " [CLS] [SEP]",
    ];
    for max in [2usize, 3, 4, 5, 6, 8, 9] {
        let t = MiniLmTokenizer::from_file(&path, max).unwrap();
        let r = reference_tokenizer(max);
        for f in fillers {
            for tail in tails {
                for n in [1usize, 3, 16, 17, 33] {
                    for pre in ["", " ", "z"] {
                        let text = format!("{pre}{}{tail}{}", f.repeat(n), f.repeat(n));
                        if mismatch(&t, &r, &text) {
                            fails.push(format!("max {max}: {text:?}"));
                        }
                    }
                }
            }
        }
    }
    assert!(
        fails.is_empty(),
        "{} failures, first: {:?}",
        fails.len(),
        &fails[..fails.len().min(5)]
    );
}
