//! The benchmark's error type.

use fused_gemm::host::cudarc;

/// Everything that can stop a benchmark step.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// From the fused-gemm host runtime: no driver, no device, launch validation, driver calls.
    #[error(transparent)]
    Host(#[from] fused_gemm::Error),
    /// A CUDA driver call made directly by the benchmark (events, copies).
    #[error("CUDA driver error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// A cuBLASLt call failed (status as cuBLASLt names it).
    #[error("cuBLASLt: {0}")]
    Cublas(String),
    /// The cuBLASLt library could not be loaded.
    #[error("cuBLASLt is not available: libcublasLt could not be loaded")]
    NoCublasLt,
    /// A command-line value that names nothing (an unknown shape pattern, ...).
    #[error("invalid {what}: {detail}")]
    Usage {
        /// Which option.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// Not enough device memory for one rotation set.
    #[error("not enough device memory: {needed} bytes needed for one input set, {free} free")]
    OutOfMemory {
        /// Bytes one set needs.
        needed: u64,
        /// Bytes free on the device.
        free: u64,
    },
    /// Writing results.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Encoding or decoding the JSON results.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Drawing the chart.
    #[error("chart: {0}")]
    Chart(String),
}

impl From<cudarc::cublaslt::result::CublasError> for BenchError {
    fn from(e: cudarc::cublaslt::result::CublasError) -> Self {
        BenchError::Cublas(format!("{:?}", e.0))
    }
}

/// `Result` with [`BenchError`].
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
