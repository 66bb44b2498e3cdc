//! BERT encoder kernels other than the GEMMs: embeddings + LayerNorm, masked attention, masked
//! mean pooling + L2 normalization; one entry point per storage dtype, and for attention per
//! (dtype, head dim): CUDA-core kernels for f32, tensor-core (`mma.sync`) kernels for f16/bf16.
//! Bodies and launch shapes: `fused_gemm_device::kernel::bert`; host launchers:
//! [`crate::bert`].

#[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
use crate::device::kernel::bert::{Ptx, attention, attention_mma, embed, pool};
use crate::device::kernel::bert::{attention::AttnKernelArgs, embed::EmbedArgs, pool::PoolArgs};
use crate::device::types::{Bf16, F16};

macro_rules! bert_entries {
    ($t:ty, $dt:literal, $embed:ident = $embed_fn:ident, $pool:ident = $pool_fn:ident) => {
        entry! {
            #[doc = concat!("Embeddings + LayerNorm, ", $dt, " storage (`bert::embed`).")]
            $embed = fn $embed_fn(a: EmbedArgs<$t> {
                ids: *const u32, token_types: *const u32, rows: u32, seq_len: u32, hidden: u32,
                word: *const $t, vocab: u32, position: *const $t, positions: u32,
                token_type: *const $t, types: u32, gamma: *const $t, beta: *const $t, eps: f32,
                out: *mut $t,
            }) {
                unsafe { embed::embed_layer_norm::<_, Ptx>(&a) }
            }
        }
        entry! {
            #[doc = concat!("Masked mean pooling + L2 normalization, ", $dt, " input, f32 output (`bert::pool`).")]
            $pool = fn $pool_fn(a: PoolArgs<$t> {
                hidden: *const $t, lengths: *const u32, batch: u32, seq_len: u32, hidden_size: u32,
                out: *mut f32,
            }) {
                unsafe { pool::mean_pool_l2::<_, Ptx>(&a) }
            }
        }
    };
}

bert_entries!(
    f32,
    "f32",
    EMBED_LN_F32 = fg_bert_embed_layer_norm_f32,
    POOL_L2_F32 = fg_bert_mean_pool_l2_f32
);
bert_entries!(
    F16,
    "f16",
    EMBED_LN_F16 = fg_bert_embed_layer_norm_f16,
    POOL_L2_F16 = fg_bert_mean_pool_l2_f16
);
bert_entries!(
    Bf16,
    "bf16",
    EMBED_LN_BF16 = fg_bert_embed_layer_norm_bf16,
    POOL_L2_BF16 = fg_bert_mean_pool_l2_bf16
);

/// One attention entry point: `$body` is the kernel body (`attention` or `attention_mma`)
/// instantiated for storage `$t` and head dimension `$hd`.
macro_rules! attn_entry {
    ($konst:ident = $name:ident, $t:ty, $hd:literal, $module:ident :: $body:ident, $what:literal) => {
        entry! {
            #[doc = concat!("Masked attention, head dim ", $hd, ", ", $what, ". Returns at once when `skip_if` is not null and the `u32` there is nonzero (an early exit decided by an earlier kernel).")]
            $konst = fn $name(p: AttnKernelArgs<$t> {
                qkv: *const $t, lengths: *const u32, batch: u32, seq_len: u32, heads: u32,
                out: *mut $t, skip_if: *const u32,
            }) {
                unsafe {
                    if !skip_if.is_null() && crate::device::arch::atomic::load_acquire_u32(skip_if) != 0 {
                        return;
                    }
                    $module::$body::<_, Ptx, $hd>(&attention::AttnArgs::from(p))
                }
            }
        }
    };
}

attn_entry!(
    ATTN_SIMT_H32_F32 = fg_bert_attention_simt_h32_f32,
    f32,
    32,
    attention::attention,
    "f32 storage, CUDA cores"
);
attn_entry!(
    ATTN_SIMT_H64_F32 = fg_bert_attention_simt_h64_f32,
    f32,
    64,
    attention::attention,
    "f32 storage, CUDA cores"
);
attn_entry!(
    ATTN_SIMT_H128_F32 = fg_bert_attention_simt_h128_f32,
    f32,
    128,
    attention::attention,
    "f32 storage, CUDA cores"
);
attn_entry!(
    ATTN_MMA_H32_F16 = fg_bert_attention_mma_h32_f16,
    F16,
    32,
    attention_mma::attention_mma,
    "f16 storage, tensor cores"
);
attn_entry!(
    ATTN_MMA_H64_F16 = fg_bert_attention_mma_h64_f16,
    F16,
    64,
    attention_mma::attention_mma,
    "f16 storage, tensor cores"
);
attn_entry!(
    ATTN_MMA_H128_F16 = fg_bert_attention_mma_h128_f16,
    F16,
    128,
    attention_mma::attention_mma,
    "f16 storage, tensor cores"
);
attn_entry!(
    ATTN_MMA_H32_BF16 = fg_bert_attention_mma_h32_bf16,
    Bf16,
    32,
    attention_mma::attention_mma,
    "bf16 storage, tensor cores"
);
attn_entry!(
    ATTN_MMA_H64_BF16 = fg_bert_attention_mma_h64_bf16,
    Bf16,
    64,
    attention_mma::attention_mma,
    "bf16 storage, tensor cores"
);
attn_entry!(
    ATTN_MMA_H128_BF16 = fg_bert_attention_mma_h128_bf16,
    Bf16,
    128,
    attention_mma::attention_mma,
    "bf16 storage, tensor cores"
);

/// Every attention entry point (for the PTX resource checks).
pub const ATTENTION: &[&str] = &[
    ATTN_SIMT_H32_F32,
    ATTN_SIMT_H64_F32,
    ATTN_SIMT_H128_F32,
    ATTN_MMA_H32_F16,
    ATTN_MMA_H64_F16,
    ATTN_MMA_H128_F16,
    ATTN_MMA_H32_BF16,
    ATTN_MMA_H64_BF16,
    ATTN_MMA_H128_BF16,
];
