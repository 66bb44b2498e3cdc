//! The micro performance model: occupancy, waves, and time per memory level against a
//! roofline (Roller, OSDI'22, §4: "micro performance model"; Welder, OSDI'23: traffic × waves).
//!
//! For one candidate (tile, split-K factor) of one problem:
//!
//! - **Occupancy**: CTAs per SM = min over shared memory (`smem + 1 KB` reserved per CTA on
//!   sm_80+), registers (allocated per warp in units of 256), threads and the CTA limit.
//! - **Waves**: CTAs = tiles_m · tiles_n · splits; slots = SMs · CTAs per SM;
//!   waves = ⌈CTAs / slots⌉; the last wave is `last_wave_fraction` full.
//! - **SM time** (critical path): per wave, the busiest SM runs `c` CTAs; each CTA's time is the
//!   largest of its tensor-core time (FLOPs at the per-SM peak), shared-memory time (cp.async
//!   fills + fragment loads) and load time (bytes into the SM at `sm_load_gbs`), scaled by
//!   latency hiding (`util` = MMAs in flight per SM / `mma_in_flight`, at most 1).
//! - **L2 → SM** and **DRAM** time: total bytes at the aggregate rates. L2 → SM bytes are
//!   `(tiles_n · M + tiles_m · N) · K · size` (every CTA reads its BM×K panel of A and BN×K panel
//!   of B; out-of-range rows are not read). DRAM bytes are A and B once (B again per group of
//!   M-tiles that do not share a wave when B does not fit in half the L2), C, epilogue reads,
//!   and split-K partials that do not fit in L2.
//! - **Overheads**: the launch, a fixed latency per wave (pipeline fill, epilogue drain), the
//!   split-K reduction (the last CTA of a tile reads the others' f32 partials), the norm
//!   finishing kernel of the partial-statistics path.
//!
//! predicted = launch + max(SM, L2, DRAM) + overheads. Every constant is a [`Roofline`] field:
//! the defaults are the H200 anchors of `bench/anchors/` (4.25 TB/s copy) and estimates for the
//! rest, to be calibrated with [`Roofline::calibrate`] from measured times.

use fused_gemm_device::gemm::TileShape;
use serde::{Deserialize, Serialize};

use crate::gpu::DeviceProps;

/// Throughputs and latencies the model uses. Units: TFLOP/s, TB/s, GB/s, microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    /// Dense tensor-core peak of the mainloop for 16-bit inputs, TFLOP/s, whole device. cuBLAS
    /// reaches ≈ 790 on the H200 with wgmma; an `mma.sync` mainloop reaches less.
    pub peak_tflops: f64,
    /// Fraction of `peak_tflops` for f32 inputs (tf32 tensor cores run at half rate).
    pub f32_fraction: f64,
    /// DRAM bandwidth, TB/s (H200 device-to-device copy: 4.25).
    pub dram_tbs: f64,
    /// L2 → SM aggregate bandwidth, TB/s.
    pub l2_tbs: f64,
    /// Shared-memory bandwidth of one SM, GB/s (128 B/clock at ≈ 1.98 GHz ≈ 253).
    pub smem_gbs_per_sm: f64,
    /// Most bytes per second one SM pulls from L2/DRAM, GB/s.
    pub sm_load_gbs: f64,
    /// MMAs (m16n8k16) in flight per SM needed to hide tensor-core latency.
    pub mma_in_flight: f64,
    /// Kernel launch cost on a stream, µs.
    pub launch_us: f64,
    /// Fixed latency per wave: pipeline fill and epilogue drain, µs.
    pub wave_fixed_us: f64,
    /// Slow-down of global→shared copies on the scalar (non-16-byte) path.
    pub scalar_load_factor: f64,
}

impl Default for Roofline {
    /// Defaults for an H200 running the sm_80 (`cp.async` + `mma.sync`) mainloop, set from
    /// measurements on the H200: the best tile (128×128×64, four 64×64 warps) ran at
    /// 294-307 TFLOP/s on large GEMMs (`tile_probe`); a least-squares fit of this model to the
    /// first exhaustive sweep (`plan_sweep`) gave L2 ≈ 4.3 TB/s, per-SM load ≈ 44 GB/s and
    /// shared memory ≈ 111 GB/s per SM for the older tile set; a near-empty kernel takes ≈ 4 µs.
    fn default() -> Self {
        Roofline {
            peak_tflops: 300.0,
            f32_fraction: 0.5,
            dram_tbs: 4.25,
            l2_tbs: 5.0,
            smem_gbs_per_sm: 150.0,
            sm_load_gbs: 60.0,
            mma_in_flight: 32.0,
            launch_us: 4.0,
            wave_fixed_us: 1.5,
            scalar_load_factor: 4.0,
        }
    }
}

/// Which term of the model sets the predicted time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Bound {
    /// The busiest SM (tensor cores, shared memory, or its load bandwidth).
    Sm,
    /// L2 → SM bandwidth.
    L2,
    /// DRAM bandwidth.
    Dram,
    /// Fixed costs (launch, per-wave latency): a tiny problem.
    Overhead,
}

/// The model's terms for one candidate, µs unless stated.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelTerms {
    /// Registers per thread assumed (estimated or measured).
    pub regs_per_thread: u32,
    /// Resident CTAs per SM.
    pub ctas_per_sm: u32,
    /// CTAs launched.
    pub ctas: u64,
    /// ⌈CTAs / (SMs · CTAs per SM)⌉.
    pub waves: u64,
    /// How full the last wave is, in (0, 1].
    pub last_wave_fraction: f64,
    /// Critical-path SM time.
    pub sm_us: f64,
    /// L2 → SM time.
    pub l2_us: f64,
    /// DRAM time.
    pub dram_us: f64,
    /// Launch, per-wave latency, split-K reduction and norm finishing.
    pub overhead_us: f64,
    /// The term that sets the time.
    pub bound: Bound,
    /// Useful FLOPs (2·M·N·K) over the FLOPs the tiles execute (padding wasted), in (0, 1];
    /// 1 when K = 0.
    pub tile_efficiency: f64,
}

/// Registers per thread of `tile` when no measured value is given: accumulators, double-buffered
/// A and B fragments (4 registers per m16 fragment, 2 per n8), and 40 for addresses, loop state
/// and the epilogue; rounded up to the allocation granularity of 8 and capped at 255.
pub fn estimate_registers(tile: &TileShape) -> u32 {
    let frags = 2 * (4 * tile.mi() + 2 * tile.ni());
    (tile.acc_registers() + frags + 40)
        .div_ceil(8)
        .saturating_mul(8)
        .min(255)
}

/// Shared memory reserved by the system per CTA on sm_80 and later, bytes.
pub const SMEM_RESERVED_PER_CTA: u32 = 1024;

/// Resident CTAs per SM of `tile` with `smem` bytes of dynamic shared memory and `regs`
/// registers per thread; 0 when it cannot launch at all.
pub fn ctas_per_sm(props: &DeviceProps, tile: &TileShape, smem: u32, regs: u32) -> u32 {
    if smem > props.smem_per_block_optin || regs > 255 {
        return 0;
    }
    let warps = tile.threads() / 32;
    // Registers are allocated per warp in units of 256.
    let regs_per_warp = (regs * 32).div_ceil(256) * 256;
    let regs_per_cta = regs_per_warp.saturating_mul(warps);
    if regs_per_cta == 0 || tile.threads() == 0 {
        return 0;
    }
    let by_regs = props.regs_per_sm / regs_per_cta;
    let by_smem = props.smem_per_sm / smem.saturating_add(SMEM_RESERVED_PER_CTA);
    let by_threads = props.max_threads_per_sm / tile.threads();
    by_regs
        .min(by_smem)
        .min(by_threads)
        .min(props.max_blocks_per_sm)
}

/// What the model needs to know about a problem and a candidate.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inputs {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub n_out: u64,
    pub in_size: f64,
    pub out_size: f64,
    pub f32_inputs: bool,
    pub epilogue_read_bytes_per_output: f64,
    pub vector: bool,
    pub tile: TileShape,
    pub splits: u64,
    /// k-tiles (of BK) per split.
    pub k_tiles_per_split: u64,
    pub regs: u32,
    pub ctas_per_sm: u32,
    /// The finishing kernel of the partial-statistics norm path runs after this one.
    pub norm_finish: bool,
}

/// `num / den` for `0 < num ≤ den` (1 when either is 0): the fraction of a padded extent
/// that is useful, in (0, 1] however large the operands.
fn useful_fraction(num: u64, den: u64) -> f64 {
    if num == 0 || den == 0 {
        1.0
    } else {
        (num as f64 / den as f64).min(1.0)
    }
}

/// Evaluates the model (see the [module docs](self)). Products of dimensions (M·N·K reaches
/// 2⁹⁶) are formed in f64, and CTA counts saturate at `u64::MAX`, so every `u32` problem gives
/// finite terms.
pub(crate) fn evaluate(props: &DeviceProps, r: &Roofline, x: &Inputs) -> ModelTerms {
    let t = &x.tile;
    let (bm, bn, bk) = (t.bm.max(1) as u64, t.bn.max(1) as u64, t.bk as u64);
    let sms = props.sm_count.max(1) as u64;
    let tiles_m = x.m.div_ceil(bm);
    let tiles_n = x.n.div_ceil(bn);
    let ctas = tiles_m.saturating_mul(tiles_n).saturating_mul(x.splits);
    let slots = sms * x.ctas_per_sm.max(1) as u64;
    let waves = ctas.div_ceil(slots).max(1);
    let last = ctas - (waves - 1) * slots;
    let last_wave_fraction = last as f64 / slots as f64;

    let k_split = x.k_tiles_per_split.saturating_mul(bk);
    let peak = r.peak_tflops * if x.f32_inputs { r.f32_fraction } else { 1.0 };
    let sm_flops_per_us = peak * 1e6 / sms as f64;
    let smem_bytes_per_us = r.smem_gbs_per_sm * 1e3;
    let load_factor = if x.vector { 1.0 } else { r.scalar_load_factor };
    let sm_load_per_us = r.sm_load_gbs * 1e3 / load_factor;

    // One full CTA: its tile's MMAs, its shared-memory traffic, its global loads.
    let flops = 2.0 * (bm * bn) as f64 * k_split as f64;
    let rows_a = bm.min(x.m) as f64;
    let cols_b = bn.min(x.n) as f64;
    let fill = (bm + bn) as f64 * k_split as f64 * x.in_size;
    let frag_reads =
        (t.warps_n as u64 * bm + t.warps_m as u64 * bn) as f64 * k_split as f64 * x.in_size;
    let loads = (rows_a + cols_b) * k_split as f64 * x.in_size;
    let cta_core = (flops / sm_flops_per_us)
        .max((fill + frag_reads) / smem_bytes_per_us)
        .max(loads / sm_load_per_us);
    let mma_per_warp = (t.mi() * t.ni()) as f64;
    let warps = (t.warps_m * t.warps_n) as f64;
    let sm_time = |c: u64| {
        let util = (c as f64 * warps * mma_per_warp / r.mma_in_flight).min(1.0);
        c as f64 * cta_core / util
    };
    let full_waves = waves - 1;
    let per_sm_last = last.div_ceil(sms);
    let sm_us = full_waves as f64 * sm_time(x.ctas_per_sm as u64) + sm_time(per_sm_last);

    // Aggregate L2 → SM traffic, capped by the SMs that are busy.
    let active_sms = ctas.min(sms) as f64;
    let l2_rate = (r.l2_tbs * 1e6).min(active_sms * sm_load_per_us);
    let k_read = k_split.saturating_mul(x.splits).min(x.k.max(1)) as f64;
    let l2_bytes = (tiles_n as f64 * x.m as f64 + tiles_m as f64 * x.n as f64) * k_read * x.in_size;
    let l2_us = l2_bytes / l2_rate;

    // DRAM: unique bytes, B re-read when it does not stay in L2 across M-tile rows.
    let l2_cap = props.l2_bytes as f64;
    let a_bytes = x.m as f64 * x.k as f64 * x.in_size;
    let b_bytes = x.n as f64 * x.k as f64 * x.in_size;
    let m_rows_per_wave = (slots / tiles_n.saturating_mul(x.splits).max(1)).max(1);
    let b_reads = if b_bytes <= 0.5 * l2_cap {
        1.0
    } else {
        tiles_m.div_ceil(m_rows_per_wave) as f64
    };
    let out_elems = x.m as f64 * x.n_out as f64;
    let c_bytes = out_elems * (x.out_size + x.epilogue_read_bytes_per_output);
    let partials = if x.splits > 1 {
        ctas as f64 * (bm * bn) as f64 * 4.0
    } else {
        0.0
    };
    let partial_dram = if partials > 0.5 * l2_cap {
        2.0 * partials
    } else {
        0.0
    };
    let dram_us = (a_bytes + b_bytes * b_reads + c_bytes + partial_dram) / (r.dram_tbs * 1e6);

    // The last CTA of each tile reads the other splits' partials at one SM's load rate.
    let split_us = if x.splits > 1 {
        waves as f64 * (x.splits - 1) as f64 * (bm * bn) as f64 * 4.0 / (r.sm_load_gbs * 1e3)
    } else {
        0.0
    };
    let norm_us = if x.norm_finish {
        r.launch_us + 2.0 * out_elems * x.out_size / (r.dram_tbs * 1e6)
    } else {
        0.0
    };
    let overhead_us = r.launch_us + waves as f64 * r.wave_fixed_us + split_us + norm_us;

    let body = sm_us.max(l2_us).max(dram_us);
    let bound = if body < overhead_us {
        Bound::Overhead
    } else if body == sm_us {
        Bound::Sm
    } else if body == l2_us {
        Bound::L2
    } else {
        Bound::Dram
    };
    // Useful over executed FLOPs, M·N·K / (⌈M⌉·⌈N⌉·splits·k_split), one factor at a time:
    // each is in (0, 1], so the product is too.
    let tile_efficiency = useful_fraction(x.m, tiles_m.saturating_mul(bm))
        * useful_fraction(x.n, tiles_n.saturating_mul(bn))
        * useful_fraction(x.k, x.splits.saturating_mul(k_split));
    ModelTerms {
        regs_per_thread: x.regs,
        ctas_per_sm: x.ctas_per_sm,
        ctas,
        waves,
        last_wave_fraction,
        sm_us,
        l2_us,
        dram_us,
        overhead_us,
        bound,
        tile_efficiency,
    }
}

impl ModelTerms {
    /// The predicted time, µs.
    pub fn total_us(&self) -> f64 {
        self.sm_us.max(self.l2_us).max(self.dram_us) + self.overhead_us
    }
}

impl Roofline {
    /// A roofline fitted to measurements: `samples` are (model terms of the plan that ran,
    /// measured µs). The SM term is scaled by the median of measured/predicted over the
    /// SM-bound samples (so `peak_tflops`, `smem_gbs_per_sm` and `sm_load_gbs` scale together),
    /// DRAM bandwidth over the DRAM-bound ones, L2 bandwidth over the L2-bound ones, and the
    /// launch cost is set to the median time of the overhead-bound ones minus their per-wave
    /// latency. A class without samples keeps its value.
    pub fn calibrate(&self, samples: &[(ModelTerms, f64)]) -> Roofline {
        fn median(mut v: Vec<f64>) -> Option<f64> {
            v.retain(|x| x.is_finite() && *x > 0.0);
            if v.is_empty() {
                return None;
            }
            v.sort_by(f64::total_cmp);
            Some(v[v.len() / 2])
        }
        // Measured time spent in the bound term ≈ measured − modelled overheads.
        let ratio = |b: Bound, term: fn(&ModelTerms) -> f64| {
            median(
                samples
                    .iter()
                    .filter(|(t, _)| t.bound == b)
                    .map(|(t, us)| (us - t.overhead_us) / term(t))
                    .collect(),
            )
        };
        let mut out = *self;
        if let Some(s) = ratio(Bound::Sm, |t| t.sm_us) {
            out.peak_tflops /= s;
            out.smem_gbs_per_sm /= s;
            out.sm_load_gbs /= s;
        }
        if let Some(s) = ratio(Bound::Dram, |t| t.dram_us) {
            out.dram_tbs /= s;
        }
        if let Some(s) = ratio(Bound::L2, |t| t.l2_us) {
            out.l2_tbs /= s;
        }
        let launch = median(
            samples
                .iter()
                .filter(|(t, _)| t.bound == Bound::Overhead)
                .map(|(t, us)| us - t.waves as f64 * self.wave_fixed_us)
                .collect(),
        );
        if let Some(l) = launch {
            out.launch_us = l;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_gemm_device::gemm::{ROW_TILES_SM80, TILES_SM80};

    #[test]
    fn register_estimates_are_plausible() {
        // 128×128, 2×4 warps: 64 accumulators + 48 fragment registers + 40 = 152.
        assert_eq!(estimate_registers(&TILES_SM80[0]), 152);
        for t in TILES_SM80.iter().chain(ROW_TILES_SM80) {
            let r = estimate_registers(t);
            assert!(
                r >= t.acc_registers() && r <= 255 && r.is_multiple_of(8),
                "{t:?}: {r}"
            );
        }
    }

    #[test]
    fn occupancy_on_h200() {
        let p = DeviceProps::h200();
        let big = TILES_SM80[0];
        // 152 registers × 256 threads = 38912 of 65536: one CTA.
        assert_eq!(ctas_per_sm(&p, &big, big.smem_bytes(true), 152), 1);
        // With 128 registers two fit, and shared memory (80 KB + 1 KB each) allows two.
        assert_eq!(ctas_per_sm(&p, &big, big.smem_bytes(true), 128), 2);
        let small = TILES_SM80[3];
        let n = ctas_per_sm(&p, &small, small.smem_bytes(true), 64);
        assert!(n >= 4, "{n}");
        // Beyond the opt-in limit: none.
        assert_eq!(ctas_per_sm(&p, &big, 300_000, 64), 0);
        assert_eq!(ctas_per_sm(&p, &big, 1024, 256), 0);
    }
}
