//! `#[fused_gemm(epilogue = [...])]`: declares a fused GEMM kernel.
//!
//! Pipeline (one private module each): `parse` the attribute into the typed `ast`, `validate` it
//! and the annotated item (every error reported, each at its token), then `expand` into device
//! entry points (under `cfg(target_arch = "nvptx64")`) and a host spec + typed launcher. On any
//! error the user's item is emitted unchanged beside the `compile_error!`s.
//!
//! The user guide, with an example expansion, is `docs/macro.md` in the repository; the
//! diagnostics are tested by the trybuild suite under `macros/tests/ui/`.

use proc_macro::TokenStream;
use syn::spanned::Spanned;

mod ast;
mod errors;
mod expand;
#[cfg(test)]
mod fuzz;
mod parse;
mod validate;

/// Declares a fused GEMM-plus-epilogue kernel: `C = epilogue(A·B)`.
///
/// ```ignore
/// #[fused_gemm(epilogue = [bias, residual, layer_norm(eps = 1e-12)], dtype = bf16)]
/// pub fn attn_out_proj() {}
/// ```
///
/// The annotated item must be `pub fn name() {}` (doc comments and `#[cfg]` allowed). It expands
/// to one `extern "ptx-kernel"` entry point per compiled tile variant (in the nvptx64 build of the
/// kernel crate), a `GemmKernelSpec` static named `NAME`, and a host launcher
/// `name(gpu, a, b, c, <stage operands>)` that validates every operand and launches.
///
/// # Stages
/// Applied in the order written, on the f32 accumulator tile before the store:
///
/// | stage | computes | launcher parameter |
/// |---|---|---|
/// | `scale(alpha)` / `scale(0.5)` | alpha·x | `alpha: f32` / none |
/// | `scale(row)` / `scale(col)` | x·s\[r\] / x·s\[c\] | `row_scale` (f32, length M) / `col_scale` (f32, length N) |
/// | `bias` / `bias(row)` | x + b\[c\] / x + b\[r\] | `bias` (length N) / `row_bias` (length M) |
/// | `relu`, `gelu` (erf), `gelu_tanh`, `silu`, `sigmoid` | element-wise | none |
/// | `residual` | x + R\[r, c\] | `residual` (M×N) |
/// | `accumulate` (last) | C + x | none (reads C) |
/// | `layer_norm(eps = 1e-5)` | (x − μ)/√(σ² + ε)·γ + β over each row | `gamma`, `beta` (length N) |
/// | `rms_norm(eps = 1e-6)` | x/√(mean x² + ε)·γ over each row | `gamma` (length N) |
/// | `swiglu` / `geglu` | silu(g)·u / gelu(g)·u on interleaved columns; width N/2 | none |
/// | `rope(theta = 10000.0)` | rotation of interleaved column pairs by row position | `rope: RopeArgs` |
/// | `cast(f16)` | rounds to f16/bf16 precision | none |
/// | `path::to::f` | `f(x)` for a `fn(f32) -> f32` | none |
///
/// Vectors and matrices have the output dtype unless noted; after `swiglu`/`geglu`, N means N/2.
///
/// # Options
/// `dtype = bf16 | f16 | f32` (A and B; default bf16; f32 runs on the CUDA cores),
/// `out = bf16 | f16 | f32` (C and the epilogue's operands; default `dtype`),
/// `b_layout = col | row` (B stored N×K, the default, or K×N), `arch = sm_80 | sm_90` (default
/// sm_80, whose kernels run on sm_80 and later; sm_90 kernels run on Hopper only and add TMA +
/// `wgmma` variants, in the sm_90a PTX module, for bf16/f16 inputs with B stored N×K and no
/// `tile`), `tile = (BM, BN, BK)` (compile only this tile of the `mma.sync` or CUDA-core
/// mainloop, multiples of 16, fitting the arch's shared memory and registers).
///
/// The kernel crate must define `__FUSED_GEMM_PTX` at its root (`fused_gemm::include_ptx!`).
#[proc_macro_attribute]
pub fn fused_gemm(attr: TokenStream, item: TokenStream) -> TokenStream {
    match process(attr.into(), item.into()) {
        Outcome::Expanded(out) => out.into(),
        Outcome::Rejected { errors, fallback } => {
            let mut out = errors.map(|e| e.to_compile_error()).unwrap_or_default();
            out.extend(fallback);
            out.into()
        }
    }
}

/// What the attribute makes of its input.
enum Outcome {
    /// The kernel's entry points, spec and launcher.
    Expanded(proc_macro2::TokenStream),
    /// Every error found (`None` when the item is not valid Rust, which rustc reports itself),
    /// and the user's item to emit beside them.
    Rejected {
        errors: Option<syn::Error>,
        fallback: proc_macro2::TokenStream,
    },
}

/// The whole pipeline on `proc_macro2` tokens (so that tests can drive it outside a compiler).
fn process(attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> Outcome {
    let mut errors = errors::Errors::default();
    let func = match syn::parse2::<syn::Item>(item.clone()) {
        Ok(syn::Item::Fn(f)) => Some(f),
        Ok(other) => {
            errors.push(
                item_kind_span(&other),
                format!(
                    "#[fused_gemm] applies to a function, `pub fn name() {{}}`, not to {}",
                    item_kind(&other)
                ),
            );
            None
        }
        // Not an item rustc would accept either: its own error will say why.
        Err(_) => None,
    };
    let parsed = parse::parse_attr(attr, &mut errors);
    if let Some(f) = &func {
        validate::check_item(f, &mut errors);
    }
    if let Some(a) = &parsed {
        validate::check_attr(a, &mut errors);
    }
    match (func, parsed) {
        (Some(f), Some(a)) if errors.is_empty() => Outcome::Expanded(expand::expand(&f, &a)),
        _ => Outcome::Rejected {
            errors: errors.into_error(),
            fallback: expand::fallback(&item),
        },
    }
}

fn item_kind(item: &syn::Item) -> &'static str {
    match item {
        syn::Item::Struct(_) => "a struct",
        syn::Item::Enum(_) => "an enum",
        syn::Item::Union(_) => "a union",
        syn::Item::Const(_) => "a const",
        syn::Item::Static(_) => "a static",
        syn::Item::Mod(_) => "a module",
        syn::Item::Impl(_) => "an impl block (annotate a free function instead)",
        syn::Item::Trait(_) => "a trait",
        syn::Item::Type(_) => "a type alias",
        syn::Item::Use(_) => "a `use`",
        syn::Item::ForeignMod(_) => "an extern block",
        syn::Item::Macro(_) => "a macro invocation",
        _ => "this item",
    }
}

/// The item's keyword (`struct`, `enum`, ...), where the error reads best.
fn item_kind_span(item: &syn::Item) -> proc_macro2::Span {
    match item {
        syn::Item::Struct(i) => i.struct_token.span(),
        syn::Item::Enum(i) => i.enum_token.span(),
        syn::Item::Union(i) => i.union_token.span(),
        syn::Item::Const(i) => i.const_token.span(),
        syn::Item::Static(i) => i.static_token.span(),
        syn::Item::Mod(i) => i.mod_token.span(),
        syn::Item::Impl(i) => i.impl_token.span(),
        syn::Item::Trait(i) => i.trait_token.span(),
        syn::Item::Type(i) => i.type_token.span(),
        syn::Item::Use(i) => i.use_token.span(),
        other => other.span(),
    }
}
