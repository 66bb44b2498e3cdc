//! Compiles this crate's built-in kernels (`src/kernels/`) for sm_80 and sm_90a and leaves the
//! packed modules in `OUT_DIR` for `src/ptx.rs`. See `builder/` for how and why.

use fused_gemm_build::PtxBuilder;

fn main() {
    // The nested nvptx64 build of this same crate runs this script again; it has nothing to do.
    if std::env::var("TARGET").is_ok_and(|t| t.starts_with("nvptx")) {
        return;
    }
    // Without the `kernels` feature (a crate that only declares its own kernels) there is
    // nothing built in to compile.
    if std::env::var_os("CARGO_FEATURE_KERNELS").is_none() {
        return;
    }
    let root = std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    // Without the default features the nvptx64 pass skips the host-only build dependencies
    // (the packing's C library).
    let mut builder = PtxBuilder::new(&root)
        .no_default_features()
        .feature("builtin-kernels");
    if std::env::var_os("CARGO_FEATURE_TEST_KERNELS").is_some() {
        builder = builder.feature("builtin-test-kernels");
    }
    // With ptxas (scripts/setup.sh installs it) the binaries also carry cubins and skip the
    // driver's JIT compilation at start-up. `FUSED_GEMM_SKIP_PTX` (documentation and lint-only
    // builds) compiles nothing: launchers then return `Error::PtxNotBuilt`.
    // `.cargo/config.toml` sets FUSED_GEMM_PTXAS to the installed path in this tree; built from
    // elsewhere, the installed ptxas is used when present.
    builder = builder.ptxas_from_env();
    let installed = root.join(".tools/cuda-nvcc/nvidia/cu13/bin/ptxas");
    if std::env::var_os("FUSED_GEMM_PTXAS").is_none() && installed.is_file() {
        builder = builder.ptxas(installed);
    }
    builder.build_or_exit();
}
