//! WordPiece tokenization with the model's `tokenizer.json`, truncated as sentence-transformers
//! does, and padding of batches.

use std::path::{Path, PathBuf};

use tokenizers::{
    NormalizerWrapper, PreTokenizerWrapper, Tokenizer, TruncationDirection, TruncationParams,
    TruncationStrategy,
};

use crate::config::MiniLmConfig;
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
    /// Whether cutting a long input before a space leaves the tokens before the cut unchanged
    /// (see [`MiniLmTokenizer::encode`]).
    prefix_exact: bool,
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
        // The BERT normalizer works character by character (NFD reorders only marks, which
        // never move across a space), the BERT pre-tokenizer splits at every space, and added
        // tokens of printable ASCII cannot match across one, even normalized (CJK characters
        // would get spaces): then a space in the input ends every token before it.
        let prefix_exact = matches!(
            inner.get_normalizer(),
            Some(NormalizerWrapper::BertNormalizer(_))
        ) && matches!(
            inner.get_pre_tokenizer(),
            Some(PreTokenizerWrapper::BertPreTokenizer(_))
        ) && inner
            .get_added_tokens_decoder()
            .values()
            .all(|t| t.content.chars().all(|c| c.is_ascii_graphic()));
        Ok(MiniLmTokenizer {
            inner,
            max_seq_len,
            pad_id,
            prefix_exact,
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
    /// A long sentence is tokenized by prefixes cut before a space, doubling in length until
    /// one has more than `max_seq_len` tokens: with the BERT normalizer and pre-tokenizer the tokens of
    /// such a prefix are the first tokens of the whole sentence, so the result is the same as
    /// tokenizing it whole, in time proportional to `max_seq_len` rather than to its length.
    ///
    /// # Errors
    /// [`Error::Tokenize`] (index 0) if the tokenizer fails.
    pub fn encode(&self, sentence: &str) -> Result<Vec<u32>> {
        Ok(self.encode_indexed(0, sentence)?.0)
    }

    /// Token ids of each sentence, as [`MiniLmTokenizer::encode`], and which sentences were cut.
    /// The sentences are tokenized on every core (rayon's global pool): one thread took about
    /// 65 µs a sentence, several times the GPU's 10 µs a sentence in a MiniLM forward at batch
    /// 256.
    ///
    /// # Errors
    /// [`Error::Tokenize`] naming the first sentence, in input order, that failed.
    pub fn encode_all<S: AsRef<str> + Sync>(&self, sentences: &[S]) -> Result<Encoded> {
        use rayon::prelude::*;
        let encoded: Vec<Result<(Vec<u32>, bool)>> = sentences
            .par_iter()
            .enumerate()
            .map(|(i, s)| self.encode_indexed(i, s.as_ref()))
            .collect();
        let mut out = Encoded {
            ids: Vec::with_capacity(sentences.len()),
            truncated: Vec::new(),
        };
        for (i, r) in encoded.into_iter().enumerate() {
            let (ids, cut) = r?;
            out.ids.push(ids);
            if cut {
                out.truncated.push(i);
            }
        }
        Ok(out)
    }

    /// The ids, and whether the sentence was cut.
    fn encode_indexed(&self, index: usize, sentence: &str) -> Result<(Vec<u32>, bool)> {
        if self.prefix_exact {
            let mut budget = PREFIX_BYTES_PER_TOKEN.saturating_mul(self.max_seq_len);
            while let Some(cut) = cut_before_space(sentence, budget) {
                // Only a cut prefix proves the whole sentence is cut: a prefix of exactly
                // `max_seq_len` tokens may be followed by nothing but spaces.
                let (ids, cut_prefix) = self.encode_whole(index, &sentence[..cut])?;
                if cut_prefix {
                    return Ok((ids, true));
                }
                budget = cut.max(budget).saturating_mul(2);
            }
        }
        self.encode_whole(index, sentence)
    }

    fn encode_whole(&self, index: usize, sentence: &str) -> Result<(Vec<u32>, bool)> {
        let enc = self
            .inner
            .encode(sentence, true)
            .map_err(|e| Error::Tokenize {
                index,
                message: e.to_string(),
            })?;
        // Truncation moves the cut tokens into the overflowing encodings.
        Ok((enc.get_ids().to_vec(), !enc.get_overflowing().is_empty()))
    }
}

/// What [`MiniLmTokenizer::encode_all`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// Per sentence, in input order: `[CLS] … [SEP]` token ids, at most `max_seq_len` of them.
    pub ids: Vec<Vec<u32>>,
    /// Indices (in input order, ascending) of the sentences longer than `max_seq_len` tokens,
    /// which were cut to it.
    pub truncated: Vec<usize>,
}

/// Bytes of text per token of the first prefix [`MiniLmTokenizer::encode`] tries: English
/// averages about 4 bytes per WordPiece token, so one prefix is almost always enough.
const PREFIX_BYTES_PER_TOKEN: usize = 16;

/// Where to cut `s` for a prefix of about `budget` bytes: the byte offset of the last space
/// at or before `budget`, else of the first one after it. `None` when `s` is not longer than
/// `budget` or has no such space (then it is tokenized whole).
fn cut_before_space(s: &str, budget: usize) -> Option<usize> {
    let bytes = s.as_bytes();
    if bytes.len() <= budget {
        return None;
    }
    bytes[..=budget]
        .iter()
        .rposition(|&b| b == b' ')
        .filter(|&p| p > 0)
        .or_else(|| {
            bytes[budget..]
                .iter()
                .position(|&b| b == b' ')
                .map(|p| p + budget)
        })
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

    /// Total positions B·T (the M dimension of every GEMM in the forward pass); saturates
    /// instead of overflowing for a batch that [`TokenBatch::validate`] rejects.
    pub fn tokens(&self) -> usize {
        self.batch.saturating_mul(self.seq_len)
    }

    /// Checks the batch against the layout above and the model's tables, before a backend
    /// reads it: B ≥ 1; 1 ≤ T ≤ `max_position_embeddings`; `ids`, `type_ids` and `mask` hold
    /// B·T values and `lengths` B; every length is in `1..=T` and its mask row is 1 on
    /// `0..lengths[b]` and 0 after it (the CPU backend reads the mask, the CUDA backend the
    /// lengths: they must agree); ids are below `vocab_size`, type ids below `type_vocab_size`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the first violation.
    pub fn validate(&self, config: &MiniLmConfig) -> Result<()> {
        if self.batch == 0 || self.seq_len == 0 {
            return Err(Error::invalid(
                "token batch",
                "at least one sequence of at least one token",
                format!("B = {}, T = {}", self.batch, self.seq_len),
            ));
        }
        if self.seq_len > config.max_position_embeddings {
            return Err(Error::invalid(
                "sequence length",
                format!("at most {} positions", config.max_position_embeddings),
                self.seq_len,
            ));
        }
        let n = self.batch.checked_mul(self.seq_len);
        let counts = [self.ids.len(), self.type_ids.len(), self.mask.len()];
        if counts.iter().any(|&c| Some(c) != n) || self.lengths.len() != self.batch {
            return Err(Error::invalid(
                "token batch",
                format!(
                    "B·T = {}·{} ids, type ids and mask values and B lengths",
                    self.batch, self.seq_len
                ),
                format!(
                    "{} ids, {} type ids, {} mask values, {} lengths",
                    counts[0],
                    counts[1],
                    counts[2],
                    self.lengths.len()
                ),
            ));
        }
        let t = self.seq_len;
        for (b, (&len, mask)) in self
            .lengths
            .iter()
            .zip(self.mask.chunks_exact(t))
            .enumerate()
        {
            if !(1..=t).contains(&len) {
                return Err(Error::invalid(
                    "sequence length",
                    format!("1..={t} (the padded length)"),
                    format!("{len} for sequence {b}"),
                ));
            }
            if let Some(p) = (0..t).find(|&p| mask[p] != u32::from(p < len)) {
                return Err(Error::invalid(
                    "attention mask",
                    format!("1 before the length {len} of sequence {b}, 0 after it"),
                    format!("{} at position {p}", mask[p]),
                ));
            }
        }
        if let Some(&id) = self.ids.iter().find(|&&i| i as usize >= config.vocab_size) {
            return Err(Error::invalid(
                "token id",
                format!("below vocab_size {}", config.vocab_size),
                id,
            ));
        }
        if let Some(&ty) = self
            .type_ids
            .iter()
            .find(|&&ty| ty as usize >= config.type_vocab_size)
        {
            return Err(Error::invalid(
                "token type id",
                format!("below type_vocab_size {}", config.type_vocab_size),
                ty,
            ));
        }
        Ok(())
    }
}
