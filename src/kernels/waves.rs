//! Entry points of the wave scheduler (`fused_gemm::host::schedule`): per *family*, one
//! persistent entry point that runs any of its *arms* (epilogue kind × tile shape) task by task
//! (`fused_gemm_device::kernel::persistent`), and one plain grid entry point per arm for
//! operators launched on their own. Both call the same `sm80::run_tile` instantiation, so a
//! persistent program and per-operator launches of the same variants compute bit-identical
//! results.
//!
//! All arms are bf16 in and out, B stored N×K (`Linear` weights), 16-byte vector loads (the
//! typed constructors in [`crate::waves`] require aligned operands). All arms of a family have
//! 128 threads (a persistent CTA has one block size).

use crate::device::epilogue::stages::{BiasCol, Gelu, LayerNorm, Norm, Relu, Residual};
use crate::device::epilogue::{Cons, Nil};
use crate::device::gemm::TileShape;
use crate::device::kernel::persistent::LstmCell;

#[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
use crate::device::{
    arch::trap,
    epilogue::Stage,
    gemm::{GemmArgs, TileCoord, sm80},
    kernel::persistent::{self, ProgramArgs},
    types::Bf16,
};

#[cfg(not(target_arch = "nvptx64"))]
use fused_gemm_host::schedule::{Arm, Family};

/// `bias_relu`: relu(A·Bᵀ + b).
pub type BiasRelu = Cons<BiasCol, Cons<Relu, Nil>>;
/// `bias`: A·Bᵀ + b.
pub type Bias = Cons<BiasCol, Nil>;
/// `bias_gelu`: gelu(A·Bᵀ + b), erf GELU (BERT's "gelu").
pub type BiasGelu = Cons<BiasCol, Cons<Gelu, Nil>>;
/// `bias_residual_layer_norm`: LayerNorm(A·Bᵀ + b + R) over the whole row (N ≤ BN).
pub type BiasResidualLayerNorm = Cons<BiasCol, Cons<Residual, Cons<Norm<LayerNorm>, Nil>>>;
/// `lstm`: the LSTM cell update on interleaved gate columns (output N/4 columns).
pub type Lstm = Cons<LstmCell, Nil>;

/// Kind names, as operators and arms name them.
pub mod kind {
    /// [`super::BiasRelu`].
    pub const BIAS_RELU: &str = "bias_relu";
    /// [`super::Bias`].
    pub const BIAS: &str = "bias";
    /// [`super::BiasGelu`].
    pub const BIAS_GELU: &str = "bias_gelu";
    /// [`super::BiasResidualLayerNorm`].
    pub const BIAS_RESIDUAL_LAYER_NORM: &str = "bias_residual_layer_norm";
    /// [`super::Lstm`].
    pub const LSTM: &str = "lstm";
}

/// 16×64 tile, 1×4 warps, BK = 64: many small tasks for skinny operators (batch-1 rows).
pub const T16X64: TileShape = TileShape::new(16, 64, 64, 1, 4, 4);
/// 64×64 tile, 2×2 warps.
pub const T64X64: TileShape = TileShape::new(64, 64, 32, 2, 2, 4);
/// 128×64 tile, 2×2 warps.
pub const T128X64: TileShape = TileShape::new(128, 64, 32, 2, 2, 4);
/// 32×384 row tile, 1×4 warps: a CTA spans a MiniLM row (in-CTA LayerNorm).
pub const T32X384: TileShape = TileShape::new(32, 384, 32, 1, 4, 3);

/// Index of `name` in `names` (for the arm dispatch; `usize::MAX` if absent).
#[doc(hidden)]
pub const fn arm_index(names: &[&str], name: &str) -> usize {
    let mut i = 0;
    while i < names.len() {
        let (a, b) = (names[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return i;
            }
        }
        i += 1;
    }
    usize::MAX
}

/// Declares a family: the persistent entry point (with its launch bounds), a grid entry point
/// per arm, and the host description. Arm `i` is the i-th line.
macro_rules! wave_family {
    (
        $(#[$doc:meta])*
        $fam:ident = $entry:ident, $bounds:ident = [$threads:literal, $min_ctas:literal] {
            $( $kind:ty, $kind_name:expr, $tile:ident => $grid:ident, $grid_bounds:ident; )+
        }
    ) => {
        #[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
        #[unsafe(no_mangle)]
        #[used]
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        pub static $bounds: [u32; 2] = [$threads, $min_ctas];

        #[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub unsafe extern "ptx-kernel" fn $entry(p: ProgramArgs) {
            const TILES: &[TileShape] = &[$($tile),+];
            const NAMES: &[&str] = &[$(stringify!($grid)),+];
            const HEADER: u32 = persistent::header_offset(TILES);
            struct Arms;
            impl persistent::Dispatch for Arms {
                #[inline(always)]
                unsafe fn tile(arm: u32, args: &GemmArgs, epi: *const u64, tile: TileCoord) {
                    family_dispatch!(arm, args, epi, tile, NAMES; $($kind, $tile => $grid;)+);
                    trap()
                }
            }
            unsafe { persistent::run::<HEADER, Arms>(&p) }
        }

        family_grid_arms!($threads; $($kind, $tile => $grid, $grid_bounds;)+);

        $(#[$doc])*
        #[cfg(not(target_arch = "nvptx64"))]
        pub static $fam: Family = Family {
            entry: stringify!($entry),
            ptx: &crate::ptx::BUILTIN,
            input: crate::device::types::DType::Bf16,
            output: crate::device::types::DType::Bf16,
            threads: $threads,
            smem_bytes: crate::device::kernel::persistent::smem_bytes(&[$($tile),+]),
            min_ctas_per_sm: $min_ctas,
            arms: &[$(Arm { kind: $kind_name, tile: $tile, grid_entry: stringify!($grid) }),+],
        };
    };
}

wave_family! {
    /// GEMM + bias + ReLU and the LSTM cell on small and medium tiles (workloads: independent
    /// GEMMs, LSTM stacks).
    WAVES_BF16 = fg_waves_bf16, __fg_launch_bounds__fg_waves_bf16 = [128, 3] {
        BiasRelu, kind::BIAS_RELU, T16X64 => fg_waves_bias_relu_t16x64, __fg_launch_bounds__fg_waves_bias_relu_t16x64;
        BiasRelu, kind::BIAS_RELU, T64X64 => fg_waves_bias_relu_t64x64, __fg_launch_bounds__fg_waves_bias_relu_t64x64;
        BiasRelu, kind::BIAS_RELU, T128X64 => fg_waves_bias_relu_t128x64, __fg_launch_bounds__fg_waves_bias_relu_t128x64;
        Lstm, kind::LSTM, T16X64 => fg_waves_lstm_t16x64, __fg_launch_bounds__fg_waves_lstm_t16x64;
        Lstm, kind::LSTM, T64X64 => fg_waves_lstm_t64x64, __fg_launch_bounds__fg_waves_lstm_t64x64;
    }
}

wave_family! {
    /// The GEMMs of a post-norm Transformer layer (BERT/MiniLM): QKV + bias, FFN up + bias +
    /// GELU, and out-proj / FFN down + bias + residual + LayerNorm on a row-spanning tile.
    WAVES_BF16_ROWS = fg_waves_bf16_rows, __fg_launch_bounds__fg_waves_bf16_rows = [128, 2] {
        Bias, kind::BIAS, T16X64 => fg_waves_bias_t16x64, __fg_launch_bounds__fg_waves_bias_t16x64;
        Bias, kind::BIAS, T64X64 => fg_waves_bias_t64x64, __fg_launch_bounds__fg_waves_bias_t64x64;
        BiasGelu, kind::BIAS_GELU, T16X64 => fg_waves_bias_gelu_t16x64, __fg_launch_bounds__fg_waves_bias_gelu_t16x64;
        BiasGelu, kind::BIAS_GELU, T64X64 => fg_waves_bias_gelu_t64x64, __fg_launch_bounds__fg_waves_bias_gelu_t64x64;
        BiasResidualLayerNorm, kind::BIAS_RESIDUAL_LAYER_NORM, T32X384 => fg_waves_bias_residual_layer_norm_t32x384, __fg_launch_bounds__fg_waves_bias_residual_layer_norm_t32x384;
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;

    #[test]
    fn arm_index_finds_names() {
        assert_eq!(arm_index(&["a", "bc", "b"], "b"), 2);
        assert_eq!(arm_index(&["a", "bc"], "bc"), 1);
        assert_eq!(arm_index(&["a"], "x"), usize::MAX);
    }

    #[test]
    fn families_are_consistent() {
        for f in [&WAVES_BF16, &WAVES_BF16_ROWS] {
            f.check().unwrap();
            for (i, a) in f.arms.iter().enumerate() {
                let names: Vec<&str> = f.arms.iter().map(|a| a.grid_entry).collect();
                assert_eq!(arm_index(&names, a.grid_entry), i);
            }
        }
    }
}
