//! The error type of the host runtime.
//!
//! Every variant that is about a caller's argument names the argument (`arg`) and says what was
//! expected and what was passed, so a message alone is enough to fix the call.

use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;
use fused_gemm_device::types::DType;

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
    /// None of the embedded PTX modules targets an arch this device can run (for example PTX
    /// built only for `sm_90a` on an sm_80 device).
    #[error("kernel crate `{crate_name}` has PTX for {available} but the device is sm_{device_cc}")]
    UnsupportedArch {
        /// The crate.
        crate_name: &'static str,
        /// Device compute capability, major·10 + minor.
        device_cc: u32,
        /// The archs that were built.
        available: String,
    },
    /// An embedded module does not unpack (a damaged binary).
    #[error("kernel crate `{crate_name}`: its {arch} module does not unpack: {message}")]
    ModuleImage {
        /// The crate.
        crate_name: &'static str,
        /// The module's arch.
        arch: &'static str,
        /// The decoder's message.
        message: String,
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
    /// `actual` say how. Used for scalar parameters (epsilon, RoPE parameters, thread counts).
    #[error("invalid argument `{arg}`: expected {expected}, got {actual}")]
    InvalidArgument {
        /// The offending argument.
        arg: &'static str,
        /// What the kernel requires.
        expected: String,
        /// What was passed.
        actual: String,
    },
    /// A matrix or vector has the wrong shape for its role, e.g. `b` is 768×3072 where the GEMM
    /// needs K×N = 768×1024. Shapes are written rows×cols.
    #[error("shape mismatch for `{arg}`: expected {expected}, got {actual}")]
    ShapeMismatch {
        /// The offending operand.
        arg: &'static str,
        /// The shape the other operands imply, with where it comes from.
        expected: String,
        /// The operand's shape.
        actual: String,
    },
    /// An operand has the wrong element type.
    #[error("wrong dtype for `{arg}`: expected {}, got {}", expected.name(), actual.name())]
    DtypeMismatch {
        /// The offending operand.
        arg: &'static str,
        /// The dtype the kernel was compiled for.
        expected: DType,
        /// The operand's dtype.
        actual: DType,
    },
    /// A row-major matrix whose leading dimension (elements between row starts) is smaller
    /// than its number of columns: rows would overlap.
    #[error("leading dimension of `{arg}` is {ld} elements, smaller than its {cols} columns")]
    LeadingDimension {
        /// The offending operand.
        arg: &'static str,
        /// Its leading dimension, elements.
        ld: u64,
        /// Its columns.
        cols: u64,
    },
    /// A device address that is not a multiple of what the kernel's loads need (at least the
    /// element size; 16 bytes for a path that requires vector loads).
    #[error("`{arg}` is misaligned: {what} must be a multiple of {align} bytes, got {actual}")]
    Misaligned {
        /// The offending operand.
        arg: &'static str,
        /// What is misaligned: "address", "leading dimension (bytes)", "row length (bytes)".
        what: &'static str,
        /// The alignment required, bytes.
        align: u64,
        /// The value found.
        actual: u64,
    },
    /// A null device address for an operand with at least one element.
    #[error("`{arg}` is a null device pointer but has {elements} element(s)")]
    NullPointer {
        /// The offending operand.
        arg: &'static str,
        /// How many elements it claims to hold.
        elements: u64,
    },
    /// A dimension or leading dimension beyond what the kernel can index (its arguments are
    /// `u32`; products are formed in 64 bits).
    #[error("`{arg}` is too large: at most {max}, got {actual}")]
    TooLarge {
        /// The offending dimension, e.g. "m", "a.ld".
        arg: &'static str,
        /// The largest value supported.
        max: u64,
        /// The value passed.
        actual: u64,
    },
    /// The output overlaps an input in a way the kernel cannot handle (it would read values it
    /// has already overwritten). Exact aliasing of C with `residual` is allowed (see
    /// [`crate::validate`]).
    #[error("output `{output}` overlaps input `{input}`: {detail}")]
    Aliasing {
        /// The output operand.
        output: &'static str,
        /// The input it overlaps.
        input: &'static str,
        /// How they overlap.
        detail: String,
    },
    /// A view or index outside its tensor, e.g. rows 5..10 of a 8-row tensor.
    #[error("`{arg}` out of range: {actual} is not within {bounds}")]
    OutOfRange {
        /// The offending range or index.
        arg: &'static str,
        /// The valid range.
        bounds: String,
        /// What was asked for.
        actual: String,
    },
    /// Host data of the wrong length for a tensor of the given shape.
    #[error("`{arg}` has {actual} elements; a {rows}×{cols} tensor needs {expected}")]
    HostLength {
        /// The offending host slice.
        arg: &'static str,
        /// Rows of the tensor.
        rows: usize,
        /// Columns of the tensor.
        cols: usize,
        /// `rows · cols`.
        expected: usize,
        /// The slice's length.
        actual: usize,
    },
    /// A launch would exceed a hardware limit (grid size, shared memory, threads).
    #[error("launch limit exceeded: {0}")]
    LaunchLimit(String),
    /// The device could not allocate memory: found before allocating (the request exceeds
    /// the free memory) or reported by the driver (`CUDA_ERROR_OUT_OF_MEMORY`).
    #[error("device out of memory allocating {}", describe_bytes(*bytes))]
    OutOfMemory {
        /// The size asked for, bytes; 0 when the driver reported the failure without a size
        /// (e.g. from a launch).
        bytes: usize,
    },
    /// A CUDA graph capture failed or captured nothing.
    #[error("CUDA graph capture failed: {0}")]
    Capture(String),
    /// Reading or writing a file (the autotune cache, a sweep report).
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A timing callback (autotune, sweep) failed or returned a value that is not a time.
    #[error("timing failed for {what}: {detail}")]
    Timing {
        /// What was being timed.
        what: String,
        /// Why it failed.
        detail: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver error: {}", driver_message(.0))]
    Driver(DriverError),
}

/// The driver's description of `e`; only the code when `libcuda` is absent (cudarc's `Display`
/// asks the driver for the string and would panic).
fn driver_message(e: &DriverError) -> String {
    if crate::driver_ext::driver_present() {
        e.to_string()
    } else {
        format!("{:?} (no CUDA driver loaded to describe it)", e.0)
    }
}

fn describe_bytes(bytes: usize) -> String {
    if bytes == 0 {
        "(size not reported by the driver)".to_owned()
    } else {
        format!("{bytes} bytes")
    }
}

impl From<DriverError> for Error {
    /// Driver errors, with `CUDA_ERROR_OUT_OF_MEMORY` turned into [`Error::OutOfMemory`].
    fn from(e: DriverError) -> Self {
        if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            Error::OutOfMemory { bytes: 0 }
        } else {
            Error::Driver(e)
        }
    }
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

    /// An [`Error::ShapeMismatch`].
    pub fn shape(arg: &'static str, expected: impl Into<String>, actual: impl ToString) -> Self {
        Error::ShapeMismatch {
            arg,
            expected: expected.into(),
            actual: actual.to_string(),
        }
    }

    /// A driver error with `CUDA_ERROR_OUT_OF_MEMORY` mapped to [`Error::OutOfMemory`] of the
    /// size that was being allocated.
    pub fn from_alloc(e: DriverError, bytes: usize) -> Self {
        if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            Error::OutOfMemory { bytes }
        } else {
            Error::Driver(e)
        }
    }

    /// Whether this is how a stream capture fails when something the driver does not allow
    /// during captures happened: [`Error::Capture`], or the driver's
    /// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, `_INVALIDATED` or `_IMPLICIT`.
    pub fn is_capture_failure(&self) -> bool {
        match self {
            Error::Capture(_) => true,
            Error::Driver(e) => matches!(
                e.0,
                CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
                    | CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                    | CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
            ),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_failures_are_recognized() {
        for code in [
            CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
        ] {
            assert!(Error::Driver(DriverError(code)).is_capture_failure());
        }
        assert!(Error::Capture("ending the capture failed".into()).is_capture_failure());
        assert!(
            !Error::Driver(DriverError(CUresult::CUDA_ERROR_INVALID_VALUE)).is_capture_failure()
        );
        assert!(!Error::OutOfMemory { bytes: 1 }.is_capture_failure());
    }

    #[test]
    fn driver_out_of_memory_becomes_typed() {
        let e: Error = DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY).into();
        assert!(matches!(e, Error::OutOfMemory { bytes: 0 }), "{e:?}");
        assert!(e.to_string().contains("not reported"), "{e}");
        let e = Error::from_alloc(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY), 1 << 40);
        assert!(e.to_string().contains("1099511627776 bytes"), "{e}");
        let e: Error = DriverError(CUresult::CUDA_ERROR_INVALID_VALUE).into();
        assert!(matches!(e, Error::Driver(_)));
        let e = Error::from_alloc(DriverError(CUresult::CUDA_ERROR_INVALID_VALUE), 8);
        assert!(matches!(e, Error::Driver(_)));
    }

    #[test]
    fn messages_name_argument_expected_and_actual() {
        let e = Error::DtypeMismatch {
            arg: "bias",
            expected: DType::Bf16,
            actual: DType::F32,
        };
        assert_eq!(
            e.to_string(),
            "wrong dtype for `bias`: expected bf16, got f32"
        );
        let e = Error::shape("b", "768×1024 (K×N)", "768×3072");
        assert_eq!(
            e.to_string(),
            "shape mismatch for `b`: expected 768×1024 (K×N), got 768×3072"
        );
    }
}
