//! Parsing the attribute's tokens into [`KernelAttr`], collecting every error.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, Meta, Token};

use crate::ast::*;
use crate::errors::Errors;

/// Known stage names, for "did you mean" suggestions.
pub const STAGE_NAMES: &[&str] = &[
    "scale",
    "bias",
    "relu",
    "gelu",
    "gelu_tanh",
    "silu",
    "sigmoid",
    "residual",
    "accumulate",
    "layer_norm",
    "rms_norm",
    "swiglu",
    "geglu",
    "rope",
    "cast",
];

/// Known options.
pub const OPTION_NAMES: &[&str] = &["epilogue", "dtype", "out", "b_layout", "arch", "tile"];

struct Args(Punctuated<Meta, Token![,]>);

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        Ok(Args(Punctuated::parse_terminated(input)?))
    }
}

/// Levenshtein distance, for suggestions.
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + (ca != *cb) as usize)
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The closest known name within edit distance 3 (and less than the name's length).
pub fn suggest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (distance(name, k), *k))
        .filter(|(d, k)| *d <= 3 && *d < name.len().max(k.len()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn parse_dtype(e: &Expr, what: &str, errors: &mut Errors) -> Option<Dtype> {
    let ident = match e {
        Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
        _ => None,
    };
    match ident.as_deref() {
        Some("f32") => Some(Dtype::F32),
        Some("bf16") => Some(Dtype::Bf16),
        Some("f16") => Some(Dtype::F16),
        other => {
            let hint = other
                .and_then(|o| suggest(o, &["f32", "bf16", "f16"]))
                .map(|s| format!("; did you mean `{s}`?"))
                .unwrap_or_default();
            errors.push(
                e.span(),
                format!(
                    "unknown {what} `{}`: expected `bf16`, `f16` or `f32`{hint}",
                    quote::quote!(#e)
                ),
            );
            None
        }
    }
}

/// A float literal (or integer literal) as f64.
fn float_lit(e: &Expr) -> Option<f64> {
    match e {
        Expr::Lit(ExprLit {
            lit: Lit::Float(f), ..
        }) => f.base10_parse().ok(),
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i.base10_parse::<u64>().ok().map(|v| v as f64),
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => float_lit(&u.expr).map(|v| -v),
        _ => None,
    }
}

/// `eps = 1e-5` or `1e-5`: a positive float literal.
fn positive_float(
    name: &str,
    stage: &str,
    args: &[Expr],
    span: Span,
    errors: &mut Errors,
) -> Option<f64> {
    if args.len() != 1 {
        errors.push(
            span,
            format!(
                "`{stage}` takes exactly one argument, `{stage}({name} = <positive float literal>)`"
            ),
        );
        return None;
    }
    let e = match &args[0] {
        Expr::Assign(a) => {
            let key = match &*a.left {
                Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
                _ => None,
            };
            if key.as_deref() != Some(name) {
                errors.push(
                    a.left.span(),
                    format!("`{stage}` has one argument, `{name}`"),
                );
                return None;
            }
            &*a.right
        }
        e => e,
    };
    match float_lit(e) {
        Some(v) if v > 0.0 && v.is_finite() => Some(v),
        _ => {
            errors.push(
                e.span(),
                format!("`{name}` must be a positive float literal, e.g. `{stage}({name} = 1e-5)`"),
            );
            None
        }
    }
}

fn no_args(stage: &str, args: &Option<Vec<Expr>>, span: Span, errors: &mut Errors) {
    if args.is_some() {
        errors.push(span, format!("`{stage}` takes no arguments"));
    }
}

fn axis_or(stage: &str, args: &[Expr], errors: &mut Errors) -> Option<Axis> {
    if args.len() != 1 {
        errors.push(
            args.first()
                .map(|a| a.span())
                .unwrap_or_else(Span::call_site),
            format!("`{stage}` takes one argument: `row` or `col`"),
        );
        return None;
    }
    match &args[0] {
        Expr::Path(p) if p.path.is_ident("row") => Some(Axis::Row),
        Expr::Path(p) if p.path.is_ident("col") => Some(Axis::Col),
        e => {
            errors.push(
                e.span(),
                format!(
                    "`{stage}(...)` takes `row` (a length-M vector) or `col` (a length-N vector)"
                ),
            );
            None
        }
    }
}

fn parse_stage(e: &Expr, errors: &mut Errors) -> Option<Stage> {
    let span = e.span();
    let (path, args): (&syn::Path, Option<Vec<Expr>>) = match e {
        Expr::Path(p) => (&p.path, None),
        Expr::Call(c) => match &*c.func {
            Expr::Path(p) => (&p.path, Some(c.args.iter().cloned().collect())),
            _ => {
                errors.push(c.func.span(), "expected a stage name");
                return None;
            }
        },
        _ => {
            errors.push(
                span,
                format!(
                    "expected a stage (one of {}) or the path of a `fn(f32) -> f32`",
                    STAGE_NAMES.join(", ")
                ),
            );
            return None;
        }
    };
    let Some(ident) = path.get_ident() else {
        if args.is_some() {
            errors.push(
                span,
                "a user stage is written as a bare path to a `fn(f32) -> f32`, without arguments",
            );
            return None;
        }
        return Some(Stage {
            kind: StageKind::User(path.clone()),
            span,
        });
    };
    let name = ident.to_string();
    let a = args.clone().unwrap_or_default();
    let kind = match name.as_str() {
        "scale" => {
            if a.len() != 1 {
                errors.push(span, "`scale` takes one argument: a parameter name (`scale(alpha)`), a float literal, `row` or `col`");
                return None;
            }
            match &a[0] {
                Expr::Path(p) if p.path.is_ident("row") => {
                    StageKind::Scale(ScaleArg::Vector(Axis::Row))
                }
                Expr::Path(p) if p.path.is_ident("col") => {
                    StageKind::Scale(ScaleArg::Vector(Axis::Col))
                }
                Expr::Path(p) if p.path.get_ident().is_some() => {
                    StageKind::Scale(ScaleArg::Param(p.path.get_ident().unwrap().clone()))
                }
                other => match float_lit(other) {
                    Some(v) if v.is_finite() => StageKind::Scale(ScaleArg::Const(v)),
                    _ => {
                        errors.push(other.span(), "`scale` takes a parameter name, a finite float literal, `row` or `col`");
                        return None;
                    }
                },
            }
        }
        "bias" => match args {
            None => StageKind::Bias(Axis::Col),
            Some(a) => StageKind::Bias(axis_or("bias", &a, errors)?),
        },
        "relu" | "gelu" | "gelu_tanh" | "silu" | "sigmoid" | "residual" | "accumulate"
        | "swiglu" | "geglu" => {
            no_args(&name, &args, span, errors);
            match name.as_str() {
                "relu" => StageKind::Relu,
                "gelu" => StageKind::Gelu,
                "gelu_tanh" => StageKind::GeluTanh,
                "silu" => StageKind::Silu,
                "sigmoid" => StageKind::Sigmoid,
                "residual" => StageKind::Residual,
                "accumulate" => StageKind::Accumulate,
                "swiglu" => StageKind::SwiGlu,
                _ => StageKind::GeGlu,
            }
        }
        "layer_norm" | "rms_norm" => {
            let Some(a) = args else {
                errors.push(
                    span,
                    format!("`{name}` needs its epsilon: `{name}(eps = 1e-5)`"),
                );
                return None;
            };
            let eps = positive_float("eps", &name, &a, span, errors)?;
            if name == "layer_norm" {
                StageKind::LayerNorm { eps }
            } else {
                StageKind::RmsNorm { eps }
            }
        }
        "rope" => {
            let Some(a) = args else {
                errors.push(span, "`rope` needs its base: `rope(theta = 10000.0)`");
                return None;
            };
            StageKind::Rope {
                theta: positive_float("theta", "rope", &a, span, errors)?,
            }
        }
        "cast" => {
            if a.len() != 1 {
                errors.push(
                    span,
                    "`cast` takes one dtype: `cast(bf16)`, `cast(f16)` or `cast(f32)`",
                );
                return None;
            }
            StageKind::Cast(parse_dtype(&a[0], "cast dtype", errors)?)
        }
        _ => {
            if let Some(s) = suggest(&name, STAGE_NAMES) {
                errors.push(
                    ident.span(),
                    format!("unknown epilogue stage `{name}`; did you mean `{s}`?"),
                );
                return None;
            }
            if args.is_some() {
                errors.push(span, format!("unknown epilogue stage `{name}`; a user stage is a bare path to a `fn(f32) -> f32`"));
                return None;
            }
            StageKind::User(path.clone())
        }
    };
    Some(Stage { kind, span })
}

/// Parses the attribute arguments. Returns `None` when errors were recorded.
pub fn parse_attr(tokens: proc_macro2::TokenStream, errors: &mut Errors) -> Option<KernelAttr> {
    let args = match syn::parse2::<Args>(tokens) {
        Ok(a) => a.0,
        Err(e) => {
            errors.push_err(e);
            return None;
        }
    };
    let mut seen: Vec<(String, Span)> = Vec::new();
    let mut stages = None;
    let mut dtype = None;
    let mut out = None;
    let mut b_layout = BLayout::Col;
    let mut arch = Arch::Sm80;
    let mut tile = None;
    for meta in &args {
        let Meta::NameValue(nv) = meta else {
            errors.push(
                meta.span(),
                format!(
                    "expected `name = value`; options are {}",
                    OPTION_NAMES.join(", ")
                ),
            );
            continue;
        };
        let key = nv
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            let mut e = syn::Error::new(nv.path.span(), format!("option `{key}` is given twice"));
            e.combine(syn::Error::new(*first, "first given here"));
            errors.push_err(e);
            continue;
        }
        seen.push((key.clone(), nv.path.span()));
        match key.as_str() {
            "epilogue" => match &nv.value {
                Expr::Array(arr) => {
                    let mut list = Vec::new();
                    for e in &arr.elems {
                        if let Some(s) = parse_stage(e, errors) {
                            list.push(s);
                        }
                    }
                    stages = Some(list);
                }
                v => errors.push(v.span(), "`epilogue` takes a list of stages: `epilogue = [bias, gelu]`"),
            },
            "dtype" => dtype = parse_dtype(&nv.value, "dtype", errors).map(|d| (d, nv.value.span())),
            "out" => out = parse_dtype(&nv.value, "output dtype", errors).map(|d| (d, nv.value.span())),
            "b_layout" => match &nv.value {
                Expr::Path(p) if p.path.is_ident("row") => b_layout = BLayout::Row,
                Expr::Path(p) if p.path.is_ident("col") => b_layout = BLayout::Col,
                v => errors.push(v.span(), "`b_layout` is `row` (B stored K×N) or `col` (B stored N×K, as PyTorch Linear weights)"),
            },
            "arch" => match &nv.value {
                Expr::Path(p) if p.path.is_ident("sm_80") => arch = Arch::Sm80,
                Expr::Path(p) if p.path.is_ident("sm_90") => arch = Arch::Sm90,
                v => errors.push(v.span(), "`arch` is `sm_80` or `sm_90`"),
            },
            "tile" => match &nv.value {
                Expr::Tuple(t) if t.elems.len() == 3 => {
                    let mut vals = Vec::new();
                    for e in &t.elems {
                        match e {
                            Expr::Lit(ExprLit { lit: Lit::Int(i), .. }) => match i.base10_parse::<u32>() {
                                Ok(v) => vals.push(v),
                                Err(_) => errors.push(e.span(), "tile sizes are positive integers"),
                            },
                            _ => errors.push(e.span(), "tile sizes are integer literals: `tile = (BM, BN, BK)`"),
                        }
                    }
                    if vals.len() == 3 {
                        tile = Some(((vals[0], vals[1], vals[2]), nv.value.span()));
                    }
                }
                v => errors.push(v.span(), "`tile` is `(BM, BN, BK)`, e.g. `tile = (128, 128, 32)`"),
            },
            other => {
                let hint = suggest(other, OPTION_NAMES).map(|s| format!("; did you mean `{s}`?")).unwrap_or_default();
                errors.push(nv.path.span(), format!("unknown option `{other}`; options are {}{hint}", OPTION_NAMES.join(", ")));
            }
        }
    }
    let Some(stages) = stages else {
        errors.push(
            Span::call_site(),
            "missing `epilogue = [...]` (use `epilogue = []` for a plain GEMM)",
        );
        return None;
    };
    let (dtype, dtype_span) = dtype.unwrap_or((Dtype::Bf16, Span::call_site()));
    if errors.is_empty() {
        Some(KernelAttr {
            stages,
            dtype,
            dtype_span,
            out,
            b_layout,
            arch,
            tile,
        })
    } else {
        None
    }
}
