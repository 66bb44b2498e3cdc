//! Choices a caller may force on the GEMM launches of one [`crate::Gpu`] handle.

use fused_gemm_device::gemm::TileShape;

/// Choices a caller may force on the GEMM launches made through one [`crate::Gpu`] handle
/// ([`crate::Gpu::with_options`]); the default leaves every choice to the planner. Benchmarks,
/// plan sweeps and tests use them to reach a given tile or path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Launch this tile (it must be compiled for the kernel; a Hopper tile also forces the TMA
    /// and `wgmma` mainloop, an sm_80 tile rules it out). A launch that cannot use it fails
    /// with [`Error::LaunchLimit`](crate::Error::LaunchLimit).
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
    /// K pieces per tile of the Hopper mainloop's last, partial round instead of the model's choice
    /// ([`crate::plan::sm90::tail_splits`]): `Some(1)` runs the last round whole, larger values are
    /// capped at what the problem allows.
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
