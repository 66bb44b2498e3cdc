//! Code generation: device entry points (nvptx64) and the host spec + typed launcher.
//!
//! Generated code names everything by absolute path (`::fused_gemm::__private::...`), and the
//! launcher's internal locals have mixed-site hygiene, so a `scale(name)` parameter can be any
//! name that `validate` accepts.

use fused_gemm_device::gemm::sm90::{TILES_SM90, cluster_m};
use fused_gemm_device::gemm::{DEFAULT_TILES_SM80, SCALAR_TILE_SM80, TILES_F32, TileShape};
use fused_gemm_device::target::Mainloop;
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};

use crate::ast::*;

const DEV: &str = "::fused_gemm::__private::device";

fn dev() -> TokenStream {
    DEV.parse().unwrap()
}

/// An identifier invisible to user code (macro_rules-like hygiene).
fn hidden(name: &str) -> syn::Ident {
    syn::Ident::new(name, Span::mixed_site())
}

/// One compiled variant.
struct Variant {
    entry: String,
    tile: TileShape,
    vec: bool,
    mainloop: Mainloop,
}

/// The tiles compiled when no `tile = (...)` is given, and the one of the bounds-checked variant.
fn default_tiles(dtype: Dtype) -> (&'static [TileShape], TileShape) {
    match dtype {
        Dtype::F32 => (&TILES_F32[..3], TILES_F32[2]),
        _ => (DEFAULT_TILES_SM80, SCALAR_TILE_SM80),
    }
}

fn variants(name: &str, attr: &KernelAttr) -> Vec<Variant> {
    let has_norm = attr.stages.iter().any(Stage::is_norm);
    let (_, rows) = crate::validate::tile_lists(attr.dtype);
    let mut tiles: Vec<(TileShape, bool)> = Vec::new();
    if let Some((shape, _)) = attr.tile {
        let t = crate::validate::resolve_tile(
            shape,
            attr.dtype,
            attr.b_layout == BLayout::Col,
            attr.arch,
        )
        .expect("validated before expansion");
        tiles.push((t, true));
        // The bounds-checked path for operands that are not 16-byte aligned.
        tiles.push((t, false));
    } else {
        let (defaults, scalar) = default_tiles(attr.dtype);
        tiles.extend(defaults.iter().map(|t| (*t, true)));
        // The bounds-checked path for unaligned operands, one modest tile.
        tiles.push((scalar, false));
        if has_norm {
            tiles.extend(rows.iter().map(|t| (*t, true)));
        }
    }
    let arch = match (attr.dtype, attr.arch) {
        (Dtype::F32, Targets::All | Targets::Sm80) => "simt",
        (Dtype::F32, Targets::Sm90) => "simt_sm90",
        (_, Targets::All | Targets::Sm80) => "sm80",
        (_, Targets::Sm90) => "sm90",
    };
    let simple = if attr.dtype == Dtype::F32 {
        Mainloop::Simt
    } else {
        Mainloop::Sm80
    };
    let bl = match attr.b_layout {
        BLayout::Col => "bcol",
        BLayout::Row => "brow",
    };
    let mut out: Vec<Variant> = tiles
        .into_iter()
        .map(|(t, vec)| Variant {
            entry: format!(
                "{name}__{arch}_{}_{}_{bl}_t{}x{}x{}_w{}x{}_s{}_{}",
                attr.dtype.name(),
                attr.out_dtype().name(),
                t.bm,
                t.bn,
                t.bk,
                t.warps_m,
                t.warps_n,
                t.stages,
                if vec { "v16" } else { "v2" }
            ),
            tile: t,
            vec,
            mainloop: simple,
        })
        .collect();
    // The Hopper mainloop (sm_90a module) for 16-bit inputs with B stored N×K; the variants
    // above stay as the path for operands TMA cannot read and for other GPUs.
    if attr.arch != Targets::Sm80
        && attr.dtype != Dtype::F32
        && attr.b_layout == BLayout::Col
        && attr.tile.is_none()
    {
        // A `row_moments` producer also centres its tile, and a `normed_residual` merges each
        // row's statistics groups: on the 128×256 and 256×128 tiles that leaves too few
        // registers (local memory), so such kernels compile the smaller ones.
        let moments = attr.stages.iter().any(|s| {
            matches!(
                s.kind,
                StageKind::RowMoments | StageKind::NormedResidual { .. }
            )
        });
        let fits = |t: &&TileShape| !moments || t.bm * t.bn <= 128 * 128;
        out.extend(TILES_SM90.iter().filter(fits).map(|t| Variant {
            entry: format!(
                "{name}__sm90tma_{}_{}_{bl}_t{}x{}x{}_w{}x{}_s{}_v16",
                attr.dtype.name(),
                attr.out_dtype().name(),
                t.bm,
                t.bn,
                t.bk,
                t.warps_m,
                t.warps_n,
                t.stages,
            ),
            tile: *t,
            vec: true,
            mainloop: Mainloop::Sm90Tma {
                cluster_m: cluster_m(t),
            },
        }));
    }
    out
}

/// A launcher parameter generated for a stage.
struct LaunchParam {
    ident: syn::Ident,
    ty: TokenStream,
    doc: String,
}

/// Per-stage pieces of the expansion.
struct StageGen {
    ty: TokenStream,
    /// Expression building the stage's `Params` inside the build closure (`stats` in scope).
    params: TokenStream,
    /// Statements taking the operands' descriptors.
    checks: TokenStream,
    /// `EpilogueArg` expressions describing the operands for validation.
    operands: Vec<TokenStream>,
    launch_params: Vec<LaunchParam>,
    /// One line for the launcher's docs: what the stage does.
    doc: String,
}

/// What the expansion knows about the position of a stage in the list.
struct StageCtx<'a> {
    kernel: &'a str,
    idx: usize,
    attr: &'a KernelAttr,
    /// A pair stage came earlier: vectors and tiles have N/2 columns.
    after_pair: bool,
    /// A row norm came earlier: the stage may run in the norm's finishing kernel.
    after_norm: bool,
    /// The launcher parameter names of this stage (`ast::stage_params`).
    names: &'a [ParamName],
    /// Hidden identifier of the row-statistics workspace address in the build closure.
    stats: &'a syn::Ident,
}

fn stage_gen(cx: &StageCtx<'_>, s: &Stage, extra_items: &mut TokenStream) -> StageGen {
    let d = dev();
    let st = quote!(#d::epilogue::stages);
    let val = quote!(::fused_gemm::__private::host::validate);
    let idx = cx.idx;
    let out_name = cx.attr.out_dtype().name();
    let width = if cx.after_pair { "N/2" } else { "N" };
    let nil = quote!(#d::epilogue::Nil);
    let param = |i: usize| format_ident!("{}", cx.names[i].name);
    let desc = |i: usize| hidden(&format!("{}_desc", cx.names[i].name));
    let simple = |ty: TokenStream, doc: String| StageGen {
        ty,
        params: nil.clone(),
        checks: quote!(),
        operands: vec![],
        launch_params: vec![],
        doc,
    };
    match &s.kind {
        StageKind::Relu => simple(quote!(#st::Relu), "`relu`: max(x, 0).".into()),
        StageKind::Gelu => simple(
            quote!(#st::Gelu),
            "`gelu`: x·Φ(x), the exact erf form (BERT's \"gelu\"; `gelu_tanh` is the approximation).".into(),
        ),
        StageKind::GeluTanh => simple(
            quote!(#st::GeluTanh),
            "`gelu_tanh`: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), the tanh approximation (\"gelu_new\").".into(),
        ),
        StageKind::Silu => simple(quote!(#st::Silu), "`silu`: x·sigmoid(x).".into()),
        StageKind::Sigmoid => simple(quote!(#st::Sigmoid), "`sigmoid`: 1/(1 + e^−x).".into()),
        StageKind::SwiGlu => simple(
            quote!(#st::SwiGlu),
            "`swiglu`: on interleaved gate/up columns `[g0, u0, g1, u1, …]` (B's gate and up rows interleaved the same way), `silu(g)·u`; halves the width: C and every later operand have N/2 columns.".into(),
        ),
        StageKind::GeGlu => simple(
            quote!(#st::GeGlu),
            "`geglu`: as `swiglu` with erf-GELU as the gate, `gelu(g)·u`; halves the width to N/2.".into(),
        ),
        StageKind::Accumulate => simple(
            quote!(#st::Accumulate),
            "`accumulate`: adds what C holds before the launch, `C + x`.".into(),
        ),
        StageKind::Cast(dt) => {
            let t = dt.device_type();
            simple(
                quote!(#st::Cast<#t>),
                format!(
                    "`cast({})`: rounds x to {} precision (and back to f32 for the next stage).",
                    dt.name(),
                    dt.name()
                ),
            )
        }
        StageKind::User(path) => {
            let w = format_ident!("__FusedGemmUser_{}_{}", cx.kernel, idx);
            extra_items.extend(quote! {
                #[doc(hidden)]
                #[allow(non_camel_case_types)]
                pub struct #w;
                impl #st::UserFn for #w {
                    #[inline(always)]
                    fn call(x: f32) -> f32 {
                        let f: fn(f32) -> f32 = #path;
                        f(x)
                    }
                }
            });
            let p = quote!(#path).to_string().replace(' ', "");
            simple(
                quote!(#st::User<#w>),
                format!("`{p}`: your function, applied to every element."),
            )
        }
        StageKind::Scale(ScaleArg::Const(v)) => {
            let v32 = *v as f32;
            StageGen {
                ty: quote!(#st::Scale),
                params: quote!(#st::ScaleParams { alpha: #v32 }),
                checks: quote!(),
                operands: vec![],
                launch_params: vec![],
                doc: format!("`scale({v})`: multiplies by {v}."),
            }
        }
        StageKind::Scale(ScaleArg::Param(_)) => {
            let id = param(0);
            StageGen {
                ty: quote!(#st::Scale),
                params: quote!(#st::ScaleParams { alpha: #id }),
                checks: quote!(),
                operands: vec![],
                launch_params: vec![LaunchParam {
                    ident: id.clone(),
                    ty: quote!(f32),
                    doc: format!("f32 scalar; stage {} multiplies by it", idx + 1),
                }],
                doc: format!("`scale({id})`: multiplies by the scalar `{id}`."),
            }
        }
        StageKind::Scale(ScaleArg::Vector(axis)) | StageKind::Bias(axis) => {
            let is_scale = matches!(s.kind, StageKind::Scale(_));
            let (ty, variant) = match (is_scale, axis) {
                (true, Axis::Row) => (quote!(#st::ScaleRow), format_ident!("ScaleRow")),
                (true, Axis::Col) => (quote!(#st::ScaleCol), format_ident!("ScaleCol")),
                (false, Axis::Row) => (quote!(#st::BiasRow), format_ident!("BiasRow")),
                (false, Axis::Col) => (quote!(#st::BiasCol), format_ident!("Bias")),
            };
            let (id, dsc) = (param(0), desc(0));
            let lit = id.to_string();
            let dt_name = if is_scale { "f32" } else { out_name };
            let (len, along, index) = match axis {
                Axis::Row => ("M", "one value per row of C, broadcast along the row", "r"),
                Axis::Col => (
                    width,
                    "one value per output column, broadcast down the rows",
                    "c",
                ),
            };
            let (stage_text, what, formula) = if is_scale {
                let n = if *axis == Axis::Row { "row" } else { "col" };
                (
                    format!("scale({n})"),
                    "multiplies by",
                    format!("x·{id}[{index}]"),
                )
            } else if *axis == Axis::Row {
                ("bias(row)".to_string(), "adds", format!("x + {id}[{index}]"))
            } else {
                ("bias".to_string(), "adds", format!("x + {id}[{index}]"))
            };
            StageGen {
                ty,
                params: quote!(#st::VectorParams { ptr: #dsc.ptr }),
                checks: quote!(let #dsc = #id.vector(gpu)?;),
                operands: vec![quote!(#val::EpilogueArg {
                    name: #lit, stage: #idx, operand: #val::Operand::#variant(#dsc),
                })],
                launch_params: vec![LaunchParam {
                    ident: id.clone(),
                    ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsVector),
                    doc: format!(
                        "length {len}, {dt_name}, contiguous: {along}; stage {} {what} it",
                        idx + 1
                    ),
                }],
                doc: format!("`{stage_text}`: {formula} ({along})."),
            }
        }
        StageKind::Residual => {
            let (id, dsc) = (param(0), desc(0));
            let lit = id.to_string();
            let alias = if cx.after_norm {
                "must not overlap `c`"
            } else {
                "may be `c` itself (an in-place residual), but must not overlap it otherwise"
            };
            StageGen {
                ty: quote!(#st::Residual),
                params: quote!(#st::MatrixParams { ptr: #dsc.ptr, ld: #dsc.ld as u32, _pad: 0 }),
                checks: quote!(let #dsc = #id.matrix(gpu)?;),
                operands: vec![quote!(#val::EpilogueArg {
                    name: #lit, stage: #idx, operand: #val::Operand::Residual(#dsc),
                })],
                launch_params: vec![LaunchParam {
                    ident: id.clone(),
                    ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsMatrix),
                    doc: format!(
                        "M×{width}, {out_name}, row-major (any leading dimension ≥ {width}); stage {} adds it element-wise; {alias}",
                        idx + 1
                    ),
                }],
                doc: format!("`residual`: x + {id}[r, c]."),
            }
        }
        StageKind::LayerNorm { eps } | StageKind::RmsNorm { eps } => {
            let ln = matches!(s.kind, StageKind::LayerNorm { .. });
            let eps32 = *eps as f32;
            let stats = cx.stats;
            let (g, gd) = (param(0), desc(0));
            let gl = g.to_string();
            let mut checks = quote!(let #gd = #g.vector(gpu)?;);
            let mut operands = vec![
                quote!(#val::EpilogueArg {
                    name: #gl, stage: #idx, operand: #val::Operand::Gamma(#gd),
                }),
                quote!(#val::EpilogueArg {
                    name: "eps", stage: #idx, operand: #val::Operand::Eps(#eps32),
                }),
            ];
            let mut lp = vec![LaunchParam {
                ident: g.clone(),
                ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsVector),
                doc: format!(
                    "length {width}, {out_name}, contiguous: the norm's scale γ, one per column"
                ),
            }];
            let finish = "finished in the GEMM's epilogue when one CTA tile spans the row, else by a second, small kernel from per-tile partial statistics (CODA); statistics in f32 whatever the dtype";
            if ln {
                let (b, bd) = (param(1), desc(1));
                let bl = b.to_string();
                checks.extend(quote!(let #bd = #b.vector(gpu)?;));
                operands.push(quote!(#val::EpilogueArg {
                    name: #bl, stage: #idx, operand: #val::Operand::Beta(#bd),
                }));
                lp.push(LaunchParam {
                    ident: b.clone(),
                    ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsVector),
                    doc: format!(
                        "length {width}, {out_name}, contiguous: the norm's shift β, one per column"
                    ),
                });
                StageGen {
                    ty: quote!(#st::Norm<#st::LayerNorm>),
                    params: quote!(#st::LayerNormParams { gamma: #gd.ptr, beta: #bd.ptr, stats: #stats, eps: #eps32, _pad: 0 }),
                    checks,
                    operands,
                    launch_params: lp,
                    doc: format!(
                        "`layer_norm(eps = {eps:e})`: over each row's {width} values, (x − mean)/√(var + {eps:e})·{g}[c] + {b}[c] (biased variance); {finish}."
                    ),
                }
            } else {
                StageGen {
                    ty: quote!(#st::Norm<#st::RmsNorm>),
                    params: quote!(#st::RmsNormParams { gamma: #gd.ptr, stats: #stats, eps: #eps32, _pad: 0 }),
                    checks,
                    operands,
                    launch_params: lp,
                    doc: format!(
                        "`rms_norm(eps = {eps:e})`: over each row's {width} values, x/√(mean(x²) + {eps:e})·{g}[c]; {finish}."
                    ),
                }
            }
        }
        StageKind::RowMoments => {
            let (id, dsc) = (param(0), desc(0));
            let lit = id.to_string();
            StageGen {
                ty: quote!(#st::RowMoments),
                params: quote!(#st::RowMomentsParams { ptr: #dsc.ptr, ld: (#dsc.ld / 4) as u32, _pad: 0 }),
                checks: quote!(let #dsc = #id.matrix(gpu)?;),
                operands: vec![quote!(#val::EpilogueArg {
                    name: #lit, stage: #idx, operand: #val::Operand::RowStats(#dsc),
                })],
                launch_params: vec![LaunchParam {
                    ident: id.clone(),
                    ty: quote!(&mut impl ::fused_gemm::__private::host::kernel::AsMatrix),
                    doc: format!(
                        "M × 4·ceil(N/64) or wider, f32, 16-byte aligned rows: stage {} writes each row's (count, mean, M2, shift) over every group of 64 columns",
                        idx + 1
                    ),
                }],
                doc: format!(
                    "`row_moments`: stores each row of the CTA's tile less its mean t (the shift, so that rows whose mean dwarfs their spread keep their precision) and writes the statistics of what it stored, with t, over every group of 64 columns to `{id}` (Welford/Chan; the producer half of a deferred LayerNorm, merged by a later GEMM's `folded_layer_norm` or `normed_residual`)."
                ),
            }
        }
        StageKind::NormedResidual { eps } => {
            let eps32 = *eps as f32;
            let ids: Vec<syn::Ident> = (0..4).map(param).collect();
            let ds: Vec<syn::Ident> = (0..4).map(desc).collect();
            let lits: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
            let (r, rs, g, b) = (&ids[0], &ids[1], &ids[2], &ids[3]);
            let (rd, rsd, gd, bd) = (&ds[0], &ds[1], &ds[2], &ds[3]);
            let (rl, rsl, gl, bl) = (&lits[0], &lits[1], &lits[2], &lits[3]);
            StageGen {
                ty: quote!(#st::NormedResidual),
                params: quote!(#st::NormedResidualParams {
                    ptr: #rd.ptr,
                    stats: #rsd.ptr,
                    gamma: #gd.ptr,
                    beta: #bd.ptr,
                    ld: #rd.ld as u32,
                    stats_ld: (#rsd.ld / 4) as u32,
                    groups: (#rd.cols as u32).div_ceil(#d::epilogue::stages::MOMENT_GROUP_COLS),
                    eps: #eps32,
                }),
                checks: quote! {
                    let #rd = #r.matrix(gpu)?;
                    let #rsd = #rs.matrix(gpu)?;
                    let #gd = #g.vector(gpu)?;
                    let #bd = #b.vector(gpu)?;
                },
                operands: vec![
                    quote!(#val::EpilogueArg {
                        name: #rl, stage: #idx, operand: #val::Operand::NormedResidual(#rd),
                    }),
                    quote!(#val::EpilogueArg {
                        name: #rsl, stage: #idx, operand: #val::Operand::ResidualStats(#rsd),
                    }),
                    quote!(#val::EpilogueArg {
                        name: #gl, stage: #idx, operand: #val::Operand::Gamma(#gd),
                    }),
                    quote!(#val::EpilogueArg {
                        name: #bl, stage: #idx, operand: #val::Operand::Beta(#bd),
                    }),
                    quote!(#val::EpilogueArg {
                        name: "eps", stage: #idx, operand: #val::Operand::Eps(#eps32),
                    }),
                ],
                launch_params: vec![
                    LaunchParam {
                        ident: r.clone(),
                        ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsMatrix),
                        doc: format!("M×{width}, {out_name}: the stored (shifted) pre-norm h′ of a deferred LayerNorm (a `row_moments` producer's C); may be `c` itself, but must not overlap it otherwise"),
                    },
                    LaunchParam {
                        ident: rs.clone(),
                        ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsMatrix),
                        doc: format!("M × 4·ceil({width}/64) or wider, f32: h's row statistics (the producer's `stats`)"),
                    },
                    LaunchParam {
                        ident: g.clone(),
                        ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsVector),
                        doc: format!("length {width}, {out_name}: the deferred norm's scale γ"),
                    },
                    LaunchParam {
                        ident: b.clone(),
                        ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsVector),
                        doc: format!("length {width}, {out_name}: the deferred norm's shift β"),
                    },
                ],
                doc: format!(
                    "`normed_residual(eps = {eps:e})`: x + LayerNorm(h)[r, c] = x + (({r}[r, c] + t_g − t_0) − μ)·rstd·{g}[c] + {b}[c], with `{r}` the stored h′ = h − t_g and the shifts t_g, μ and rstd = 1/√(σ² + {eps:e}) merged from `{rs}` (the residual of a post-norm layer whose norm was deferred)."
                ),
            }
        }
        StageKind::FoldedLayerNorm { eps } => {
            let eps32 = *eps as f32;
            let (s_id, s_dsc) = (param(0), desc(0));
            let (c_id, c_dsc) = (param(1), desc(1));
            let (o_id, o_dsc) = (param(2), desc(2));
            let (s_lit, c_lit, o_lit) = (s_id.to_string(), c_id.to_string(), o_id.to_string());
            StageGen {
                ty: quote!(#st::FoldedLayerNorm),
                params: quote!(#st::FoldedLayerNormParams {
                    stats: #s_dsc.ptr,
                    colsum: #c_dsc.ptr,
                    offset: #o_dsc.ptr,
                    ld: (#s_dsc.ld / 4) as u32,
                    groups: (a.cols as u32).div_ceil(#d::epilogue::stages::MOMENT_GROUP_COLS),
                    eps: #eps32,
                    colsum_ld: #c_dsc.ld as u32,
                }),
                checks: quote! {
                    let #s_dsc = #s_id.matrix(gpu)?;
                    let #c_dsc = #c_id.matrix(gpu)?;
                    let #o_dsc = #o_id.vector(gpu)?;
                },
                operands: vec![
                    quote!(#val::EpilogueArg {
                        name: #s_lit, stage: #idx, operand: #val::Operand::InputStats(#s_dsc),
                    }),
                    quote!(#val::EpilogueArg {
                        name: #c_lit, stage: #idx, operand: #val::Operand::Colsum(#c_dsc),
                    }),
                    quote!(#val::EpilogueArg {
                        name: #o_lit, stage: #idx, operand: #val::Operand::NormOffset(#o_dsc),
                    }),
                    quote!(#val::EpilogueArg {
                        name: "eps", stage: #idx, operand: #val::Operand::Eps(#eps32),
                    }),
                ],
                launch_params: vec![
                    LaunchParam {
                        ident: s_id.clone(),
                        ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsMatrix),
                        doc: "M × 4·ceil(K/64) or wider, f32: the statistics of A's rows, as a `row_moments` stage wrote them".into(),
                    },
                    LaunchParam {
                        ident: c_id.clone(),
                        ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsMatrix),
                        doc: format!("ceil(K/64) × {width}, f32: row g is Σ_k γ[k]·W[k, c] over the K columns 64g..64g+63, W the weights before γ was folded into B (`fold_layer_norm` makes it)"),
                    },
                    LaunchParam {
                        ident: o_id.clone(),
                        ty: quote!(&impl ::fused_gemm::__private::host::kernel::AsVector),
                        doc: format!("length {width}, f32: Σ_k β[k]·W[k, c] + bias[c]"),
                    },
                ],
                doc: format!(
                    "`folded_layer_norm(eps = {eps:e})`: A is the stored (shifted) pre-norm h′ of a deferred LayerNorm and B holds γ folded in (diag(γ)·W); gives LayerNorm(h)·W + bias = rstd·(x + Σ_g ((t_g − t_0) − μ)·{c_id}[g, c]) + {o_id}[c], with the shifts t_g, μ and rstd = 1/√(σ² + {eps:e}) merged from `{s_id}` (biased variance)."
                ),
            }
        }
        StageKind::Rope { theta } => {
            let theta32 = *theta as f32;
            let id = param(0);
            let lit = id.to_string();
            StageGen {
                ty: quote!(#st::Rope),
                params: quote!(#st::RopeParams {
                    theta: #theta32,
                    head_dim: #id.head_dim,
                    rotary_dim: #id.rotary_dim,
                    seq_len: #id.seq_len,
                    pos_offset: #id.pos_offset,
                    _pad: 0,
                }),
                checks: quote!(),
                operands: vec![quote!(#val::EpilogueArg {
                    name: #lit, stage: #idx, operand: #val::Operand::Rope(#id.spec(#theta32)),
                })],
                launch_params: vec![LaunchParam {
                    ident: id.clone(),
                    ty: quote!(::fused_gemm::__private::host::kernel::RopeArgs),
                    doc: format!(
                        "the rotation of stage {}: `head_dim` (columns per head, even), `rotary_dim` (rotated columns at the start of each head, even, ≤ head_dim), `seq_len` and `pos_offset` (row r is at position r % seq_len + pos_offset)",
                        idx + 1
                    ),
                }],
                doc: format!(
                    "`rope(theta = {theta})`: rotates the interleaved pairs (2i, 2i+1) of each head by p·{theta}^(−2i/rotary_dim), p the row's position: x' = x·cos − y·sin, y' = y·cos + x·sin (LLaMA/NeoX convention; interleave half-split weight rows first)."
                ),
            }
        }
    }
}

fn cons_type(items: &[TokenStream]) -> TokenStream {
    let d = dev();
    items.iter().rev().fold(
        quote!(#d::epilogue::Nil),
        |tail, head| quote!(#d::epilogue::Cons<#head, #tail>),
    )
}

fn cons_value(items: &[TokenStream]) -> TokenStream {
    let d = dev();
    items.iter().rev().fold(
        quote!(#d::epilogue::Nil),
        |tail, head| quote!(#d::epilogue::Cons { head: #head, tail: #tail }),
    )
}

/// The whole epilogue as one formula over `A·B`, for the launcher's first doc line, e.g.
/// `layer_norm(A·B + bias[c] + residual[r, c])`.
fn formula(stages: &[Stage], params: &[Vec<ParamName>]) -> String {
    // `sum`: the expression is a sum at top level (needs parentheses under a product).
    let (mut x, mut sum) = ("A·B".to_string(), false);
    let wrap = |x: &str, sum: bool| {
        if sum { format!("({x})") } else { x.to_string() }
    };
    for (s, ps) in stages.iter().zip(params) {
        let p = |i: usize| ps[i].name.as_str();
        (x, sum) = match &s.kind {
            StageKind::Scale(ScaleArg::Param(_)) => (format!("{}·{}", p(0), wrap(&x, sum)), false),
            StageKind::Scale(ScaleArg::Const(v)) => (format!("{v}·{}", wrap(&x, sum)), false),
            StageKind::Scale(ScaleArg::Vector(Axis::Row)) => {
                (format!("{}[r]·{}", p(0), wrap(&x, sum)), false)
            }
            StageKind::Scale(ScaleArg::Vector(Axis::Col)) => {
                (format!("{}[c]·{}", p(0), wrap(&x, sum)), false)
            }
            StageKind::Bias(Axis::Row) => (format!("{x} + {}[r]", p(0)), true),
            StageKind::Bias(Axis::Col) => (format!("{x} + {}[c]", p(0)), true),
            StageKind::Residual => (format!("{x} + {}[r, c]", p(0)), true),
            StageKind::NormedResidual { .. } => (format!("{x} + layer_norm({})[r, c]", p(0)), true),
            StageKind::RowMoments => (x, sum),
            StageKind::Accumulate => (format!("C + {x}"), true),
            StageKind::Cast(d) => (format!("round_{}({x})", d.name()), false),
            StageKind::User(path) => (
                format!("{}({x})", quote!(#path).to_string().replace(' ', "")),
                false,
            ),
            _ => (format!("{}({x})", s.name()), false),
        };
    }
    x
}

pub fn expand(item: &syn::ItemFn, attr: &KernelAttr) -> TokenStream {
    let d = dev();
    let name = &item.sig.ident;
    let name_s = name.to_string();
    let user_docs: Vec<&syn::Attribute> = item
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .collect();
    // `#[cfg(...)]` on the kernel applies to every item generated for it.
    let cfgs: Vec<&syn::Attribute> = item
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .collect();
    let cfgs = quote!(#(#cfgs)*);
    let spec = format_ident!("{}", name_s.to_uppercase());
    let chain_ty = format_ident!("__FusedGemmChain_{}", name_s);
    let post_ty = format_ident!("__FusedGemmPost_{}", name_s);
    let stats = hidden("stats");
    let call = hidden("call");

    let names = stage_params(&attr.stages);
    let mut extra = TokenStream::new();
    let mut gens = Vec::new();
    let (mut after_pair, mut after_norm) = (false, false);
    for (i, s) in attr.stages.iter().enumerate() {
        let cx = StageCtx {
            kernel: &name_s,
            idx: i,
            attr,
            after_pair,
            after_norm,
            names: &names[i],
            stats: &stats,
        };
        gens.push(stage_gen(&cx, s, &mut extra));
        after_pair |= s.is_pairwise_reducing();
        after_norm |= s.is_norm();
    }
    let pairs = after_pair;
    let norm_idx = attr.stages.iter().position(Stage::is_norm);

    let types: Vec<TokenStream> = gens.iter().map(|g| g.ty.clone()).collect();
    let chain = cons_type(&types);
    let params_value = cons_value(&gens.iter().map(|g| g.params.clone()).collect::<Vec<_>>());
    let checks: Vec<&TokenStream> = gens.iter().map(|g| &g.checks).collect();
    let operands: Vec<&TokenStream> = gens.iter().flat_map(|g| g.operands.iter()).collect();
    let pair_idx = attr.stages.iter().position(Stage::is_pairwise_reducing);
    let pair_stage = match pair_idx {
        Some(i) => quote!(Some(#i)),
        None => quote!(None),
    };
    let b_layout = if attr.b_layout == BLayout::Col {
        quote!(::fused_gemm::__private::host::validate::BLayout::NxK)
    } else {
        quote!(::fused_gemm::__private::host::validate::BLayout::KxN)
    };
    let accumulate = attr
        .stages
        .iter()
        .any(|s| matches!(s.kind, StageKind::Accumulate));

    let in_t = attr.dtype.device_type();
    let out_t = attr.out_dtype().device_type();
    let b_col = attr.b_layout == BLayout::Col;
    let arch_cfg = match attr.arch {
        Targets::All | Targets::Sm80 => quote!(target_arch = "nvptx64"),
        Targets::Sm90 => quote!(all(target_arch = "nvptx64", target_feature = "sm_90")),
    };

    let vars = variants(&name_s, attr);
    let mut entries = TokenStream::new();
    let mut variant_values = Vec::new();
    for v in &vars {
        let entry = format_ident!("{}", v.entry);
        let t = v.tile;
        let (mi, ni) = (t.mi() as usize, t.ni() as usize);
        let (wm, wn, bk, stages, vec) = (t.warps_m, t.warps_n, t.bk, t.stages, v.vec);
        let tma = v.mainloop.is_sm90();
        let mainloop = if tma {
            quote!(#d::gemm::sm90::run::<#in_t, #out_t, #mi, #ni, #wm, #stages, #chain_ty>(&args, &epi, &tma))
        } else if attr.dtype == Dtype::F32 {
            quote!(#d::gemm::simt::run::<#out_t, #b_col, #mi, #ni, #wm, #wn, #bk, #stages, #vec, #chain_ty>(&args, &epi))
        } else {
            quote!(#d::gemm::sm80::run::<#in_t, #out_t, #b_col, #mi, #ni, #wm, #wn, #bk, #stages, #vec, #chain_ty>(&args, &epi))
        };
        let bounds = format_ident!("__fg_launch_bounds__{}", v.entry);
        let (threads, min_ctas) = if tma {
            (fused_gemm_device::gemm::sm90::THREADS, 1)
        } else {
            (t.threads(), t.min_ctas_per_sm())
        };
        // Hopper entries take the tensor maps as a third parameter and exist only in the
        // sm_90a module.
        let (cfg, tma_param) = if tma {
            (
                quote!(all(target_arch = "nvptx64", target_feature = "sm_90a")),
                quote!(, tma: #d::gemm::sm90::Sm90Args),
            )
        } else {
            (arch_cfg.clone(), quote!())
        };
        entries.extend(quote! {
            #cfgs
            #[cfg(#cfg)]
            #[unsafe(no_mangle)]
            #[used]
            #[doc(hidden)]
            #[allow(non_upper_case_globals)]
            pub static #bounds: [u32; 2] = [#threads, #min_ctas];
            #cfgs
            #[cfg(#cfg)]
            #[unsafe(no_mangle)]
            #[doc(hidden)]
            pub unsafe extern "ptx-kernel" fn #entry(args: #d::gemm::GemmArgs, epi: <#chain_ty as #d::epilogue::Stage>::Params #tma_param) {
                unsafe { #mainloop }
            }
        });
        let e = &v.entry;
        let (bm, bn) = (t.bm, t.bn);
        let mainloop_value = match v.mainloop {
            Mainloop::Simt => quote!(#d::target::Mainloop::Simt),
            Mainloop::Sm80 => quote!(#d::target::Mainloop::Sm80),
            Mainloop::Sm90Tma { cluster_m } => {
                quote!(#d::target::Mainloop::Sm90Tma { cluster_m: #cluster_m })
            }
        };
        variant_values.push(quote! {
            ::fused_gemm::__private::host::kernel::KernelVariant {
                entry: #e,
                tile: #d::gemm::TileShape::new(#bm, #bn, #bk, #wm, #wn, #stages),
                vec: #vec,
                mainloop: #mainloop_value,
            }
        });
    }

    let norm_stage = match norm_idx {
        Some(i) => quote!(Some(#i)),
        None => quote!(None),
    };
    let (post_items, finish_entry, finish_value) = match norm_idx {
        Some(ni) => {
            let post = cons_type(&types[ni + 1..]);
            let kind = match attr.stages[ni].kind {
                StageKind::LayerNorm { .. } => quote!(#d::epilogue::stages::LayerNorm),
                _ => quote!(#d::epilogue::stages::RmsNorm),
            };
            let fin = format!("{name_s}__norm_finish_{}", attr.out_dtype().name());
            let fin_id = format_ident!("{}", fin);
            let norm_params = &gens[ni].params;
            let post_params = cons_value(
                &gens[ni + 1..]
                    .iter()
                    .map(|g| g.params.clone())
                    .collect::<Vec<_>>(),
            );
            (
                quote! {
                    #cfgs
                    #[doc(hidden)]
                    #[allow(non_camel_case_types)]
                    pub type #post_ty = #post;
                    #cfgs
                    #[cfg(#arch_cfg)]
                    #[unsafe(no_mangle)]
                    #[doc(hidden)]
                    pub unsafe extern "ptx-kernel" fn #fin_id(
                        args: #d::kernel::norm_finish::NormFinishArgs,
                        norm: <#kind as #d::epilogue::stages::RowNorm>::Params,
                        post: <#post_ty as #d::epilogue::Stage>::Params,
                    ) {
                        // sm_90+: when launched as the GEMM's programmatic dependent it may start
                        // before the GEMM has finished writing C and the statistics; in stream
                        // order this returns at once.
                        #[cfg(target_feature = "sm_90")]
                        #d::arch::sync::grid_dependency_wait();
                        unsafe { #d::kernel::norm_finish::run::<#kind, #post_ty, #out_t>(&args, &norm, &post) }
                    }
                },
                quote!(Some(#fin)),
                quote!(Some((#norm_params, #post_params))),
            )
        }
        None => (
            quote!(),
            quote!(None),
            quote!(None::<(#d::epilogue::Nil, #d::epilogue::Nil)>),
        ),
    };

    let in_dt = attr.dtype.host_dtype();
    let out_dt = attr.out_dtype().host_dtype();
    let stage_list: Vec<String> = attr.stages.iter().map(stage_text).collect();
    let stage_str = stage_list.join(", ");

    let mut sig_params = TokenStream::new();
    let mut param_docs = String::new();
    for g in &gens {
        for p in &g.launch_params {
            param_docs.push_str(&format!("- `{}`: {}.\n", p.ident, p.doc));
            let (id, ty) = (&p.ident, &p.ty);
            sig_params.extend(quote!(#id: #ty,));
        }
    }
    let doc = launcher_doc(
        &name_s,
        attr,
        &formula(&attr.stages, &names),
        &gens,
        &param_docs,
        pairs,
        &vars,
    );
    let spec_doc = format!(
        "What the launcher [`{name_s}`] needs to know about its kernel: the dtypes, the stage list `[{stage_str}]` and the {} compiled variants (entry points and tiles).",
        vars.len()
    );

    quote! {
        #extra
        #cfgs
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        pub type #chain_ty = #chain;
        #post_items
        #entries

        #cfgs
        #[cfg(not(target_arch = "nvptx64"))]
        #[doc = #spec_doc]
        pub static #spec: ::fused_gemm::__private::host::kernel::GemmKernelSpec = ::fused_gemm::__private::host::kernel::GemmKernelSpec {
            name: #name_s,
            stages: #stage_str,
            ptx: &crate::__FUSED_GEMM_PTX,
            input: #in_dt,
            output: #out_dt,
            b_col: #b_col,
            accumulate: #accumulate,
            norm_finish: #finish_entry,
            epilogue: #d::gemm::sm90::EpilogueTraits::of::<#chain_ty>(),
            variants: &[#(#variant_values),*],
        };

        #(#user_docs)*
        #cfgs
        #[cfg(not(target_arch = "nvptx64"))]
        #[doc = #doc]
        #[allow(clippy::too_many_arguments, unused_variables)]
        pub fn #name(
            gpu: &::fused_gemm::__private::host::Gpu,
            a: &impl ::fused_gemm::__private::host::kernel::AsMatrix,
            b: &impl ::fused_gemm::__private::host::kernel::AsMatrix,
            c: &mut impl ::fused_gemm::__private::host::kernel::AsMatrix,
            #sig_params
        ) -> ::fused_gemm::__private::host::Result<::fused_gemm::__private::host::launch::LaunchReport> {
            use ::fused_gemm::__private::host::kernel::{AsMatrix as _, AsVector as _};
            let a = a.matrix(gpu)?;
            let b = b.matrix(gpu)?;
            let c = c.matrix(gpu)?;
            #(#checks)*
            let #call = ::fused_gemm::__private::host::validate::GemmCall {
                a,
                b,
                b_layout: #b_layout,
                c,
                in_dtype: #in_dt,
                out_dtype: #out_dt,
                epilogue: &[#(#operands),*],
                pair_stage: #pair_stage,
                row_norm_stage: #norm_stage,
            };
            ::fused_gemm::__private::host::launch::launch(gpu, &#spec, &#call, |#stats: u64| (#params_value, #finish_value))
        }
    }
}

/// The launcher's docstring: what it computes, the stages in order, every parameter with its
/// shape and dtype, the errors and the return value.
fn launcher_doc(
    name: &str,
    attr: &KernelAttr,
    formula: &str,
    gens: &[StageGen],
    param_docs: &str,
    pairs: bool,
    vars: &[Variant],
) -> String {
    let (i, o) = (attr.dtype.name(), attr.out_dtype().name());
    let (b_shape, b_desc) = if attr.b_layout == BLayout::Col {
        (
            "N×K",
            "row-major, i.e. Bᵀ stored, as a PyTorch `Linear` weight (`b_layout = col`, the default); leading dimension ≥ K",
        )
    } else {
        ("K×N", "row-major (`b_layout = row`); leading dimension ≥ N")
    };
    let c_shape = if pairs { "M×N/2" } else { "M×N" };
    let c_reads = if attr
        .stages
        .iter()
        .any(|s| matches!(s.kind, StageKind::Accumulate))
    {
        "read (by `accumulate`) and written"
    } else {
        "written; its old contents are not read"
    };
    // Starts with an empty line: it follows the user's doc comment, if any, as a new paragraph.
    let mut doc = format!(
        "\nLaunches the fused GEMM `{name}` on `gpu`'s stream: `C = {formula}`, where r and c are the row and column of C.\n\n"
    );
    if gens.is_empty() {
        doc.push_str("No epilogue: C = A·B, accumulated in f32 and rounded once to C's dtype.\n\n");
    } else {
        doc.push_str(&format!(
            "The epilogue stages apply in the order written, on the f32 accumulator tile while it is on chip, before C is rounded to {o} and stored:\n"
        ));
        for (k, g) in gens.iter().enumerate() {
            doc.push_str(&format!("{}. {}\n", k + 1, g.doc));
        }
        doc.push('\n');
    }
    doc.push_str(&format!(
        "# Parameters\n\
         - `gpu`: the device; the launch is enqueued on its stream and not waited for.\n\
         - `a`: A, M×K, {i}, row-major (leading dimension ≥ K).\n\
         - `b`: B, {b_shape}, {i}, {b_desc}.\n\
         - `c`: C, {c_shape}, {o}, row-major; {c_reads}. Must not overlap `a` or `b`.\n"
    ));
    doc.push_str(param_docs);
    let tiles: Vec<String> = vars
        .iter()
        .filter(|v| v.vec && !v.mainloop.is_sm90())
        .map(|v| format!("{}×{}×{}", v.tile.bm, v.tile.bn, v.tile.bk))
        .collect();
    let has_tma = vars.iter().any(|v| v.mainloop.is_sm90());
    let tma_note = if has_tma {
        " On H100/H200 (the sm_90a module) the launcher takes the TMA + `wgmma` mainloop when A and B are 16-byte aligned with K > 0 and its model does not predict the `mma.sync` tiles faster (skinny shapes with split-K); `LaunchReport::mainloop` and `LaunchReport::why` say which ran and why."
    } else {
        ""
    };
    let arch_note = match attr.arch {
        Targets::Sm90 => format!(
            " Compiled for Hopper only (`arch = sm_90`): other GPUs fail with `Error::KernelNotFound`.{tma_note}"
        ),
        Targets::All | Targets::Sm80 => tma_note.to_string(),
    };
    let per_16_bytes = if attr.dtype == Dtype::F32 { 4 } else { 8 };
    doc.push_str(&format!(
        "\nAny alignment is accepted: when every device pointer is 16-byte aligned and the leading dimensions and K are multiples of {per_16_bytes} elements, the mainloop loads with 16-byte `cp.async`, otherwise with bounds-checked element loads. Tiles compiled (BM×BN×BK): {}; the planner picks one and a split-K factor per shape.{arch_note}\n",
        tiles.join(", ")
    ));
    doc.push_str(
        "\n# Errors\n\
         Operands are validated before anything is launched.\n\
         - `Error::DtypeMismatch`, `Error::ShapeMismatch`, `Error::LeadingDimension`, `Error::NullPointer`, \
         `Error::TooLarge`, `Error::Aliasing`, `Error::Misaligned` (not even element-aligned) and \
         `Error::InvalidArgument` (e.g. RoPE dimensions) name the operand that is wrong.\n\
         - `Error::LaunchLimit` when no compiled tile can launch this shape on this device.\n\
         - `Error::PtxNotBuilt`, `Error::UnsupportedArch`, `Error::KernelNotFound` when the kernel crate's PTX lacks \
         this kernel for the device; `Error::OutOfMemory` for the split-K or statistics workspace; `Error::Driver` for CUDA errors.\n\
         \n# Returns\n\
         What ran (`LaunchReport`): the entry point, its mainloop, the plan (tile, split-K factor, grid) and why; no entry point when M or N is 0 (nothing to do). The launch follows `gpu`'s `LaunchOptions` (`Gpu::with_options`).",
    );
    doc
}

fn stage_text(s: &Stage) -> String {
    match &s.kind {
        StageKind::Scale(ScaleArg::Param(p)) => format!("scale({p})"),
        StageKind::Scale(ScaleArg::Const(v)) => format!("scale({v})"),
        StageKind::Scale(ScaleArg::Vector(Axis::Row)) => "scale(row)".into(),
        StageKind::Scale(ScaleArg::Vector(Axis::Col)) => "scale(col)".into(),
        StageKind::Bias(Axis::Row) => "bias(row)".into(),
        StageKind::Bias(Axis::Col) => "bias".into(),
        StageKind::LayerNorm { eps } => format!("layer_norm(eps = {eps:e})"),
        StageKind::RmsNorm { eps } => format!("rms_norm(eps = {eps:e})"),
        StageKind::FoldedLayerNorm { eps } => format!("folded_layer_norm(eps = {eps:e})"),
        StageKind::NormedResidual { eps } => format!("normed_residual(eps = {eps:e})"),
        StageKind::Rope { theta } => format!("rope(theta = {theta})"),
        StageKind::Cast(d) => format!("cast({})", d.name()),
        StageKind::User(p) => quote!(#p).to_string().replace(' ', ""),
        _ => s.name().into(),
    }
}

/// Keeps the user's item compiling beside the errors (for IDEs, and so that one mistake does not
/// cascade into "cannot find function" errors at every call). A function's body is kept unless it
/// declares a return type, which its `{}` would not satisfy.
pub fn fallback(item: &TokenStream) -> TokenStream {
    match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(mut f) => {
            if matches!(f.sig.output, syn::ReturnType::Type(..)) {
                f.block = syn::parse_quote!({ ::core::unreachable!() });
            }
            quote!(#[allow(dead_code, unused_variables)] #f)
        }
        Err(_) => quote!(#[allow(dead_code)] #item),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(attr: &str, item: &str) -> String {
        let mut errors = crate::errors::Errors::default();
        let a = crate::parse::parse_attr(attr.parse().unwrap(), &mut errors).unwrap();
        assert!(errors.is_empty());
        let f: syn::ItemFn = syn::parse_str(item).unwrap();
        expand(&f, &a).to_string()
    }

    /// The `#[doc = "..."]` strings of the launcher, joined.
    fn launcher_doc_of(expansion: &str) -> String {
        let file: syn::File = syn::parse_str(expansion).unwrap();
        let f = file
            .items
            .iter()
            .find_map(|i| match i {
                syn::Item::Fn(f) if !f.sig.ident.to_string().contains("__") => Some(f),
                _ => None,
            })
            .expect("a launcher");
        f.attrs
            .iter()
            .filter_map(|a| match &a.meta {
                syn::Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => Some(s.value()),
                    _ => None,
                },
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn launcher_doc_gives_order_shapes_and_errors() {
        let e = expand_str(
            "epilogue = [bias, residual, layer_norm(eps = 1e-12)], dtype = bf16",
            "/// BERT attention output projection.\npub fn attn_out_proj() {}",
        );
        let doc = launcher_doc_of(&e);
        println!("{doc}");
        assert!(
            doc.starts_with(" BERT attention output projection.\n\nLaunches"),
            "{doc}"
        );
        assert!(doc.contains("`C = layer_norm(A·B + bias[c] + residual[r, c])`"));
        assert!(doc.contains("apply in the order written"));
        assert!(doc.contains("- `bias`: length N, bf16, contiguous: one value per output column, broadcast down the rows"));
        assert!(doc.contains("- `b`: B, N×K, bf16"));
        assert!(doc.contains("- `gamma`: length N"));
        assert!(doc.contains("`Error::ShapeMismatch`") && doc.contains("# Returns"));
    }

    #[test]
    fn formula_shows_where_scale_applies() {
        // `scale` before `bias` scales only the product; the docs show which.
        let d1 = launcher_doc_of(&expand_str(
            "epilogue = [scale(alpha), bias]",
            "pub fn k() {}",
        ));
        let d2 = launcher_doc_of(&expand_str(
            "epilogue = [bias, scale(alpha)]",
            "pub fn k() {}",
        ));
        assert!(d1.contains("`C = alpha·A·B + bias[c]`"), "{d1}");
        assert!(d2.contains("`C = alpha·(A·B + bias[c])`"), "{d2}");
        let d3 = launcher_doc_of(&expand_str("epilogue = [swiglu, bias]", "pub fn k() {}"));
        assert!(
            d3.contains("`c`: C, M×N/2") && d3.contains("- `bias`: length N/2"),
            "{d3}"
        );
    }
}
