//! # fused-gemm-bench
//!
//! Side-by-side GEMM + epilogue measurements on one GPU: **ours** (the `#[fused_gemm]` kernels
//! plugged into [`ours`]: the launcher's default choice, the model's tile, each Hopper tile
//! forced) and **cuBLAS** (its plain GEMM, the fastest of the heuristic's top algorithms, and
//! cuBLASLt's fused epilogue where one exists, [`cublaslt`]), over the rows of [`shapes`]:
//! Transformer layer GEMMs with the epilogues of their models ([`epilogue`]). [`compare`] merges
//! that with the PyTorch, CODA and quack side of `bench/compare/` into the curated table.
//!
//! Every path is checked once per row against an f64 reference of sampled rows (each element
//! and the whole, outputs poisoned first) and is timed only if it passes ([`run`]); times are
//! CUDA-event medians over rotated input sets larger than L2, taken in interleaved rounds
//! ([`timing`], the primitive other benchmarks share).
//!
//! | module | what |
//! |---|---|
//! | [`timing`] | CUDA-event timing, statistics, rotation-set sizing, the spin kernel |
//! | [`shapes`] | the rows: BERT-base/large, LLaMA-3-1B/8B, MiniLM at batch 1/32/256 |
//! | [`epilogue`] | each epilogue's contract, minimal traffic, f64 reference |
//! | [`problem`] | device buffers (rotation sets) of one row, random data, error measures |
//! | [`cublaslt`] | cuBLASLt plans over cudarc's `result` layer |
//! | [`ours`] | our kernel for each epilogue |
//! | [`run`] | verification and interleaved timing of every path of every row |
//! | [`report`] | the JSON schema of one run, its text table |
//! | [`compare`], [`chart`] | the merged comparison: markdown, CSV, PNG |

pub mod chart;
pub mod compare;
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
