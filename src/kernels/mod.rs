//! Built-in kernels. Each entry point exists only in the nvptx64 build with the
//! `builtin-kernels` feature; on the host its name and argument type are constants, so the
//! launcher loads by the same string the device exports and can pass only what it takes.

/// Declares a hand-written device entry point `fg_<name>` and two host constants: `<NAME>`, its
/// exported name (for PTX checks and name lists), and `fg_<name>`, an
/// [`Entry`](fused_gemm_host::launch::Entry) of its parameter type, which launchers load with
/// [`Gpu::kernel`](fused_gemm_host::Gpu::kernel): a launch can then pass only that type.
///
/// Two forms: `fn fg_x(p: T)` takes one [`KernelParam`](crate::device::params::KernelParam)
/// `T` by value; `fn fg_x(p: T { a: A, b: B })` takes the fields of the
/// [`param_list!`](crate::device::param_list) struct `T` as its parameters, listed with their
/// types (checked at compile time against `T`: every field, its type, `T`'s order), and binds
/// them to `p: T` for the body. Prefer the second: a struct passed by value compiles to worse
/// code (see `fused_gemm_device::params`).
macro_rules! entry {
    (@host $(#[$doc:meta])* $konst:ident, $name:ident, $ty:ty) => {
        #[doc = concat!("Exported name of `", stringify!($name), "`.")]
        pub const $konst: &str = stringify!($name);

        $(#[$doc])*
        #[cfg(not(target_arch = "nvptx64"))]
        #[allow(non_upper_case_globals)]
        pub const $name: fused_gemm_host::launch::Entry<$ty> =
            // SAFETY: the entry point declared below under this name takes `$ty`'s parameters
            // (its fields as listed: `check_params!`).
            unsafe { fused_gemm_host::launch::Entry::new(stringify!($name)) };
    };
    (
        $(#[$doc:meta])*
        $konst:ident = fn $name:ident($p:ident : $ty:ty { $($field:ident : $fty:ty),* $(,)? })
        $body:block
    ) => {
        entry!(@host $(#[$doc])* $konst, $name, $ty);
        check_params!($ty { $($field: $fty),* });

        $(#[$doc])*
        #[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "ptx-kernel" fn $name($($field: $fty),*) {
            type Args = $ty;
            #[allow(unused_variables)]
            let $p = Args { $($field),* };
            $body
        }
    };
    ($(#[$doc:meta])* $konst:ident = fn $name:ident($arg:ident : $ty:ty) $body:block) => {
        entry!(@host $(#[$doc])* $konst, $name, $ty);

        $(#[$doc])*
        #[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name($arg: $ty) $body
    };
}

/// Checks at compile time that `$field: $fty, ...` are the fields of the
/// [`param_list!`](crate::device::param_list) struct `$ty`: each once, with its type, in the
/// order and with the sizes of `$ty`'s [`ParamLayout`](crate::device::params::ParamLayout), so an
/// entry point declared with these parameters takes what a host launch of `$ty` passes.
macro_rules! check_params {
    ($ty:ty { $($field:ident : $fty:ty),* }) => {
        const _: () = {
            type Args = $ty;
            // Every field once, of the listed type: a struct literal names each field.
            let _: fn($($fty),*) -> Args = |$($field),*| Args { $($field),* };
            let params = <Args as $crate::device::params::ParamLayout>::PARAMS;
            let listed = [$((::core::mem::offset_of!(Args, $field), ::core::mem::size_of::<$fty>())),*];
            assert!(params.len() == listed.len(), "every field is a parameter");
            let mut i = 0;
            while i < listed.len() {
                assert!(
                    params[i].0 == listed[i].0 && params[i].1 == listed[i].1,
                    "parameters in the order of the fields"
                );
                i += 1;
            }
        };
    };
}

/// The grid entry points of a persistent family's arms ([`waves`], [`control`]): per arm, the
/// compile-time checks (block size, tile, parameters within a task's epilogue words), the launch
/// bounds and a plain `sm80::run` entry point, bf16 in and out, B stored N×K.
macro_rules! family_grid_arms {
    ($threads:literal; $( $kind:ty, $tile:ident => $grid:ident, $grid_bounds:ident; )+) => {
        $(
            const _: () = {
                assert!($tile.threads() == $threads, "every arm of a family has its block size");
                assert!($tile.check().is_none());
                assert!(
                    core::mem::size_of::<<$kind as crate::device::epilogue::Stage>::Params>()
                        <= 8 * crate::device::kernel::persistent::EPI_WORDS,
                    "the kind's parameters must fit in a task's epilogue words"
                );
            };

            #[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
            #[unsafe(no_mangle)]
            #[used]
            #[doc(hidden)]
            #[allow(non_upper_case_globals)]
            pub static $grid_bounds: [u32; 2] = [$tile.threads(), $tile.min_ctas_per_sm()];

            #[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
            #[unsafe(no_mangle)]
            #[doc(hidden)]
            pub unsafe extern "ptx-kernel" fn $grid(
                args: GemmArgs,
                epi: <$kind as Stage>::Params,
            ) {
                unsafe {
                    sm80::run::<
                        Bf16, Bf16, true,
                        { $tile.mi() as usize }, { $tile.ni() as usize },
                        { $tile.warps_m }, { $tile.warps_n }, { $tile.bk }, { $tile.stages },
                        true, $kind,
                    >(&args, &epi)
                }
            }
        )+
    };
}

/// Inside a persistent family's `Dispatch::tile`: runs task `$tile_c` of the arm numbered `$arm`
/// (its index in `$names`) with the parameters read from `$epi`, and returns; falls through
/// when no arm has that number.
#[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
macro_rules! family_dispatch {
    (
        $arm:ident, $args:ident, $epi:ident, $tile_c:ident, $names:ident;
        $( $kind:ty, $tile:ident => $grid:ident; )+
    ) => {
        $(
            if $arm == const { crate::kernels::waves::arm_index($names, stringify!($grid)) as u32 } {
                unsafe {
                    let params = persistent::read_params::<<$kind as Stage>::Params>($epi);
                    sm80::run_tile::<
                        Bf16, Bf16, true,
                        { $tile.mi() as usize }, { $tile.ni() as usize },
                        { $tile.warps_m }, { $tile.warps_n }, { $tile.bk }, { $tile.stages },
                        true, $kind,
                    >($args, &params, $tile_c);
                }
                return;
            }
        )+
    };
}

pub mod basic;
pub mod bert;
pub mod control;
// `#[fused_gemm]` emits its entry points in every nvptx64 build; outside this crate's own
// (`builtin-kernels`) build they would land in the PTX of every downstream kernel crate.
#[cfg(any(not(target_arch = "nvptx64"), feature = "builtin-kernels"))]
pub mod blocks;
#[cfg(any(not(target_arch = "nvptx64"), feature = "builtin-kernels"))]
pub mod gemm;
#[cfg(any(
    all(not(target_arch = "nvptx64"), feature = "test-kernels"),
    feature = "builtin-test-kernels"
))]
pub mod hopper;
pub mod rowwise;
#[cfg(any(
    all(not(target_arch = "nvptx64"), feature = "test-kernels"),
    feature = "builtin-test-kernels"
))]
pub mod stages;
pub mod waves;

/// The hand-written entry points' PTX signatures against their host argument types: what
/// [`Entry::new`](fused_gemm_host::launch::Entry::new) asserts, checked on the embedded modules
/// (skipped in a build with `FUSED_GEMM_SKIP_PTX`).
#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use fused_gemm_host::launch::Entry;

    use super::{basic, bert, control, rowwise};
    use crate::device::params::ParamLayout;

    /// (name, byte size of each PTX parameter) of an entry point taking `A`.
    fn expected<A: ParamLayout>(e: Entry<A>) -> (&'static str, Vec<usize>) {
        let sizes = A::PARAMS.iter().map(|p| p.1).filter(|&s| s > 0).collect();
        (e.name(), sizes)
    }

    fn entries() -> Vec<(&'static str, Vec<usize>)> {
        macro_rules! expected {
            ($($entry:expr),* $(,)?) => { vec![$(expected($entry)),*] };
        }
        use rowwise as r;
        expected![
            basic::fg_axpy_f32,
            basic::fg_gemm_naive_f32,
            r::fg_spin_ns,
            control::fg_exit_head,
            control::fg_lstm_stationary_b1,
            control::fg_lstm_stationary_b4,
            r::fg_bias_f32,
            r::fg_bias_relu_f32,
            r::fg_bias_gelu_f32,
            r::fg_bias_gelu_tanh_f32,
            r::fg_bias_silu_f32,
            r::fg_bias_bf16,
            r::fg_bias_relu_bf16,
            r::fg_bias_gelu_bf16,
            r::fg_bias_gelu_tanh_bf16,
            r::fg_bias_silu_bf16,
            r::fg_bias_f16,
            r::fg_bias_relu_f16,
            r::fg_bias_gelu_f16,
            r::fg_bias_gelu_tanh_f16,
            r::fg_bias_silu_f16,
            r::fg_swiglu_f32,
            r::fg_swiglu_bf16,
            r::fg_swiglu_f16,
            r::fg_layer_norm_f32,
            r::fg_layer_norm_bf16,
            r::fg_layer_norm_f16,
            r::fg_rms_norm_f32,
            r::fg_rms_norm_bf16,
            r::fg_rms_norm_f16,
            r::fg_rms_scale_f32,
            r::fg_rms_scale_bf16,
            r::fg_rms_scale_f16,
            bert::fg_bert_embed_layer_norm_f32,
            bert::fg_bert_embed_layer_norm_f16,
            bert::fg_bert_embed_layer_norm_bf16,
            bert::fg_bert_mean_pool_l2_f32,
            bert::fg_bert_mean_pool_l2_f16,
            bert::fg_bert_mean_pool_l2_bf16,
            bert::fg_bert_attention_simt_h32_f32,
            bert::fg_bert_attention_simt_h64_f32,
            bert::fg_bert_attention_simt_h128_f32,
            bert::fg_bert_attention_mma_h32_f16,
            bert::fg_bert_attention_mma_h64_f16,
            bert::fg_bert_attention_mma_h128_f16,
            bert::fg_bert_attention_mma_h32_bf16,
            bert::fg_bert_attention_mma_h64_bf16,
            bert::fg_bert_attention_mma_h128_bf16,
        ]
    }

    /// Byte sizes of the parameters of `.entry name(...)` in `ptx`, or `None` when absent.
    fn ptx_params(ptx: &str, name: &str) -> Option<Vec<usize>> {
        let start = ptx.find(&format!(".entry {name}("))?;
        let sig = &ptx[start..];
        let sig = &sig[..sig.find(')')?];
        // `.param .align 8 .b8 name[88]`, or `.param .u64 name`.
        let size = |p: &str| {
            if let Some(open) = p.find('[') {
                return p[open + 1..p.find(']')?].parse().ok();
            }
            let ty = p.split_whitespace().nth(1)?;
            ty.get(2..)?.parse::<usize>().ok().map(|bits| bits / 8)
        };
        sig.lines()
            .map(str::trim)
            .filter(|l| l.starts_with(".param"))
            .map(size)
            .collect()
    }

    #[test]
    fn ptx_params_reads_structs_and_scalars() {
        let ptx = ".visible .entry fg_a(\n\t.param .align 8 .b8 fg_a_param_0[88]\n)\n.maxntid 1\n\
                   .visible .entry fg_ab(\n\t.param .u64 fg_ab_param_0,\n\t.param .f32 fg_ab_param_1\n)\n";
        assert_eq!(ptx_params(ptx, "fg_a"), Some(vec![88]));
        assert_eq!(ptx_params(ptx, "fg_ab"), Some(vec![8, 4]));
        assert_eq!(ptx_params(ptx, "fg_b"), None);
    }

    #[test]
    fn entry_parameters_match_their_argument_types() {
        let mut checked = 0;
        for module in crate::ptx::BUILTIN.modules {
            if module.ptx.is_empty() {
                continue;
            }
            let ptx = module.ptx_text("fused_gemm").unwrap();
            // The Hopper probes are pushed in a build with the test kernels.
            #[cfg_attr(not(feature = "test-kernels"), allow(unused_mut))]
            let mut all = entries();
            #[cfg(feature = "test-kernels")]
            if module.arch == fused_gemm_host::module::Arch::Sm90a {
                use super::hopper::probe;
                let sizes = |p: &[(usize, usize)]| p.iter().map(|p| p.1).collect::<Vec<_>>();
                all.push((probe::TMA, sizes(probe::TmaProbeArgs::PARAMS)));
                for name in [probe::WGMMA_N128, probe::WGMMA_N256] {
                    all.push((name, sizes(probe::WgmmaProbeArgs::PARAMS)));
                }
            }
            for (name, sizes) in all {
                let got = ptx_params(&ptx, name)
                    .unwrap_or_else(|| panic!("{name} missing from the {} PTX", module.arch));
                assert_eq!(got, sizes, "{} {name}: PTX parameters", module.arch);
                checked += 1;
            }
        }
        if checked == 0 {
            eprintln!("no PTX embedded (FUSED_GEMM_SKIP_PTX): nothing checked");
        }
    }
}
