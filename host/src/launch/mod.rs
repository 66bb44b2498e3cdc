//! GEMM launches, in layers: [`dispatch`] validates a call and picks the mainloop and plan;
//! [`sm90`] launches the Hopper TMA + `wgmma` mainloop (with [`tune`] measuring its candidate
//! tiles when the device has an autotuner); [`norm_finish`] runs a row norm's finishing kernel;
//! [`workspace`] holds the buffers launches reuse; [`entry`] is the typed launch every kernel
//! of the crate goes through. What goes in besides the operands is the
//! handle's [`LaunchOptions`]; what comes out is a [`LaunchReport`].

pub mod dispatch;
pub mod entry;
pub mod norm_finish;
pub mod report;
pub mod sm90;
pub mod tune;
pub mod workspace;

pub use crate::options::{LaunchOptions, NormExchange};
pub use crate::shape::{DEFAULT_SMEM_LIMIT, LaunchShape};
pub use dispatch::launch;
pub use entry::{Entry, GemmParams, Kernel, LaunchMode, NormFinishParams, Sm90Params};
pub use report::LaunchReport;
pub use workspace::tensor_map;
