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

pub mod basic;
pub mod bert;
pub mod control;
// `#[fused_gemm]` emits its entry points in every nvptx64 build; outside this crate's own
// (`builtin-kernels`) build they would land in the PTX of every downstream kernel crate.
#[cfg(any(not(target_arch = "nvptx64"), feature = "builtin-kernels"))]
pub mod blocks;
#[cfg(any(not(target_arch = "nvptx64"), feature = "builtin-kernels"))]
pub mod gemm;
#[cfg(any(not(target_arch = "nvptx64"), feature = "builtin-kernels"))]
pub mod hopper;
pub mod rowwise;
#[cfg(any(not(target_arch = "nvptx64"), feature = "builtin-kernels"))]
pub mod stages;
pub mod waves;
