//! Parsing the attribute's tokens into [`KernelAttr`], collecting every error.
//!
//! Each error points at the token that is wrong and says what is allowed there; where a likely
//! intent can be guessed (a misspelling, a name from another library, a missing `=`), it
//! suggests the fix.

use proc_macro2::Span;
use quote::ToTokens;
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
    "row_moments",
    "folded_layer_norm",
    "normed_residual",
    "swiglu",
    "geglu",
    "rope",
    "cast",
];

/// Names other libraries and model configs use for our stages: `(theirs, ours, why)`.
const STAGE_ALIASES: &[(&str, &str, &str)] = &[
    (
        "gelu_new",
        "gelu_tanh",
        "`gelu_new` is the tanh approximation; `gelu` is the erf form",
    ),
    (
        "gelu_pytorch_tanh",
        "gelu_tanh",
        "the tanh approximation; `gelu` is the erf form",
    ),
    (
        "gelu_fast",
        "gelu_tanh",
        "the tanh approximation; `gelu` is the erf form",
    ),
    (
        "gelu_approx",
        "gelu_tanh",
        "the tanh approximation; `gelu` is the erf form",
    ),
    ("gelu_erf", "gelu", "`gelu` is the erf form"),
    ("swish", "silu", "swish(x) = x·sigmoid(x) = silu(x)"),
    ("layernorm", "layer_norm", ""),
    ("ln", "layer_norm", ""),
    ("rmsnorm", "rms_norm", ""),
    ("rotary", "rope", ""),
    ("add", "residual", "`residual` adds an M×N matrix"),
    ("silu_mul", "swiglu", "`swiglu` is silu(gate)·up"),
    ("gelu_mul", "geglu", "`geglu` is gelu(gate)·up"),
    ("bias_row", "bias(row)", ""),
    ("row_bias", "bias(row)", ""),
    ("scale_row", "scale(row)", ""),
    ("row_scale", "scale(row)", ""),
    ("scale_col", "scale(col)", ""),
    ("col_scale", "scale(col)", ""),
    ("tanh_gelu", "gelu_tanh", ""),
];

/// Known options.
pub const OPTION_NAMES: &[&str] = &["epilogue", "dtype", "out", "b_layout", "arch", "tile"];

/// Names other libraries use for our options.
const OPTION_ALIASES: &[(&str, &str)] = &[
    ("stages", "epilogue"),
    ("ops", "epilogue"),
    ("input", "dtype"),
    ("in_dtype", "dtype"),
    ("out_dtype", "out"),
    ("output", "out"),
    ("layout", "b_layout"),
    ("target", "arch"),
    ("sm", "arch"),
    ("tile_shape", "tile"),
    ("block", "tile"),
];

const DTYPES: &[&str] = &["bf16", "f16", "f32"];

const DTYPE_ALIASES: &[(&str, &str)] = &[
    ("bfloat16", "bf16"),
    ("half", "f16"),
    ("float16", "f16"),
    ("fp16", "f16"),
    ("float", "f32"),
    ("float32", "f32"),
    ("fp32", "f32"),
];

struct Args(Punctuated<Meta, Token![,]>);

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        Ok(Args(Punctuated::parse_terminated(input)?))
    }
}

/// Edit distance with adjacent transpositions (optimal string alignment), for suggestions:
/// `bais` is one edit from `bias`.
pub fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = (a[i - 1] != b[j - 1]) as usize;
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// The closest known name: within edit distance 2, or 3 for names of 8 characters or more, and
/// less than half the longer name (so `ln` does not suggest `gelu`).
pub fn suggest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let name = name.to_lowercase();
    known
        .iter()
        .map(|k| (distance(&name, k), *k))
        .filter(|(d, k)| {
            let longest = name.len().max(k.len());
            let limit = if longest >= 8 { 3 } else { 2 };
            *d <= limit && 2 * *d < longest
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn ident_of(e: &Expr) -> Option<String> {
    match e {
        Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
        _ => None,
    }
}

/// Tokens as written, without the spaces `to_string` puts around `::` and `.`.
fn text(t: &impl ToTokens) -> String {
    let s = t.to_token_stream().to_string();
    let s = s
        .replace(" :: ", "::")
        .replace(":: ", "::")
        .replace(" . ", ".");
    match s.strip_prefix("- ") {
        Some(rest) => format!("-{rest}"),
        None => s,
    }
}

/// `bf16`, `f16` or `f32`.
fn parse_dtype(e: &Expr, what: &str, errors: &mut Errors) -> Option<Dtype> {
    let (name, quoted) = match e {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => (Some(s.value()), true),
        _ => (ident_of(e), false),
    };
    match (name.as_deref(), quoted) {
        (Some("f32"), false) => Some(Dtype::F32),
        (Some("bf16"), false) => Some(Dtype::Bf16),
        (Some("f16"), false) => Some(Dtype::F16),
        (Some(n), true) if DTYPES.contains(&n) => {
            errors.push(
                e.span(),
                format!("{what} is a bare name, not a string: write `{n}`"),
            );
            None
        }
        (other, _) => {
            let hint = other
                .and_then(|o| {
                    let lower = o.to_lowercase();
                    DTYPE_ALIASES
                        .iter()
                        .find(|(a, _)| *a == lower)
                        .map(|(_, d)| *d)
                        .or_else(|| suggest(o, DTYPES))
                })
                .map(|s| format!("; did you mean `{s}`?"))
                .unwrap_or_default();
            errors.push(
                e.span(),
                format!(
                    "unknown {what} `{}`: expected `bf16`, `f16` or `f32`{hint}",
                    text(e)
                ),
            );
            None
        }
    }
}

/// A float or integer literal, possibly negated, as f64.
fn number_lit(e: &Expr) -> Option<f64> {
    match e {
        Expr::Lit(ExprLit {
            lit: Lit::Float(f), ..
        }) => f.base10_parse().ok(),
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i.base10_parse::<u64>().ok().map(|v| v as f64),
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => number_lit(&u.expr).map(|v| -v),
        Expr::Paren(p) => number_lit(&p.expr),
        _ => None,
    }
}

/// The one argument of `stage(name = <literal>)` (or `stage(<literal>)`), a positive float that
/// stays positive and finite in f32 and exceeds `min`.
fn float_arg(
    name: &str,
    stage: &str,
    example: &str,
    min: f64,
    args: &[Expr],
    stage_span: Span,
    errors: &mut Errors,
) -> Option<f64> {
    let usage = format!("`{stage}({name} = {example})`");
    let Some(first) = args.first() else {
        errors.push(stage_span, format!("`{stage}` needs its `{name}`: {usage}"));
        return None;
    };
    for extra in &args[1..] {
        errors.push(
            extra.span(),
            format!("`{stage}` takes one argument, `{name}`; remove this one ({usage})"),
        );
    }
    let value = match first {
        Expr::Assign(a) => {
            let key = ident_of(&a.left);
            if key.as_deref() != Some(name) {
                let hint = if key.as_deref().and_then(|k| suggest(k, &[name])).is_some()
                    || matches!(key.as_deref(), Some("epsilon" | "base" | "rope_theta"))
                {
                    format!("; did you mean `{name}`?")
                } else {
                    String::new()
                };
                errors.push(
                    a.left.span(),
                    format!(
                        "`{stage}` has one argument, `{name}`, not `{}`{hint}",
                        text(&a.left)
                    ),
                );
                return None;
            }
            &*a.right
        }
        e => e,
    };
    let Some(v) = number_lit(value) else {
        let why = if matches!(value, Expr::Path(_)) {
            " (the macro bakes it into the kernel and cannot see constants)"
        } else {
            ""
        };
        errors.push(
            value.span(),
            format!(
                "`{name}` must be a positive float literal{why}, e.g. {usage}; got `{}`",
                text(value)
            ),
        );
        return None;
    };
    let as_f32 = v as f32;
    // NaN cannot come from a literal; `<=` also rejects it.
    if v <= min || v.is_nan() {
        let bound = if min == 0.0 {
            "positive".to_string()
        } else {
            format!("greater than {min}")
        };
        errors.push(
            value.span(),
            format!(
                "`{name}` must be {bound}, e.g. {usage}; got `{}`",
                text(value)
            ),
        );
        None
    } else if !as_f32.is_finite() || as_f32 <= min as f32 {
        errors.push(
            value.span(),
            format!(
                "`{name} = {}` is not representable in f32, in which the epilogue computes: it would become {as_f32}",
                text(value)
            ),
        );
        None
    } else {
        Some(v)
    }
}

/// For stages that take no arguments: points at the argument list.
fn no_args(stage: &str, call: Option<&syn::ExprCall>, errors: &mut Errors) {
    if let Some(c) = call {
        let span = if c.args.is_empty() {
            c.paren_token.span.join()
        } else {
            c.args.span()
        };
        errors.push(
            span,
            format!("`{stage}` takes no arguments; write `{stage}`"),
        );
    }
}

/// `row` or `col`, for `bias(...)` and `scale(...)`.
fn axis_of(e: &Expr) -> Option<Axis> {
    match ident_of(e).as_deref() {
        Some("row") => Some(Axis::Row),
        Some("col") => Some(Axis::Col),
        _ => None,
    }
}

fn bias_axis(call: &syn::ExprCall, errors: &mut Errors) -> Option<Axis> {
    let usage = "`bias` (one value per output column, length N) or `bias(row)` (one value per row, length M)";
    let args: Vec<&Expr> = call.args.iter().collect();
    let Some(first) = args.first() else {
        errors.push(
            call.paren_token.span.join(),
            format!("empty argument list; write {usage}"),
        );
        return None;
    };
    for extra in &args[1..] {
        errors.push(
            extra.span(),
            format!("`bias` takes at most one argument; write {usage}"),
        );
    }
    match axis_of(first) {
        Some(a) => Some(a),
        None => {
            let msg = match ident_of(first).and_then(|i| suggest(&i, &["row", "col"])) {
                Some(s) => format!(
                    "unknown bias axis `{}`; did you mean `bias({s})`? Write {usage}",
                    text(*first)
                ),
                None => format!("unknown bias axis `{}`; write {usage}", text(*first)),
            };
            errors.push(first.span(), msg);
            None
        }
    }
}

fn scale_arg(
    call: Option<&syn::ExprCall>,
    stage_span: Span,
    errors: &mut Errors,
) -> Option<ScaleArg> {
    let usage = "`scale(alpha)` (a launch-time f32 named `alpha`), `scale(0.125)` (a constant), `scale(row)` (an f32 vector of length M) or `scale(col)` (of length N)";
    let Some(call) = call else {
        errors.push(stage_span, format!("`scale` needs its factor: {usage}"));
        return None;
    };
    let args: Vec<&Expr> = call.args.iter().collect();
    let Some(first) = args.first() else {
        errors.push(
            call.paren_token.span.join(),
            format!("`scale` needs its factor: {usage}"),
        );
        return None;
    };
    for extra in &args[1..] {
        errors.push(
            extra.span(),
            format!("`scale` takes one argument; remove this one. Use one of {usage}"),
        );
    }
    if let Some(axis) = axis_of(first) {
        return Some(ScaleArg::Vector(axis));
    }
    if let Expr::Path(p) = first
        && let Some(id) = p.path.get_ident()
    {
        let s = id.to_string();
        if matches!(s.as_str(), "self" | "Self" | "super" | "crate") {
            errors.push(
                id.span(),
                format!("`{s}` cannot name a launcher parameter; use one of {usage}"),
            );
            return None;
        }
        return Some(ScaleArg::Param(id.clone()));
    }
    match number_lit(first) {
        Some(v) if (v as f32).is_finite() => Some(ScaleArg::Const(v)),
        Some(v) => {
            errors.push(first.span(), format!("`scale({v})` is not a finite f32"));
            None
        }
        None => {
            let hint = match first {
                Expr::Assign(a) => format!(
                    "; for a launch-time scalar write `scale({})`, for a constant `scale({})`",
                    text(&a.left),
                    text(&a.right)
                ),
                _ => String::new(),
            };
            errors.push(
                first.span(),
                format!("`scale` takes a parameter name, a float literal, `row` or `col`, not `{}`{hint}", text(*first)),
            );
            None
        }
    }
}

fn cast_dtype(
    call: Option<&syn::ExprCall>,
    stage_span: Span,
    errors: &mut Errors,
) -> Option<Dtype> {
    let usage = "`cast(bf16)`, `cast(f16)` or `cast(f32)`";
    let Some(call) = call else {
        errors.push(stage_span, format!("`cast` needs a dtype: {usage}"));
        return None;
    };
    let args: Vec<&Expr> = call.args.iter().collect();
    let Some(first) = args.first() else {
        errors.push(
            call.paren_token.span.join(),
            format!("`cast` needs a dtype: {usage}"),
        );
        return None;
    };
    for extra in &args[1..] {
        errors.push(
            extra.span(),
            format!("`cast` takes one dtype; remove this one ({usage})"),
        );
    }
    parse_dtype(first, "cast dtype", errors)
}

/// A user stage is written as a path that is not one of our names: say how, and why a near miss
/// of a built-in name is not taken as one.
fn unknown_stage(name: &str, ident: &syn::Ident, has_args: bool, errors: &mut Errors) -> bool {
    if let Some((_, ours, why)) = STAGE_ALIASES.iter().find(|(a, _, _)| *a == name) {
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(" ({why})")
        };
        errors.push(
            ident.span(),
            format!("unknown epilogue stage `{name}`; did you mean `{ours}`?{why}"),
        );
        return true;
    }
    if let Some(s) = suggest(name, STAGE_NAMES) {
        errors.push(
            ident.span(),
            format!(
                "unknown epilogue stage `{name}`; did you mean `{s}`? (a function of yours named `{name}` is written as a path: `self::{name}`)"
            ),
        );
        return true;
    }
    if has_args {
        errors.push(
            ident.span(),
            format!(
                "unknown epilogue stage `{name}`; stages are {}, or the path of a `fn(f32) -> f32` written without arguments",
                STAGE_NAMES.join(", ")
            ),
        );
        return true;
    }
    false
}

fn parse_stage(e: &Expr, errors: &mut Errors) -> Option<Stage> {
    let span = e.span();
    let (path, call): (&syn::Path, Option<&syn::ExprCall>) = match e {
        Expr::Path(p) if p.qself.is_none() => (&p.path, None),
        Expr::Call(c) => match &*c.func {
            Expr::Path(p) if p.qself.is_none() => (&p.path, Some(c)),
            f => {
                errors.push(f.span(), "expected a stage name before `(...)`");
                return None;
            }
        },
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => {
            errors.push(
                span,
                format!("stages are written without quotes: `{}`", s.value()),
            );
            return None;
        }
        _ => {
            errors.push(
                span,
                format!(
                    "expected a stage ({}) or the path of a `fn(f32) -> f32`, got `{}`",
                    STAGE_NAMES.join(", "),
                    text(e)
                ),
            );
            return None;
        }
    };
    let Some(ident) = path.get_ident() else {
        if let Some(c) = call {
            errors.push(
                c.paren_token.span.join(),
                format!(
                    "a user stage is the path of a `fn(f32) -> f32`, written without arguments: `{}`; for a parameterized function, write a wrapper `fn` with the values fixed",
                    text(path)
                ),
            );
            return None;
        }
        if let Some(seg) = path.segments.iter().find(|s| !s.arguments.is_none()) {
            errors.push(
                seg.arguments.span(),
                "a user stage is the path of a plain `fn(f32) -> f32`, without generic arguments",
            );
            return None;
        }
        return Some(Stage {
            kind: StageKind::User(path.clone()),
            span,
        });
    };
    let name = ident.to_string();
    let args: Vec<Expr> = call
        .map(|c| c.args.iter().cloned().collect())
        .unwrap_or_default();
    let kind = match name.as_str() {
        "scale" => StageKind::Scale(scale_arg(call, span, errors)?),
        "bias" => match call {
            None => StageKind::Bias(Axis::Col),
            Some(c) => StageKind::Bias(bias_axis(c, errors)?),
        },
        "relu" | "gelu" | "gelu_tanh" | "silu" | "sigmoid" | "residual" | "accumulate"
        | "swiglu" | "geglu" | "row_moments" => {
            no_args(&name, call, errors);
            match name.as_str() {
                "relu" => StageKind::Relu,
                "gelu" => StageKind::Gelu,
                "gelu_tanh" => StageKind::GeluTanh,
                "silu" => StageKind::Silu,
                "sigmoid" => StageKind::Sigmoid,
                "residual" => StageKind::Residual,
                "accumulate" => StageKind::Accumulate,
                "swiglu" => StageKind::SwiGlu,
                "row_moments" => StageKind::RowMoments,
                _ => StageKind::GeGlu,
            }
        }
        "layer_norm" | "rms_norm" => {
            let example = if name == "layer_norm" { "1e-5" } else { "1e-6" };
            let eps = float_arg("eps", &name, example, 0.0, &args, span, errors)?;
            if name == "layer_norm" {
                StageKind::LayerNorm { eps }
            } else {
                StageKind::RmsNorm { eps }
            }
        }
        "folded_layer_norm" => StageKind::FoldedLayerNorm {
            eps: float_arg("eps", &name, "1e-12", 0.0, &args, span, errors)?,
        },
        "normed_residual" => StageKind::NormedResidual {
            eps: float_arg("eps", &name, "1e-12", 0.0, &args, span, errors)?,
        },
        "rope" => StageKind::Rope {
            theta: float_arg("theta", "rope", "10000.0", 1.0, &args, span, errors)?,
        },
        "cast" => StageKind::Cast(cast_dtype(call, span, errors)?),
        _ => {
            if unknown_stage(&name, ident, call.is_some(), errors) {
                return None;
            }
            StageKind::User(path.clone())
        }
    };
    Some(Stage { kind, span })
}

/// `name` where `name = value` was meant: suggest the option it belongs to.
fn bare_word_hint(word: &str) -> String {
    if DTYPES.contains(&word) {
        format!("; did you mean `dtype = {word}` (inputs) or `out = {word}` (output)?")
    } else if word == "row" || word == "col" {
        format!("; did you mean `b_layout = {word}`?")
    } else if word == "sm_80" || word == "sm_90" {
        format!("; did you mean `arch = {word}`?")
    } else if STAGE_NAMES.contains(&word) {
        format!("; stages go in the list: `epilogue = [{word}]`")
    } else if OPTION_NAMES.contains(&word) {
        format!("; `{word}` needs a value: `{word} = ...`")
    } else {
        String::new()
    }
}

fn parse_arch(v: &Expr, errors: &mut Errors) -> Option<Targets> {
    match ident_of(v).as_deref() {
        Some("sm_80") => Some(Targets::Sm80),
        Some("sm_90") => Some(Targets::Sm90),
        Some(a @ ("sm_86" | "sm_87" | "sm_89")) => {
            errors.push(
                v.span(),
                format!("`arch = {a}` is not a separate target: sm_80 code runs on {a} too; leave `arch` out (every GPU) or write `arch = sm_80`"),
            );
            None
        }
        Some("sm_90a") => {
            errors.push(
                v.span(),
                "`arch = sm_90a` is not an option: without `arch` a kernel already gets TMA + wgmma variants in the sm_90a module (bf16/f16 inputs, B stored N×K, no `tile`); `arch = sm_90` restricts it to Hopper",
            );
            None
        }
        Some(a @ ("sm80" | "sm90")) => {
            errors.push(
                v.span(),
                format!("unknown arch `{a}`; did you mean `sm_{}`?", &a[2..]),
            );
            None
        }
        _ => {
            errors.push(
                v.span(),
                format!(
                    "unsupported arch `{}`: leave `arch` out for every GPU, or write `sm_80` (the mma.sync mainloop only) or `sm_90` (Hopper only)",
                    text(v)
                ),
            );
            None
        }
    }
}

fn parse_tile(v: &Expr, errors: &mut Errors) -> Option<(u32, u32, u32)> {
    let usage = "`tile = (BM, BN, BK)`, e.g. `tile = (128, 128, 32)`";
    let elems: Vec<&Expr> = match v {
        Expr::Tuple(t) => t.elems.iter().collect(),
        Expr::Array(_) => {
            errors.push(
                v.span(),
                format!("a tile is a tuple, not an array: {usage}"),
            );
            return None;
        }
        _ => {
            errors.push(v.span(), format!("expected {usage}"));
            return None;
        }
    };
    if elems.len() != 3 {
        errors.push(
            v.span(),
            format!(
                "a tile has three sizes (BM, BN, BK), got {}: {usage}",
                elems.len()
            ),
        );
        return None;
    }
    let mut vals = Vec::new();
    for (e, what) in elems.iter().zip(["BM", "BN", "BK"]) {
        match e {
            Expr::Lit(ExprLit {
                lit: Lit::Int(i), ..
            }) => match i.base10_parse::<u32>() {
                Ok(0) => errors.push(e.span(), format!("{what} must be positive")),
                Ok(v) => vals.push(v),
                Err(_) => errors.push(e.span(), format!("{what} is too large")),
            },
            _ => errors.push(
                e.span(),
                format!("{what} must be an integer literal: {usage}"),
            ),
        }
    }
    (vals.len() == 3).then(|| (vals[0], vals[1], vals[2]))
}

/// Parses the attribute arguments. Returns `None` when the attribute cannot be understood as a
/// whole (not `name = value, ...`, or no `epilogue`); otherwise what could be parsed, with the
/// stages and options that had errors left out, so later checks still run.
pub fn parse_attr(tokens: proc_macro2::TokenStream, errors: &mut Errors) -> Option<KernelAttr> {
    if tokens.is_empty() {
        errors.push(
            Span::call_site(),
            "#[fused_gemm] needs its epilogue: `#[fused_gemm(epilogue = [bias, gelu])]` (or `epilogue = []` for a plain GEMM)",
        );
        return None;
    }
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
    let mut arch = Targets::All;
    let mut tile = None;
    for meta in &args {
        let nv = match meta {
            Meta::NameValue(nv) => nv,
            Meta::Path(p) => {
                let word = p.get_ident().map(|i| i.to_string()).unwrap_or_default();
                errors.push(
                    p.span(),
                    format!(
                        "expected `option = value` (options: {}){}",
                        OPTION_NAMES.join(", "),
                        bare_word_hint(&word)
                    ),
                );
                continue;
            }
            Meta::List(l) => {
                let name = text(&l.path);
                if name == "epilogue" {
                    stages.get_or_insert_with(Vec::new);
                }
                let (open, close) = if name == "epilogue" {
                    ("[", "]")
                } else {
                    ("(", ")")
                };
                errors.push(
                    l.span(),
                    format!(
                        "options are written `name = value`: `{name} = {open}{}{close}`",
                        l.tokens
                    ),
                );
                continue;
            }
        };
        let key = nv
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_else(|| text(&nv.path));
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            let mut e = syn::Error::new(
                nv.path.span(),
                format!("option `{key}` is given twice; keep one"),
            );
            e.combine(syn::Error::new(*first, format!("`{key}` first given here")));
            errors.push_err(e);
            continue;
        }
        seen.push((key.clone(), nv.path.span()));
        match key.as_str() {
            "epilogue" => match &nv.value {
                Expr::Array(arr) => {
                    stages = Some(
                        arr.elems
                            .iter()
                            .filter_map(|e| parse_stage(e, errors))
                            .collect::<Vec<_>>(),
                    );
                }
                v => {
                    errors.push(
                        v.span(),
                        format!(
                            "`epilogue` takes a list of stages in brackets: `epilogue = [{}]`",
                            text(v)
                        ),
                    );
                    // Understood well enough to keep checking the rest.
                    stages = Some(Vec::new());
                }
            },
            "dtype" => dtype = parse_dtype(&nv.value, "dtype", errors),
            "out" => {
                out = parse_dtype(&nv.value, "output dtype", errors).map(|d| (d, nv.value.span()))
            }
            "b_layout" => match ident_of(&nv.value).as_deref() {
                Some("row") => b_layout = BLayout::Row,
                Some("col") => b_layout = BLayout::Col,
                other => {
                    let hint = match other {
                        Some("nk" | "n_k" | "transposed" | "t") => "; did you mean `col` (N×K)?",
                        Some("kn" | "k_n" | "normal" | "n") => "; did you mean `row` (K×N)?",
                        _ => "",
                    };
                    errors.push(
                        nv.value.span(),
                        format!(
                            "`b_layout` is `col` (B stored N×K, as PyTorch `Linear` weights; the default) or `row` (B stored K×N), not `{}`{hint}",
                            text(&nv.value)
                        ),
                    )
                }
            },
            "arch" => {
                if let Some(a) = parse_arch(&nv.value, errors) {
                    arch = a;
                }
            }
            "tile" => {
                tile = parse_tile(&nv.value, errors).map(|t| (t, nv.value.span()));
            }
            other => {
                let hint = OPTION_ALIASES
                    .iter()
                    .find(|(a, _)| *a == other)
                    .map(|(_, o)| *o)
                    .or_else(|| suggest(other, OPTION_NAMES));
                let options = OPTION_NAMES.join(", ");
                let msg = match hint {
                    Some(s) => format!(
                        "unknown option `{other}`; did you mean `{s}`? Options are {options}"
                    ),
                    None => format!("unknown option `{other}`; options are {options}"),
                };
                errors.push(nv.path.span(), msg);
            }
        }
    }
    let Some(stages) = stages else {
        errors.push(
            Span::call_site(),
            "missing `epilogue = [...]`: the stages applied after the GEMM, e.g. `epilogue = [bias, gelu]` (`epilogue = []` for a plain GEMM)",
        );
        return None;
    };
    let dtype = dtype.unwrap_or(Dtype::Bf16);
    Some(KernelAttr {
        stages,
        dtype,
        out,
        b_layout,
        arch,
        tile,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_typos_but_not_unrelated_names() {
        assert_eq!(suggest("bais", STAGE_NAMES), Some("bias"));
        assert_eq!(suggest("gelu_tahn", STAGE_NAMES), Some("gelu_tanh"));
        assert_eq!(suggest("layer_nrom", STAGE_NAMES), Some("layer_norm"));
        assert_eq!(suggest("Relu", STAGE_NAMES), Some("relu"));
        assert_eq!(suggest("ln", STAGE_NAMES), None);
        assert_eq!(suggest("mish", STAGE_NAMES), None);
        assert_eq!(suggest("square", STAGE_NAMES), None);
        assert_eq!(suggest("dtyp", OPTION_NAMES), Some("dtype"));
    }

    #[test]
    fn distance_counts_a_transposition_as_one_edit() {
        assert_eq!(distance("bais", "bias"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
