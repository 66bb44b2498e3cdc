//! Host runtime for fused-gemm, over `cudarc`.
//!
//! | module | what |
//! |---|---|
//! | [`error`] | the one error type; every fallible call returns [`Result`] |
//! | [`gemm`] | the generic fused-GEMM launcher the macro's code calls |
//! | [`gpu`] | [`Gpu`]: a device, its context and stream, loaded modules |
//! | [`module`] | PTX sets embedded by kernel crates, picked per compute capability |
//! | [`launch`] | grid shapes and typed parameters for kernel launches |
//! | [`reference`] | CPU f64 references of every kernel |
//! | [`testing`] | GPU-test helpers: skip without a GPU, seeded random data, poison |
//! | [`weights`] | host-side weight layouts for fused SwiGLU/GeGLU and RoPE |

pub mod error;
pub mod gemm;
pub mod gpu;
pub mod launch;
pub mod module;
pub mod reference;
pub mod testing;
pub mod weights;

pub use error::{Error, Result};
pub use gpu::Gpu;

/// Re-export of the cudarc version this crate is built against.
pub use cudarc;
