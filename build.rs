//! Compiles this crate's built-in kernels (`src/kernels/`) to PTX for sm_80, sm_90 and sm_90a and
//! exposes the files to `src/ptx.rs` through `OUT_DIR`. See `builder/` for how and why.

use fused_gemm_build::{Arch, PtxBuilder};

fn main() {
    // The nested nvptx64 build of this same crate runs this script again; it has nothing to do.
    if std::env::var("TARGET").is_ok_and(|t| t.starts_with("nvptx")) {
        return;
    }
    println!("cargo::rustc-check-cfg=cfg(fused_gemm_ptx_skipped)");
    // `cargo doc`, rust-analyzer and clippy-only runs can skip the device build; launchers then
    // return `Error::PtxNotBuilt`.
    if std::env::var_os("FUSED_GEMM_SKIP_PTX").is_some() {
        println!("cargo::rerun-if-env-changed=FUSED_GEMM_SKIP_PTX");
        println!("cargo::rustc-cfg=fused_gemm_ptx_skipped");
        return;
    }
    let root = std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let mut builder = PtxBuilder::new(&root)
        .arch(Arch::Sm80)
        .arch(Arch::Sm90)
        .feature("builtin-kernels")
        .watch(root.join("device/src"))
        .watch(root.join("device/Cargo.toml"))
        .watch(root.join("macros/src"));
    // sm_90a (H100/H200 only: wgmma, setmaxnreg) gets its own build: the Hopper mainloop's
    // tensor-map fence needs PTX ISA 8.3, above the 8.0 LLVM picks for sm_90a by default.
    let mut hopper = PtxBuilder::new(&root)
        .arch(Arch::Sm90a)
        .feature("builtin-kernels")
        .rustflag("-Ctarget-feature=+ptx85")
        .watch(root.join("device/src"))
        .watch(root.join("device/Cargo.toml"))
        .watch(root.join("macros/src"));
    // With ptxas (scripts/setup.sh installs it) the binaries also carry cubins and skip the
    // driver's JIT compilation at start-up.
    println!("cargo::rerun-if-env-changed=FUSED_GEMM_PTXAS");
    let ptxas = std::env::var_os("FUSED_GEMM_PTXAS")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            Some(root.join(".tools/cuda-nvcc/nvidia/cu13/bin/ptxas")).filter(|p| p.exists())
        });
    if let Some(p) = ptxas {
        builder = builder.ptxas(&p);
        hopper = hopper.ptxas(p);
    }
    builder.build_or_exit();
    hopper.build_or_exit();
}
