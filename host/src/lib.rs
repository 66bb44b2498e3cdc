//! Host runtime for fused-gemm, over `cudarc`.
//!
//! Modules from the bottom layer up; each uses only modules in rows above its own
//! (`tests/module_layers.rs` checks it).
//!
//! | layer | module | what |
//! |---|---|---|
//! | 0 | [`driver_ext`] | driver calls cudarc does not wrap (tensor-map encoding, cluster launches) |
//! | 0 | [`options`] | [`LaunchOptions`]: choices a caller forces on a handle's launches |
//! | 1 | [`error`] | the one error type; every fallible call returns [`Result`] |
//! | 2 | [`module`] | PTX sets embedded by kernel crates, picked per compute capability |
//! | 3 | [`gpu`] | [`Gpu`]: a device, its context and stream, loaded modules and functions |
//! | 4 | [`tensor`] | device tensors, views, and the raw descriptors launchers consume |
//! | 4 | [`shape`] | launch shapes, checked against the device's limits |
//! | 5 | [`validate`] | checks before every GEMM launch (shapes, dtypes, alignment, aliasing) |
//! | 6 | [`tensor_map`] | TMA descriptors of the Hopper mainloop's operands |
//! | 7 | [`plan`] | Roller-style tile construction for both mainloops: tile, split-K, grid, predicted time |
//! | 8 | [`kernel`] | what the macro's code describes: compiled variants, operands, parameters |
//! | 8 | [`autotune`] | measured tile choices, cached on disk |
//! | 8 | [`graph`] | capture launches into a CUDA graph and replay them |
//! | 9 | [`launch`] | the launch path: dispatch, Hopper launch, norm finishing kernel, workspaces |
//! | 10 | [`schedule`] | the wave scheduler (Rammer): persistent programs of many operators |
//! | 10 | [`weights`] | host-side weight layouts for fused SwiGLU/GeGLU and RoPE |
//! | 11 | [`reference`](mod@reference) | CPU f64 references of every kernel |
//! | 12 | [`testing`] | GPU-test helpers: skip without a GPU (or fail under `FUSED_GEMM_REQUIRE_GPU`), per-element comparisons, seeded random data, poison |
//! | 13 | [`sweep`] | plan sweeps: time forced plans to fit the plan model |
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
pub mod gpu;
pub mod graph;
pub mod kernel;
pub mod launch;
pub mod module;
pub mod options;
pub mod plan;
pub mod reference;
pub mod schedule;
pub mod shape;
pub mod sweep;
pub mod tensor;
pub mod tensor_map;
pub mod testing;
pub mod validate;
pub mod weights;

pub use error::{Error, Result};
pub use gpu::{Gpu, Stream};
pub use launch::LaunchReport;
pub use options::LaunchOptions;
pub use tensor::{MatrixDesc, Tensor, VectorDesc};

/// Re-export of the cudarc version this crate is built against.
pub use cudarc;
