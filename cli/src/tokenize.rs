//! WordPiece tokenization with the model's `tokenizer.json`, truncated as sentence-transformers
//! does, and padding of batches.

use std::path::{Path, PathBuf};

use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::error::{Error, Result};

/// The sequence length sentence-transformers uses for all-MiniLM-L6-v2 (`max_seq_length` in the
/// model's `sentence_bert_config.json`): inputs are cut to this many tokens, `[CLS]` and `[SEP]`
/// included. (The 128 in `tokenizer.json`'s own truncation and padding sections is not what
/// sentence-transformers uses; [`MiniLmTokenizer`] overrides both.)
pub const DEFAULT_MAX_SEQ_LEN: usize = 256;

/// The model's tokenizer (BERT normalizer: clean text, split CJK characters, lowercase, strip
/// accents; WordPiece; `[CLS] … [SEP]` template), truncating every sentence to at most
/// `max_seq_len` tokens including `[CLS]` and `[SEP]` (right side, "longest first"), without
/// padding: [`TokenBatch::pad`] pads per batch.
pub struct MiniLmTokenizer {
    inner: Tokenizer,
    max_seq_len: usize,
    pad_id: u32,
}

impl std::fmt::Debug for MiniLmTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLmTokenizer")
            .field("max_seq_len", &self.max_seq_len)
            .finish_non_exhaustive()
    }
}

impl MiniLmTokenizer {
    /// Loads `tokenizer.json` and sets truncation to `max_seq_len` tokens.
    ///
    /// `max_seq_len` must be at least 2 (room for `[CLS]` and `[SEP]`); the caller checks it
    /// against the model's position table.
    ///
    /// # Errors
    /// [`Error::ModelFileMissing`] when the file is absent, [`Error::Tokenizer`] when it does not
    /// parse or has no `[PAD]` token, [`Error::InvalidArgument`] for `max_seq_len < 2`.
    pub fn from_file(path: &Path, max_seq_len: usize) -> Result<Self> {
        if max_seq_len < 2 {
            return Err(Error::invalid(
                "--max-seq-len",
                "at least 2 ([CLS] and [SEP])",
                max_seq_len,
            ));
        }
        if !path.exists() {
            return Err(Error::ModelFileMissing {
                path: path.to_owned(),
            });
        }
        let err = |message: String| Error::Tokenizer {
            path: PathBuf::from(path),
            message,
        };
        let mut inner = Tokenizer::from_file(path).map_err(|e| err(e.to_string()))?;
        inner
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_seq_len,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| err(e.to_string()))?;
        inner.with_padding(None);
        let pad_id = inner
            .token_to_id("[PAD]")
            .ok_or_else(|| err("vocabulary has no [PAD] token".into()))?;
        Ok(MiniLmTokenizer {
            inner,
            max_seq_len,
            pad_id,
        })
    }

    /// The truncation length (tokens, `[CLS]`/`[SEP]` included).
    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// The id of `[PAD]`.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The id of a token in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token string of an id.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Token ids of one sentence, `[CLS] … [SEP]`, truncated, unpadded.
    ///
    /// # Errors
    /// [`Error::Tokenize`] (index 0) if the tokenizer fails.
    pub fn encode(&self, sentence: &str) -> Result<Vec<u32>> {
        self.encode_indexed(0, sentence)
    }

    /// Token ids of each sentence, as [`MiniLmTokenizer::encode`].
    ///
    /// # Errors
    /// [`Error::Tokenize`] naming the sentence that failed.
    pub fn encode_all<S: AsRef<str>>(&self, sentences: &[S]) -> Result<Vec<Vec<u32>>> {
        sentences
            .iter()
            .enumerate()
            .map(|(i, s)| self.encode_indexed(i, s.as_ref()))
            .collect()
    }

    fn encode_indexed(&self, index: usize, sentence: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(sentence, true)
            .map_err(|e| Error::Tokenize {
                index,
                message: e.to_string(),
            })?;
        Ok(enc.get_ids().to_vec())
    }
}

/// A padded batch of token sequences, the input of a forward pass.
///
/// All arrays are row-major `[batch, seq_len]`; sequence `b` occupies positions
/// `0..lengths[b]` and is right-padded with `pad_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBatch {
    /// Number of sequences B.
    pub batch: usize,
    /// Padded length T (the longest sequence of the batch).
    pub seq_len: usize,
    /// `[B, T]` token ids.
    pub ids: Vec<u32>,
    /// `[B, T]` token type ids (all 0 for single sentences).
    pub type_ids: Vec<u32>,
    /// `[B, T]` attention mask: 1 for real tokens, 0 for padding.
    pub mask: Vec<u32>,
    /// `[B]` real lengths.
    pub lengths: Vec<usize>,
}

impl TokenBatch {
    /// Pads `sequences` on the right with `pad_id` to the longest one.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `sequences` is empty or a sequence is empty.
    pub fn pad<S: AsRef<[u32]>>(sequences: &[S], pad_id: u32) -> Result<Self> {
        if sequences.is_empty() {
            return Err(Error::invalid("batch", "at least one sequence", 0));
        }
        let lengths: Vec<usize> = sequences.iter().map(|s| s.as_ref().len()).collect();
        if let Some(i) = lengths.iter().position(|&l| l == 0) {
            return Err(Error::invalid(
                "batch",
                "non-empty sequences",
                format!("sequence {i} with no tokens"),
            ));
        }
        let batch = sequences.len();
        let seq_len = *lengths.iter().max().expect("non-empty");
        let mut ids = vec![pad_id; batch * seq_len];
        let mut mask = vec![0u32; batch * seq_len];
        for (b, s) in sequences.iter().enumerate() {
            let s = s.as_ref();
            ids[b * seq_len..b * seq_len + s.len()].copy_from_slice(s);
            mask[b * seq_len..b * seq_len + s.len()].fill(1);
        }
        Ok(TokenBatch {
            batch,
            seq_len,
            ids,
            type_ids: vec![0; batch * seq_len],
            mask,
            lengths,
        })
    }

    /// Total positions B·T (the M dimension of every GEMM in the forward pass).
    pub fn tokens(&self) -> usize {
        self.batch * self.seq_len
    }
}
