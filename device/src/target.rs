//! What a kernel is compiled for: the PTX targets ([`Arch`]) and the GEMM mainloops
//! ([`Mainloop`]). One definition for the macro, the builder and the host.

use core::fmt;

/// A PTX target: the `.target` of a module and rustc's `-C target-cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    /// Ampere (A100): `mma.sync`, `ldmatrix`, `cp.async`. Its cubin runs on every 8.x GPU and its
    /// PTX, JIT-compiled, on every later one.
    Sm80,
    /// Hopper, portable subset: adds TMA (`cp.async.bulk.tensor`) and `mbarrier` transaction
    /// counts.
    Sm90,
    /// Hopper with arch-specific instructions (`wgmma`, `setmaxnreg`): runs only on 9.0 (H100,
    /// H200), and is the only module with the TMA + `wgmma` mainloop.
    Sm90a,
}

impl Arch {
    /// The name used by PTX's `.target` directive and by ptxas' `-arch`.
    pub const fn name(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm_80",
            Arch::Sm90 => "sm_90",
            Arch::Sm90a => "sm_90a",
        }
    }

    /// Compute capability as `major * 10 + minor`.
    pub const fn compute_capability(self) -> u32 {
        match self {
            Arch::Sm80 => 80,
            Arch::Sm90 | Arch::Sm90a => 90,
        }
    }

    /// Whether code for it runs only on exactly its compute capability (the `a` targets).
    pub const fn arch_specific(self) -> bool {
        matches!(self, Arch::Sm90a)
    }

    /// Whether a module built for it can run on a device of compute capability `cc` (as PTX,
    /// JIT-compiled where `cc` is newer).
    pub const fn runs_on(self, cc: u32) -> bool {
        if self.arch_specific() {
            cc == self.compute_capability()
        } else {
            cc >= self.compute_capability()
        }
    }

    /// Whether a module built for it holds `mainloop`'s entry points.
    pub const fn has(self, mainloop: Mainloop) -> bool {
        match mainloop {
            Mainloop::Simt | Mainloop::Sm80 => true,
            Mainloop::Sm90Tma { .. } => matches!(self, Arch::Sm90a),
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The mainloop of one compiled GEMM variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mainloop {
    /// f32 on CUDA cores (`gemm::simt`).
    Simt,
    /// `mma.sync` tensor cores fed by `cp.async` or bounds-checked loads (`gemm::sm80`).
    Sm80,
    /// Hopper: TMA loads into a shared-memory ring, warp-specialized `wgmma` consumers,
    /// persistent CTAs (`gemm::sm90`); `cluster_m` CTAs per cluster along M. sm_90a only.
    Sm90Tma {
        /// CTAs per thread-block cluster along M (1 or 2).
        cluster_m: u32,
    },
}

impl Mainloop {
    /// A short name for reports (`simt`, `sm80`, `sm90-tma`).
    pub const fn name(self) -> &'static str {
        match self {
            Mainloop::Simt => "simt",
            Mainloop::Sm80 => "sm80",
            Mainloop::Sm90Tma { .. } => "sm90-tma",
        }
    }

    /// Whether it is the Hopper TMA + `wgmma` mainloop.
    pub const fn is_sm90(self) -> bool {
        matches!(self, Mainloop::Sm90Tma { .. })
    }
}

impl fmt::Display for Mainloop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archs_run_where_their_code_does() {
        assert!(Arch::Sm80.runs_on(80) && Arch::Sm80.runs_on(90) && Arch::Sm80.runs_on(120));
        assert!(!Arch::Sm80.runs_on(75));
        assert!(Arch::Sm90a.runs_on(90) && !Arch::Sm90a.runs_on(100) && !Arch::Sm90a.runs_on(89));
        assert!(Arch::Sm90a.has(Mainloop::Sm90Tma { cluster_m: 2 }));
        assert!(!Arch::Sm90.has(Mainloop::Sm90Tma { cluster_m: 1 }));
        assert!(Arch::Sm80.has(Mainloop::Sm80) && Arch::Sm80.has(Mainloop::Simt));
    }
}
