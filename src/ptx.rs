//! The PTX and cubins of the built-in kernels, compiled by `build.rs` and embedded packed.

use fused_gemm_host::module::{Arch, Image, PtxModule, PtxSet};

macro_rules! packed {
    ($arch:literal, $ext:literal) => {
        Image::Zstd(include_bytes!(concat!(
            env!("OUT_DIR"),
            "/fused_gemm.",
            $arch,
            ".",
            $ext,
            ".zst"
        )))
    };
}

/// Built-in kernels, one module per arch, newest first: the launcher loads `sm_90a` (with the
/// TMA + `wgmma` mainloop) on H100/H200 and `sm_80` elsewhere. In a build with
/// `FUSED_GEMM_SKIP_PTX` the images are empty and launches fail with `Error::PtxNotBuilt`.
pub static BUILTIN: PtxSet = PtxSet::new(
    "fused_gemm",
    &[
        PtxModule {
            arch: Arch::Sm90a,
            ptx: packed!("sm_90a", "ptx"),
            cubin: packed!("sm_90a", "cubin"),
        },
        PtxModule {
            arch: Arch::Sm80,
            ptx: packed!("sm_80", "ptx"),
            cubin: packed!("sm_80", "cubin"),
        },
    ],
);
