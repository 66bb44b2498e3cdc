//! Element-wise kernels.

use crate::arch::thread::{block_dim_x, block_idx_x, grid_dim_x, thread_idx_x};

crate::param_list! {
    /// The parameters of [`axpy_f32`]'s entry point.
    #[derive(Clone, Copy, Debug)]
    pub struct AxpyArgs {
        /// Elements.
        pub n: u64,
        /// The scale of x.
        pub alpha: f32,
        /// x, `n` f32.
        pub x: *const f32,
        /// y, `n` f32 (read and written).
        pub y: *mut f32,
    }
}

/// `y[i] = alpha · x[i] + y[i]` for `i < n`, f32. Grid-stride loop: any 1-D grid covers any `n`.
///
/// # Safety
/// `x` and `y` must be valid device pointers to at least `n` f32 each.
#[inline(always)]
pub unsafe fn axpy_f32(n: u64, alpha: f32, x: *const f32, y: *mut f32) {
    let stride = block_dim_x() as u64 * grid_dim_x() as u64;
    let mut i = block_idx_x() as u64 * block_dim_x() as u64 + thread_idx_x() as u64;
    while i < n {
        *y.add(i as usize) = alpha * *x.add(i as usize) + *y.add(i as usize);
        i += stride;
    }
}
