//! Thread, block and grid indices (PTX ISA §10 special registers `%tid`, `%ctaid`, `%ntid`,
//! `%nctaid`, `%laneid`).

#[cfg(target_arch = "nvptx64")]
use core::arch::nvptx;

macro_rules! sreg {
    ($(#[$m:meta])* $name:ident, $intr:ident) => {
        $(#[$m])*
        #[inline(always)]
        pub fn $name() -> u32 {
            #[cfg(target_arch = "nvptx64")]
            unsafe {
                nvptx::$intr() as u32
            }
            #[cfg(not(target_arch = "nvptx64"))]
            super::host_unreachable(stringify!($name))
        }
    };
}

sreg!(/// `threadIdx.x`.
    thread_idx_x, _thread_idx_x);
sreg!(/// `threadIdx.y`.
    thread_idx_y, _thread_idx_y);
sreg!(/// `blockIdx.x`.
    block_idx_x, _block_idx_x);
sreg!(/// `blockIdx.y`.
    block_idx_y, _block_idx_y);
sreg!(/// `blockIdx.z`.
    block_idx_z, _block_idx_z);
sreg!(/// `blockDim.x`.
    block_dim_x, _block_dim_x);
sreg!(/// `gridDim.x`.
    grid_dim_x, _grid_dim_x);
sreg!(/// `gridDim.y`.
    grid_dim_y, _grid_dim_y);
sreg!(/// `gridDim.z`.
    grid_dim_z, _grid_dim_z);

/// Lane of this thread in its warp, 0..32 (`%laneid`).
#[inline(always)]
pub fn lane_id() -> u32 {
    thread_idx_x() & 31
}

/// Warp index within a 1-D CTA.
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_idx_x() >> 5
}
