//! Compiles this crate's kernels for sm_80 and sm_90a; `src/lib.rs` embeds them.

fn main() {
    // With ptxas (`FUSED_GEMM_PTXAS`) the modules also carry cubins, which load without the
    // driver's JIT compilation.
    fused_gemm_build::PtxBuilder::new(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .ptxas_from_env()
        .build_or_exit();
}
