//! Kernel bodies. Entry points (`extern "ptx-kernel"`) live in kernel crates and call these.

pub mod bert;
pub mod control;
pub mod elementwise;
pub mod naive_gemm;
pub mod norm_finish;
pub mod persistent;
pub mod rnn;
pub mod rowwise;
pub mod timing;
