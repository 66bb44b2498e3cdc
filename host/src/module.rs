//! PTX and cubins embedded by kernel crates.

use std::borrow::Cow;

pub use fused_gemm_device::target::Arch;

/// Bytes a kernel crate embeds: as they are, or one zstd frame (what `fused_gemm_build` writes
/// as `<crate>.<arch>.ptx.zst` and `.cubin.zst`). Empty means absent.
#[derive(Clone, Copy, Debug)]
pub enum Image {
    /// The bytes themselves.
    Plain(&'static [u8]),
    /// One zstd frame holding the bytes.
    Zstd(&'static [u8]),
}

impl Image {
    /// Whether there is nothing (a module built without ptxas has no cubin; a build with
    /// `FUSED_GEMM_SKIP_PTX` has neither).
    pub fn is_empty(&self) -> bool {
        match self {
            Image::Plain(b) | Image::Zstd(b) => b.is_empty(),
        }
    }

    /// The bytes as embedded (packed or not).
    pub fn embedded(&self) -> &'static [u8] {
        match *self {
            Image::Plain(b) | Image::Zstd(b) => b,
        }
    }

    /// The bytes, unpacked.
    ///
    /// # Errors
    /// [`crate::Error::ModuleImage`] when a zstd frame does not decode.
    pub fn bytes(
        &self,
        crate_name: &'static str,
        arch: &'static str,
    ) -> crate::Result<Cow<'static, [u8]>> {
        match *self {
            Image::Plain(b) => Ok(Cow::Borrowed(b)),
            Image::Zstd(b) if b.is_empty() => Ok(Cow::Borrowed(b)),
            Image::Zstd(b) => {
                zstd::decode_all(b)
                    .map(Cow::Owned)
                    .map_err(|e| crate::Error::ModuleImage {
                        crate_name,
                        arch,
                        message: e.to_string(),
                    })
            }
        }
    }
}

/// One module of a kernel crate: what rustc emitted for one arch, and ptxas' machine code.
#[derive(Debug)]
pub struct PtxModule {
    /// Its `.target`.
    pub arch: Arch,
    /// The PTX text.
    pub ptx: Image,
    /// Machine code for this arch made by ptxas at build time, or empty. Loaded instead of the
    /// PTX on devices of the same major version and at least its minor (`sm_80` code runs on
    /// 8.6 and 8.9; `sm_90a` only on 9.0), which skips the driver's JIT compilation.
    pub cubin: Image,
}

impl PtxModule {
    /// The PTX text.
    ///
    /// # Errors
    /// [`crate::Error::ModuleImage`] when the embedded text does not unpack or is not UTF-8.
    pub fn ptx_text(&self, crate_name: &'static str) -> crate::Result<String> {
        let bytes = self.ptx.bytes(crate_name, self.arch.name())?;
        String::from_utf8(bytes.into_owned()).map_err(|e| crate::Error::ModuleImage {
            crate_name,
            arch: self.arch.name(),
            message: e.to_string(),
        })
    }

    /// A CRC-32 of its PTX and cubin as embedded: which build of the kernel crate this is (the
    /// autotune cache's [`crate::autotune::TuneKey::build`]).
    pub fn checksum(&self) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(self.ptx.embedded());
        h.update(self.cubin.embedded());
        h.finalize()
    }

    /// Whether its cubin runs on a device of compute capability `cc`.
    pub fn cubin_runs_on(&self, cc: u32) -> bool {
        !self.cubin.is_empty()
            && cc / 10 == self.arch.compute_capability() / 10
            && self.arch.runs_on(cc)
    }
}

/// All PTX modules of one kernel crate, newest arch first.
#[derive(Debug)]
pub struct PtxSet {
    /// The kernel crate's name (for messages; the module cache keys on the set's address).
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
    /// [`crate::Error::PtxNotBuilt`] when the set has no modules with PTX (the crate was built
    /// with `FUSED_GEMM_SKIP_PTX`); [`crate::Error::UnsupportedArch`], listing the built archs,
    /// when none runs on `cc`: no plain module for `cc` or older, and no arch-specific (`a`)
    /// module for exactly `cc`.
    pub fn select(&self, cc: u32) -> crate::Result<&PtxModule> {
        if self.modules.iter().all(|m| m.ptx.is_empty()) {
            return Err(crate::Error::PtxNotBuilt {
                crate_name: self.crate_name,
            });
        }
        self.modules
            .iter()
            .find(|m| !m.ptx.is_empty() && m.arch.runs_on(cc))
            .ok_or_else(|| crate::Error::UnsupportedArch {
                crate_name: self.crate_name,
                device_cc: cc,
                available: self
                    .modules
                    .iter()
                    .map(|m| m.arch.name())
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
                arch: Arch::Sm90a,
                ptx: Image::Plain(b"a"),
                cubin: Image::Plain(b"x"),
            },
            PtxModule {
                arch: Arch::Sm90,
                ptx: Image::Plain(b"b"),
                cubin: Image::Plain(&[]),
            },
            PtxModule {
                arch: Arch::Sm80,
                ptx: Image::Plain(b"c"),
                cubin: Image::Plain(b"y"),
            },
        ],
    );

    #[test]
    fn cubins_run_within_their_major_version() {
        let [a, b, c] = [&SET.modules[0], &SET.modules[1], &SET.modules[2]];
        assert!(a.cubin_runs_on(90) && !a.cubin_runs_on(100));
        assert!(!b.cubin_runs_on(90), "no cubin");
        assert!(c.cubin_runs_on(80) && c.cubin_runs_on(86) && c.cubin_runs_on(89));
        assert!(!c.cubin_runs_on(90) && !c.cubin_runs_on(75));
    }

    #[test]
    fn packed_images_unpack() {
        static PACKED: std::sync::LazyLock<&'static [u8]> = std::sync::LazyLock::new(|| {
            Vec::leak(zstd::bulk::compress(b".target sm_90a", 3).unwrap())
        });
        let m = PtxModule {
            arch: Arch::Sm90a,
            ptx: Image::Zstd(&PACKED),
            cubin: Image::Zstd(&[]),
        };
        assert_eq!(m.ptx_text("k").unwrap(), ".target sm_90a");
        assert!(m.cubin.is_empty());
        let broken = Image::Zstd(b"not zstd");
        assert!(matches!(
            broken.bytes("k", "sm_80"),
            Err(crate::Error::ModuleImage { arch: "sm_80", .. })
        ));
        let skipped = [PtxModule {
            ptx: Image::Zstd(&[]),
            ..m
        }];
        assert!(matches!(
            PtxSet::new("k", Vec::leak(skipped.into())).select(90),
            Err(crate::Error::PtxNotBuilt { .. })
        ));
    }

    #[test]
    fn picks_newest_runnable_arch() {
        assert_eq!(SET.select(90).unwrap().arch, Arch::Sm90a);
        assert_eq!(SET.select(100).unwrap().arch, Arch::Sm90);
        assert_eq!(SET.select(89).unwrap().arch, Arch::Sm80);
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
