//! Host runtime for fused-gemm, over `cudarc`.
//!
//! | module | what |
//! |---|---|
//! | [`error`] | the one error type; every fallible call returns [`Result`] |
//! | [`gemm`] | the generic fused-GEMM launcher the macro's code calls |
//! | [`sm90`] | its Hopper path: TMA eligibility, tensor maps, tile choice, persistent launch |
//! | [`driver_ext`] | driver calls cudarc does not wrap (tensor-map encoding) |
//! | [`gpu`] | [`Gpu`]: a device, its context and stream, loaded modules |
//! | [`module`] | PTX sets embedded by kernel crates, picked per compute capability |
//! | [`launch`] | grid shapes and typed parameters for kernel launches |
//! | [`tensor`] | device tensors, views, and the raw descriptors launchers consume |
//! | [`validate`] | checks before every GEMM launch (shapes, dtypes, alignment, aliasing) |
//! | [`plan`] | Roller-style tile construction: tile, split-K, grid, predicted time |
//! | [`autotune`] | optional timing of the top candidates, cached on disk |
//! | [`graph`] | capture launches into a CUDA graph and replay them |
//! | [`reference`](mod@reference) | CPU f64 references of every kernel |
//! | [`schedule`] | the wave scheduler (Rammer): persistent programs of many operators |
//! | [`testing`] | GPU-test helpers: skip without a GPU (or fail under `FUSED_GEMM_REQUIRE_GPU`), per-element comparisons, seeded random data, poison |
//! | [`weights`] | host-side weight layouts for fused SwiGLU/GeGLU and RoPE |
//!
//! # How a GEMM launcher uses this crate
//!
//! 1. Describe the operands: [`Tensor::desc`] / views' `desc()` for matrices, `vector_desc()`
//!    for vectors, into a [`validate::GemmCall`] with the epilogue's [`validate::EpilogueArg`]s.
//! 2. [`plan::Planner::plan_call`] validates and plans: `None` when M or N is 0 (return
//!    `Ok(())`), else the [`validate::Checked`] dimensions and a [`plan::Plan`].
//!    `checked.vector.mainloop()` picks the 16-byte or the scalar kernel variant
//!    (`checked.require_vector()` is the error when there is no scalar variant).
//! 3. When `plan.splits > 1`, provide `plan.workspace_bytes` of f32 partials and
//!    `plan.counter_bytes` of zeroed counters; for [`plan::NormPath::Partials`] the statistics
//!    buffer and the finishing kernel.
//! 4. `plan.gemm_args(..)` fills the kernel's `GemmArgs`; `plan.launch_shape().prepare(..)` opts
//!    in to large shared memory and gives the launch configuration.

pub mod autotune;
pub mod driver_ext;
pub mod error;
pub mod gemm;
pub mod gpu;
pub mod graph;
pub mod launch;
pub mod module;
pub mod plan;
pub mod reference;
pub mod schedule;
pub mod sm90;
pub mod tensor;
pub mod testing;
pub mod validate;
pub mod weights;

pub use error::{Error, Result};
pub use gpu::{Gpu, Stream};
pub use launch::{LaunchOptions, LaunchReport};
pub use tensor::{MatrixDesc, Tensor, VectorDesc};

/// Re-export of the cudarc version this crate is built against.
pub use cudarc;
