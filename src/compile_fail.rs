//! Mistakes in a `#[fused_gemm]` declaration that the attribute cannot see and rustc reports in
//! its expansion, each pinned to its error code. Collected by rustdoc's test runner only.
//!
//! A kernel crate without `include_ptx!()` at its root: E0425 at the attribute.
//!
//! ```compile_fail,E0425
//! use fused_gemm::fused_gemm;
//!
//! #[fused_gemm(epilogue = [bias])]
//! pub fn no_ptx() {}
//! # fn main() {}
//! ```
//!
//! A user stage whose path does not resolve: E0433 at the path.
//!
//! ```compile_fail,E0433
//! use fused_gemm::fused_gemm;
//!
//! static __FUSED_GEMM_PTX: fused_gemm::host::module::PtxSet =
//!     fused_gemm::host::module::PtxSet::new("doc", &[]);
//!
//! #[fused_gemm(epilogue = [crate::activations::mish])]
//! pub fn missing() {}
//! # fn main() {}
//! ```
//!
//! A user stage that is not a `fn(f32) -> f32`: E0308 at the path.
//!
//! ```compile_fail,E0308
//! use fused_gemm::fused_gemm;
//!
//! static __FUSED_GEMM_PTX: fused_gemm::host::module::PtxSet =
//!     fused_gemm::host::module::PtxSet::new("doc", &[]);
//!
//! pub fn in_f64(x: f64) -> f64 {
//!     x * 2.0
//! }
//!
//! #[fused_gemm(epilogue = [self::in_f64])]
//! pub fn wrong_signature() {}
//! # fn main() {}
//! ```
