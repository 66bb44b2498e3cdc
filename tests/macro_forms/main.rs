//! The accepted forms of `#[fused_gemm]`: every option and stage, alone and combined, expands
//! to host code that compiles, with the specs and launcher signatures they should have. The
//! rejected forms and their diagnostics are `macros/tests/ui.rs` and `src/compile_fail.rs`.
//!
//! A kernel crate defines `__FUSED_GEMM_PTX` at its root with `fused_gemm::include_ptx!`, which
//! reads the PTX its build script wrote. These kernels have no build of their own, so the root
//! defines an empty PTX set: everything compiles and the specs can be inspected; a launch would
//! fail with `Error::PtxNotBuilt`.

static __FUSED_GEMM_PTX: fused_gemm::host::module::PtxSet =
    fused_gemm::host::module::PtxSet::new("macro_forms", &[]);

mod attn_out_proj;
mod cfg;
mod options;
mod stages;
