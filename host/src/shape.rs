//! Launch shapes (grid, block, shared memory), checked against the device before every launch.

use cudarc::driver::sys::CUfunction_attribute_enum as FnAttr;
use cudarc::driver::{CudaFunction, LaunchConfig};

use crate::gpu::DeviceProps;
use crate::{Error, Result};

/// Shared memory a CTA gets without opting in (bytes).
pub const DEFAULT_SMEM_LIMIT: u32 = 48 * 1024;

/// Grid, block and dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// CTAs in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per CTA in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per CTA, bytes.
    pub smem_bytes: u32,
}

impl LaunchShape {
    /// A 1-D launch covering `n` items with `threads` per CTA, at most `max_ctas` CTAs (the
    /// kernel must loop, grid-stride, over the rest).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `threads` is 0 or above 1024.
    pub fn linear(n: u64, threads: u32, max_ctas: u32) -> Result<Self> {
        if threads == 0 || threads > 1024 {
            return Err(Error::invalid("threads", "1..=1024", threads));
        }
        let ctas = n.div_ceil(threads as u64).clamp(1, max_ctas.max(1) as u64) as u32;
        Ok(LaunchShape {
            grid: (ctas, 1, 1),
            block: (threads, 1, 1),
            smem_bytes: 0,
        })
    }

    /// Checks the shape against the device's limits.
    ///
    /// # Errors
    /// [`Error::LaunchLimit`] naming the limit that is exceeded.
    pub fn check(&self, props: &DeviceProps) -> Result<()> {
        let (gx, gy, gz) = self.grid;
        let (bx, by, bz) = self.block;
        if gx == 0 || gy == 0 || gz == 0 {
            return Err(Error::LaunchLimit(format!("empty grid {:?}", self.grid)));
        }
        if gx > i32::MAX as u32 || gy > props.max_grid_y || gz > props.max_grid_y {
            return Err(Error::LaunchLimit(format!(
                "grid {:?} exceeds ({}, {}, {})",
                self.grid,
                i32::MAX,
                props.max_grid_y,
                props.max_grid_y
            )));
        }
        let threads = bx as u64 * by as u64 * bz as u64;
        if threads == 0 || threads > 1024 {
            return Err(Error::LaunchLimit(format!(
                "block {:?} has {threads} threads; 1..=1024 allowed",
                self.block
            )));
        }
        if self.smem_bytes > props.smem_per_block_optin {
            return Err(Error::LaunchLimit(format!(
                "{} bytes of shared memory per CTA requested; the device allows {}",
                self.smem_bytes, props.smem_per_block_optin
            )));
        }
        Ok(())
    }

    /// Validates the shape and, when it needs more than 48 KB of dynamic shared memory, raises
    /// the function's limit first (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
    ///
    /// # Errors
    /// [`Error::LaunchLimit`] as [`LaunchShape::check`] (also for shared memory beyond
    /// `i32::MAX` bytes, which the attribute cannot take); [`Error::Driver`] when the driver
    /// refuses the shared-memory attribute.
    pub fn prepare(&self, func: &CudaFunction, props: &DeviceProps) -> Result<LaunchConfig> {
        self.check(props)?;
        if self.smem_bytes > DEFAULT_SMEM_LIMIT {
            let bytes = i32::try_from(self.smem_bytes).map_err(|_| {
                Error::LaunchLimit(format!(
                    "{} bytes of shared memory per CTA exceed the driver attribute's i32",
                    self.smem_bytes
                ))
            })?;
            func.set_attribute(
                FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            )?;
        }
        Ok(LaunchConfig {
            grid_dim: self.grid,
            block_dim: self.block,
            shared_mem_bytes: self.smem_bytes,
        })
    }
}

/// Registers per thread the driver allocated for `func` (`CU_FUNC_ATTRIBUTE_NUM_REGS`): the
/// measured value for [`crate::plan::Planner::with_registers`].
///
/// # Errors
/// Driver errors.
pub fn registers_per_thread(func: &CudaFunction) -> Result<u32> {
    // SAFETY: a `CudaFunction` is a loaded function whose module it keeps alive.
    let regs = unsafe {
        cudarc::driver::result::function::get_function_attribute(
            func.cu_function(),
            FnAttr::CU_FUNC_ATTRIBUTE_NUM_REGS,
        )
    }?;
    Ok(regs.max(0) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> DeviceProps {
        DeviceProps::h200()
    }

    // Awkward element counts: 1, a multiple of the block (1024), one past it (1025) and
    // 2^26 + 1; every element must get a thread.
    #[test]
    fn linear_grids_cover_awkward_counts() {
        for &(n, ctas) in &[(1u64, 1u32), (1024, 4), (1025, 5), ((1 << 26) + 1, 262_145)] {
            let s = LaunchShape::linear(n, 256, u32::MAX).unwrap();
            assert_eq!(s.grid.0, ctas, "n = {n}");
            assert!(s.grid.0 as u64 * 256 >= n);
            s.check(&h200()).unwrap();
        }
        assert_eq!(LaunchShape::linear(0, 256, 8).unwrap().grid.0, 1);
        assert!(LaunchShape::linear(5, 0, 8).is_err());
        assert!(LaunchShape::linear(5, 2048, 8).is_err());
    }

    #[test]
    fn limits_are_named() {
        let p = h200();
        let big = LaunchShape {
            grid: (1, 70_000, 1),
            block: (256, 1, 1),
            smem_bytes: 0,
        };
        assert!(matches!(big.check(&p), Err(Error::LaunchLimit(m)) if m.contains("65535")));
        let smem = LaunchShape {
            grid: (1, 1, 1),
            block: (256, 1, 1),
            smem_bytes: 300_000,
        };
        assert!(matches!(smem.check(&p), Err(Error::LaunchLimit(m)) if m.contains("232448")));
        let threads = LaunchShape {
            grid: (1, 1, 1),
            block: (32, 33, 1),
            smem_bytes: 0,
        };
        assert!(threads.check(&p).is_err());
        // 64 KB and 96 KB tiles are legal on sm_90 (opt-in happens in `prepare`).
        for kb in [64, 96] {
            LaunchShape {
                grid: (1, 1, 1),
                block: (256, 1, 1),
                smem_bytes: kb * 1024,
            }
            .check(&p)
            .unwrap();
        }
    }
}
