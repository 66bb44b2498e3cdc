//! The wave scheduler (Rammer: Ma et al., "Rammer: Enabling Holistic Deep Learning Compiler
//! Optimizations with rTasks", OSDI'20): packs independent fused-GEMM operators into waves of
//! one persistent launch.
//!
//! | module | what |
//! |---|---|
//! | [`dag`] | the graph builder: operators in program order, connected through their memory |
//! | [`family`] | what a persistent entry point runs: arms (epilogue kind × tile) |
//! | [`waves`] | waves, variant choice, placement, program merging, fall-back ([`schedule`]) |
//! | [`verify`] | independent checks of a schedule (tests, debugging) |
//! | [`table`] | the device task tables of a persistent program |
//! | [`exec`] | uploading and launching on the GPU ([`WaveRunner`]) |
//! | [`report`] | what the benchmark records |
//! | [`control`] | device-side loops and branches (Grinder/Cocktailer) |
//! | [`plan_cache`] | plans per (workload, trip-count, sequence-length, batch) bucket |
//!
//! # Use
//! 1. Build a [`WaveGraph`]: `add` operators ([`OpSpec`], made by the kernel crate's typed
//!    constructors, e.g. `fused_gemm::waves`), in program order.
//! 2. [`exec::vdevice`] gives the vDevice (SMs × co-resident persistent CTAs per SM);
//!    [`schedule`] the programs; [`verify::verify`] checks them.
//! 3. [`WaveRunner::new`] prepares them and [`WaveRunner::launch`] runs one execution (also
//!    inside a CUDA-graph capture). [`per_op`] or [`Schedule::as_launches`] give the per-operator
//!    execution to compare against.
//!
//! Rammer's terms: an rOperator is an [`OpSpec`], its rTasks are its output tiles (× K splits);
//! an rKernel is a [`Variant`]; the vDevice's vEUs are the persistent CTAs.

pub mod control;
pub mod dag;
pub mod exec;
pub mod family;
pub mod plan_cache;
pub mod report;
pub mod table;
pub mod verify;
pub mod waves;

pub use dag::{Access, OpSpec, Region, WaveGraph};
pub use exec::WaveRunner;
pub use family::{Arm, Family};
pub use waves::{
    FixedArms, PersistentProgram, PlacedTask, Program, Schedule, ScheduleOptions, VDevice, Variant,
    per_op, schedule,
};
