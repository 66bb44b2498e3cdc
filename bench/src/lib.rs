//! # fused-gemm-bench
//!
//! Side-by-side GEMM + epilogue benchmarks on the GPU, in one process: **ours** (the fused
//! `#[fused_gemm]` kernels plugged into [`ours`]), **cuBLASLt** with its fused epilogue where one exists
//! ([`cublaslt`]), and **unfused** (cuBLASLt's plain GEMM followed by
//! `fused_gemm::rowwise` kernels), over a table of Transformer layer shapes ([`shapes`]) and
//! epilogues ([`epilogue`]).
//!
//! Every path is checked once per shape against an f64 reference of sampled rows (ours also
//! against the unfused output) and is timed only if it passes ([`run`]); times are CUDA-event
//! medians over rotated input sets larger than L2 ([`timing`], the primitive other benchmarks
//! share). Results go to a table, JSON and a PNG chart ([`report`], [`chart`]).
//!
//! | module | what |
//! |---|---|
//! | [`timing`] | CUDA-event timing, statistics, rotation-set sizing, the spin kernel |
//! | [`shapes`] | BERT-base/large, GPT-2 XL, LLaMA-3-8B layers at M = 128/4096/16384; anchors |
//! | [`epilogue`] | each epilogue's contract, minimal traffic, f64 reference |
//! | [`problem`] | device buffers (rotation sets) of one case, random data, error measures |
//! | [`cublaslt`] | cuBLASLt plans over cudarc's `result` layer |
//! | [`ours`] | the slot for our fused kernels |
//! | [`run`] | verification and timing of every path of every case |
//! | [`report`], [`chart`] | JSON schema, text table, PNG |

pub mod chart;
pub mod cublaslt;
pub mod epilogue;
pub mod error;
pub mod ours;
pub mod problem;
pub mod report;
pub mod run;
pub mod shapes;
pub mod timing;

pub use error::{BenchError, Result};
