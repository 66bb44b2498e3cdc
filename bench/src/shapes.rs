//! The shape table: Transformer layer GEMMs (`C = A·Bᵀ`, M tokens, N output features, K input
//! features) at M = 128, 4096 and 16384, and the anchor shapes measured with PyTorch on the
//! H200 (`bench/anchors/`). Each shape carries the epilogues that belong to it in its model; `--epilogues`
//! replaces them.
//!
//! Names are `<model>.<layer>.m<M>` and `anchor.<what>`; a pattern selects every shape whose
//! name equals it or starts with it followed by `.` (`bert-base`, `llama3-8b.gate-up`), or is a
//! literal `MxNxK`.

use serde::{Deserialize, Serialize};

use crate::epilogue::Epilogue;
use crate::error::{BenchError, Result};

/// One GEMM shape and its epilogues.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Table name (or `MxNxK` for a literal).
    pub name: String,
    /// Rows of A and C (tokens).
    pub m: usize,
    /// Columns of C (output features; gate+up for SwiGLU).
    pub n: usize,
    /// Inner dimension (input features).
    pub k: usize,
    /// The epilogues this layer runs in its model.
    pub epilogues: Vec<Epilogue>,
}

/// Token counts of the model-layer shapes.
pub const MS: [usize; 3] = [128, 4096, 16384];

struct Layer {
    name: &'static str,
    n: usize,
    k: usize,
    epilogues: &'static [Epilogue],
}

use Epilogue::{BiasGelu, BiasGeluTanh, BiasResidualLayernorm, RmsRstd, RmsnormScale, Swiglu};

/// (model, layers): BERT-base (d 768, FFN 3072), BERT-large (1024, 4096), GPT-2 XL (1600,
/// 6400, `gelu_new`; GPT-2 small's shapes equal BERT-base's), LLaMA-3-8B (4096, FFN 14336 with
/// gate and up interleaved into one N = 28672 GEMM).
fn models() -> Vec<(&'static str, Vec<Layer>)> {
    let bert = |d: usize, ffn: usize| {
        vec![
            Layer {
                name: "attn-out",
                n: d,
                k: d,
                epilogues: &[BiasResidualLayernorm],
            },
            Layer {
                name: "ffn-up",
                n: ffn,
                k: d,
                epilogues: &[BiasGelu],
            },
            Layer {
                name: "ffn-down",
                n: d,
                k: ffn,
                epilogues: &[BiasResidualLayernorm],
            },
        ]
    };
    vec![
        ("bert-base", bert(768, 3072)),
        ("bert-large", bert(1024, 4096)),
        (
            "gpt2-xl",
            vec![
                Layer {
                    name: "attn-proj",
                    n: 1600,
                    k: 1600,
                    epilogues: &[BiasResidualLayernorm],
                },
                Layer {
                    name: "mlp-fc",
                    n: 6400,
                    k: 1600,
                    epilogues: &[BiasGeluTanh],
                },
                Layer {
                    name: "mlp-proj",
                    n: 1600,
                    k: 6400,
                    epilogues: &[BiasResidualLayernorm],
                },
            ],
        ),
        (
            "llama3-8b",
            vec![
                Layer {
                    name: "qkv",
                    n: 6144,
                    k: 4096,
                    epilogues: &[RmsnormScale],
                },
                Layer {
                    name: "o-proj",
                    n: 4096,
                    k: 4096,
                    epilogues: &[RmsRstd],
                },
                Layer {
                    name: "gate-up",
                    n: 28672,
                    k: 4096,
                    epilogues: &[Swiglu],
                },
                Layer {
                    name: "down",
                    n: 4096,
                    k: 14336,
                    epilogues: &[RmsRstd],
                },
            ],
        ),
    ]
}

/// The anchors of `bench/anchors/` (M×N×K) with the epilogues measured there.
fn anchors() -> Vec<Shape> {
    let s = |name: &str, m, n, k, epilogues: &[Epilogue]| Shape {
        name: format!("anchor.{name}"),
        m,
        n,
        k,
        epilogues: epilogues.to_vec(),
    };
    let gelu_ln = [BiasGelu, BiasResidualLayernorm];
    vec![
        s("bert-ffn-up", 4096, 3072, 768, &gelu_ln),
        s("bert-ffn-down", 4096, 768, 3072, &gelu_ln),
        s("gpt-ffn-up", 8192, 16384, 4096, &gelu_ln),
        s("out-proj", 8192, 4096, 4096, &gelu_ln),
        s("ffn-down", 8192, 4096, 16384, &gelu_ln),
        s("llama3-1b-mlp-up", 8192, 16384, 2048, &[Swiglu]),
        s("llama3-8b-mlp-up", 8192, 28672, 4096, &[Swiglu]),
        s("bert-large-swiglu", 4096, 8192, 1024, &[Swiglu]),
    ]
}

/// The whole table: model layers at every M of [`MS`], then the anchors.
pub fn table() -> Vec<Shape> {
    let mut out = Vec::new();
    for (model, layers) in models() {
        for l in &layers {
            for m in MS {
                out.push(Shape {
                    name: format!("{model}.{}.m{m}", l.name),
                    m,
                    n: l.n,
                    k: l.k,
                    epilogues: l.epilogues.to_vec(),
                });
            }
        }
    }
    out.extend(anchors());
    out
}

/// `--quick`: small shapes covering the four main epilogues, plus the BERT FFN-up anchor.
pub const QUICK: &[&str] = &[
    "bert-base.ffn-up.m128",
    "bert-base.attn-out.m128",
    "llama3-8b.qkv.m128",
    "llama3-8b.o-proj.m128",
    "llama3-8b.gate-up.m128",
    "anchor.bert-ffn-up",
];

/// Parses a literal `MxNxK` (also `M×N×K`).
pub fn parse_mnk(s: &str) -> Option<(usize, usize, usize)> {
    let parts: Vec<&str> = s.split(['x', 'X', '×']).collect();
    if parts.len() != 3 {
        return None;
    }
    let v: Vec<usize> = parts.iter().filter_map(|p| p.trim().parse().ok()).collect();
    (v.len() == 3 && v.iter().all(|&d| d > 0)).then(|| (v[0], v[1], v[2]))
}

/// The shapes `patterns` select from `table`, in table order, each once; literals `MxNxK`
/// follow (their epilogues: bias-gelu unless `--epilogues` says otherwise).
///
/// # Errors
/// [`BenchError::Usage`] naming a pattern that selects nothing.
pub fn select(table: &[Shape], patterns: &[String]) -> Result<Vec<Shape>> {
    if patterns.is_empty() {
        return Ok(table.to_vec());
    }
    let mut chosen = vec![false; table.len()];
    let mut literals = Vec::new();
    for p in patterns {
        let p = p.trim();
        let mut hit = false;
        for (i, s) in table.iter().enumerate() {
            if s.name == p || s.name.starts_with(&format!("{p}.")) {
                chosen[i] = true;
                hit = true;
            }
        }
        if !hit {
            match parse_mnk(p) {
                Some((m, n, k)) => literals.push(Shape {
                    name: format!("{m}x{n}x{k}"),
                    m,
                    n,
                    k,
                    epilogues: vec![BiasGelu],
                }),
                None => {
                    return Err(BenchError::Usage {
                        what: "--shapes",
                        detail: format!(
                            "`{p}` names no shape and is not MxNxK (see `fused-gemm-bench list`)"
                        ),
                    });
                }
            }
        }
    }
    let mut out: Vec<Shape> = table
        .iter()
        .zip(&chosen)
        .filter(|&(_, &c)| c)
        .map(|(s, _)| s.clone())
        .collect();
    out.extend(literals);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_every_model_at_every_m_and_the_anchors() {
        let t = table();
        for model in ["bert-base", "bert-large", "gpt2-xl", "llama3-8b"] {
            for m in MS {
                assert!(
                    t.iter().any(|s| s.name.starts_with(model) && s.m == m),
                    "{model} at M = {m}"
                );
            }
        }
        for (m, n, k) in [
            (4096, 3072, 768),
            (4096, 768, 3072),
            (8192, 16384, 4096),
            (8192, 4096, 4096),
            (8192, 4096, 16384),
            (8192, 16384, 2048),
            (8192, 28672, 4096),
            (4096, 8192, 1024),
        ] {
            assert!(
                t.iter().any(|s| (s.m, s.n, s.k) == (m, n, k)),
                "anchor {m}x{n}x{k}"
            );
        }
        let mut names: Vec<&str> = t.iter().map(|s| s.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), t.len(), "names are unique");
        for s in &t {
            assert!(!s.epilogues.is_empty());
            for e in &s.epilogues {
                assert!(
                    e.check_width(s.n, s.k, 32768).is_none(),
                    "{} {}",
                    s.name,
                    e.name()
                );
            }
        }
        for q in QUICK {
            assert!(t.iter().any(|s| s.name == *q), "quick shape {q}");
        }
    }

    #[test]
    fn patterns_select_by_prefix_and_literal() {
        let t = table();
        let bert = select(&t, &["bert-base".into()]).unwrap();
        assert_eq!(bert.len(), 9);
        assert!(bert.iter().all(|s| s.name.starts_with("bert-base.")));
        let one = select(
            &t,
            &["llama3-8b.gate-up.m128".into(), "bert-base.ffn-up".into()],
        )
        .unwrap();
        assert_eq!(one.len(), 4);
        // Table order, no duplicates.
        let dup = select(&t, &["anchor".into(), "anchor.out-proj".into()]).unwrap();
        assert_eq!(dup.len(), 8);
        let lit = select(&t, &["1x3073x17".into()]).unwrap();
        assert_eq!((lit[0].m, lit[0].n, lit[0].k), (1, 3073, 17));
        // `bert` is not a whole name component: no silent match of bert-base and bert-large.
        assert!(select(&t, &["bert".into()]).is_err());
        assert!(select(&t, &["0x1x1".into()]).is_err());
        assert_eq!(parse_mnk("4096×768×3072"), Some((4096, 768, 3072)));
        assert_eq!(select(&t, &[]).unwrap().len(), t.len());
    }
}
