//! The finishing kernel of a row norm whose rows span several CTA tiles: it merges the
//! per-tile statistics, normalizes C and runs the stages after the norm.

use fused_gemm_device::kernel::norm_finish::{self, NormFinishArgs};
use fused_gemm_device::params::KernelParam;

use super::entry::{Kernel, LaunchMode, NormFinishParams};
use crate::kernel::{GemmKernelSpec, in_signature};
use crate::shape::LaunchShape;
use crate::validate::{Checked, GemmCall};
use crate::{Error, Gpu, Result};

/// Shared memory bytes per CTA (unused by the kernel) that cap a dependent finishing kernel
/// at its fair share of `ceil(ctas / SMs)` CTAs per SM, for a grid of `ctas` CTAs.
///
/// Launched early, the finishing CTAs go to the first SMs the GEMM leaves, as many per SM as fit
/// (16 by threads): a grid sized for 4 per SM then sits on a quarter of the SMs, and the
/// memory-bound pass ran 27 µs slower at 8192² (H200).
/// Each CTA's share of the SM is rounded down to 1 KiB (allocation granularity is at most that)
/// and includes the driver's 1 KiB reserve per CTA. 0 where the share is above 16 per SM, which
/// threads already limit.
pub fn dependent_finish_smem(ctas: u64, props: &crate::gpu::DeviceProps) -> u32 {
    const KIB: u32 = 1024;
    let share = ctas.div_ceil(props.sm_count.max(1) as u64).max(1);
    if share > 16 {
        return 0;
    }
    let per_cta = props.smem_per_sm / share as u32 / KIB * KIB;
    per_cta.saturating_sub(KIB).min(props.smem_per_block_optin)
}

/// Columns per CTA of the norm finishing kernel (`fused_gemm_device::kernel::norm_finish`) for
/// an M×N output on `sms` SMs, a multiple of its 64-column step.
///
/// - `wide` (the kernel's 16-byte path: 16-bit C with 16-byte aligned rows and no stage after
///   the norm): a warp keeps its next step's loads in flight while it works, so the row blocks
///   are split into as few column blocks as fill the SMs with 16 warps each. Every column block
///   merges its rows' partial statistics again; at 8192×8192 with 512-column blocks those
///   re-reads were half of the kernel's L2 traffic (75 % of L2 peak, 97 µs).
/// - otherwise a warp waits on each step's loads in turn: as few steps per warp as keep about
///   32 warps per SM in flight, at most [`norm_finish::MAX_COLS_PER_CTA`] (a fixed 512 ran
///   4096×1024 with 512 warps in all, about 4 per SM).
pub fn norm_finish_cols(m: u32, n: u32, sms: u32, wide: bool) -> u32 {
    let step = norm_finish::COLS_PER_STEP;
    let row_steps = n.div_ceil(step).max(1) as u64;
    let sms = sms.max(1) as u64;
    if wide {
        let warps_per_block = (m.div_ceil(norm_finish::ROWS_PER_CTA) as u64
            * (norm_finish::THREADS / 32) as u64)
            .max(1);
        let blocks = (16 * sms / warps_per_block).clamp(1, row_steps);
        return step * row_steps.div_ceil(blocks) as u32;
    }
    let warp_steps = m.div_ceil(16) as u64 * row_steps;
    let max_steps = (norm_finish::MAX_COLS_PER_CTA / step) as u64;
    step * (warp_steps / (32 * sms)).clamp(1, max_steps) as u32
}

/// The finishing kernel's columns per CTA and grid for `call`, checked against the device's
/// grid limits, so that a launcher can refuse before its GEMM writes C.
///
/// # Errors
/// [`Error::LaunchLimit`] when the grid exceeds the device's limits.
pub(crate) fn norm_finish_grid<Q: KernelParam>(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    call: &GemmCall<'_>,
    checked: &Checked,
) -> Result<(u32, (u32, u32, u32))> {
    // The kernel also needs γ and β 16-byte aligned for its wide path; where they are not, it
    // takes the fragment path with these (larger) column blocks: slower, equally correct.
    let wide = !in_signature::<Q>()
        && spec.output.size() == 2
        && call.c.ptr.is_multiple_of(16)
        && call.c.ld.is_multiple_of(8);
    let cols_per_cta = norm_finish_cols(checked.m, checked.n, gpu.props().sm_count, wide);
    let grid = (
        checked.m.div_ceil(norm_finish::ROWS_PER_CTA),
        checked.n.div_ceil(cols_per_cta),
        1,
    );
    LaunchShape {
        grid,
        block: (norm_finish::THREADS, 1, 1),
        smem_bytes: 0,
    }
    .check(gpu.props())?;
    Ok((cols_per_cta, grid))
}

/// Launches the row-norm finishing kernel of `spec` over C, whose rows have `tiles_n` partial
/// statistics (their address is in the norm parameters of `finish`), with the `(norm,
/// post-stage)` parameters `finish`, on the `(cols_per_cta, grid)` of [`norm_finish_grid`].
/// Returns whether it was launched as the GEMM's programmatic dependent.
pub(crate) fn launch_norm_finish<N: KernelParam, Q: KernelParam>(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    call: &GemmCall<'_>,
    checked: &Checked,
    tiles_n: u32,
    (cols_per_cta, grid): (u32, (u32, u32, u32)),
    finish: Option<(N, Q)>,
) -> Result<bool> {
    let entry = spec.norm_finish.ok_or_else(|| {
        Error::LaunchLimit(format!(
            "`{}`: a deferred norm without a finishing kernel",
            spec.name
        ))
    })?;
    let (norm, post) = finish.ok_or_else(|| {
        Error::LaunchLimit(format!(
            "`{}`: no finishing parameters for a deferred norm",
            spec.name
        ))
    })?;
    // SAFETY: `#[fused_gemm]` declares the finishing entry point with (NormFinishArgs,
    // K::Params, Post::Params), and the launcher it generates passes those as `N` and `Q`.
    let kernel = unsafe {
        Kernel::<NormFinishParams<N, Q>>::from_function(spec.finish_function(gpu, entry)?)
    };
    let args = NormFinishParams {
        args: NormFinishArgs {
            c: call.c.ptr,
            m: checked.m,
            n: checked.n,
            ldc: call.c.ld as u32,
            tiles_n,
            cols_per_cta,
            _pad: 0,
        },
        norm,
        post,
    };
    // In stream order by default: launched as the GEMM's programmatic dependent (sm_90+) the
    // finishing kernel was never clearly faster on the H200 (within 1 µs at 4096 rows, 6-14 µs
    // slower at 8192²), so that launch is kept for
    // comparison only (`LaunchOptions::dependent_finish`).
    let dependent = gpu.options().dependent_finish
        && spec
            .ptx
            .select(gpu.props().compute_capability)?
            .arch
            .compute_capability()
            >= 90;
    let shape = LaunchShape {
        grid,
        block: (norm_finish::THREADS, 1, 1),
        smem_bytes: if dependent {
            dependent_finish_smem(grid.0 as u64 * grid.1 as u64, gpu.props())
        } else {
            0
        },
    };
    let cfg = shape.prepare(&kernel, gpu.props())?;
    let mode = if dependent {
        LaunchMode::ProgrammaticDependent
    } else {
        LaunchMode::Plain
    };
    // SAFETY: C and the statistics were validated and sized by the caller; in modules of sm_90
    // and above, the `#[fused_gemm]` finishing entry points wait for the GEMM before they call
    // `norm_finish::run` (tests/ptx.rs checks it), and only those run as dependents.
    unsafe { kernel.launch_as(gpu, cfg, mode, &args) }?;
    Ok(dependent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependent_finish_smem_caps_ctas_at_the_fair_share() {
        let h200 = crate::gpu::DeviceProps::h200();
        let fits = |bytes: u32| h200.smem_per_sm / (bytes + 1024);
        // 8192² LayerNorm: 128 × 4 CTAs on 132 SMs, 4 per SM.
        for (ctas, share) in [
            (512u64, 4u32),
            (132, 1),
            (133, 2),
            (64, 1),
            (1, 1),
            (2112, 16),
        ] {
            let bytes = dependent_finish_smem(ctas, &h200);
            assert!(bytes <= h200.smem_per_block_optin, "{ctas}: {bytes}");
            assert_eq!(fits(bytes), share, "{ctas} CTAs: {bytes} bytes");
        }
        assert_eq!(dependent_finish_smem(2113, &h200), 0);
        assert_eq!(dependent_finish_smem(0, &h200), h200.smem_per_block_optin);
    }

    #[test]
    fn norm_finish_keeps_enough_warps_in_flight() {
        // Fragment path. BERT-large's 4096×1024: one 64-column step per warp, 4096 warps.
        assert_eq!(norm_finish_cols(4096, 1024, 132, false), 64);
        // 8192×8192: 512 × 128 warp-steps, at most 8 steps per warp.
        assert_eq!(norm_finish_cols(8192, 8192, 132, false), 512);
        // Wide path: 16 warps per SM in one wave. 8192×8192: 512 warps per column block, four
        // blocks of 2048 columns; 4096×1024: 256 warps per block, eight blocks of 128.
        assert_eq!(norm_finish_cols(8192, 8192, 132, true), 2048);
        assert_eq!(norm_finish_cols(4096, 1024, 132, true), 128);
        // Rows enough for several waves: whole rows, each row's partials merged once.
        assert_eq!(norm_finish_cols(65536, 8192, 132, true), 8192);
        // The blocks split a row evenly: 8192×3000 has 47 steps a row, in four blocks of 12.
        assert_eq!(norm_finish_cols(8192, 3000, 132, true), 768);
        // Tiny and awkward shapes still get one whole step, never 0.
        for wide in [false, true] {
            assert_eq!(norm_finish_cols(1, 1, 132, wide), 64);
            assert_eq!(norm_finish_cols(0, 0, 132, wide), 64);
        }
        assert_eq!(norm_finish_cols(17, 4095, 0, false), 256);
        for (m, n) in [(1u32, 65u32), (4095, 4097), (33, 129)] {
            let c = norm_finish_cols(m, n, 132, false);
            assert!(
                c.is_multiple_of(64) && (64..=512).contains(&c),
                "{m}x{n}: {c}"
            );
            for sms in [0, 1, 132, 1000] {
                let c = norm_finish_cols(m, n, sms, true);
                assert!(
                    c.is_multiple_of(64) && c >= 64 && c < n + 64,
                    "{m}x{n} on {sms} SMs: {c}"
                );
            }
        }
    }
}
