//! The attribute under random input: token trees built from the attribute's own vocabulary,
//! valid attributes with tokens inserted, dropped or swapped, and random items go through the
//! whole pipeline ([`process`]). It must return (no panic; a watchdog aborts on a case that
//! runs for more than [`HANG`]) with either an expansion that parses as Rust items or errors
//! that each point at a token of the input.
//!
//! CI runs 4,000 cases; `PROPTEST_CASES=1000000 cargo test -p fused-gemm-macros --release fuzz`
//! runs a million.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proc_macro2::TokenStream;
use proptest::prelude::*;

use crate::{Outcome, process};

/// Words the parser branches on, near misses of them, and other identifiers and keywords.
#[rustfmt::skip]
const WORDS: &[&str] = &[
    "epilogue", "dtype", "out", "b_layout", "arch", "tile", "bias", "relu", "gelu", "gelu_tanh",
    "silu", "sigmoid", "residual", "accumulate", "layer_norm", "rms_norm", "swiglu", "geglu",
    "rope", "cast", "scale", "squared_relu", "eps", "theta", "alpha", "row", "col", "bf16",
    "f16", "f32", "f64", "u8", "sm_80", "sm_90", "sm_90a", "sm_100", "bais", "gelu_tahn", "Relu",
    "epilog", "fn", "pub", "self", "crate", "super", "r#type", "_", "x", "my", "std", "f",
];
#[rustfmt::skip]
const PUNCT: &[&str] = &[
    "=", ",", ":", "::", "-", ".", "+", "*", "/", "#", "!", "&", ";", "<", ">", "..", "=>", "@",
    "?", "|", "'a",
];
#[rustfmt::skip]
const LITERALS: &[&str] = &[
    "0", "1", "16", "32", "64", "128", "256", "4095", "1e-5", "1e-12", "0.5", "1.", "10000.0",
    "1e999", "1e39", "-0.0", "4294967296", "18446744073709551616", "0x10", "1_000", "1u8",
    "2.0f32", "\"s\"", "'c'", "b'x'", "true",
];
/// Attributes the parser accepts, the seeds of the mutations.
const VALID: &[&str] = &[
    "epilogue = [bias, gelu]",
    "epilogue = []",
    "epilogue = [bias, residual, layer_norm(eps = 1e-12)], dtype = bf16",
    "epilogue = [scale(row), bias(row), relu], dtype = f16, out = f32",
    "epilogue = [swiglu], arch = sm_90",
    "epilogue = [rms_norm(eps = 1e-6)], b_layout = row, tile = (64, 128, 32)",
    "epilogue = [rope(theta = 10000.0), cast(f16)], dtype = f32",
    "epilogue = [scale(0.5), my::f, accumulate]",
];
const ITEMS: &[&str] = &[
    "pub fn k() {}",
    "/// Doc.\npub fn k() {}",
    "#[cfg(test)] pub fn k() {}",
    "fn k() {}",
    "pub fn k(x: u32) -> u32 { x }",
    "pub fn K() {}",
    "pub fn r#type() {}",
    "pub async unsafe fn k<T>() where T: Copy {}",
    "pub struct K;",
    "impl K {}",
    "pub fn k() { let x = 1; }",
];

/// A case running longer than this is a hang.
const HANG: Duration = Duration::from_secs(10);

fn token_tree() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        prop::sample::select(WORDS).prop_map(str::to_owned),
        prop::sample::select(PUNCT).prop_map(str::to_owned),
        prop::sample::select(LITERALS).prop_map(str::to_owned),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        (
            prop::sample::select(&[("(", ")"), ("[", "]"), ("{", "}")][..]),
            prop::collection::vec(inner, 0..6),
        )
            .prop_map(|((open, close), body)| format!("{open}{}{close}", body.join(" ")))
    })
}

fn random_tokens() -> impl Strategy<Value = String> {
    prop::collection::vec(token_tree(), 0..12).prop_map(|t| t.join(" "))
}

/// One edit of a token list: insert, drop or replace at a position (taken modulo the length).
#[derive(Debug, Clone)]
enum Edit {
    Insert(usize, String),
    Drop(usize),
    Replace(usize, String),
}

fn mutated_valid() -> impl Strategy<Value = String> {
    let edit = prop_oneof![
        (any::<usize>(), token_tree()).prop_map(|(i, t)| Edit::Insert(i, t)),
        any::<usize>().prop_map(Edit::Drop),
        (any::<usize>(), token_tree()).prop_map(|(i, t)| Edit::Replace(i, t)),
    ];
    (
        prop::sample::select(VALID),
        prop::collection::vec(edit, 1..4),
    )
        .prop_map(|(seed, edits)| {
            // Spaces around delimiters and punctuation, so that a token list edit is a token edit.
            let spaced: String = seed
                .chars()
                .flat_map(|c| match c {
                    '(' | ')' | '[' | ']' | ',' | '=' => vec![' ', c, ' '],
                    _ => vec![c],
                })
                .collect();
            let mut toks: Vec<String> = spaced.split_whitespace().map(str::to_owned).collect();
            for e in edits {
                let n = toks.len();
                match e {
                    Edit::Insert(i, t) => toks.insert(i % (n + 1), t),
                    Edit::Drop(i) if n > 0 => {
                        toks.remove(i % n);
                    }
                    Edit::Replace(i, t) if n > 0 => toks[i % n] = t,
                    _ => {}
                }
            }
            toks.join(" ")
        })
}

fn item() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(ITEMS).prop_map(str::to_owned),
        1 => random_tokens(),
    ]
}

/// The case in progress and when it started (ms since [`Watchdog::start`]; 0 when idle).
struct Watchdog {
    start: Instant,
    since_ms: AtomicU64,
    input: Mutex<String>,
}

impl Watchdog {
    fn get() -> &'static Watchdog {
        static DOG: std::sync::OnceLock<&'static Watchdog> = std::sync::OnceLock::new();
        DOG.get_or_init(|| {
            let dog: &'static Watchdog = Box::leak(Box::new(Watchdog {
                start: Instant::now(),
                since_ms: AtomicU64::new(0),
                input: Mutex::new(String::new()),
            }));
            std::thread::spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(500));
                    let since = dog.since_ms.load(Ordering::Acquire);
                    let now = dog.start.elapsed().as_millis() as u64;
                    if since != 0 && now.saturating_sub(since) > HANG.as_millis() as u64 {
                        let input = dog.input.lock().map(|s| s.clone()).unwrap_or_default();
                        eprintln!("#[fused_gemm] ran for more than {HANG:?} on: {input}");
                        std::process::abort();
                    }
                }
            });
            dog
        })
    }

    fn watch<T>(&self, input: String, f: impl FnOnce() -> T) -> T {
        *self.input.lock().unwrap() = input;
        let now = self.start.elapsed().as_millis() as u64;
        self.since_ms.store(now.max(1), Ordering::Release);
        let out = f();
        self.since_ms.store(0, Ordering::Release);
        out
    }
}

/// Runs the pipeline on `attr` and `item` (cases that do not lex are skipped: rustc never
/// passes unbalanced delimiters) and checks what it returns.
fn check(attr: &str, item: &str) -> Result<(), TestCaseError> {
    let (Ok(a), Ok(i)) = (attr.parse::<TokenStream>(), item.parse::<TokenStream>()) else {
        return Ok(());
    };
    let outcome = Watchdog::get().watch(format!("#[fused_gemm({attr})] {item}"), || process(a, i));
    match outcome {
        Outcome::Expanded(out) => {
            prop_assert!(
                syn::parse2::<syn::File>(out.clone()).is_ok(),
                "the expansion of #[fused_gemm({attr})] {item} is not Rust items: {out}"
            );
        }
        Outcome::Rejected { errors, .. } => {
            for e in errors.into_iter().flatten() {
                let at_input = e.span().byte_range() != (0..0);
                // A missing epilogue and syn's errors at the end of a list cut short have no
                // token to point at; the compiler shows them at the attribute.
                let msg = e.to_string();
                let no_token = msg.starts_with("#[fused_gemm] needs its epilogue")
                    || msg.starts_with("missing `epilogue")
                    || msg.starts_with("unexpected end of input")
                    || msg.starts_with("expected");
                prop_assert!(
                    at_input || no_token,
                    "error without a span for #[fused_gemm({attr})] {item}: {msg}"
                );
            }
        }
    }
    Ok(())
}

fn config() -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 4000;
    }
    c
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_tokens_never_panic_or_lose_their_span(attr in random_tokens(), item in item()) {
        check(&attr, &item)?;
    }

    #[test]
    fn edited_attributes_never_panic_or_lose_their_span(attr in mutated_valid(), item in item()) {
        check(&attr, &item)?;
    }
}

#[test]
fn the_seeds_expand() {
    for attr in VALID {
        let (a, i) = (attr.parse().unwrap(), "pub fn k() {}".parse().unwrap());
        assert!(
            matches!(process(a, i), Outcome::Expanded(_)),
            "#[fused_gemm({attr})] was rejected"
        );
    }
}
