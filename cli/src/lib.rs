//! # fused-gemm-cli
//!
//! Sentence embeddings with all-MiniLM-L6-v2 (a 6-layer post-LayerNorm BERT, d = 384), the main
//! job of fused-gemm on real input, plus the library behind the `fused-gemm` tool.
//!
//! | module | what |
//! |---|---|
//! | [`config`] | hyper-parameters from `config.json`; the GELU variants |
//! | [`weights`] | `model.safetensors` → checked f32 tensors; packed QKV; f16/bf16 copies |
//! | [`tokenize`] | the model's WordPiece tokenizer, truncation as sentence-transformers does; padded batches |
//! | [`backend`] | the [`Backend`] trait (one method per fused kernel of a layer), [`forward`], timings |
//! | [`backend::cpu`] | the f32 CPU backend |
//! | [`backend::cuda`] | the CUDA backend (fused kernels, f16/bf16), its throughput path and benchmark |
//! | [`embed`](mod@embed) | loading a model directory, batching by length, [`Embeddings`] |
//! | [`input`], [`output`] | reading sentences; writing JSON lines / `.npy` atomically; the similarity table |
//! | [`device`] | `--device auto|cuda|cpu` and `--dtype` resolution |
//! | [`convert`] | `convert-model`: a model directory with f16/bf16 weights (45 MB instead of 90) |
//! | [`smoke`] | the GPU smoke test (axpy, naive GEMM) with its CPU fallback |
//!
//! The pipeline matches sentence-transformers' `SentenceTransformer("all-MiniLM-L6-v2")`:
//! tokens (truncated to 256 by default) → BERT → mean pooling over the attention mask → L2
//! normalization. `cli/tests/` checks the CPU backend against fixtures made by
//! `scripts/make_fixtures.py` (cosine ≥ 0.9999 per sentence, identical token ids);
//! `cli/tests/gpu_minilm.rs` checks the CUDA backend on a GPU (cosine ≥ 0.999 in f16, ≥ 0.995
//! in bf16).

#![warn(missing_docs)]

pub mod backend;
pub mod config;
pub mod convert;
pub mod device;
pub mod embed;
pub mod error;
pub mod input;
pub mod output;
pub mod random_model;
pub mod shard;
pub mod smoke;
pub mod tokenize;
pub mod weights;

pub use backend::cpu::CpuBackend;
pub use backend::cuda::{AnyCudaBackend, CudaBackend, CudaOptions};
pub use backend::{Activations, Backend, Dtype, Stage, Timings, encode, forward};
pub use config::{Activation, MiniLmConfig};
pub use embed::{Embeddings, Model, default_model_dir, embed};
pub use error::{Error, Result};
pub use shard::{DeviceShare, ShardedEmbeddings, embed_on_devices};
pub use tokenize::{DEFAULT_MAX_SEQ_LEN, Encoded, MiniLmTokenizer, TokenBatch};
pub use weights::ModelWeights;
