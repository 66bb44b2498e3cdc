//! Checks that need the whole attribute or the annotated item: the item's form, how the stages
//! compose on the device, the launcher's parameter names, dtypes and the tile.

use fused_gemm_device::gemm::{ROW_TILES_F32, ROW_TILES_SM80, TILES_F32, TILES_SM80, TileShape};
use proc_macro2::Span;
use syn::spanned::Spanned;

use crate::ast::*;
use crate::errors::Errors;

const ITEM_FORM: &str = "write `pub fn name() {}`";

/// The annotated item must be `pub fn name() {}`, with only doc comments and `#[cfg]`s on it.
pub fn check_item(item: &syn::ItemFn, errors: &mut Errors) {
    let sig = &item.sig;
    for attr in &item.attrs {
        let path = attr.path();
        if !(path.is_ident("doc") || path.is_ident("cfg")) {
            errors.push(
                attr.span(),
                format!(
                    "`#[{}]` is not kept on a #[fused_gemm] kernel: only doc comments (they start the launcher's docs) and `#[cfg(...)]` (applied to everything generated) are allowed",
                    quote::quote!(#path).to_string().replace(' ', "")
                ),
            );
        }
    }
    match &item.vis {
        syn::Visibility::Public(_) => {}
        syn::Visibility::Inherited => errors.push(
            sig.fn_token.span(),
            format!("a #[fused_gemm] kernel must be `pub`: it exports a device entry point and a public launcher; {ITEM_FORM}"),
        ),
        v @ syn::Visibility::Restricted(_) => errors.push(
            v.span(),
            format!("a #[fused_gemm] kernel must be plain `pub` (its entry point is exported from the PTX module whatever the visibility); {ITEM_FORM}"),
        ),
    }
    if let Some(c) = &sig.constness {
        errors.push(
            c.span(),
            "a #[fused_gemm] kernel cannot be `const`; remove it",
        );
    }
    if let Some(a) = &sig.asyncness {
        errors.push(
            a.span(),
            "a #[fused_gemm] kernel cannot be `async`: the launcher enqueues work on the GPU's stream and returns; remove `async`",
        );
    }
    if let Some(u) = &sig.unsafety {
        errors.push(
            u.span(),
            "a #[fused_gemm] kernel is declared without `unsafe`: the generated launcher validates every operand and is safe; remove `unsafe`",
        );
    }
    if let Some(abi) = &sig.abi {
        errors.push(
            abi.span(),
            "a #[fused_gemm] kernel takes no ABI: the macro emits the `extern \"ptx-kernel\"` entry points itself; remove it",
        );
    }
    if !sig.generics.params.is_empty() {
        errors.push(
            sig.generics.span(),
            "a #[fused_gemm] kernel cannot be generic: each kernel is compiled to PTX for one dtype and stage list; declare one kernel per combination",
        );
    }
    if let Some(w) = &sig.generics.where_clause {
        errors.push(
            w.span(),
            "a #[fused_gemm] kernel cannot have a `where` clause",
        );
    }
    if let Some(first) = sig.inputs.first() {
        if let syn::FnArg::Receiver(r) = first {
            errors.push(
                r.span(),
                "a #[fused_gemm] kernel is a free function, not a method: remove `self` and declare it outside the `impl` block",
            );
        }
        let typed: Vec<&syn::FnArg> = sig
            .inputs
            .iter()
            .filter(|a| matches!(a, syn::FnArg::Typed(_)))
            .collect();
        if let (Some(first), Some(last)) = (typed.first(), typed.last()) {
            let span = first.span().join(last.span()).unwrap_or(first.span());
            errors.push(
                span,
                "a #[fused_gemm] kernel declares no parameters: the launcher's parameters (`gpu, a, b, c` and one per stage operand) follow from the epilogue list; remove them",
            );
        }
    }
    if let Some(v) = &sig.variadic {
        errors.push(v.span(), "a #[fused_gemm] kernel is not variadic");
    }
    if let syn::ReturnType::Type(arrow, t) = &sig.output {
        let span = arrow.span().join(t.span()).unwrap_or(t.span());
        errors.push(
            span,
            "a #[fused_gemm] kernel has no return type: the launcher returns `fused_gemm::Result<LaunchReport>`; remove it",
        );
    }
    if !item.block.stmts.is_empty() {
        errors.push(
            item.block.span(),
            "a #[fused_gemm] kernel is declared with an empty body, `{}`: the macro generates the device code from the epilogue list; remove these statements",
        );
    }
    let name = sig.ident.to_string();
    if name.starts_with("r#") {
        errors.push(
            sig.ident.span(),
            "a #[fused_gemm] kernel cannot have a raw identifier as its name: it becomes part of PTX entry names",
        );
    } else if name.chars().any(|c| c.is_ascii_uppercase()) {
        errors.push(
            sig.ident.span(),
            format!(
                "a #[fused_gemm] kernel's name is snake_case (its spec is the name in upper case: `{}`); write `{}`",
                name.to_uppercase(),
                to_snake(&name)
            ),
        );
    }
}

fn to_snake(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Checks the stage list composes on the device, the launcher's parameter names are distinct,
/// and the dtypes and tile are supported together.
pub fn check_attr(attr: &KernelAttr, errors: &mut Errors) {
    check_stages(&attr.stages, errors);
    check_param_names(&attr.stages, errors);
    if let Some(((bm, bn, bk), span)) = attr.tile {
        let b_col = attr.b_layout == BLayout::Col;
        if let Err(msg) = resolve_tile((bm, bn, bk), attr.dtype, b_col, attr.arch) {
            errors.push(span, msg);
        }
        let moments = attr
            .stages
            .iter()
            .any(|s| matches!(s.kind, StageKind::RowMoments));
        if moments && bn % 64 != 0 {
            errors.push(
                span,
                format!(
                    "`row_moments` writes statistics per 64 columns, so each CTA tile must start on a group: BN = {bn} is not a multiple of 64"
                ),
            );
        }
    }
}

fn check_stages(stages: &[Stage], errors: &mut Errors) {
    let mut norm: Option<&Stage> = None;
    let mut pair: Option<&Stage> = None;
    let mut moments: Option<&Stage> = None;
    let last = stages.len().saturating_sub(1);
    for (i, s) in stages.iter().enumerate() {
        if s.is_norm() {
            if let Some(first) = norm {
                let mut e = syn::Error::new(
                    s.span,
                    format!(
                        "a kernel has at most one row norm; `{}` follows `{}`. Split the work into two kernels, or fold one norm into the next GEMM (`scale(row)`)",
                        s.name(),
                        first.name()
                    ),
                );
                e.combine(syn::Error::new(first.span, "the first norm is here"));
                errors.push_err(e);
            }
            if let Some(p) = pair {
                errors.push(
                    s.span,
                    format!(
                        "`{}` cannot follow `{}`: after a pair stage each thread holds one value per column pair, and the row statistics are taken over the full-width tile; normalize in the next kernel, or before `{}`",
                        s.name(),
                        p.name(),
                        p.name()
                    ),
                );
            }
            norm = Some(s);
        }
        if s.is_pairwise_reducing() {
            if let Some(n) = norm {
                errors.push(
                    s.span,
                    format!(
                        "`{}` cannot follow `{}`: when a row spans several CTA tiles the norm finishes in a second kernel that sees single columns, not the gate/up pairs `{}` needs; put `{}` before the norm",
                        s.name(),
                        n.name(),
                        s.name(),
                        s.name()
                    ),
                );
            }
            if let Some(p) = pair {
                let mut e = syn::Error::new(
                    s.span,
                    format!(
                        "at most one pair stage per kernel: `{}` follows `{}`, whose output already has N/2 columns with no pairs left in a thread",
                        s.name(),
                        p.name()
                    ),
                );
                e.combine(syn::Error::new(p.span, "the first pair stage is here"));
                errors.push_err(e);
            }
            pair = Some(s);
        }
        if matches!(s.kind, StageKind::Rope { .. })
            && let Some(p) = pair
        {
            errors.push(
                s.span,
                format!(
                    "`rope` cannot follow `{}`: `{}` reduced each column pair to one value, so there are no pairs left to rotate; put `rope` first",
                    p.name(),
                    p.name()
                ),
            );
        }
        if matches!(s.kind, StageKind::FoldedLayerNorm { .. }) && i != 0 {
            errors.push(
                s.span,
                "`folded_layer_norm` must be the first stage: it turns the raw product of the pre-norm A and the γ-scaled weights into the normalized layer's output, and its offset already holds the bias; move it to the front",
            );
        }
        if matches!(s.kind, StageKind::NormedResidual { .. })
            && let Some(p) = pair
        {
            errors.push(
                s.span,
                format!(
                    "`normed_residual` cannot follow `{}`: it normalizes full-width rows of its matrix, and `{}` halved the columns; put it before `{}`",
                    p.name(),
                    p.name(),
                    p.name()
                ),
            );
        }
        if matches!(s.kind, StageKind::RowMoments) {
            if let Some(first) = moments {
                let mut e = syn::Error::new(s.span, "a kernel writes row statistics at most once");
                e.combine(syn::Error::new(
                    first.span,
                    "the first `row_moments` is here",
                ));
                errors.push_err(e);
            }
            if let Some(p) = pair.or(norm) {
                errors.push(
                    s.span,
                    format!(
                        "`row_moments` cannot follow `{}`: its statistics are of the full-width values a CTA holds before any pair or norm stage; put it before `{}`",
                        p.name(),
                        p.name()
                    ),
                );
            } else if i != last {
                errors.push(
                    s.span,
                    "`row_moments` must be the last stage: its statistics describe the values stored in C; move it to the end",
                );
            }
            moments = Some(s);
        }
        if matches!(s.kind, StageKind::Accumulate) {
            if i != last {
                errors.push(
                    s.span,
                    "`accumulate` must be the last stage: it adds the result to what C holds as C is stored; move it to the end",
                );
            }
            if let Some(n) = norm {
                errors.push(
                    s.span,
                    format!(
                        "`accumulate` cannot follow `{}`: when the norm finishes in its second kernel, C already holds this GEMM's pre-norm values, not the old contents; add the old C with `residual` before the norm, or accumulate in a separate kernel",
                        n.name()
                    ),
                );
            }
        }
    }
}

/// The launcher's parameters must have distinct names: a `scale(name)` parameter must not reuse
/// `gpu`, `a`, `b`, `c`, an operand another stage adds, or another `scale`'s name.
fn check_param_names(stages: &[Stage], errors: &mut Errors) {
    let params = stage_params(stages);
    let generated: Vec<(&str, usize)> = params
        .iter()
        .enumerate()
        .flat_map(|(i, ps)| {
            ps.iter()
                .filter(|p| p.chosen.is_none())
                .map(move |p| (p.name.as_str(), i))
        })
        .collect();
    let mut chosen: Vec<(&str, Span)> = Vec::new();
    for ps in &params {
        for p in ps {
            let Some(span) = p.chosen else { continue };
            let name = p.name.as_str();
            let clash = if let Some((_, what)) = FIXED_PARAMS.iter().find(|(n, _)| *n == name) {
                Some(format!("`{name}` is {what}"))
            } else if let Some((_, i)) = generated.iter().find(|(n, _)| *n == name) {
                Some(format!(
                    "`{name}` is the launcher parameter of the `{}` stage",
                    stages[*i].name()
                ))
            } else if chosen.iter().any(|(n, _)| *n == name) {
                Some(format!(
                    "`{name}` is already another `scale` stage's parameter"
                ))
            } else {
                None
            };
            match clash {
                Some(why) => {
                    let taken = |n: &str| {
                        FIXED_PARAMS.iter().any(|(f, _)| *f == n)
                            || generated.iter().any(|(g, _)| *g == n)
                            || chosen.iter().any(|(c, _)| *c == n)
                            || n == name
                    };
                    let other = ["alpha", "beta", "gamma_scale"]
                        .into_iter()
                        .map(String::from)
                        .find(|n| !taken(n))
                        .unwrap_or_else(|| format!("{name}_2"));
                    errors.push(
                        span,
                        format!(
                            "`scale({name})` would add a launcher parameter named `{name}`, but {why}; choose another name, e.g. `scale({other})`"
                        ),
                    )
                }
                None => chosen.push((name, span)),
            }
        }
    }
}

/// The instantiated tiles of the mainloop that serves `dtype`: tensor cores (`mma.sync`) for
/// 16-bit inputs, CUDA cores (`simt`) for f32.
pub fn tile_lists(dtype: Dtype) -> (&'static [TileShape], &'static [TileShape]) {
    match dtype {
        Dtype::F32 => (TILES_F32, ROW_TILES_F32),
        _ => (TILES_SM80, ROW_TILES_SM80),
    }
}

/// Dynamic shared memory of `t` for `dtype` inputs, bytes, as the planner requests it at launch
/// (`TileShape::smem_bytes` counts 16-bit elements).
fn smem_bytes(t: &TileShape, dtype: Dtype, b_col: bool) -> u64 {
    let size = if dtype == Dtype::F32 { 4 } else { 2 };
    u64::from(t.smem_bytes(b_col)) * size / 2
}

/// The tile shape that `tile = (BM, BN, BK)` instantiates: one of the shapes the built-in
/// kernels use when it matches ([`tile_lists`]), else a warp grid and pipeline depth derived
/// here; fewer pipeline stages when needed to fit the arch's shared memory. `Err` says why it
/// cannot be instantiated, with a fix.
pub fn resolve_tile(
    (bm, bn, bk): (u32, u32, u32),
    dtype: Dtype,
    b_col: bool,
    arch: Targets,
) -> Result<TileShape, String> {
    let shown = format!("tile ({bm}, {bn}, {bk})");
    let mut bad = Vec::new();
    for (v, what, why) in [
        (bm, "BM", "the accumulator fragments are m16n8"),
        (bn, "BN", "B is loaded 16 columns at a time"),
        (bk, "BK", "the MMA's k is 16"),
    ] {
        if v % 16 != 0 {
            let lo = v / 16 * 16;
            let fix = if lo == 0 {
                "16".to_string()
            } else {
                format!("{lo} or {}", lo + 16)
            };
            bad.push(format!(
                "{what} = {v} is not a multiple of 16 ({why}); try {fix}"
            ));
        }
    }
    if !bad.is_empty() {
        return Err(format!(
            "{shown} cannot be instantiated: {}",
            bad.join("; ")
        ));
    }
    let limit = u64::from(arch.smem_limit());
    let fits = |t: &TileShape| smem_bytes(t, dtype, b_col) <= limit;
    let (main, rows) = tile_lists(dtype);
    let instantiated = main
        .iter()
        .chain(rows)
        .find(|t| (t.bm, t.bn, t.bk) == (bm, bn, bk));
    let mut t = match instantiated {
        Some(t) => *t,
        None => derive_warps((bm, bn, bk), dtype)
            .map_err(|why| format!("{shown} cannot be instantiated: {why}"))?,
    };
    // Fewer pipeline stages until the tile fits the arch's shared memory (2 at least).
    while !fits(&t) && t.stages > 2 {
        t = TileShape::new(bm, bn, bk, t.warps_m, t.warps_n, t.stages - 1);
    }
    if !fits(&t) {
        return Err(format!(
            "{shown} does not fit {}'s shared memory: even with 2 pipeline stages its {} tiles need {} bytes, and one CTA may use at most {limit}; use a smaller BK{}",
            arch.name(),
            dtype.name(),
            smem_bytes(&t, dtype, b_col),
            if arch != Targets::Sm90 {
                " or BN (or `arch = sm_90`, 227 KB)"
            } else {
                " or BN"
            }
        ));
    }
    Ok(t)
}

/// A warp grid (up to 8 warps) and pipeline depth for a BM×BN×BK tile: closest to 64
/// accumulator registers per thread (the instantiated shapes' choice), then more warps, then
/// squarer warp tiles. `Err` says why none passes [`TileShape::check`], with a fix.
fn derive_warps((bm, bn, bk): (u32, u32, u32), dtype: Dtype) -> Result<TileShape, String> {
    let stages = if dtype == Dtype::F32 || bk > 32 { 3 } else { 4 };
    let key = |t: &TileShape| {
        (
            (t.acc_registers() as i64 - 64).abs(),
            -(t.threads() as i64),
            ((t.bm / t.warps_m) as i64 - (t.bn / t.warps_n) as i64).abs(),
        )
    };
    let mut best: Option<TileShape> = None;
    let mut reason: Option<&'static str> = None;
    for wm in [1, 2, 4, 8] {
        for wn in [1, 2, 4, 8] {
            if wm * wn > 8 {
                continue;
            }
            let t = TileShape::new(bm, bn, bk, wm, wn, stages);
            match t.check() {
                None if best.as_ref().is_none_or(|b| key(&t) < key(b)) => best = Some(t),
                None => {}
                Some(r) if wm * wn == 8 || reason.is_none() => reason = Some(r),
                Some(_) => {}
            }
        }
    }
    best.ok_or_else(|| {
        let per_thread = (bm as u64 * bn as u64) / 256;
        if per_thread > 128 {
            format!(
                "a {bm}×{bn} tile needs {per_thread} f32 accumulator registers per thread even with 8 warps (at most 128 fit without spilling); try ({}, {bn}, {bk}) or ({bm}, {}, {bk})",
                bm / 2,
                bn / 2
            )
        } else {
            format!(
                "no grid of up to 8 warps fits it ({})",
                reason.unwrap_or("no warp grid divides it")
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instantiated_tiles_resolve_to_themselves_where_they_fit() {
        for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
            let (main, rows) = tile_lists(dtype);
            for t in main.iter().chain(rows) {
                for b_col in [true, false] {
                    let shape = (t.bm, t.bn, t.bk);
                    assert_eq!(resolve_tile(shape, dtype, b_col, Targets::Sm90), Ok(*t));
                    // 32×768×32 with B stored N×K needs 192000 B with 3 stages, over sm_80's
                    // limit: the same warp grid with fewer stages.
                    let r = resolve_tile(shape, dtype, b_col, Targets::Sm80).unwrap();
                    assert_eq!(
                        (r.bm, r.bn, r.bk, r.warps_m, r.warps_n),
                        (t.bm, t.bn, t.bk, t.warps_m, t.warps_n)
                    );
                    assert!(smem_bytes(&r, dtype, b_col) <= 163 * 1024, "{r:?}");
                    if smem_bytes(t, dtype, b_col) <= 163 * 1024 {
                        assert_eq!(r, *t);
                    }
                }
            }
        }
    }

    #[test]
    fn derived_tiles_pass_the_device_checks_and_fit() {
        for (bm, bn, bk) in [(64, 128, 32), (256, 128, 32), (16, 64, 64), (96, 96, 48)] {
            for arch in [Targets::Sm80, Targets::Sm90] {
                for dtype in [Dtype::Bf16, Dtype::F32] {
                    let t = resolve_tile((bm, bn, bk), dtype, true, arch).unwrap();
                    assert_eq!((t.bm, t.bn, t.bk), (bm, bn, bk));
                    assert_eq!(t.check(), None, "{t:?}");
                    assert!(smem_bytes(&t, dtype, true) <= u64::from(arch.smem_limit()));
                    assert!(t.acc_registers() <= 128 && t.threads() <= 256, "{t:?}");
                }
            }
        }
    }

    #[test]
    fn bad_tiles_say_why() {
        let e = resolve_tile((100, 128, 24), Dtype::Bf16, true, Targets::Sm80).unwrap_err();
        assert!(e.contains("BM = 100") && e.contains("96 or 112"), "{e}");
        assert!(e.contains("BK = 24") && e.contains("16 or 32"), "{e}");
        let e = resolve_tile((256, 256, 32), Dtype::Bf16, true, Targets::Sm80).unwrap_err();
        assert!(e.contains("256 f32 accumulator registers"), "{e}");
        let e = resolve_tile((128, 128, 512), Dtype::Bf16, true, Targets::Sm80).unwrap_err();
        assert!(e.contains("shared memory") && e.contains("166912"), "{e}");
    }

    #[test]
    fn smem_limit_depends_on_arch() {
        // 2 stages × (128 + 64) rows × (256 + 8) × 2 bytes = 202752 B: fits sm_90 only.
        assert!(resolve_tile((128, 64, 256), Dtype::Bf16, true, Targets::Sm80).is_err());
        assert!(resolve_tile((128, 64, 256), Dtype::Bf16, true, Targets::Sm90).is_ok());
        // f32 tiles take twice the bytes: 2 stages × 192 rows × 136 × 4 = 208896 B.
        assert!(resolve_tile((128, 64, 128), Dtype::Bf16, true, Targets::Sm80).is_ok());
        assert!(resolve_tile((128, 64, 128), Dtype::F32, true, Targets::Sm80).is_err());
        assert!(resolve_tile((128, 64, 128), Dtype::F32, true, Targets::Sm90).is_ok());
    }
}
