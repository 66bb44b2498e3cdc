//! What goes into a GEMM launch besides its operands ([`LaunchOptions`]), what comes out
//! ([`LaunchReport`]), and launch shapes, checked against the device before every launch.

use cudarc::driver::sys::CUfunction_attribute_enum as FnAttr;
use cudarc::driver::{CudaFunction, LaunchConfig};
use fused_gemm_device::gemm::TileShape;
use fused_gemm_device::target::Mainloop;

use crate::gpu::DeviceProps;
use crate::plan::Plan;
use crate::{Error, Result};

/// Choices a caller may force on the GEMM launches made through one [`crate::Gpu`] handle
/// ([`crate::Gpu::with_options`]); the default leaves every choice to the planner. Benchmarks,
/// plan sweeps and tests use them to reach a given tile or path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Launch this tile (it must be compiled for the kernel; a Hopper tile also forces the TMA
    /// + `wgmma` mainloop, an sm_80 tile rules it out). A launch that cannot use it fails with
    /// [`Error::LaunchLimit`].
    pub tile: Option<TileShape>,
    /// Launch with this many K splits (above 1 rules the Hopper mainloop out).
    pub splits: Option<u32>,
    /// Store C with per-thread stores even where the Hopper mainloop could store it with TMA
    /// (to compare the store paths): kernels without a row norm still stage C in shared
    /// memory, and their threads copy it out; others store from the accumulators.
    pub direct_store: bool,
    /// Read `residual` from global memory even where the Hopper mainloop could copy it into
    /// its staging buffers with TMA (to compare the two paths).
    pub global_residual: bool,
    /// K pieces per tile of the Hopper mainloop's last, partial round instead of the model's
    /// choice ([`crate::sm90::tail_splits`]): `Some(1)` runs the last round whole, larger values
    /// are capped at what the problem allows.
    pub tail_splits: Option<u32>,
    /// Launch a norm's finishing kernel as the GEMM's programmatic dependent (sm_90+ modules;
    /// elsewhere ignored) instead of in plain stream order after the GEMM: it may then start
    /// while the GEMM's last tiles run and waits for them on the device. Slower on the H200 so
    /// far, kept to compare the two.
    pub dependent_finish: bool,
    /// How the CTAs of a Hopper row norm that spans several tiles swap row statistics.
    pub norm_exchange: NormExchange,
}

impl LaunchOptions {
    /// Whether every choice is left to the planner (the autotuner measures only then).
    pub fn is_default(&self) -> bool {
        *self == LaunchOptions::default()
    }
}

/// The row-statistics exchange of a Hopper row norm over several tiles
/// ([`LaunchOptions::norm_exchange`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NormExchange {
    /// Whichever runs more row blocks at once; a cluster on a tie.
    #[default]
    Auto,
    /// A thread-block cluster, distributed shared memory ([`crate::plan::NormPath::Cluster`]).
    Cluster,
    /// A cooperative launch, global memory ([`crate::plan::NormPath::GlobalExchange`]).
    Global,
}

/// What one GEMM launch ran, returned by every `#[fused_gemm]` launcher.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchReport {
    /// The kernel's name (the annotated function).
    pub kernel: &'static str,
    /// The entry point launched; `None` when M or N was 0 and nothing ran.
    pub entry: Option<&'static str>,
    /// Its mainloop.
    pub mainloop: Option<Mainloop>,
    /// The plan: tile, split-K factor, grid, norm path, split tail, the model's prediction.
    pub plan: Option<Plan>,
    /// Why this mainloop: the Hopper path's prediction, or why that path was not taken.
    pub why: String,
    /// Whether C was stored with TMA through shared memory (Hopper mainloop with a C tensor map)
    /// rather than with per-thread stores.
    pub tma_store: bool,
    /// Whether `residual` was copied into shared memory with TMA rather than loaded per thread.
    pub tma_residual: bool,
    /// Whether a norm finishing kernel was launched as the GEMM's programmatic dependent.
    pub finish_dependent: bool,
}

impl LaunchReport {
    /// The report of a launch with nothing to do (M or N is 0).
    pub fn nothing(kernel: &'static str) -> Self {
        LaunchReport {
            kernel,
            entry: None,
            mainloop: None,
            plan: None,
            why: "M or N is 0: nothing to launch".into(),
            tma_store: false,
            tma_residual: false,
            finish_dependent: false,
        }
    }

    /// The report of `variant` launched with `plan`, for `why`.
    pub fn ran(
        kernel: &'static str,
        variant: &crate::gemm::KernelVariant,
        plan: Plan,
        why: String,
    ) -> Self {
        LaunchReport {
            kernel,
            entry: Some(variant.entry),
            mainloop: Some(variant.mainloop),
            plan: Some(plan),
            why,
            tma_store: false,
            tma_residual: false,
            finish_dependent: false,
        }
    }

    /// The tile that ran.
    pub fn tile(&self) -> Option<TileShape> {
        self.plan.as_ref().map(|p| p.tile)
    }

    /// Whether the Hopper TMA + `wgmma` mainloop ran.
    pub fn on_sm90(&self) -> bool {
        self.mainloop.is_some_and(Mainloop::is_sm90)
    }

    /// K pieces per tile of the Hopper mainloop's last round (1: whole, or another mainloop).
    pub fn tail_splits(&self) -> u32 {
        self.plan.as_ref().map_or(1, |p| p.tail_splits)
    }
}

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
