//! Code generation: device entry points (nvptx64) and the host spec + typed launcher.

use fused_gemm_device::gemm::sm90::TILES_SM90;
use fused_gemm_device::gemm::{ROW_TILES_F32, ROW_TILES_SM80, TILES_F32, TILES_SM80, TileShape};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};

use crate::ast::*;

const DEV: &str = "::fused_gemm::__private::device";

fn dev() -> TokenStream {
    DEV.parse().unwrap()
}

/// One compiled variant.
struct Variant {
    entry: String,
    tile: TileShape,
    vec: bool,
    /// The Hopper TMA + wgmma mainloop (sm_90a module only).
    tma: bool,
}

/// The instantiated tiles of the mainloop that serves `dtype`: tensor cores (`mma.sync`) for
/// 16-bit inputs, CUDA cores for f32.
pub fn tile_lists(dtype: Dtype) -> (&'static [TileShape], &'static [TileShape]) {
    match dtype {
        Dtype::F32 => (TILES_F32, ROW_TILES_F32),
        _ => (TILES_SM80, ROW_TILES_SM80),
    }
}

fn variants(name: &str, attr: &KernelAttr) -> Vec<Variant> {
    let has_norm = attr.stages.iter().any(Stage::is_norm);
    let (main, rows) = tile_lists(attr.dtype);
    let mut tiles: Vec<(TileShape, bool)> = Vec::new();
    if let Some(((bm, bn, bk), _)) = attr.tile {
        let t = *main
            .iter()
            .chain(rows)
            .find(|t| (t.bm, t.bn, t.bk) == (bm, bn, bk))
            .expect("validated");
        tiles.push((t, true));
        tiles.push((t, false));
    } else {
        tiles.extend(main.iter().take(3).map(|t| (*t, true)));
        // The bounds-checked path for unaligned operands (known-faults #3), one modest tile.
        tiles.push((main[2], false));
        if has_norm {
            tiles.extend(rows.iter().map(|t| (*t, true)));
        }
    }
    let arch = match (attr.dtype, attr.arch) {
        (Dtype::F32, _) => "simt",
        (_, Arch::Sm80) => "sm80",
        (_, Arch::Sm90) => "sm90",
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
            tma: false,
        })
        .collect();
    // arch = sm_90: the Hopper mainloop for 16-bit inputs with B stored N×K; the sm_80 variants
    // above stay as the path for operands TMA cannot read.
    if attr.arch == Arch::Sm90
        && attr.dtype != Dtype::F32
        && attr.b_layout == BLayout::Col
        && attr.tile.is_none()
    {
        out.extend(TILES_SM90.iter().map(|t| Variant {
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
            tma: true,
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
}

struct Names(Vec<String>);

impl Names {
    fn take(&mut self, base: &str) -> syn::Ident {
        let mut name = base.to_string();
        let mut i = 2;
        while self.0.contains(&name) {
            name = format!("{base}_{i}");
            i += 1;
        }
        self.0.push(name.clone());
        format_ident!("{}", name)
    }
}

fn stage_gen(
    kernel: &str,
    idx: usize,
    s: &Stage,
    attr: &KernelAttr,
    after_pair: bool,
    names: &mut Names,
    extra_items: &mut TokenStream,
) -> StageGen {
    let d = dev();
    let st = quote!(#d::epilogue::stages);
    let out_name = attr.out_dtype().name();
    let width_doc = if after_pair { "N/2" } else { "N" };
    let nil = quote!(#d::epilogue::Nil);
    let simple = |ty: TokenStream| StageGen {
        ty,
        params: nil.clone(),
        checks: quote!(),
        operands: vec![],
        launch_params: vec![],
    };
    match &s.kind {
        StageKind::Relu => simple(quote!(#st::Relu)),
        StageKind::Gelu => simple(quote!(#st::Gelu)),
        StageKind::GeluTanh => simple(quote!(#st::GeluTanh)),
        StageKind::Silu => simple(quote!(#st::Silu)),
        StageKind::Sigmoid => simple(quote!(#st::Sigmoid)),
        StageKind::SwiGlu => simple(quote!(#st::SwiGlu)),
        StageKind::GeGlu => simple(quote!(#st::GeGlu)),
        StageKind::Accumulate => simple(quote!(#st::Accumulate)),
        StageKind::Cast(dt) => {
            let t = dt.device_type();
            simple(quote!(#st::Cast<#t>))
        }
        StageKind::User(path) => {
            let w = format_ident!("__FusedGemmUser_{}_{}", kernel, idx);
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
            simple(quote!(#st::User<#w>))
        }
        StageKind::Scale(ScaleArg::Const(v)) => {
            let v = *v as f32;
            StageGen {
                ty: quote!(#st::Scale),
                params: quote!(#st::ScaleParams { alpha: #v }),
                checks: quote!(),
                operands: vec![],
                launch_params: vec![],
            }
        }
        StageKind::Scale(ScaleArg::Param(p)) => {
            let id = names.take(&p.to_string());
            StageGen {
                ty: quote!(#st::Scale),
                params: quote!(#st::ScaleParams { alpha: #id }),
                checks: quote!(),
                operands: vec![],
                launch_params: vec![LaunchParam {
                    ident: id,
                    ty: quote!(f32),
                    doc: "scalar factor of `scale`".into(),
                }],
            }
        }
        StageKind::Scale(ScaleArg::Vector(axis)) | StageKind::Bias(axis) => {
            let is_scale = matches!(s.kind, StageKind::Scale(_));
            let (ty, base, variant, len_doc) = match (is_scale, axis) {
                (true, Axis::Row) => (
                    quote!(#st::ScaleRow),
                    "row_scale",
                    format_ident!("ScaleRow"),
                    "M",
                ),
                (true, Axis::Col) => (
                    quote!(#st::ScaleCol),
                    "col_scale",
                    format_ident!("ScaleCol"),
                    width_doc,
                ),
                (false, Axis::Row) => (
                    quote!(#st::BiasRow),
                    "row_bias",
                    format_ident!("BiasRow"),
                    "M",
                ),
                (false, Axis::Col) => (
                    quote!(#st::BiasCol),
                    "bias",
                    format_ident!("Bias"),
                    width_doc,
                ),
            };

            let dt_name = if is_scale { "f32" } else { out_name };
            let id = names.take(base);
            let desc = format_ident!("{}_desc", id);
            let lit = id.to_string();
            let what = if is_scale { "multiplies" } else { "adds" };
            let along = if *axis == Axis::Row {
                "one value per row"
            } else {
                "one value per output column, broadcast down the rows"
            };
            StageGen {
                ty,
                params: quote!(#st::VectorParams { ptr: #desc.ptr }),
                checks: quote!(let #desc = #id.vector(gpu)?;),
                operands: vec![
                    quote!(::fused_gemm::__private::host::validate::EpilogueArg {
                        name: #lit, stage: #idx, operand: ::fused_gemm::__private::host::validate::Operand::#variant(#desc),
                    }),
                ],
                launch_params: vec![LaunchParam {
                    ident: id,
                    ty: quote!(&impl ::fused_gemm::__private::host::gemm::AsVector),
                    doc: format!("length {len_doc}, {dt_name}; {what} {along}"),
                }],
            }
        }
        StageKind::Residual => {
            let id = names.take("residual");
            let desc = format_ident!("{}_desc", id);
            let lit = id.to_string();
            StageGen {
                ty: quote!(#st::Residual),
                params: quote!(#st::MatrixParams { ptr: #desc.ptr, ld: #desc.ld as u32, _pad: 0 }),
                checks: quote!(let #desc = #id.matrix(gpu)?;),
                operands: vec![
                    quote!(::fused_gemm::__private::host::validate::EpilogueArg {
                        name: #lit, stage: #idx, operand: ::fused_gemm::__private::host::validate::Operand::Residual(#desc),
                    }),
                ],
                launch_params: vec![LaunchParam {
                    ident: id,
                    ty: quote!(&impl ::fused_gemm::__private::host::gemm::AsMatrix),
                    doc: format!(
                        "M×{width_doc}, {out_name}, row-major; added element-wise (may be C itself)"
                    ),
                }],
            }
        }
        StageKind::LayerNorm { eps } | StageKind::RmsNorm { eps } => {
            let ln = matches!(s.kind, StageKind::LayerNorm { .. });
            let eps = *eps as f32;
            let g = names.take("gamma");
            let gd = format_ident!("{}_desc", g);
            let gl = g.to_string();
            let mut checks = quote!(let #gd = #g.vector(gpu)?;);
            let mut operands = vec![
                quote!(::fused_gemm::__private::host::validate::EpilogueArg {
                    name: #gl, stage: #idx, operand: ::fused_gemm::__private::host::validate::Operand::Gamma(#gd),
                }),
                quote!(::fused_gemm::__private::host::validate::EpilogueArg {
                    name: "eps", stage: #idx, operand: ::fused_gemm::__private::host::validate::Operand::Eps(#eps),
                }),
            ];
            let mut lp = vec![LaunchParam {
                ident: g,
                ty: quote!(&impl ::fused_gemm::__private::host::gemm::AsVector),
                doc: format!("length {width_doc}, {out_name}; the norm's scale γ"),
            }];
            if ln {
                let b = names.take("beta");
                let bd = format_ident!("{}_desc", b);
                let bl = b.to_string();
                checks.extend(quote!(let #bd = #b.vector(gpu)?;));
                operands.push(quote!(::fused_gemm::__private::host::validate::EpilogueArg {
                    name: #bl, stage: #idx, operand: ::fused_gemm::__private::host::validate::Operand::Beta(#bd),
                }));
                lp.push(LaunchParam {
                    ident: b,
                    ty: quote!(&impl ::fused_gemm::__private::host::gemm::AsVector),
                    doc: format!("length {width_doc}, {out_name}; the norm's shift β"),
                });
                StageGen {
                    ty: quote!(#st::Norm<#st::LayerNorm>),
                    params: quote!(#st::LayerNormParams { gamma: #gd.ptr, beta: #bd.ptr, stats, eps: #eps, _pad: 0 }),
                    checks,
                    operands,
                    launch_params: lp,
                }
            } else {
                StageGen {
                    ty: quote!(#st::Norm<#st::RmsNorm>),
                    params: quote!(#st::RmsNormParams { gamma: #gd.ptr, stats, eps: #eps, _pad: 0 }),
                    checks,
                    operands,
                    launch_params: lp,
                }
            }
        }
        StageKind::Rope { theta } => {
            let theta = *theta as f32;
            let id = names.take("rope");
            let lit = id.to_string();
            let idx = idx;
            StageGen {
                ty: quote!(#st::Rope),
                params: quote!(#st::RopeParams {
                    theta: #theta,
                    head_dim: #id.head_dim,
                    rotary_dim: #id.rotary_dim,
                    seq_len: #id.seq_len,
                    pos_offset: #id.pos_offset,
                    _pad: 0,
                }),
                checks: quote!(),
                operands: vec![quote!(::fused_gemm::__private::host::validate::EpilogueArg {
                    name: #lit, stage: #idx, operand: ::fused_gemm::__private::host::validate::Operand::Rope(#id.spec(#theta)),
                })],
                launch_params: vec![LaunchParam {
                    ident: id,
                    ty: quote!(::fused_gemm::__private::host::gemm::RopeArgs),
                    doc: "head_dim, rotary_dim, seq_len and pos_offset of the rotation (row r is at position r % seq_len + pos_offset)".into(),
                }],
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

pub fn expand(item: &syn::ItemFn, attr: &KernelAttr) -> TokenStream {
    let d = dev();
    let name = &item.sig.ident;
    let name_s = name.to_string();
    let user_docs: Vec<&syn::Attribute> = item
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .collect();
    let spec = format_ident!("{}", name_s.to_uppercase());
    let chain_ty = format_ident!("__FusedGemmChain_{}", name_s);
    let post_ty = format_ident!("__FusedGemmPost_{}", name_s);

    let mut names = Names(vec![
        "gpu".into(),
        "a".into(),
        "b".into(),
        "c".into(),
        "m".into(),
        "n".into(),
        "stats".into(),
    ]);
    let mut extra = TokenStream::new();
    let mut gens = Vec::new();
    let mut after_pair = false;
    for (i, s) in attr.stages.iter().enumerate() {
        gens.push(stage_gen(
            &name_s, i, s, attr, after_pair, &mut names, &mut extra,
        ));
        if s.is_pairwise_reducing() {
            after_pair = true;
        }
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
        Arch::Sm80 => quote!(target_arch = "nvptx64"),
        Arch::Sm90 => quote!(all(target_arch = "nvptx64", target_feature = "sm_90")),
    };

    let vars = variants(&name_s, attr);
    let mut entries = TokenStream::new();
    let mut variant_values = Vec::new();
    for v in &vars {
        let entry = format_ident!("{}", v.entry);
        let t = v.tile;
        let (mi, ni) = (t.mi() as usize, t.ni() as usize);
        let (wm, wn, bk, stages, vec) = (t.warps_m, t.warps_n, t.bk, t.stages, v.vec);
        let mainloop = if v.tma {
            quote!(#d::gemm::sm90::run::<#in_t, #out_t, #mi, #ni, #wm, #stages, #chain_ty>(&args, &epi, &tma))
        } else if attr.dtype == Dtype::F32 {
            quote!(#d::gemm::simt::run::<#out_t, #b_col, #mi, #ni, #wm, #wn, #bk, #stages, #vec, #chain_ty>(&args, &epi))
        } else {
            quote!(#d::gemm::sm80::run::<#in_t, #out_t, #b_col, #mi, #ni, #wm, #wn, #bk, #stages, #vec, #chain_ty>(&args, &epi))
        };
        let bounds = format_ident!("__fg_launch_bounds__{}", v.entry);
        let (threads, min_ctas) = if v.tma {
            (fused_gemm_device::gemm::sm90::THREADS, 1)
        } else {
            (t.threads(), t.min_ctas_per_sm())
        };
        // Hopper entries take the tensor maps as a third parameter and exist only in the
        // sm_90a module.
        let (cfg, tma_param) = if v.tma {
            (
                quote!(all(target_arch = "nvptx64", target_feature = "sm_90a")),
                quote!(, tma: #d::gemm::sm90::Sm90Args),
            )
        } else {
            (arch_cfg.clone(), quote!())
        };
        entries.extend(quote! {
            #[cfg(#cfg)]
            #[unsafe(no_mangle)]
            #[used]
            #[doc(hidden)]
            #[allow(non_upper_case_globals)]
            pub static #bounds: [u32; 2] = [#threads, #min_ctas];
            #[cfg(#cfg)]
            #[unsafe(no_mangle)]
            #[doc(hidden)]
            pub unsafe extern "ptx-kernel" fn #entry(args: #d::gemm::GemmArgs, epi: <#chain_ty as #d::epilogue::Stage>::Params #tma_param) {
                unsafe { #mainloop }
            }
        });
        let e = &v.entry;
        let (bm, bn) = (t.bm, t.bn);
        variant_values.push(quote! {
            ::fused_gemm::__private::host::gemm::KernelVariant {
                entry: #e,
                tile: #d::gemm::TileShape::new(#bm, #bn, #bk, #wm, #wn, #stages),
                vec: #vec,
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
                    #[doc(hidden)]
                    #[allow(non_camel_case_types)]
                    pub type #post_ty = #post;
                    #[cfg(#arch_cfg)]
                    #[unsafe(no_mangle)]
                    #[doc(hidden)]
                    pub unsafe extern "ptx-kernel" fn #fin_id(
                        args: #d::kernel::norm_finish::NormFinishArgs,
                        norm: <#kind as #d::epilogue::stages::RowNorm>::Params,
                        post: <#post_ty as #d::epilogue::Stage>::Params,
                    ) {
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

    // Launcher docs.
    let (b_shape, b_desc) = if b_col {
        ("N×K", "row-major (B transposed: PyTorch `Linear` weights)")
    } else {
        ("K×N", "row-major")
    };
    let c_shape = if pairs { "M×N/2" } else { "M×N" };
    let mut doc = format!(
        "Launches `{name_s}`: C = epilogue(A·B) on the GPU, the epilogue `[{stage_str}]` applied in that order to the f32 \
         accumulator tile before the store.\n\n# Parameters\n- `gpu`: the device.\n- `a`: A, M×K, {} row-major.\n\
         - `b`: B, {b_shape}, {}, {b_desc}.\n- `c`: C, {c_shape}, {}, row-major (written).\n",
        attr.dtype.name(),
        attr.dtype.name(),
        attr.out_dtype().name()
    );
    let mut sig_params = TokenStream::new();
    for g in &gens {
        for p in &g.launch_params {
            doc.push_str(&format!("- `{}`: {}.\n", p.ident, p.doc));
            let (id, ty) = (&p.ident, &p.ty);
            sig_params.extend(quote!(#id: #ty,));
        }
    }
    doc.push_str(
        "\n# Errors\n`Error::InvalidArgument` naming the operand whose shape, dtype, leading dimension, bounds or aliasing \
         is wrong; `Error::LaunchLimit` when no compiled tile fits; `Error::NoDriver`-family and driver errors from the launch.\n\
         Returns the plan that ran (tile, split-K, grid), or `None` when M or N is 0 (nothing to do).",
    );
    let spec_doc = format!("Compiled variants and dtypes of [`{name_s}`].");

    quote! {
        #extra
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        pub type #chain_ty = #chain;
        #post_items
        #entries

        #[cfg(not(target_arch = "nvptx64"))]
        #[doc = #spec_doc]
        pub static #spec: ::fused_gemm::__private::host::gemm::GemmKernelSpec = ::fused_gemm::__private::host::gemm::GemmKernelSpec {
            name: #name_s,
            stages: #stage_str,
            ptx: &crate::__FUSED_GEMM_PTX,
            input: #in_dt,
            output: #out_dt,
            b_col: #b_col,
            accumulate: #accumulate,
            norm_finish: #finish_entry,
            variants: &[#(#variant_values),*],
        };

        #(#user_docs)*
        #[cfg(not(target_arch = "nvptx64"))]
        #[doc = #doc]
        #[allow(clippy::too_many_arguments, unused_variables)]
        pub fn #name(
            gpu: &::fused_gemm::__private::host::Gpu,
            a: &impl ::fused_gemm::__private::host::gemm::AsMatrix,
            b: &impl ::fused_gemm::__private::host::gemm::AsMatrix,
            c: &mut impl ::fused_gemm::__private::host::gemm::AsMatrix,
            #sig_params
        ) -> ::fused_gemm::__private::host::Result<Option<::fused_gemm::__private::host::plan::Plan>> {
            use ::fused_gemm::__private::host::gemm::{AsMatrix as _, AsVector as _};
            let a = a.matrix(gpu)?;
            let b = b.matrix(gpu)?;
            let c = c.matrix(gpu)?;
            #(#checks)*
            let call = ::fused_gemm::__private::host::validate::GemmCall {
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
            ::fused_gemm::__private::host::gemm::launch(gpu, &#spec, &call, |stats: u64| (#params_value, #finish_value))
        }
    }
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
        StageKind::Rope { theta } => format!("rope(theta = {theta})"),
        StageKind::Cast(d) => format!("cast({})", d.name()),
        StageKind::User(p) => quote!(#p).to_string().replace(' ', ""),
        _ => s.name().into(),
    }
}

/// Keeps the user's item compiling (for IDEs and to avoid cascading errors) beside the errors.
pub fn fallback(item: &TokenStream) -> TokenStream {
    let _ = Span::call_site();
    quote!(#[allow(dead_code)] #item)
}
