//! Choosing where the forward pass runs.

use crate::error::{Error, Result};

/// The `--device` choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceChoice {
    /// CUDA when a driver is present, else the CPU.
    Auto,
    /// The CUDA backend (fused kernels).
    Cuda,
    /// The CPU backend (f32).
    Cpu,
}

/// Where the forward pass will run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolvedDevice {
    /// [`crate::backend::cpu::CpuBackend`].
    Cpu,
}

impl ResolvedDevice {
    /// Short name for messages (`"cpu"`).
    pub fn name(self) -> &'static str {
        match self {
            ResolvedDevice::Cpu => "cpu",
        }
    }
}

/// Resolves `choice` given whether a CUDA driver is present
/// ([`fused_gemm::host::gpu::driver_present`]). Returns the device and, when the choice was
/// not taken literally, a note for stderr saying why.
///
/// # Errors
/// For [`DeviceChoice::Cuda`]: the GPU runtime's "no CUDA driver" error without a driver,
/// [`Error::NotImplemented`] with one (the CUDA backend is not built yet).
pub fn resolve_device(
    choice: DeviceChoice,
    driver_present: bool,
) -> Result<(ResolvedDevice, Option<String>)> {
    match (choice, driver_present) {
        (DeviceChoice::Cpu, _) => Ok((ResolvedDevice::Cpu, None)),
        (DeviceChoice::Cuda, false) => Err(Error::Gpu(fused_gemm::Error::NoDriver)),
        (DeviceChoice::Cuda, true) => Err(Error::NotImplemented {
            what: "the CUDA backend of `embed` (use --device cpu)",
        }),
        (DeviceChoice::Auto, false) => Ok((
            ResolvedDevice::Cpu,
            Some("no CUDA driver found; running on the CPU".into()),
        )),
        (DeviceChoice::Auto, true) => Ok((
            ResolvedDevice::Cpu,
            Some(
                "CUDA driver found, but the CUDA backend of `embed` is not yet implemented; \
                 running on the CPU"
                    .into(),
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_falls_back_to_cpu_and_says_why() {
        for present in [false, true] {
            let (d, note) = resolve_device(DeviceChoice::Auto, present).unwrap();
            assert_eq!(d, ResolvedDevice::Cpu);
            assert!(note.unwrap().contains("running on the CPU"));
        }
        assert_eq!(
            resolve_device(DeviceChoice::Cpu, true).unwrap(),
            (ResolvedDevice::Cpu, None)
        );
    }

    #[test]
    fn explicit_cuda_is_a_clear_error() {
        let e = resolve_device(DeviceChoice::Cuda, false).unwrap_err();
        assert!(e.to_string().contains("no CUDA driver"), "{e}");
        let e = resolve_device(DeviceChoice::Cuda, true).unwrap_err();
        assert!(e.to_string().contains("not yet implemented"), "{e}");
    }
}
