//! Reference-quality GEMM without tensor cores: one thread per output element.

use crate::arch::thread::{block_dim_x, block_idx_x, block_idx_y, thread_idx_x, thread_idx_y};

crate::param_list! {
    /// The parameters of [`gemm_f32`]'s entry point.
    #[derive(Clone, Copy, Debug)]
    pub struct GemmNaiveArgs {
        /// M.
        pub m: u32,
        /// N.
        pub n: u32,
        /// K.
        pub k: u32,
        /// A, M×K (`lda`).
        pub a: *const f32,
        /// Leading dimension of A.
        pub lda: u32,
        /// B, K×N (`ldb`).
        pub b: *const f32,
        /// Leading dimension of B.
        pub ldb: u32,
        /// C, M×N (`ldc`), written.
        pub c: *mut f32,
        /// Leading dimension of C.
        pub ldc: u32,
    }
}

/// `C = A·B` in f32. A is M×K row-major with leading dimension `lda`, B is K×N row-major
/// (`ldb`), C is M×N row-major (`ldc`); all leading dimensions in elements. Block (16, 16),
/// grid (ceil(N/16), ceil(M/16)): thread (x, y) of block (bx, by) computes C[by·16+y, bx·16+x].
///
/// # Safety
/// Pointers must be valid for the extents implied by M, N, K and the leading dimensions.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_f32(
    m: u32,
    n: u32,
    k: u32,
    a: *const f32,
    lda: u32,
    b: *const f32,
    ldb: u32,
    c: *mut f32,
    ldc: u32,
) {
    let col = block_idx_x() * block_dim_x() + thread_idx_x();
    let row = block_idx_y() * block_dim_x() + thread_idx_y();
    if row >= m || col >= n {
        return;
    }
    let a_row = a.add(row as usize * lda as usize);
    let mut acc = 0.0f32;
    for kk in 0..k as usize {
        acc += *a_row.add(kk) * *b.add(kk * ldb as usize + col as usize);
    }
    *c.add(row as usize * ldc as usize + col as usize) = acc;
}
