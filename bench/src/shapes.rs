//! The rows of the comparison: Transformer layer GEMMs (`C = A·Bᵀ`, M tokens, N output
//! features, K input features), each with the epilogues that layer runs in its model, plus the
//! plain GEMM of every shape.
//!
//! | model | tokens M | d | FFN | epilogues |
//! |---|---:|---:|---:|---|
//! | `bert-base`, `bert-large` | 4096 (8 × 512) | 768, 1024 | 3072, 4096 | bias (QKV), bias+GELU erf and tanh (FFN up), bias+residual+LayerNorm (out-proj, FFN down) |
//! | `llama3-1b`, `llama3-8b` | 8192 | 2048, 4096 | 8192, 14336 | RMSNorm consumer (QKV), producer (o-proj, down), SwiGLU (gate+up interleaved) |
//! | `minilm.b1`, `.b32`, `.b256` | 128 · batch | 384 | 1536 | as BERT (all-MiniLM-L6-v2 at sequence length 128) |
//!
//! A row's name is `<model>.<layer>.<epilogue>`; a pattern selects every row whose name equals
//! it or starts with it followed by `.` (`bert-base`, `llama3-8b.gate-up`), or is a literal
//! `MxNxK` (run with every epilogue of `--epilogues`, default `gemm`).

use serde::{Deserialize, Serialize};

use crate::epilogue::Epilogue;
use crate::error::{BenchError, Result};

/// One row: a GEMM shape and the epilogue that runs on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// `<model>.<layer>.<epilogue>` (or `MxNxK.<epilogue>` for a literal).
    pub name: String,
    /// Rows of A and C (tokens).
    pub m: usize,
    /// Columns of C (output features; gate+up for SwiGLU).
    pub n: usize,
    /// Inner dimension (input features).
    pub k: usize,
    /// What runs on the GEMM's output.
    pub epilogue: Epilogue,
}

struct Layer {
    name: &'static str,
    n: usize,
    k: usize,
    epilogues: &'static [Epilogue],
}

use Epilogue::{
    Bias, BiasGelu, BiasGeluTanh, BiasResidualLayernorm, Gemm, RmsConsumer, RmsProducer, Swiglu,
};

fn bert(d: usize, ffn: usize, tanh: bool) -> Vec<Layer> {
    let up: &'static [Epilogue] = if tanh {
        &[Gemm, BiasGelu, BiasGeluTanh]
    } else {
        &[Gemm, BiasGelu]
    };
    vec![
        Layer {
            name: "qkv",
            n: 3 * d,
            k: d,
            epilogues: &[Gemm, Bias],
        },
        Layer {
            name: "attn-out",
            n: d,
            k: d,
            epilogues: &[Gemm, BiasResidualLayernorm],
        },
        Layer {
            name: "ffn-up",
            n: ffn,
            k: d,
            epilogues: up,
        },
        Layer {
            name: "ffn-down",
            n: d,
            k: ffn,
            epilogues: &[Gemm, BiasResidualLayernorm],
        },
    ]
}

/// LLaMA-3: grouped-query attention with `kv_heads` heads of 128 (QKV width d + 2·128·kv),
/// gate and up interleaved into one GEMM of width 2·FFN.
fn llama(d: usize, ffn: usize, kv_heads: usize) -> Vec<Layer> {
    vec![
        Layer {
            name: "qkv",
            n: d + 2 * 128 * kv_heads,
            k: d,
            epilogues: &[Gemm, RmsConsumer],
        },
        Layer {
            name: "o-proj",
            n: d,
            k: d,
            epilogues: &[Gemm, RmsProducer],
        },
        Layer {
            name: "gate-up",
            n: 2 * ffn,
            k: d,
            epilogues: &[Gemm, Swiglu],
        },
        Layer {
            name: "down",
            n: d,
            k: ffn,
            epilogues: &[Gemm, RmsProducer],
        },
    ]
}

/// (model name, tokens, layers).
fn models() -> Vec<(String, usize, Vec<Layer>)> {
    let mut v = vec![
        ("bert-base".to_owned(), 4096, bert(768, 3072, true)),
        ("bert-large".to_owned(), 4096, bert(1024, 4096, true)),
        // LLaMA-3.2-1B: 8 KV heads of 64 are 2·512 wide, the same as 4 heads of 128.
        ("llama3-1b".to_owned(), 8192, llama(2048, 8192, 4)),
        ("llama3-8b".to_owned(), 8192, llama(4096, 14336, 8)),
    ];
    for batch in MINILM_BATCHES {
        v.push((
            format!("minilm.b{batch}"),
            MINILM_SEQ * batch,
            bert(384, 1536, false),
        ));
    }
    v
}

/// Batch sizes of the MiniLM rows (and of the whole-model comparison).
pub const MINILM_BATCHES: [usize; 3] = [1, 32, 256];

/// Sequence length of the MiniLM rows.
pub const MINILM_SEQ: usize = 128;

/// Every row, model by model.
pub fn table() -> Vec<Row> {
    let mut out = Vec::new();
    for (model, m, layers) in models() {
        for l in &layers {
            for &e in l.epilogues {
                out.push(Row {
                    name: format!("{model}.{}.{}", l.name, e.name()),
                    m,
                    n: l.n,
                    k: l.k,
                    epilogue: e,
                });
            }
        }
    }
    out
}

/// `--quick`: a few rows, small and large, that cover every epilogue.
pub const QUICK: &[&str] = &[
    "bert-base.qkv.bias",
    "bert-base.attn-out.bias-residual-layernorm",
    "bert-large.ffn-up",
    "llama3-1b.qkv.rms-consumer",
    "llama3-1b.o-proj.rms-producer",
    "llama3-1b.gate-up",
    "minilm.b1.ffn-up.bias-gelu",
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

/// The rows `patterns` select from `table`, in table order, each once, then the literals
/// `MxNxK` with each of `literal_epilogues`.
///
/// # Errors
/// [`BenchError::Usage`] naming a pattern that selects nothing.
pub fn select(
    table: &[Row],
    patterns: &[String],
    literal_epilogues: &[Epilogue],
) -> Result<Vec<Row>> {
    if patterns.is_empty() {
        return Ok(table.to_vec());
    }
    let mut chosen = vec![false; table.len()];
    let mut literals = Vec::new();
    for p in patterns {
        let p = p.trim();
        if let Some((m, n, k)) = parse_mnk(p) {
            for &e in literal_epilogues {
                if let Some(why) = e.check_width(n) {
                    return Err(BenchError::Usage {
                        what: "--rows",
                        detail: format!("{p} with {}: {why}", e.name()),
                    });
                }
                literals.push(Row {
                    name: format!("{m}x{n}x{k}.{}", e.name()),
                    m,
                    n,
                    k,
                    epilogue: e,
                });
            }
            continue;
        }
        let mut any = false;
        for (i, r) in table.iter().enumerate() {
            let hit = r.name == p
                || r.name
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with('.'));
            if hit {
                chosen[i] = true;
                any = true;
            }
        }
        if !any {
            return Err(BenchError::Usage {
                what: "--rows",
                detail: format!(
                    "`{p}` names no row (see `fused-gemm-bench list`) and is not MxNxK"
                ),
            });
        }
    }
    let mut out: Vec<Row> = table
        .iter()
        .zip(&chosen)
        .filter(|(_, c)| **c)
        .map(|(r, _)| r.clone())
        .collect();
    out.extend(literals);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_covers_every_model_and_epilogue_once() {
        let t = table();
        let mut names: Vec<&str> = t.iter().map(|r| r.name.as_str()).collect();
        let len = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), len, "row names are unique");
        for e in Epilogue::ALL {
            assert!(t.iter().any(|r| r.epilogue == e), "{e:?} has a row");
        }
        let get = |n: &str| t.iter().find(|r| r.name == n).unwrap();
        let r = get("llama3-8b.gate-up.swiglu");
        assert_eq!((r.m, r.n, r.k), (8192, 28672, 4096));
        let r = get("llama3-8b.qkv.rms-consumer");
        assert_eq!((r.m, r.n, r.k), (8192, 6144, 4096));
        let r = get("llama3-1b.gate-up.gemm");
        assert_eq!((r.m, r.n, r.k), (8192, 16384, 2048));
        let r = get("bert-base.ffn-up.bias-gelu-tanh");
        assert_eq!((r.m, r.n, r.k), (4096, 3072, 768));
        let r = get("minilm.b256.ffn-down.bias-residual-layernorm");
        assert_eq!((r.m, r.n, r.k), (32768, 384, 1536));
        assert_eq!(get("minilm.b1.qkv.bias").m, 128);
        // Every shape has its plain GEMM.
        for r in &t {
            let shape = r.name.rsplit_once('.').unwrap().0;
            assert!(
                t.iter().any(
                    |g| g.name == format!("{shape}.gemm") && (g.m, g.n, g.k) == (r.m, r.n, r.k)
                ),
                "{}",
                r.name
            );
        }
    }

    #[test]
    fn patterns_select_by_dotted_prefix_and_literals() {
        let t = table();
        let s = select(&t, &["llama3-8b.gate-up".into()], &[Gemm]).unwrap();
        let names: Vec<&str> = s.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["llama3-8b.gate-up.gemm", "llama3-8b.gate-up.swiglu"]
        );
        // `minilm.b1` does not select `minilm.b128…` or `minilm.b256`.
        let s = select(&t, &["minilm.b1".into()], &[Gemm]).unwrap();
        assert!(s.iter().all(|r| r.m == 128) && s.len() == 8);
        let s = select(&t, &["17x4096x1".into()], &[Gemm, Swiglu]).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[1].m, s[1].n, s[1].k, s[1].epilogue),
            (17, 4096, 1, Swiglu)
        );
        assert_eq!(
            select(&t, &["17x4095x1".into()], &[Gemm]).unwrap()[0].n,
            4095
        );
        assert!(
            select(&t, &["7x7x7".into()], &[Swiglu]).is_err(),
            "odd N for SwiGLU"
        );
        let e = select(&t, &["gpt5".into()], &[Gemm]).unwrap_err();
        assert!(e.to_string().contains("gpt5"));
        for q in QUICK {
            assert!(
                !select(&t, &[q.to_string()], &[Gemm]).unwrap().is_empty(),
                "{q}"
            );
        }
        assert_eq!(parse_mnk("8×16×32"), Some((8, 16, 32)));
        assert_eq!(parse_mnk("8x0x32"), None);
    }
}
