//! # fused-gemm
//!
//! GEMM-plus-epilogue GPU kernels written in Rust. Declare a kernel with
//! [`#[fused_gemm(epilogue = [...])]`](macro@fused_gemm); `cargo build` compiles the device side
//! to PTX (see the `fused-gemm-build` crate) and the host side to a typed launcher that runs it
//! through `cudarc`.
//!
//! This crate is also the kernel crate for the built-in kernels in [`kernels`]: `build.rs`
//! compiles it for `nvptx64-nvidia-cuda` with the `builtin-kernels` feature, and the host build
//! embeds the resulting PTX ([`ptx`]).
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

pub use fused_gemm_macros::fused_gemm;

/// Device-side API (also compiled on the host, where intrinsics panic).
pub use fused_gemm_device as device;

#[cfg(not(target_arch = "nvptx64"))]
pub use fused_gemm_host as host;

#[cfg(not(target_arch = "nvptx64"))]
pub use fused_gemm_host::{Error, Gpu, Result};

pub mod kernels;

#[cfg(not(target_arch = "nvptx64"))]
pub mod ptx;

#[cfg(not(target_arch = "nvptx64"))]
pub mod ops;

#[cfg(not(target_arch = "nvptx64"))]
pub mod bert;

/// Paths used by code that `#[fused_gemm]` generates. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use fused_gemm_device as device;
    #[cfg(not(target_arch = "nvptx64"))]
    pub use fused_gemm_host as host;
}
