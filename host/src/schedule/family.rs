//! What a persistent entry point can run: its *arms* (epilogue kind × tile shape), and the
//! plain grid entry point of each arm for operators launched on their own.

use fused_gemm_device::gemm::TileShape;
use fused_gemm_device::kernel::persistent::EPI_WORDS;
use fused_gemm_device::params::KernelParam;
use fused_gemm_device::types::DType;

use crate::launch::{GemmParams, Kernel};
use crate::module::PtxSet;
use crate::plan::model::estimate_registers;
use crate::{Error, Gpu, Result};

/// An operator's epilogue parameter words, passed where a grid entry point takes its kind's
/// `Params`: the driver copies as many bytes as the entry point declares (`cuLaunchKernel` takes
/// parameter sizes from the kernel image), which is at most these `8·EPI_WORDS`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EpiWords(pub(crate) [u64; EPI_WORDS]);

// SAFETY: plain integers, the layout the device's `Params` types are read from.
unsafe impl KernelParam for EpiWords {}

/// One instantiated (epilogue kind, tile shape) of a [`Family`]. Its index in
/// [`Family::arms`] is the `arm` the device dispatches on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arm {
    /// The epilogue kind, as operators name it (`"bias_relu"`, `"lstm"`, ...).
    pub kind: &'static str,
    /// The CTA tile.
    pub tile: TileShape,
    /// The grid entry point computing this arm with one CTA per tile (for plain launches):
    /// parameters `(GemmArgs, <kind's Params>)`, grid `(⌈N/BN⌉, ⌈M/BM⌉, splits)`.
    pub grid_entry: &'static str,
}

impl Arm {
    /// The grid entry point on `gpu`, taking an operator's epilogue words for the kind's
    /// parameters.
    ///
    /// # Errors
    /// Module-loading errors, [`Error::KernelNotFound`].
    pub(crate) fn grid_kernel(
        &self,
        gpu: &Gpu,
        ptx: &'static PtxSet,
    ) -> Result<Kernel<GemmParams<EpiWords>>> {
        let func = gpu.function(ptx, self.grid_entry)?;
        // SAFETY: a grid entry point takes (GemmArgs, <kind's Params>) by value, the Params no
        // larger than the epilogue words (the family macros assert it), so the driver reads
        // a prefix of them; were they zero-sized, the words would be one parameter past the
        // entry point's last, never read.
        Ok(unsafe { Kernel::from_function(func) })
    }
}

/// A persistent entry point and its arms. All arms share the block size; the entry point's
/// dynamic shared memory holds the largest arm's pipeline plus two task headers
/// (`fused_gemm_device::kernel::persistent::smem_bytes`).
#[derive(Debug)]
pub struct Family {
    /// The persistent entry point (parameter: `ProgramArgs`).
    pub entry: &'static str,
    /// The kernel crate's PTX.
    pub ptx: &'static PtxSet,
    /// dtype of A and B.
    pub input: DType,
    /// dtype of C and of the epilogue's vectors and tiles.
    pub output: DType,
    /// Threads per CTA of every arm.
    pub threads: u32,
    /// Dynamic shared memory of the persistent entry point, bytes.
    pub smem_bytes: u32,
    /// `.minnctapersm` the persistent entry point was compiled for.
    pub min_ctas_per_sm: u32,
    /// The arms, in device dispatch order.
    pub arms: &'static [Arm],
}

impl Family {
    /// Arms computing `kind`, with their indices.
    pub fn arms_of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = (usize, &'a Arm)> + 'a {
        self.arms
            .iter()
            .enumerate()
            .filter(move |(_, a)| a.kind == kind)
    }

    /// Whether some arm computes `kind`.
    pub fn has_kind(&self, kind: &str) -> bool {
        self.arms_of(kind).next().is_some()
    }

    /// Registers per thread assumed for the persistent entry point before the driver reports
    /// them: the largest estimate over the arms (every arm is inlined into one function).
    pub fn registers_estimate(&self) -> u32 {
        self.arms
            .iter()
            .map(|a| estimate_registers(&a.tile))
            .max()
            .unwrap_or(0)
    }

    /// Checks the description: at least one arm, valid tiles with `threads` threads each, and
    /// shared memory for every arm's pipeline.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the first inconsistency.
    pub fn check(&self) -> Result<()> {
        if self.arms.is_empty() {
            return Err(Error::invalid("family", "at least one arm", self.entry));
        }
        for a in self.arms {
            if let Some(why) = a.tile.check() {
                return Err(Error::invalid("family", "valid tile shapes", why));
            }
            if a.tile.threads() != self.threads {
                return Err(Error::invalid(
                    "family",
                    format!("every arm with {} threads", self.threads),
                    format!("{} ({:?}) has {}", a.grid_entry, a.tile, a.tile.threads()),
                ));
            }
            if a.tile.smem_bytes(true) > self.smem_bytes {
                return Err(Error::invalid(
                    "family",
                    format!("shared memory ≥ every arm's ({})", a.tile.smem_bytes(true)),
                    self.smem_bytes,
                ));
            }
        }
        Ok(())
    }
}
