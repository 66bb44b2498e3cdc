//! The error type of the host runtime.

use cudarc::driver::DriverError;

/// Everything that can go wrong on the host side of a launch.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `libcuda.so` could not be loaded: no NVIDIA driver on this machine.
    #[error(
        "no CUDA driver found (libcuda could not be loaded); a GPU and the NVIDIA driver are required"
    )]
    NoDriver,
    /// The driver loaded but reports no device with this ordinal.
    #[error("no CUDA device with ordinal {ordinal} ({count} device(s) present)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// The kernel crate was built without PTX (`FUSED_GEMM_SKIP_PTX` was set).
    #[error(
        "kernel crate `{crate_name}` was built with FUSED_GEMM_SKIP_PTX: it holds no PTX to launch"
    )]
    PtxNotBuilt {
        /// The crate whose PTX set is empty.
        crate_name: &'static str,
    },
    /// None of the embedded PTX modules targets an arch this device can run.
    #[error("kernel crate `{crate_name}` has PTX for {available} but the device is sm_{device_cc}")]
    UnsupportedArch {
        /// The crate.
        crate_name: &'static str,
        /// Device compute capability, major·10 + minor.
        device_cc: u32,
        /// The archs that were built.
        available: String,
    },
    /// A kernel name is not in the loaded module.
    #[error("kernel `{name}` not found in module `{crate_name}` ({arch})")]
    KernelNotFound {
        /// The entry point.
        name: String,
        /// The crate.
        crate_name: &'static str,
        /// The arch of the loaded module.
        arch: &'static str,
    },
    /// An argument does not satisfy a launch requirement; `arg` names it, `expected` and
    /// `actual` say how.
    #[error("invalid argument `{arg}`: expected {expected}, got {actual}")]
    InvalidArgument {
        /// The offending argument.
        arg: &'static str,
        /// What the kernel requires.
        expected: String,
        /// What was passed.
        actual: String,
    },
    /// A launch would exceed a hardware limit (grid size, shared memory, threads).
    #[error("launch limit exceeded: {0}")]
    LaunchLimit(String),
    /// The device could not allocate memory.
    #[error("device out of memory allocating {bytes} bytes")]
    OutOfMemory {
        /// The size asked for.
        bytes: usize,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver error: {0}")]
    Driver(#[from] DriverError),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::InvalidArgument`].
    pub fn invalid(arg: &'static str, expected: impl Into<String>, actual: impl ToString) -> Self {
        Error::InvalidArgument {
            arg,
            expected: expected.into(),
            actual: actual.to_string(),
        }
    }
}
