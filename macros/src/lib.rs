//! `#[fused_gemm(epilogue = [...])]`: declares a fused GEMM kernel.
//!
//! Pipeline (one function each): [`parse`] the attribute into the typed [`ast`], [`validate`] it
//! and the annotated item (every error reported, each at its token), then [`expand`] into device
//! entry points (under `cfg(target_arch = "nvptx64")`) and a host spec + typed launcher.

use proc_macro::TokenStream;

mod ast;
mod errors;
mod expand;
mod parse;
mod validate;

/// Declares a fused GEMM-plus-epilogue kernel: `C = epilogue(A·B)`.
///
/// ```ignore
/// #[fused_gemm(epilogue = [bias, gelu], dtype = bf16, b_layout = col)]
/// pub fn bert_ffn_up() {}
/// ```
///
/// The annotated item must be `pub fn name() {}`. It expands to one `extern "ptx-kernel"` entry
/// point per compiled tile variant (in the nvptx64 build of the kernel crate), a
/// `GemmKernelSpec` static named `NAME`, and a host launcher `name(gpu, a, b, c, <stage operands>)`
/// whose extra parameters follow from the stages, in order: `scale(alpha)` → `alpha: f32`;
/// `scale(row)`/`scale(col)` → f32 vectors; `bias`/`bias(row)` → vectors; `residual` → an M×N
/// matrix; `layer_norm(eps)` → `gamma`, `beta`; `rms_norm(eps)` → `gamma`; `rope(theta)` →
/// `RopeArgs`. Stages apply in the order written.
///
/// Options: `dtype = bf16 | f16` (A and B), `out = bf16 | f16 | f32` (C and epilogue operands;
/// default `dtype`), `b_layout = col | row` (B stored N×K, the default, or K×N),
/// `arch = sm_80 | sm_90`, `tile = (BM, BN, BK)`.
///
/// The kernel crate must define `__FUSED_GEMM_PTX` at its root (`fused_gemm::include_ptx!()`).
#[proc_macro_attribute]
pub fn fused_gemm(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr: proc_macro2::TokenStream = attr.into();
    let item2: proc_macro2::TokenStream = item.into();
    let mut errors = errors::Errors::default();
    let func = match syn::parse2::<syn::ItemFn>(item2.clone()) {
        Ok(f) => Some(f),
        Err(_) => {
            errors.push(
                proc_macro2::Span::call_site(),
                "#[fused_gemm] applies to a function: `pub fn name() {}`",
            );
            None
        }
    };
    let parsed = parse::parse_attr(attr, &mut errors);
    if let Some(f) = &func {
        validate::check_item(f, &mut errors);
    }
    if let Some(a) = &parsed {
        validate::check_attr(a, &mut errors);
    }
    match (func, parsed) {
        (Some(f), Some(a)) if errors.is_empty() => expand::expand(&f, &a).into(),
        _ => {
            let mut out = errors.into_compile_errors();
            out.extend(expand::fallback(&item2));
            out.into()
        }
    }
}
