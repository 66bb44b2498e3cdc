//! Entry points of device-side control flow (`fused_gemm_host::schedule::control`): the loop
//! program's persistent entry point (`fused_gemm_device::kernel::control::run_loop`) over the
//! arms below, a plain grid entry point per GEMM arm, and the gate's grid entry point, for the
//! host-driven execution of the same operators. A loop program and the host-driven launches run
//! the same instantiations, so their results are bit-identical.
//!
//! All GEMM arms are bf16 in and out, B stored N×K, 128 threads; the last arm is the gate
//! (`fused_gemm_device::kernel::control::gate_tile`).

use crate::device::epilogue::stages::{BiasCol, Relu, Residual};
use crate::device::epilogue::{Cons, Nil};
use crate::device::kernel::persistent::LstmCell;

pub use super::waves::{T16X64, T64X64};

#[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
use crate::device::{
    arch::trap,
    epilogue::Stage,
    gemm::{GemmArgs, TileCoord, TileShape, sm80},
    kernel::control::{self, GateParams, LoopArgs},
    kernel::persistent,
    types::Bf16,
};

#[cfg(not(target_arch = "nvptx64"))]
use fused_gemm_host::schedule::{Arm, Family};

/// `bias_relu`: relu(A·Bᵀ + b).
pub type BiasRelu = Cons<BiasCol, Cons<Relu, Nil>>;
/// `bias_residual`: A·Bᵀ + b + R.
pub type BiasResidual = Cons<BiasCol, Cons<Residual, Nil>>;
/// `lstm`: the LSTM cell update.
pub type Lstm = Cons<LstmCell, Nil>;

/// Kind names, as operators and arms name them.
pub mod kind {
    pub use super::super::waves::kind::{BIAS_RELU, LSTM};
    /// [`super::BiasResidual`].
    pub const BIAS_RESIDUAL: &str = "bias_residual";
    /// The gate: a predicate from a reduction of A against a gate vector.
    pub const GATE: &str = "gate";
}

/// Grid entry point of the gate (one CTA of 128 threads,
/// `fused_gemm_device::kernel::control::GATE_SMEM_BYTES` of dynamic shared memory; parameters
/// `(GemmArgs, GateParams)`).
pub const GATE_ENTRY: &str = "fg_ctl_gate";
/// Dynamic shared memory of [`GATE_ENTRY`], bytes.
pub const GATE_SMEM: u32 = crate::device::kernel::control::GATE_SMEM_BYTES;

#[cfg(all(target_arch = "nvptx64", feature = "builtin-kernels"))]
#[unsafe(no_mangle)]
#[doc(hidden)]
pub unsafe extern "ptx-kernel" fn fg_ctl_gate(args: GemmArgs, p: GateParams) {
    unsafe { control::gate_tile(&args, &p) }
}

entry! {
    /// An early-exit head (`fused_gemm_device::kernel::control::exit_head`): one CTA of
    /// [`EXIT_HEAD_THREADS`] threads, [`EXIT_HEAD_SMEM`] bytes of dynamic shared memory.
    EXIT_HEAD = fn fg_exit_head(p: crate::device::kernel::control::ExitHeadArgs) {
        unsafe { crate::device::kernel::control::exit_head(&p) }
    }
}

/// Block size of [`EXIT_HEAD`].
pub const EXIT_HEAD_THREADS: u32 = 128;
/// Dynamic shared memory of [`EXIT_HEAD`], bytes (its largest logits tile).
pub const EXIT_HEAD_SMEM: u32 = 4 * MAX_EXIT_LOGITS;
pub use crate::device::kernel::control::MAX_EXIT_LOGITS;

entry! {
    /// The weight-stationary LSTM loop (`fused_gemm_device::kernel::rnn`), batch 1.
    LSTM_STATIONARY_B1 = fn fg_lstm_stationary_b1(p: crate::device::kernel::rnn::LstmStationaryArgs) {
        unsafe { crate::device::kernel::rnn::lstm_stationary::<1>(&p) }
    }
}

entry! {
    /// The weight-stationary LSTM loop (`fused_gemm_device::kernel::rnn`), batch ≤ 4.
    LSTM_STATIONARY_B4 = fn fg_lstm_stationary_b4(p: crate::device::kernel::rnn::LstmStationaryArgs) {
        unsafe { crate::device::kernel::rnn::lstm_stationary::<4>(&p) }
    }
}

macro_rules! control_family {
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
        pub unsafe extern "ptx-kernel" fn $entry(p: LoopArgs) {
            const TILES: &[TileShape] = &[$($tile),+];
            const NAMES: &[&str] = &[$(stringify!($grid)),+];
            const HEADER: u32 = persistent::header_offset(TILES);
            struct Arms;
            impl persistent::Dispatch for Arms {
                #[inline(always)]
                unsafe fn tile(arm: u32, args: &GemmArgs, epi: *const u64, tile: TileCoord) {
                    family_dispatch!(arm, args, epi, tile, NAMES; $($kind, $tile => $grid;)+);
                    if arm == NAMES.len() as u32 {
                        unsafe {
                            let params = persistent::read_params::<GateParams>(epi);
                            control::gate_tile(args, &params);
                        }
                        return;
                    }
                    trap()
                }
            }
            unsafe { control::run_loop::<HEADER, Arms>(&p) }
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
            arms: &[
                $(Arm { kind: $kind_name, tile: $tile, grid_entry: stringify!($grid) },)+
                Arm { kind: kind::GATE, tile: T16X64, grid_entry: GATE_ENTRY },
            ],
        };
    };
}

control_family! {
    /// Loop and branch bodies: GEMM + bias + ReLU, GEMM + bias + residual, the LSTM cell, on
    /// 16×64 and 64×64 tiles, and the gate (last arm).
    CONTROL_BF16 = fg_control_bf16, __fg_launch_bounds__fg_control_bf16 = [128, 3] {
        BiasRelu, kind::BIAS_RELU, T16X64 => fg_ctl_bias_relu_t16x64, __fg_launch_bounds__fg_ctl_bias_relu_t16x64;
        BiasRelu, kind::BIAS_RELU, T64X64 => fg_ctl_bias_relu_t64x64, __fg_launch_bounds__fg_ctl_bias_relu_t64x64;
        BiasResidual, kind::BIAS_RESIDUAL, T16X64 => fg_ctl_bias_residual_t16x64, __fg_launch_bounds__fg_ctl_bias_residual_t16x64;
        BiasResidual, kind::BIAS_RESIDUAL, T64X64 => fg_ctl_bias_residual_t64x64, __fg_launch_bounds__fg_ctl_bias_residual_t64x64;
        Lstm, kind::LSTM, T16X64 => fg_ctl_lstm_t16x64, __fg_launch_bounds__fg_ctl_lstm_t16x64;
        Lstm, kind::LSTM, T64X64 => fg_ctl_lstm_t64x64, __fg_launch_bounds__fg_ctl_lstm_t64x64;
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;

    #[test]
    fn control_family_is_consistent_and_gate_is_last() {
        CONTROL_BF16.check().unwrap();
        let last = CONTROL_BF16.arms.last().unwrap();
        assert_eq!(last.kind, kind::GATE);
        assert_eq!(CONTROL_BF16.arms_of(kind::GATE).count(), 1);
        assert!(CONTROL_BF16.has_kind(kind::BIAS_RESIDUAL));
    }
}
