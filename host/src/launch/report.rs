//! What one GEMM launch ran.

use fused_gemm_device::gemm::TileShape;
use fused_gemm_device::target::Mainloop;

use crate::kernel::KernelVariant;
use crate::plan::Plan;

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
    pub fn ran(kernel: &'static str, variant: &KernelVariant, plan: Plan, why: String) -> Self {
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
