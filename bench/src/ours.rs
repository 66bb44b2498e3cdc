//! The slot for our fused kernels: one function per (storage type, epilogue). An epilogue
//! without an entry is reported as `n/a`.
//!
//! # Plugging a fused kernel in
//! Write a launcher with the signature [`FusedFn`] that computes the epilogue's contract
//! ([`Epilogue`] documents each) into `args.out` (and `args.rstd`), queued on `gpu.stream()`
//! without synchronizing, and add it to the table of its storage type:
//!
//! ```ignore
//! fn bias_gelu_bf16(gpu: &Gpu, a: FusedArgs<'_, bf16>) -> fused_gemm::Result<()> {
//!     fused_gemm::gemm::bias_gelu(gpu, a.m, a.n, a.k, a.a, a.b, a.bias.unwrap(), a.out)
//! }
//! pub const OURS_BF16: &[(Epilogue, FusedFn<bf16>)] = &[(Epilogue::BiasGelu, bias_gelu_bf16)];
//! ```
//!
//! The harness then checks it once per shape against the f64 reference and the unfused path
//! (and refuses to time it if it is wrong), and times it beside cuBLASLt and the unfused path.

use cudarc::driver::CudaSlice;
use fused_gemm::Gpu;
use fused_gemm::host::cudarc;
use half::{bf16, f16};

use crate::epilogue::Epilogue;

/// What a fused kernel gets for one run: the problem and one rotation set's buffers. Every
/// buffer is a whole, contiguous allocation (leading dimension = row length).
#[derive(Debug)]
pub struct FusedArgs<'a, T> {
    /// Rows of A and `out`.
    pub m: usize,
    /// Columns of the GEMM (before SwiGLU halves them).
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// A, M×K row-major (activations).
    pub a: &'a CudaSlice<T>,
    /// B, N×K row-major (a `Linear` weight; for SwiGLU gate/up rows interleaved).
    pub b: &'a CudaSlice<T>,
    /// Bias, N values (bias epilogues and LayerNorm).
    pub bias: Option<&'a CudaSlice<T>>,
    /// Residual, M×N row-major (LayerNorm).
    pub residual: Option<&'a CudaSlice<T>>,
    /// γ, N values (LayerNorm).
    pub gamma: Option<&'a CudaSlice<T>>,
    /// β, N values (LayerNorm).
    pub beta: Option<&'a CudaSlice<T>>,
    /// ε of the norm epilogues ([`Epilogue::eps`]).
    pub eps: f32,
    /// The output, M×`Epilogue::out_cols(N)` row-major.
    pub out: &'a mut CudaSlice<T>,
    /// RMSNorm-scale's per-row 1/rms, M f32 values.
    pub rstd: Option<&'a mut CudaSlice<f32>>,
}

/// A fused GEMM + epilogue launcher.
pub type FusedFn<T> = fn(&Gpu, FusedArgs<'_, T>) -> fused_gemm::Result<()>;

/// Our bf16 kernels, one entry per epilogue they implement.
pub const OURS_BF16: &[(Epilogue, FusedFn<bf16>)] = &[];

/// Our f16 kernels, one entry per epilogue they implement.
pub const OURS_F16: &[(Epilogue, FusedFn<f16>)] = &[];

/// The table of a storage type.
pub trait Ours: Sized + 'static {
    /// The entries for this type.
    const TABLE: &'static [(Epilogue, FusedFn<Self>)];

    /// Our kernel for `e`, if there is one.
    fn fused(e: Epilogue) -> Option<FusedFn<Self>> {
        Self::TABLE.iter().find(|(x, _)| *x == e).map(|(_, f)| *f)
    }
}

impl Ours for bf16 {
    const TABLE: &'static [(Epilogue, FusedFn<bf16>)] = OURS_BF16;
}

impl Ours for f16 {
    const TABLE: &'static [(Epilogue, FusedFn<f16>)] = OURS_F16;
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Probe;

    fn fake(_: &Gpu, _: FusedArgs<'_, Probe>) -> fused_gemm::Result<()> {
        Ok(())
    }

    impl Ours for Probe {
        const TABLE: &'static [(Epilogue, FusedFn<Probe>)] = &[(Epilogue::Swiglu, fake)];
    }

    #[test]
    fn lookup_finds_exactly_the_listed_epilogues() {
        for e in Epilogue::ALL {
            assert_eq!(Probe::fused(e).is_some(), e == Epilogue::Swiglu, "{e:?}");
            assert_eq!(
                bf16::fused(e).is_some(),
                OURS_BF16.iter().any(|(x, _)| *x == e)
            );
            assert_eq!(
                f16::fused(e).is_some(),
                OURS_F16.iter().any(|(x, _)| *x == e)
            );
        }
    }
}
