//! BERT encoder kernels other than the GEMMs: embeddings + LayerNorm, masked attention
//! (head dim 64), masked mean pooling + L2 normalization; one entry point per storage dtype.
//! Bodies and launch shapes: `fused_gemm_device::kernel::bert`; host launchers:
//! [`crate::bert`].

#[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
use crate::device::kernel::bert::{Ptx, attention, embed, pool};
#[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
use crate::device::types::{Bf16, F16};

macro_rules! bert_entries {
    ($t:ty, $dt:literal, $embed:ident = $embed_fn:ident, $attn:ident = $attn_fn:ident, $pool:ident = $pool_fn:ident) => {
        entry! {
            #[doc = concat!("Embeddings + LayerNorm, ", $dt, " storage. Args: `(ids, token_types (0 = none), rows, seq_len, hidden, word, vocab, position, positions, token_type, types, gamma, beta, eps, out)`.")]
            $embed = fn $embed_fn(
                ids: *const u32, token_types: *const u32, rows: u32, seq_len: u32, hidden: u32,
                word: *const $t, vocab: u32, position: *const $t, positions: u32,
                token_type: *const $t, types: u32, gamma: *const $t, beta: *const $t, eps: f32,
                out: *mut $t,
            ) {
                unsafe {
                    embed::embed_layer_norm::<_, Ptx>(&embed::EmbedArgs {
                        ids, token_types, rows, seq_len, hidden, word, vocab, position, positions,
                        token_type, types, gamma, beta, eps, out,
                    })
                }
            }
        }
        entry! {
            #[doc = concat!("Masked attention, head dim 64, ", $dt, " storage. Args: `(qkv, lengths, batch, seq_len, heads, out)`.")]
            $attn = fn $attn_fn(qkv: *const $t, lengths: *const u32, batch: u32, seq_len: u32, heads: u32, out: *mut $t) {
                unsafe {
                    attention::attention::<_, Ptx>(&attention::AttnArgs { qkv, lengths, batch, seq_len, heads, out })
                }
            }
        }
        entry! {
            #[doc = concat!("Masked mean pooling + L2 normalization, ", $dt, " input, f32 output. Args: `(hidden, lengths, batch, seq_len, hidden_size, out)`.")]
            $pool = fn $pool_fn(hidden: *const $t, lengths: *const u32, batch: u32, seq_len: u32, hidden_size: u32, out: *mut f32) {
                unsafe {
                    pool::mean_pool_l2::<_, Ptx>(&pool::PoolArgs { hidden, lengths, batch, seq_len, hidden_size, out })
                }
            }
        }
    };
}

bert_entries!(
    f32,
    "f32",
    EMBED_LN_F32 = fg_bert_embed_layer_norm_f32,
    ATTN_H64_F32 = fg_bert_attention_h64_f32,
    POOL_L2_F32 = fg_bert_mean_pool_l2_f32
);
bert_entries!(
    F16,
    "f16",
    EMBED_LN_F16 = fg_bert_embed_layer_norm_f16,
    ATTN_H64_F16 = fg_bert_attention_h64_f16,
    POOL_L2_F16 = fg_bert_mean_pool_l2_f16
);
bert_entries!(
    Bf16,
    "bf16",
    EMBED_LN_BF16 = fg_bert_embed_layer_norm_bf16,
    ATTN_H64_BF16 = fg_bert_attention_h64_bf16,
    POOL_L2_BF16 = fg_bert_mean_pool_l2_bf16
);
