//! Checks that need the whole attribute or the annotated item.

use fused_gemm_device::gemm::TileShape;
use syn::spanned::Spanned;

use crate::ast::*;
use crate::errors::Errors;

/// Largest dynamic shared memory per CTA on the supported archs (sm_80: 163 KB, sm_90: 227 KB).
fn smem_limit(arch: Arch) -> u32 {
    match arch {
        Arch::Sm80 => 163 * 1024,
        Arch::Sm90 => 227 * 1024,
    }
}

/// The annotated item must be `pub fn name() {}`.
pub fn check_item(item: &syn::ItemFn, errors: &mut Errors) {
    let sig = &item.sig;
    if !matches!(item.vis, syn::Visibility::Public(_)) {
        errors.push(sig.fn_token.span(), "a #[fused_gemm] kernel must be `pub`: it defines an exported entry point and a public launcher");
    }
    if let Some(a) = &sig.asyncness {
        errors.push(a.span(), "a #[fused_gemm] kernel cannot be `async`");
    }
    if let Some(c) = &sig.constness {
        errors.push(c.span(), "a #[fused_gemm] kernel cannot be `const`");
    }
    if let Some(u) = &sig.unsafety {
        errors.push(
            u.span(),
            "a #[fused_gemm] kernel is declared without `unsafe`; the generated launcher is safe",
        );
    }
    if let Some(abi) = &sig.abi {
        errors.push(
            abi.span(),
            "a #[fused_gemm] kernel takes no ABI; the macro emits the `ptx-kernel` entry point",
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(
            sig.generics.span(),
            "a #[fused_gemm] kernel cannot be generic: write one kernel per dtype and stage list",
        );
    }
    if let Some(first) = sig.inputs.first() {
        let msg = if matches!(first, syn::FnArg::Receiver(_)) {
            "a #[fused_gemm] kernel is a free function, not a method (no `self`)"
        } else {
            "a #[fused_gemm] kernel declares no parameters: the launcher's parameters follow from the stage list"
        };
        errors.push(sig.inputs.span(), msg);
    }
    if let syn::ReturnType::Type(_, t) = &sig.output {
        errors.push(t.span(), "a #[fused_gemm] kernel has no return type");
    }
    if !item.block.stmts.is_empty() {
        errors.push(
            item.block.span(),
            "a #[fused_gemm] kernel has an empty body `{}`: the macro generates the body",
        );
    }
}

/// Checks the stage list composes and the options are supported together.
pub fn check_attr(attr: &KernelAttr, errors: &mut Errors) {
    let mut norm: Option<&Stage> = None;
    let mut pair: Option<&Stage> = None;
    let last = attr.stages.len().saturating_sub(1);
    for (i, s) in attr.stages.iter().enumerate() {
        if s.is_norm() {
            if let Some(first) = norm {
                let mut e = syn::Error::new(
                    s.span,
                    format!(
                        "a kernel has at most one row norm; `{}` follows `{}`",
                        s.name(),
                        first.name()
                    ),
                );
                e.combine(syn::Error::new(first.span, "first norm here"));
                errors.push_err(e);
            }
            if let Some(p) = pair {
                errors.push(s.span, format!("`{}` after `{}`: the norm would see half-width rows; normalize before the pairwise stage", s.name(), p.name()));
            }
            norm = Some(s);
        }
        if s.is_pairwise_reducing() {
            if let Some(n) = norm {
                errors.push(s.span, format!("`{}` after `{}`: a row norm needs the full width of its row before pairs are reduced; put `{}` first", s.name(), n.name(), s.name()));
            }
            if let Some(p) = pair {
                errors.push(
                    s.span,
                    format!(
                        "`{}` after `{}`: the output is already halved",
                        s.name(),
                        p.name()
                    ),
                );
            }
            pair = Some(s);
        }
        if matches!(s.kind, StageKind::Rope { .. }) && pair.is_some() {
            errors.push(s.span, "`rope` after a pairwise `swiglu`/`geglu`: there are no column pairs left to rotate");
        }
        if matches!(s.kind, StageKind::Accumulate) {
            if i != last {
                errors.push(
                    s.span,
                    "`accumulate` must be the last stage (it adds the result to C as it is stored)",
                );
            }
            if let Some(n) = norm {
                errors.push(s.span, format!("`accumulate` after `{}`: when the norm is finished by its second kernel, C holds pre-norm values", n.name()));
            }
        }
    }
    if let Some(((bm, bn, bk), span)) = attr.tile {
        let (main, rows) = crate::expand::tile_lists(attr.dtype);
        let all: Vec<&TileShape> = main.iter().chain(rows).collect();
        let t = all.iter().find(|t| (t.bm, t.bn, t.bk) == (bm, bn, bk));
        match t {
            None => {
                let reason = if bm % 16 != 0 || bn % 16 != 0 || bk % 16 != 0 {
                    "BM, BN and BK must be multiples of 16 (the m16n8k16 MMA shape; ldmatrix.x4 loads 16 columns of B)".to_string()
                } else {
                    let acc = bm as u64 * bn as u64;
                    if acc / 256 > 128 {
                        format!(
                            "a {bm}×{bn} tile needs {} f32 accumulators per thread with 8 warps: registers would spill",
                            acc / 256
                        )
                    } else {
                        "it is not one of the instantiated tile shapes".to_string()
                    }
                };
                let list: Vec<String> = all
                    .iter()
                    .map(|t| format!("({}, {}, {})", t.bm, t.bn, t.bk))
                    .collect();
                errors.push(
                    span,
                    format!(
                        "tile ({bm}, {bn}, {bk}) is not available: {reason}; available tiles: {}",
                        list.join(", ")
                    ),
                );
            }
            Some(t) => {
                let b_col = attr.b_layout == BLayout::Col;
                if t.smem_bytes(b_col) > smem_limit(attr.arch) {
                    errors.push(span, format!("tile ({bm}, {bn}, {bk}) needs {} bytes of shared memory; {:?} allows {}", t.smem_bytes(b_col), attr.arch, smem_limit(attr.arch)));
                }
            }
        }
    }
}
