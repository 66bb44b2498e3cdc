//! PTX embedded by kernel crates.

/// One PTX module: the text rustc emitted for one arch.
#[derive(Debug)]
pub struct PtxModule {
    /// Lowest compute capability that can run it (major·10 + minor).
    pub compute_capability: u32,
    /// The `.target` name (`sm_80`, `sm_90`, `sm_90a`).
    pub arch: &'static str,
    /// The PTX text.
    pub ptx: &'static str,
    /// Machine code for exactly this arch made by ptxas at build time, or empty. Loaded instead
    /// of the PTX when the device's compute capability equals `compute_capability`, which skips
    /// the driver's JIT compilation.
    pub cubin: &'static [u8],
}

/// All PTX modules of one kernel crate, newest arch first.
#[derive(Debug)]
pub struct PtxSet {
    /// The kernel crate's name (for messages and as the module-cache key).
    pub crate_name: &'static str,
    /// Modules, newest arch first.
    pub modules: &'static [PtxModule],
}

impl PtxSet {
    /// A set; list `modules` newest arch first.
    pub const fn new(crate_name: &'static str, modules: &'static [PtxModule]) -> Self {
        PtxSet {
            crate_name,
            modules,
        }
    }

    /// The newest module a device of compute capability `cc` can run. `sm_90a` code runs only on
    /// exactly 9.0; plain `sm_XY` PTX runs on XY and later (the driver JIT-compiles it).
    ///
    /// # Errors
    /// [`crate::Error::PtxNotBuilt`] when the set has no modules (the crate was built with
    /// `FUSED_GEMM_SKIP_PTX`); [`crate::Error::UnsupportedArch`], listing the built archs, when
    /// none runs on `cc`: no plain module for `cc` or older, and no arch-specific (`a`) module
    /// for exactly `cc`.
    pub fn select(&self, cc: u32) -> crate::Result<&PtxModule> {
        if self.modules.is_empty() {
            return Err(crate::Error::PtxNotBuilt {
                crate_name: self.crate_name,
            });
        }
        self.modules
            .iter()
            .find(|m| {
                if m.arch.ends_with('a') {
                    m.compute_capability == cc
                } else {
                    m.compute_capability <= cc
                }
            })
            .ok_or_else(|| crate::Error::UnsupportedArch {
                crate_name: self.crate_name,
                device_cc: cc,
                available: self
                    .modules
                    .iter()
                    .map(|m| m.arch)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SET: PtxSet = PtxSet::new(
        "k",
        &[
            PtxModule {
                compute_capability: 90,
                arch: "sm_90a",
                ptx: "a",
                cubin: &[],
            },
            PtxModule {
                compute_capability: 90,
                arch: "sm_90",
                ptx: "b",
                cubin: &[],
            },
            PtxModule {
                compute_capability: 80,
                arch: "sm_80",
                ptx: "c",
                cubin: &[],
            },
        ],
    );

    #[test]
    fn picks_newest_runnable_arch() {
        assert_eq!(SET.select(90).unwrap().arch, "sm_90a");
        assert_eq!(SET.select(100).unwrap().arch, "sm_90");
        assert_eq!(SET.select(89).unwrap().arch, "sm_80");
        assert!(matches!(
            SET.select(75),
            Err(crate::Error::UnsupportedArch { device_cc: 75, .. })
        ));
        assert!(matches!(
            PtxSet::new("e", &[]).select(90),
            Err(crate::Error::PtxNotBuilt { .. })
        ));
    }
}
