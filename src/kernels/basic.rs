//! First kernels: element-wise `axpy` and a naive f32 GEMM.

#[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
use crate::device::kernel::{elementwise, naive_gemm};

entry! {
    /// `y = alpha·x + y`, f32, any 1-D grid (grid-stride).
    AXPY_F32 = fn fg_axpy_f32(p: crate::device::kernel::elementwise::AxpyArgs {
        n: u64, alpha: f32, x: *const f32, y: *mut f32,
    }) {
        unsafe { elementwise::axpy_f32(n, alpha, x, y) }
    }
}

entry! {
    /// Naive `C = A·B`, f32 row-major, block (16, 16), grid (ceil(N/16), ceil(M/16)).
    GEMM_NAIVE_F32 = fn fg_gemm_naive_f32(p: crate::device::kernel::naive_gemm::GemmNaiveArgs {
        m: u32, n: u32, k: u32, a: *const f32, lda: u32, b: *const f32, ldb: u32, c: *mut f32,
        ldc: u32,
    }) {
        unsafe { naive_gemm::gemm_f32(m, n, k, a, lda, b, ldb, c, ldc) }
    }
}
