//! Host runtime for fused-gemm, over `cudarc`.
//!
//! | module | what |
//! |---|---|
//! | [`error`] | the one error type; every fallible call returns [`Result`] |
//! | [`gpu`] | [`Gpu`]: a device, its context and stream, loaded modules |
//! | [`module`] | PTX sets embedded by kernel crates, picked per compute capability |
//! | [`launch`] | grid shapes and typed parameters for kernel launches |
//! | [`tensor`] | device tensors, views, and the raw descriptors launchers consume |
//! | [`validate`] | checks before every GEMM launch (shapes, dtypes, alignment, aliasing) |
//! | [`plan`] | Roller-style tile construction: tile, split-K, grid, predicted time |
//! | [`autotune`] | optional timing of the top candidates, cached on disk |
//! | [`graph`] | capture launches into a CUDA graph and replay them |
//! | [`reference`](mod@reference) | CPU f64 references of every kernel |
//! | [`testing`] | GPU-test helpers: skip without a GPU, seeded random data, poison |

pub mod autotune;
pub mod error;
pub mod gpu;
pub mod graph;
pub mod launch;
pub mod module;
pub mod plan;
pub mod reference;
pub mod tensor;
pub mod testing;
pub mod validate;

pub use error::{Error, Result};
pub use gpu::{Gpu, Stream};
pub use tensor::{MatrixDesc, Tensor, VectorDesc};

/// Re-export of the cudarc version this crate is built against.
pub use cudarc;
