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

/// `(blockIdx.x, gridDim.x)`, read anew at each call (a volatile `asm`): the compiler cannot
/// hoist the read, or what is computed from it, out of a loop, so nothing derived from it
/// stays live in a register across the loop.
#[inline(always)]
pub fn block_and_grid_x_uncached() -> (u32, u32) {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let (b, g): (u32, u32);
        core::arch::asm!(
            "mov.u32 {b}, %ctaid.x;",
            "mov.u32 {g}, %nctaid.x;",
            b = out(reg32) b, g = out(reg32) g,
            options(nomem, nostack)
        );
        (b, g)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    super::host_unreachable("block_and_grid_x_uncached")
}

/// `x`, passed through a volatile `asm` move: what is computed from the result is computed
/// again at each call, never hoisted out of a loop, so it does not stay live in a register
/// across the loop (for values the compiler would otherwise keep, or spill, for a whole
/// kernel: an operand read from the constant bank costs nothing to read again).
#[inline(always)]
pub fn uncached(x: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let y: u32;
        core::arch::asm!("mov.u32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(nomem, nostack));
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    x
}

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
