//! The error type of the embedding pipeline and the tool.

use std::path::PathBuf;

/// Everything that can go wrong between reading the model and writing embeddings.
///
/// Every variant names what failed (a path, a tensor, an argument) so that the message printed
/// by the tool is enough to fix the problem.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file of the model directory does not exist.
    #[error(
        "model file {path} not found (run scripts/fetch-model.sh, or point --model-dir / FUSED_GEMM_MODEL_DIR at a directory holding config.json, model.safetensors and tokenizer.json)"
    )]
    ModelFileMissing {
        /// The missing file.
        path: PathBuf,
    },
    /// Reading or writing a file failed for another reason than its absence.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was attempted ("read", "write", "create", "rename to").
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// `config.json` is not valid JSON or describes a model this code does not run.
    #[error("model config {path}: {reason}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The safetensors file is corrupt or truncated (bad header, offsets past the end).
    #[error("corrupt or truncated safetensors file {path}: {source}")]
    SafeTensors {
        /// The weights file.
        path: PathBuf,
        /// The parser's error.
        source: safetensors::SafeTensorError,
    },
    /// A tensor the model needs is not in the weights file.
    #[error("weights file {path} has no tensor `{name}`")]
    MissingTensor {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name, e.g. `encoder.layer.3.attention.self.query.weight`.
        name: String,
    },
    /// The weights file holds more encoder layers than the config's `num_hidden_layers`
    /// (fewer layers are a [`Error::MissingTensor`]).
    #[error(
        "weights file {path} has tensors of {file} encoder layers, but config.json's num_hidden_layers is {config}: they describe different models"
    )]
    LayerCount {
        /// The weights file.
        path: PathBuf,
        /// `num_hidden_layers` in the config.
        config: usize,
        /// Layers in the file: one more than the highest `encoder.layer.{i}` index.
        file: usize,
    },
    /// A tensor has a shape other than the config implies.
    #[error("tensor `{name}` has shape {actual:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor's name.
        name: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape in the file.
        actual: Vec<usize>,
    },
    /// A tensor is stored in a dtype the loader does not read.
    #[error("tensor `{name}` has dtype {actual}, expected F32, F16 or BF16")]
    TensorDtype {
        /// The tensor's name.
        name: String,
        /// The dtype in the file.
        actual: String,
    },
    /// `tokenizer.json` could not be loaded or configured.
    #[error("tokenizer {path}: {message}")]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// The tokenizers crate's message.
        message: String,
    },
    /// Encoding a sentence failed.
    #[error("tokenizing sentence {index}: {message}")]
    Tokenize {
        /// Index of the sentence in the input.
        index: usize,
        /// The tokenizers crate's message.
        message: String,
    },
    /// A command-line or API argument is out of range.
    #[error("invalid {arg}: expected {expected}, got {actual}")]
    InvalidArgument {
        /// The argument, as the user spells it (`--max-seq-len`).
        arg: &'static str,
        /// What is accepted.
        expected: String,
        /// What was given.
        actual: String,
    },
    /// The backend cannot run the requested dtype.
    #[error("the {backend} backend supports --dtype {supported} only, got {requested}")]
    UnsupportedDtype {
        /// The backend's name.
        backend: &'static str,
        /// The dtype asked for.
        requested: crate::Dtype,
        /// The dtypes it runs.
        supported: &'static str,
    },
    /// The requested backend is not built yet.
    #[error("{what} is not yet implemented")]
    NotImplemented {
        /// What is missing.
        what: &'static str,
    },
    /// No sentences were given.
    #[error("no input sentences: {hint}")]
    EmptyInput {
        /// Where sentences were looked for.
        hint: &'static str,
    },
    /// An input line is not valid UTF-8.
    #[error("{source_name}: line {line} is not valid UTF-8")]
    InvalidUtf8 {
        /// `stdin` or the file's path.
        source_name: String,
        /// 1-based line number.
        line: usize,
    },
    /// Writing the `.npy` output failed.
    #[error("writing npy output: {0}")]
    Npy(std::io::Error),
    /// A smoke-test result is off by more than its tolerance.
    #[error(
        "smoke test on {device}: {what} max relative error {error:.3e} exceeds {tolerance:.1e}"
    )]
    SmokeFailed {
        /// The computation.
        what: &'static str,
        /// Where it ran.
        device: String,
        /// The measured error.
        error: f64,
        /// The allowed error.
        tolerance: f64,
    },
    /// A GPU runtime error.
    #[error(transparent)]
    Gpu(#[from] fused_gemm::Error),
    /// One device of a run on several failed; the others stopped before their next batch and
    /// nothing was written.
    #[error("device {device}: {source}")]
    OnDevice {
        /// The device: its position among the run's devices, which the CLI replaces by the
        /// GPU's ordinal.
        device: usize,
        /// What failed there.
        source: Box<Error>,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Io`] for `action` on `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// An [`Error::InvalidArgument`].
    pub fn invalid(arg: &'static str, expected: impl Into<String>, actual: impl ToString) -> Self {
        Error::InvalidArgument {
            arg,
            expected: expected.into(),
            actual: actual.to_string(),
        }
    }
}

/// Reads a whole file, turning "not found" into [`Error::ModelFileMissing`].
pub(crate) fn read_model_file(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::ModelFileMissing {
                path: path.to_owned(),
            }
        } else {
            Error::io("read", path, e)
        }
    })
}
