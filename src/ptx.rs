//! The PTX of the built-in kernels, compiled by `build.rs` and embedded at build time.

#[cfg(not(fused_gemm_ptx_skipped))]
use fused_gemm_host::module::PtxModule;
use fused_gemm_host::module::PtxSet;

#[cfg(not(fused_gemm_ptx_skipped))]
const SM80: &str = include_str!(concat!(env!("OUT_DIR"), "/fused_gemm.sm_80.ptx"));
#[cfg(not(fused_gemm_ptx_skipped))]
const SM90: &str = include_str!(concat!(env!("OUT_DIR"), "/fused_gemm.sm_90.ptx"));
#[cfg(not(fused_gemm_ptx_skipped))]
const SM90A: &str = include_str!(concat!(env!("OUT_DIR"), "/fused_gemm.sm_90a.ptx"));
#[cfg(not(fused_gemm_ptx_skipped))]
const SM90A_CUBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fused_gemm.sm_90a.cubin"));
#[cfg(not(fused_gemm_ptx_skipped))]
const SM80_CUBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fused_gemm.sm_80.cubin"));
#[cfg(not(fused_gemm_ptx_skipped))]
const SM90_CUBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fused_gemm.sm_90.cubin"));

/// Built-in kernels, one module per arch (newest first; the launcher picks the newest the device
/// can run: `sm_90a`, with the Hopper mainloop, on H100/H200).
#[cfg(not(fused_gemm_ptx_skipped))]
pub static BUILTIN: PtxSet = PtxSet::new(
    "fused_gemm",
    &[
        PtxModule {
            compute_capability: 90,
            arch: "sm_90a",
            ptx: SM90A,
            cubin: SM90A_CUBIN,
        },
        PtxModule {
            compute_capability: 90,
            arch: "sm_90",
            ptx: SM90,
            cubin: SM90_CUBIN,
        },
        PtxModule {
            compute_capability: 80,
            arch: "sm_80",
            ptx: SM80,
            cubin: SM80_CUBIN,
        },
    ],
);

/// Built with `FUSED_GEMM_SKIP_PTX`: no modules, launches fail with `Error::PtxNotBuilt`.
#[cfg(fused_gemm_ptx_skipped)]
pub static BUILTIN: PtxSet = PtxSet::new("fused_gemm", &[]);
