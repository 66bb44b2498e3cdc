//! Host launchers for the BERT encoder's kernels other than its GEMMs: embeddings + LayerNorm,
//! masked multi-head attention (head dimensions 32, 64 and 128) and masked mean pooling + L2 normalization
//! (sentence-transformers' `Pooling(mean)` + `Normalize`).
//!
//! Shapes follow the encoder's forward pass for a right-padded batch `[B, T]` (B sequences,
//! T = longest length): hidden states are `[B·T, d]` row-major, one row per token, row
//! `b·T + t` for position `t` of sequence `b`. A [`SeqBatch`] holds the token ids and the
//! validated lengths on the device and is shared by all three launchers.
//!
//! Storage dtypes are f32, [`half::f16`] and [`half::bf16`] ([`BertElement`]); all arithmetic is
//! f32. Launches are asynchronous on [`Gpu::stream`]. Every launcher validates shapes, lengths,
//! table bounds and grid limits and returns a typed [`Error`] instead of launching out of
//! bounds.
//!
//! Kernel bodies and launch shapes: `fused_gemm_device::kernel::bert`; f64 references:
//! `fused_gemm_host::reference::bert`.

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice};
use fused_gemm_device::kernel::bert::attention::AttnKernelArgs;
use fused_gemm_device::kernel::bert::embed::EmbedArgs;
use fused_gemm_device::kernel::bert::pool::PoolArgs;
use fused_gemm_device::kernel::bert::{
    attention as dattn, attention_mma as dmma, embed as dembed, pool as dpool,
};
use fused_gemm_device::types::DType;
use fused_gemm_host::launch::{Entry, LaunchShape};
use fused_gemm_host::{Error, Gpu, Result};

use crate::kernels::bert as k;
use crate::ptx::BUILTIN;

use fused_gemm_host::cudarc;

/// Head dimensions (columns per attention head) [`attention`] is built for.
pub const HEAD_DIMS: [usize; 3] = [32, 64, 128];
const _: () = {
    let mut i = 0;
    while i < HEAD_DIMS.len() {
        assert!(HEAD_DIMS[i] == dattn::ATTN_HEAD_DIMS[i] as usize);
        i += 1;
    }
};
/// Largest hidden size d of [`embeddings`] (1024, BERT-large).
pub const MAX_HIDDEN: usize = dembed::EMBED_MAX_HIDDEN as usize;
/// Largest hidden size of [`mean_pool_l2`] (2048).
pub const MAX_POOL_HIDDEN: usize = dpool::POOL_MAX_HIDDEN as usize;
/// ε of the L2 normalization: `x / max(‖x‖, NORM_EPS)` (`torch.nn.functional.normalize`).
pub const NORM_EPS: f32 = dpool::POOL_NORM_EPS;

mod sealed {
    use super::{AttnKernelArgs, EmbedArgs, Entry, PoolArgs, k};
    use fused_gemm_device::types::{Bf16, Element, F16};

    /// What seals [`super::BertElement`]: the storage type's entry points.
    pub trait Sealed {
        /// The device storage type with the same bits.
        type Device: Element;
        /// Embeddings + LayerNorm.
        const EMBED: Entry<EmbedArgs<Self::Device>>;
        /// Mean pooling + L2 normalization.
        const POOL: Entry<PoolArgs<Self::Device>>;
        /// Attention, per head dimension of [`super::HEAD_DIMS`].
        const ATTENTION: [Entry<AttnKernelArgs<Self::Device>>; 3];
    }
    impl Sealed for f32 {
        type Device = f32;
        const EMBED: Entry<EmbedArgs<f32>> = k::fg_bert_embed_layer_norm_f32;
        const POOL: Entry<PoolArgs<f32>> = k::fg_bert_mean_pool_l2_f32;
        const ATTENTION: [Entry<AttnKernelArgs<f32>>; 3] = [
            k::fg_bert_attention_simt_h32_f32,
            k::fg_bert_attention_simt_h64_f32,
            k::fg_bert_attention_simt_h128_f32,
        ];
    }
    impl Sealed for half::f16 {
        type Device = F16;
        const EMBED: Entry<EmbedArgs<F16>> = k::fg_bert_embed_layer_norm_f16;
        const POOL: Entry<PoolArgs<F16>> = k::fg_bert_mean_pool_l2_f16;
        const ATTENTION: [Entry<AttnKernelArgs<F16>>; 3] = [
            k::fg_bert_attention_mma_h32_f16,
            k::fg_bert_attention_mma_h64_f16,
            k::fg_bert_attention_mma_h128_f16,
        ];
    }
    impl Sealed for half::bf16 {
        type Device = Bf16;
        const EMBED: Entry<EmbedArgs<Bf16>> = k::fg_bert_embed_layer_norm_bf16;
        const POOL: Entry<PoolArgs<Bf16>> = k::fg_bert_mean_pool_l2_bf16;
        const ATTENTION: [Entry<AttnKernelArgs<Bf16>>; 3] = [
            k::fg_bert_attention_mma_h32_bf16,
            k::fg_bert_attention_mma_h64_bf16,
            k::fg_bert_attention_mma_h128_bf16,
        ];
    }
}

/// A storage type of the BERT kernels: `f32`, [`half::f16`] or [`half::bf16`].
pub trait BertElement: DeviceRepr + Copy + sealed::Sealed {
    /// The device dtype with the same bits.
    const DTYPE: DType;
}
impl BertElement for f32 {
    const DTYPE: DType = DType::F32;
}
impl BertElement for half::f16 {
    const DTYPE: DType = DType::F16;
}
impl BertElement for half::bf16 {
    const DTYPE: DType = DType::Bf16;
}

/// The attention kernel of `T` for a head dimension and its launch: the CUDA-core kernel for
/// f32, the tensor-core kernel for f16/bf16; `None` for a head dimension not in
/// [`HEAD_DIMS`].
fn attention_entry<T: BertElement>(
    head_dim: usize,
) -> Option<(Entry<AttnKernelArgs<T::Device>>, dattn::AttnLaunch)> {
    let entry = T::ATTENTION[HEAD_DIMS.iter().position(|&d| d == head_dim)?];
    let launch = match T::DTYPE {
        DType::F32 => dattn::simt_launch(head_dim as u32),
        DType::F16 | DType::Bf16 => dmma::mma_launch(head_dim as u32),
    }?;
    Some((entry, launch))
}

/// Checks a right-padded batch on the host: `seq_len ≥ 1`, at least one sequence, every
/// length in `1..=seq_len`, `ids_len = lengths.len()·seq_len`, and `B·T` rows addressable with
/// 32-bit indices.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `seq_len`, `lengths` or `ids`.
pub fn check_batch(ids_len: usize, lengths: &[u32], seq_len: usize) -> Result<()> {
    if seq_len == 0 || seq_len > u32::MAX as usize {
        return Err(Error::invalid("seq_len", "1..=2^32-1", seq_len));
    }
    if lengths.is_empty() {
        return Err(Error::invalid("lengths", "at least one sequence", 0));
    }
    if let Some((b, &l)) = lengths
        .iter()
        .enumerate()
        .find(|&(_, &l)| l == 0 || l as usize > seq_len)
    {
        return Err(Error::invalid(
            "lengths",
            format!("every length in 1..={seq_len}"),
            format!("length {l} for sequence {b}"),
        ));
    }
    let rows = lengths.len().checked_mul(seq_len);
    if rows.is_none_or(|r| r > u32::MAX as usize) {
        return Err(Error::invalid(
            "lengths",
            "batch · seq_len ≤ 2^32-1 token rows",
            format!("{} · {seq_len}", lengths.len()),
        ));
    }
    if Some(ids_len) != rows {
        return Err(Error::invalid(
            "ids",
            format!(
                "{} token ids (batch {} × seq_len {seq_len})",
                lengths.len() * seq_len,
                lengths.len()
            ),
            ids_len,
        ));
    }
    Ok(())
}

/// The lengths of a right-padded attention mask `[B, T]` (row-major, 1 = token, 0 = padding):
/// each row must be ones followed by zeros, with at least one 1.
///
/// # Errors
/// [`Error::InvalidArgument`] (`mask`) for a length that is not a multiple of `seq_len`, a
/// value other than 0/1, a row with no token, or left/interior padding.
pub fn lengths_from_mask(mask: &[u32], seq_len: usize) -> Result<Vec<u32>> {
    if seq_len == 0 || mask.is_empty() || !mask.len().is_multiple_of(seq_len) {
        return Err(Error::invalid(
            "mask",
            format!("a non-empty [B, {seq_len}] 0/1 mask"),
            format!("{} values", mask.len()),
        ));
    }
    mask.chunks(seq_len)
        .enumerate()
        .map(|(b, row)| {
            let len = row.iter().take_while(|&&m| m == 1).count();
            if len == 0 || row[len..].iter().any(|&m| m != 0) {
                return Err(Error::invalid(
                    "mask",
                    "each row 1…1 0…0 with at least one 1 (right padding)",
                    format!("row {b}: {row:?}"),
                ));
            }
            Ok(len as u32)
        })
        .collect()
}

/// A right-padded batch of `B` token sequences of padded length `T`, on the device: token ids
/// `[B, T]` (u32, row-major; ids at padded positions are still looked up, so they must be valid
/// too, e.g. `[PAD]` = 0), optional token type ids `[B, T]`, and lengths `[B]` with
/// `1 ≤ len ≤ T`. Positions are `0..T` in every sequence (BERT's default `position_ids`).
#[derive(Debug)]
pub struct SeqBatch {
    seq_len: usize,
    lengths: Vec<u32>,
    max_id: u32,
    max_type: u32,
    ids: CudaSlice<u32>,
    token_types: Option<CudaSlice<u32>>,
    lengths_dev: CudaSlice<u32>,
}

impl SeqBatch {
    /// Validates (see [`check_batch`]) and uploads ids and lengths. Token types are all 0.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] from [`check_batch`]; allocation and driver errors.
    pub fn new(gpu: &Gpu, ids: &[u32], lengths: &[u32], seq_len: usize) -> Result<Self> {
        check_batch(ids.len(), lengths, seq_len)?;
        Ok(SeqBatch {
            seq_len,
            lengths: lengths.to_vec(),
            max_id: ids.iter().copied().max().unwrap_or(0),
            max_type: 0,
            ids: gpu.upload(ids)?,
            token_types: None,
            lengths_dev: gpu.upload(lengths)?,
        })
    }

    /// As [`SeqBatch::new`] with the lengths read off a right-padded attention mask `[B, T]`
    /// ([`lengths_from_mask`]).
    ///
    /// # Errors
    /// As [`lengths_from_mask`] and [`SeqBatch::new`].
    pub fn from_attention_mask(
        gpu: &Gpu,
        ids: &[u32],
        mask: &[u32],
        seq_len: usize,
    ) -> Result<Self> {
        let lengths = lengths_from_mask(mask, seq_len)?;
        Self::new(gpu, ids, &lengths, seq_len)
    }

    /// Adds token type (segment) ids `[B, T]`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`token_types`) when their count is not `B·T`; allocation and
    /// driver errors.
    pub fn with_token_types(mut self, gpu: &Gpu, token_types: &[u32]) -> Result<Self> {
        if token_types.len() != self.tokens() {
            return Err(Error::invalid(
                "token_types",
                format!("{} values (as ids)", self.tokens()),
                token_types.len(),
            ));
        }
        self.max_type = token_types.iter().copied().max().unwrap_or(0);
        self.token_types = Some(gpu.upload(token_types)?);
        Ok(self)
    }

    /// Overwrites the token ids and lengths in place, keeping B, T, the token types and the
    /// device buffers, so that launches recorded with this batch (a CUDA graph) run on the new
    /// tokens. One host-to-device copy on `gpu`'s stream, two when the lengths changed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`lengths`) when `lengths` does not hold B values, then as
    /// [`check_batch`]; driver errors.
    pub fn refill(&mut self, gpu: &Gpu, ids: &[u32], lengths: &[u32]) -> Result<()> {
        if lengths.len() != self.lengths.len() {
            return Err(Error::invalid(
                "lengths",
                format!("{} sequences (the batch's B)", self.lengths.len()),
                lengths.len(),
            ));
        }
        check_batch(ids.len(), lengths, self.seq_len)?;
        gpu.stream().memcpy_htod(ids, &mut self.ids)?;
        if lengths != self.lengths.as_slice() {
            gpu.stream().memcpy_htod(lengths, &mut self.lengths_dev)?;
            self.lengths.copy_from_slice(lengths);
        }
        self.max_id = ids.iter().copied().max().unwrap_or(0);
        Ok(())
    }

    /// B.
    pub fn batch(&self) -> usize {
        self.lengths.len()
    }

    /// T, the padded length.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// `B·T`, the token rows of every `[B·T, d]` activation.
    pub fn tokens(&self) -> usize {
        self.lengths.len() * self.seq_len
    }

    /// The lengths, `[B]`.
    pub fn lengths(&self) -> &[u32] {
        &self.lengths
    }

    /// The token ids on the device, `[B·T]`.
    pub fn ids(&self) -> &CudaSlice<u32> {
        &self.ids
    }

    /// The lengths on the device, `[B]`.
    pub fn lengths_device(&self) -> &CudaSlice<u32> {
        &self.lengths_dev
    }
}

/// BERT's embedding tables and their LayerNorm, all of one storage type, row-major.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddingWeights<'a, T> {
    /// `word_embeddings`, `[vocab, d]`.
    pub word: &'a CudaSlice<T>,
    /// `position_embeddings`, `[max_positions, d]`, `max_positions ≥ T`.
    pub position: &'a CudaSlice<T>,
    /// `token_type_embeddings`, `[types, d]`.
    pub token_type: &'a CudaSlice<T>,
    /// LayerNorm γ, `[d]` (d is read from its length).
    pub gamma: &'a CudaSlice<T>,
    /// LayerNorm β, `[d]`.
    pub beta: &'a CudaSlice<T>,
    /// LayerNorm ε (1e-12 for BERT checkpoints).
    pub eps: f32,
}

/// Rows of a `[rows, d]` table held in `len` elements.
fn table_rows(name: &'static str, len: usize, d: usize) -> Result<u32> {
    if len == 0 || !len.is_multiple_of(d) || len / d > u32::MAX as usize {
        return Err(Error::invalid(
            name,
            format!("a non-empty [rows, {d}] table (at most 2^32-1 rows)"),
            format!("{len} elements"),
        ));
    }
    Ok((len / d) as u32)
}

fn check_len(name: &'static str, len: usize, want: usize, what: &str) -> Result<()> {
    if len != want {
        return Err(Error::invalid(
            name,
            format!("{want} elements ({what})"),
            len,
        ));
    }
    Ok(())
}

fn same_device<T, B: DeviceSlice<T> + ?Sized>(gpu: &Gpu, name: &'static str, b: &B) -> Result<()> {
    if b.stream().context().cu_ctx() != gpu.context().cu_ctx() {
        return Err(Error::invalid(
            name,
            format!("a buffer on this device ({})", gpu.name()),
            "a buffer from another CUDA context",
        ));
    }
    Ok(())
}

fn grid_x(ctas: u64) -> Result<u32> {
    u32::try_from(ctas)
        .ok()
        .filter(|&g| g <= i32::MAX as u32)
        .ok_or_else(|| Error::LaunchLimit(format!("{ctas} CTAs exceed the grid limit 2^31-1")))
}

/// `hidden[b·T + t] = LayerNorm(word[id] + position[t] + token_type[type])` for every token row
/// of `batch`, padded rows included (BERT's `BertEmbeddings` at inference). Writes `out`,
/// `[B·T, d]`.
///
/// LayerNorm: `(x − μ)/√(σ² + ε)·γ + β` with the biased variance over the row's d values,
/// computed with Welford/Chan moments (a constant row gives exactly β).
///
/// # Errors
/// [`Error::InvalidArgument`] when d (= `gamma.len()`) is 0 or above [`MAX_HIDDEN`], a table's
/// length is not a multiple of d, `beta` or `out` has the wrong length, a token id, token type or
/// position (`T`) is beyond its table, or ε is negative or not finite; [`Error::LaunchLimit`] for
/// a grid too large; module-loading and driver errors.
pub fn embeddings<T: BertElement>(
    gpu: &Gpu,
    batch: &SeqBatch,
    w: &EmbeddingWeights<'_, T>,
    out: &mut CudaSlice<T>,
) -> Result<()> {
    let d = w.gamma.len();
    if d == 0 || d > MAX_HIDDEN {
        return Err(Error::invalid(
            "gamma",
            format!("hidden size 1..={MAX_HIDDEN}"),
            d,
        ));
    }
    check_len("beta", w.beta.len(), d, "hidden size, as gamma")?;
    let vocab = table_rows("word", w.word.len(), d)?;
    let positions = table_rows("position", w.position.len(), d)?;
    let types = table_rows("token_type", w.token_type.len(), d)?;
    if batch.max_id >= vocab {
        return Err(Error::invalid(
            "ids",
            format!("token ids < vocab {vocab}"),
            format!("id {}", batch.max_id),
        ));
    }
    if batch.max_type >= types {
        return Err(Error::invalid(
            "token_types",
            format!("token types < {types}"),
            format!("type {}", batch.max_type),
        ));
    }
    if batch.seq_len > positions as usize {
        return Err(Error::invalid(
            "position",
            format!("at least seq_len = {} position rows", batch.seq_len),
            positions,
        ));
    }
    if !(w.eps.is_finite() && w.eps >= 0.0) {
        return Err(Error::invalid("eps", "a finite ε ≥ 0", w.eps));
    }
    let rows = batch.tokens();
    check_len("out", out.len(), rows * d, "[B·T, d]")?;
    let shape = LaunchShape {
        grid: (
            grid_x((rows as u64).div_ceil(dembed::EMBED_ROWS_PER_CTA as u64))?,
            1,
            1,
        ),
        block: (32 * dembed::EMBED_ROWS_PER_CTA, 1, 1),
        smem_bytes: 0,
    };
    let kernel = gpu.kernel(&BUILTIN, T::EMBED)?;
    let cfg = shape.prepare(&kernel, gpu.props())?;
    // Device addresses, with guards that order this launch after other streams' writes and
    // record its reads and writes for cudarc, as its launch builder does for buffer arguments.
    let stream = gpu.stream();
    let (ids, _ids) = batch.ids.device_ptr(stream);
    let (token_types, _types) = match &batch.token_types {
        Some(t) => {
            let (p, g) = t.device_ptr(stream);
            (p, Some(g))
        }
        None => (0, None),
    };
    let (word, _word) = w.word.device_ptr(stream);
    let (position, _position) = w.position.device_ptr(stream);
    let (token_type, _token_type) = w.token_type.device_ptr(stream);
    let (gamma, _gamma) = w.gamma.device_ptr(stream);
    let (beta, _beta) = w.beta.device_ptr(stream);
    let (out, _out) = out.device_ptr_mut(stream);
    let args = EmbedArgs::<T::Device> {
        ids: ids as *const u32,
        token_types: token_types as *const u32,
        rows: rows as u32,
        seq_len: batch.seq_len as u32,
        hidden: d as u32,
        word: word as *const T::Device,
        vocab,
        position: position as *const T::Device,
        positions,
        token_type: token_type as *const T::Device,
        types,
        gamma: gamma as *const T::Device,
        beta: beta as *const T::Device,
        eps: w.eps,
        out: out as *mut T::Device,
    };
    // SAFETY: every table holds the rows the ids, types and positions index (checked above),
    // `out` holds B·T·d elements.
    unsafe { kernel.launch(gpu, cfg, &args) }?;
    Ok(())
}

/// Multi-head self-attention with a key padding mask:
/// `out[b·T + i, h·hd..] = Σ_{j < len_b} softmax_j(q_i·k_j/√hd)·v_j` for query rows `i < len_b`,
/// with q, k, v the `hd = head_dim` columns of head h in the Q, K and V thirds of `qkv`. Rows
/// `i ≥ len_b` (padding) are written as zeros. Padded keys are never read, so they may hold
/// anything (NaN included).
///
/// `qkv` is `[B·T, 3·heads·head_dim]` row-major (the fused QKV projection: columns
/// `[Q | K | V]`, heads of `head_dim` contiguous columns within each); `out` is
/// `[B·T, heads·head_dim]`, heads concatenated. `head_dim` is one of [`HEAD_DIMS`]; any T and B
/// (T up to 512 is what the tests cover). Both may be `CudaSlice`s or `CudaView`s (`slice(a..)`)
/// of this device.
///
/// f32 storage runs on the CUDA cores in f32 (`fused_gemm_device::kernel::bert::attention`);
/// f16/bf16 run on the tensor cores (`mma.sync` m16n8k16, f32 accumulation and softmax,
/// P rounded to the storage type for `P·V`; `fused_gemm_device::kernel::bert::attention_mma`).
/// Buffers that are not 16-byte aligned (offset views) take element-wise loads and stores.
///
/// # Errors
/// [`Error::InvalidArgument`] for `head_dim` not in [`HEAD_DIMS`], `heads = 0` or too many
/// heads for 32-bit column indices, buffers of the wrong length or from another CUDA context;
/// [`Error::LaunchLimit`]
/// when `B·heads·ceil(T/64)` CTAs exceed the grid; module-loading and driver errors.
pub fn attention<T: BertElement>(
    gpu: &Gpu,
    batch: &SeqBatch,
    heads: usize,
    head_dim: usize,
    qkv: &dyn DevicePtr<T>,
    out: &mut dyn DevicePtrMut<T>,
) -> Result<()> {
    attention_unless(gpu, batch, heads, head_dim, qkv, out, 0)
}

/// [`attention`], skipped on the device: the kernel returns at once when the `u32` at
/// `skip_if` is nonzero when it starts (an early exit decided by an earlier kernel of the
/// stream); `skip_if` = 0 never skips.
///
/// # Errors
/// As [`attention`]; [`Error::Misaligned`] for a `skip_if` not 4-byte aligned.
#[allow(clippy::too_many_arguments)]
pub fn attention_unless<T: BertElement>(
    gpu: &Gpu,
    batch: &SeqBatch,
    heads: usize,
    head_dim: usize,
    qkv: &dyn DevicePtr<T>,
    out: &mut dyn DevicePtrMut<T>,
    skip_if: u64,
) -> Result<()> {
    if !skip_if.is_multiple_of(4) {
        return Err(Error::Misaligned {
            arg: "skip_if",
            what: "address",
            align: 4,
            actual: skip_if,
        });
    }
    let Some((entry, launch)) = attention_entry::<T>(head_dim) else {
        return Err(Error::invalid(
            "head_dim",
            format!("one of {HEAD_DIMS:?}"),
            head_dim,
        ));
    };
    if heads == 0 || heads > u32::MAX as usize / (3 * head_dim) {
        return Err(Error::invalid(
            "heads",
            format!(
                "1..={} heads of {head_dim} columns",
                u32::MAX as usize / (3 * head_dim)
            ),
            heads,
        ));
    }
    let d = heads * head_dim;
    let rows = batch.tokens();
    check_len("qkv", qkv.len(), rows * 3 * d, "[B·T, 3·heads·head_dim]")?;
    check_len("out", out.len(), rows * d, "[B·T, heads·head_dim]")?;
    same_device(gpu, "qkv", qkv)?;
    same_device(gpu, "out", &*out)?;
    let shape = LaunchShape {
        grid: (
            grid_x(dattn::attn_ctas(
                batch.batch() as u64,
                heads as u64,
                batch.seq_len as u64,
            ))?,
            1,
            1,
        ),
        block: (launch.threads, 1, 1),
        smem_bytes: launch.smem_bytes,
    };
    let kernel = gpu.kernel(&BUILTIN, entry)?;
    let cfg = shape.prepare(&kernel, gpu.props())?;
    let (qkv, _qkv_guard) = qkv.device_ptr(gpu.stream());
    let (lengths, _lengths_guard) = batch.lengths_dev.device_ptr(gpu.stream());
    let (out, _out_guard) = out.device_ptr_mut(gpu.stream());
    let args = AttnKernelArgs::<T::Device> {
        qkv: qkv as *const T::Device,
        lengths: lengths as *const u32,
        batch: batch.batch() as u32,
        seq_len: batch.seq_len as u32,
        heads: heads as u32,
        out: out as *mut T::Device,
        skip_if: skip_if as *const u32,
    };
    // SAFETY: the entry point's head dimension is `head_dim`; `qkv` and `out` hold B·T rows of
    // 3·heads·head_dim and heads·head_dim elements; lengths are in 1..=T (checked when `batch`
    // was built); `skip_if` is 0 or a 4-byte aligned `u32` the caller keeps alive.
    unsafe { kernel.launch(gpu, cfg, &args) }?;
    Ok(())
}

/// Masked mean pooling then L2 normalization (sentence-transformers' `Pooling(mean)` +
/// `Normalize`): `out[b] = m_b / max(‖m_b‖₂, 1e-12)` with `m_b = (1/len_b)·Σ_{t < len_b}
/// hidden[b·T + t]`. `hidden` is `[B·T, hidden_size]` in any storage type (padded rows are never
/// read); `out` is `[B, hidden_size]` f32.
///
/// # Errors
/// [`Error::InvalidArgument`] for `hidden_size` outside `1..=MAX_POOL_HIDDEN` or buffers of the wrong
/// length; [`Error::LaunchLimit`] for more than 2^31-1 sequences; module-loading and driver
/// errors.
pub fn mean_pool_l2<T: BertElement>(
    gpu: &Gpu,
    batch: &SeqBatch,
    hidden_size: usize,
    hidden: &CudaSlice<T>,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    if hidden_size == 0 || hidden_size > MAX_POOL_HIDDEN {
        return Err(Error::invalid(
            "hidden_size",
            format!("1..={MAX_POOL_HIDDEN}"),
            hidden_size,
        ));
    }
    check_len(
        "hidden",
        hidden.len(),
        batch.tokens() * hidden_size,
        "[B·T, hidden_size]",
    )?;
    check_len(
        "out",
        out.len(),
        batch.batch() * hidden_size,
        "[B, hidden_size]",
    )?;
    let shape = LaunchShape {
        grid: (grid_x(batch.batch() as u64)?, 1, 1),
        block: (dpool::POOL_THREADS, 1, 1),
        smem_bytes: dpool::POOL_SMEM_BYTES,
    };
    let kernel = gpu.kernel(&BUILTIN, T::POOL)?;
    let cfg = shape.prepare(&kernel, gpu.props())?;
    let (hidden, _hidden) = hidden.device_ptr(gpu.stream());
    let (lengths, _lengths) = batch.lengths_dev.device_ptr(gpu.stream());
    let (out, _out) = out.device_ptr_mut(gpu.stream());
    let args = PoolArgs::<T::Device> {
        hidden: hidden as *const T::Device,
        lengths: lengths as *const u32,
        batch: batch.batch() as u32,
        seq_len: batch.seq_len as u32,
        hidden_size: hidden_size as u32,
        out: out as *mut f32,
    };
    // SAFETY: `hidden` holds B·T rows and `out` B rows of hidden_size elements; lengths are in
    // 1..=T.
    unsafe { kernel.launch(gpu, cfg, &args) }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_checked() {
        assert!(check_batch(6, &[1, 3], 3).is_ok());
        let bad = [
            (check_batch(6, &[1, 3], 0), "seq_len"),
            (check_batch(0, &[], 3), "lengths"),
            (check_batch(6, &[0, 3], 3), "lengths"),
            (check_batch(6, &[1, 4], 3), "lengths"),
            (check_batch(5, &[1, 3], 3), "ids"),
        ];
        for (r, arg) in bad {
            match r {
                Err(Error::InvalidArgument { arg: a, .. }) => assert_eq!(a, arg),
                other => panic!("expected an invalid `{arg}`, got {other:?}"),
            }
        }
        let huge = vec![1u32; 1 << 17];
        assert!(matches!(
            check_batch(0, &huge, 1 << 16),
            Err(Error::InvalidArgument { arg: "lengths", .. })
        ));
    }

    #[test]
    fn masks_give_lengths_and_reject_left_padding() {
        assert_eq!(
            lengths_from_mask(&[1, 1, 0, 1, 0, 0, 1, 1, 1], 3).unwrap(),
            vec![2, 1, 3]
        );
        for bad in [
            &[0u32, 1, 1][..],
            &[1, 0, 1],
            &[0, 0, 0],
            &[1, 2, 0],
            &[1, 1],
        ] {
            assert!(lengths_from_mask(bad, 3).is_err(), "{bad:?}");
        }
        assert!(lengths_from_mask(&[], 3).is_err());
        assert!(lengths_from_mask(&[1], 0).is_err());
    }

    /// Per storage type: its embedding, pooling and attention entry points' names, and the
    /// attention launches.
    fn names<T: BertElement>() -> (&'static str, &'static str, Vec<(&'static str, u32, u32)>) {
        let attention = HEAD_DIMS
            .iter()
            .map(|&hd| {
                let (entry, launch) = attention_entry::<T>(hd).unwrap();
                (entry.name(), launch.threads, launch.smem_bytes)
            })
            .collect();
        for bad in [0, 16, 48, 96, 256] {
            assert!(attention_entry::<T>(bad).is_none(), "{bad}");
        }
        (T::EMBED.name(), T::POOL.name(), attention)
    }

    #[test]
    fn every_dtype_has_its_own_entry_points() {
        let all = [names::<f32>(), names::<half::f16>(), names::<half::bf16>()];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert!(a.0 != b.0 && a.1 != b.1);
            }
        }
        for (entries, dt) in all.iter().zip([DType::F32, DType::F16, DType::Bf16]) {
            assert!(entries.0.ends_with(dt.name()) && entries.1.ends_with(dt.name()));
        }
    }

    #[test]
    fn attention_has_one_kernel_per_dtype_and_head_dim() {
        let mut seen = Vec::new();
        let all = [names::<f32>(), names::<half::f16>(), names::<half::bf16>()];
        for ((_, _, attention), dt) in all.iter().zip([DType::F32, DType::F16, DType::Bf16]) {
            for (&(name, threads, smem), hd) in attention.iter().zip(HEAD_DIMS) {
                assert!(name.contains(&format!("_h{hd}_")), "{name}");
                assert!(name.ends_with(dt.name()), "{name}");
                // Tensor cores for the 16-bit types, CUDA cores for f32.
                assert_eq!(name.contains("_mma_"), dt != DType::F32, "{name}");
                assert!(threads.is_multiple_of(32) && threads <= 1024);
                assert!(smem <= 227 * 1024);
                seen.push(name);
            }
        }
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 9);
        assert_eq!(seen.len(), k::ATTENTION.len());
    }
}
