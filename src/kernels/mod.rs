//! Built-in kernels. Each entry point exists only in the nvptx64 build with the
//! `builtin-kernels` feature; its name is also a host constant, so the launcher loads by the
//! same string the device exports.

/// Declares a hand-written device entry point `fg_<name>` and a host constant `<NAME>` holding
/// its exported name.
macro_rules! entry {
    ($(#[$doc:meta])* $konst:ident = fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$doc])*
        pub const $konst: &str = stringify!($name);

        #[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "ptx-kernel" fn $name($($arg: $ty),*) $body
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
#[cfg(all(
    feature = "test-kernels",
    any(not(target_arch = "nvptx64"), feature = "builtin-kernels")
))]
pub mod hopper;
pub mod rowwise;
#[cfg(all(
    feature = "test-kernels",
    any(not(target_arch = "nvptx64"), feature = "builtin-kernels")
))]
pub mod stages;
pub mod waves;
