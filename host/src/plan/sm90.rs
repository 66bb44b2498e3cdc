//! The Hopper mainloop's plans and its model ([`fused_gemm_device::gemm::sm90`]).
//!
//! A small model in the spirit of [`crate::plan`]: per tile shape, the busiest SM runs
//! ⌈tiles / CTAs⌉ tiles at [`PEAK_TFLOPS`] times the shape's efficiency; cooperative tiles add
//! their epilogue (one consumer warpgroup's share of the tile's stores, at the SM's share of
//! DRAM bandwidth), ping-pong tiles hide it behind the other warpgroup's mainloop; the whole is
//! at least the DRAM time. On ping-pong tiles a last, partial round is split along K
//! ([`tail_splits`]): its few tiles are shared by many SMs instead of leaving the others idle
//! for a whole mainloop. The sm_80 planner's best plan wins when it predicts less (skinny
//! problems, where split-K pays; `crate::launch` decides).

use fused_gemm_device::gemm::TileShape;
use fused_gemm_device::gemm::sm90::{
    self, EpilogueTraits, MAX_NORM_CLUSTER, cluster_m, cta_rows, is_pingpong, row_norm_cluster_tile,
};

use super::model::{Bound, ModelTerms};
use super::{NORM_STATS_BYTES, NormPath, Plan, Problem};

/// Dense bf16/f16 tensor-core throughput the model assumes for the whole H200, TFLOP/s
/// (cuBLAS measured about 790 at 8192³, `bench/anchors/`).
pub const PEAK_TFLOPS: f64 = 800.0;

/// DRAM bandwidth the model assumes, TB/s (device-to-device copy, `bench/anchors/`).
pub const DRAM_TBS: f64 = 4.25;

/// Launch overhead the model adds, µs.
pub const LAUNCH_US: f64 = 3.0;

/// Tile rows per raster group ([`Sm90Args::group_m`](sm90::Sm90Args::group_m)).
pub const GROUP_M: u32 = 8;

/// What a one-round grid's partial statistics cost beyond the model's two launches and six
/// passes over C, µs: the finishing kernel starts only after the GEMM's last CTA, on a device
/// that has been mostly idle. Measured on an H100 (bf16, MiniLM's LayerNorm GEMMs with the
/// 128×128 ping-pong tile forced): 128×384×384 18.4 µs against 13.3 predicted, 128×384×1536
/// 25.8 against 19.6, 4096×384×384 25.3 against 17.6.
pub const UNDERFILLED_PARTIALS_US: f64 = 5.0;

/// Bandwidth at which one SM reads the other pieces' partial tiles of a split tail tile from
/// L2, GB/s (the model's cost of [`tail_splits`]'s fixup; an estimate of one SM's share of L2
/// bandwidth).
pub const FIXUP_GBS: f64 = 100.0;

/// K pieces per tile of the last, partial round
/// ([`Sm90Args::tail_splits`](sm90::Sm90Args::tail_splits)) for `tile` on `p` with `sms` SMs; 1 for
/// no split. Only ping-pong tiles with at least one whole round of tiles and a partial last one are
/// split: into `s` pieces, as many as minimize a piece's mainloop (`tile_us / s`) plus the last
/// piece's reads of all `s` partial tiles ([`FIXUP_GBS`]), with `s·(tiles mod SMs) ≤ SMs` and
/// `s ≤ ⌈K/64⌉`, when that saves at least 1 µs of the tile's mainloop. Example: 8192³ on 128×128
/// ping-pong tiles, 4096 tiles on 132 SMs: 4 tiles left after 31 rounds, each in 8 pieces.
pub fn tail_splits(sms: u32, tile: &TileShape, p: &Problem) -> u32 {
    let Some((_, cap)) = tail_shape(sms, tile, p) else {
        return 1;
    };
    let tile_us = tile_mainloop_us(sms, tile, p);
    let cost = |s: u32| tile_us / s as f64 + s as f64 * fixup_read_us(tile);
    let best = (2..=cap).min_by(|&a, &b| cost(a).total_cmp(&cost(b)));
    match best {
        Some(s) if cost(s) + 1.0 <= tile_us => s,
        _ => 1,
    }
}

/// `forced` K pieces for the last round instead of [`tail_splits`]'s, capped at what the problem
/// allows (at least 1; 1 where the tail cannot be split).
pub fn forced_tail_splits(sms: u32, tile: &TileShape, p: &Problem, forced: u32) -> u32 {
    tail_shape(sms, tile, p).map_or(1, |(_, cap)| forced.clamp(1, cap))
}

/// The last round of ping-pong `tile` on `p`: (tiles left after the whole rounds, most pieces
/// each may have), or `None` when the tail cannot be split (not ping-pong, no whole round, or
/// no partial round).
fn tail_shape(sms: u32, tile: &TileShape, p: &Problem) -> Option<(u32, u32)> {
    if !is_pingpong(tile) || cluster_m(tile) != 1 || sms == 0 {
        return None;
    }
    let tiles = p.m.div_ceil(tile.bm) as u64 * p.n.div_ceil(tile.bn) as u64;
    let (rounds, left) = (tiles / sms as u64, tiles % sms as u64);
    if rounds == 0 || left == 0 {
        return None;
    }
    let cap = (sms as u64 / left).min(p.k.div_ceil(sm90::BK) as u64) as u32;
    (cap >= 2).then_some((left as u32, cap))
}

/// One tile's mainloop on one SM, µs (the model's [`PEAK_TFLOPS`] shared by `sms` SMs, at the
/// shape's relative efficiency).
fn tile_mainloop_us(sms: u32, tile: &TileShape, p: &Problem) -> f64 {
    let k_pad = p.k.div_ceil(sm90::BK) as u64 * sm90::BK as u64;
    let sm_flops_per_us = PEAK_TFLOPS * 1e6 / sms.max(1) as f64;
    2.0 * (cta_rows(tile) as u64 * tile.bn as u64 * k_pad) as f64
        / (sm_flops_per_us * tile_efficiency(tile))
}

/// Relative mainloop efficiency of `tile`, measured on the H200 (8192³ bf16 with each tile
/// forced, all in the same interleaved rounds: 128×128
/// ping-pong 1.58 ms, 128×256 and 256×128 cooperative 1.61 and 1.62, 128×128 cooperative
/// 1.62; ping-pong and 128×256 are within 1 % in other runs). The 256×256 cluster takes
/// 1.00-1.08× the 128×256 cooperative time (median 1.006 over the 20 benchmark rows).
/// Ping-pong's hidden epilogue (in
/// [`predict_fit`]) makes it win at nearly equal efficiency; its 0.97 came from tiles timed
/// one after another, whose clocks drifted by up to 10 %. Its 0.99 (two m64n128 `wgmma`s per
/// k-step where a 128×256 cooperative warpgroup issues one m64n256) decides where it hides
/// nothing: one tile per warpgroup, as at 4096×1024×{1024, 4096}, where the 128×256
/// cooperative tile measured 0.0171 against 0.0192 ms and 0.0540 against 0.0588 ms (H200,
/// Hopper benchmark). Cooperative 128×256 CTAs have the best figure; 256×128 ones took a
/// median 1.015× its time over the benchmark's 11 plain GEMM rows (0.99-1.05×, same runs).
fn tile_efficiency(tile: &TileShape) -> f64 {
    if cluster_m(tile) > 1 {
        0.98
    } else if is_pingpong(tile) {
        0.99
    } else if cta_rows(tile) == 128 && tile.bn == 256 {
        1.0
    } else if cta_rows(tile) * tile.bn >= 128 * 256 {
        0.985
    } else {
        0.89
    }
}

/// The last piece's reads of every piece's partial tile (f32 accumulators), µs per piece.
fn fixup_read_us(tile: &TileShape) -> f64 {
    (cta_rows(tile) * tile.bn * 4) as f64 / (FIXUP_GBS * 1e3)
}

/// Bytes of the workspace and counters of a split tail ([`tail_splits`] = `pieces` ≥ 2) for
/// `tile` on `p` with `sms` SMs: one f32 partial tile per piece, one `u32` per tail tile.
pub fn tail_workspace_bytes(sms: u32, tile: &TileShape, p: &Problem, pieces: u32) -> (u64, u64) {
    match tail_shape(sms, tile, p) {
        Some((tiles, _)) if pieces > 1 => (
            tiles as u64 * pieces as u64 * (cta_rows(tile) * tile.bn) as u64 * 4,
            tiles as u64 * 4,
        ),
        _ => (0, 0),
    }
}

/// The model's time for `tile` on `p`, and its terms ([`predict_fit`] with no measured cluster
/// occupancy).
pub fn predict(gpu_sms: u32, tile: &TileShape, p: &Problem) -> (f64, ModelTerms) {
    predict_fit(gpu_sms, tile, p, None)
}

/// The model's time for `tile` on `p`, and its terms. `fit`: how many row-norm groups
/// ([`norm_cluster`]) the device runs at once, when known: clusters
/// (`cuOccupancyMaxActiveClusters`; they must sit in one GPC, so fewer fit than SMs ÷ CTAs: 30
/// of 4 and 15 of 8 on an H200, measured) or the groups of a cooperative grid
/// ([`NormPath::GlobalExchange`], 33 of 4); `Some(0)` when none can run (the
/// partial-statistics path is modelled).
pub fn predict_fit(
    gpu_sms: u32,
    tile: &TileShape,
    p: &Problem,
    fit: Option<u32>,
) -> (f64, ModelTerms) {
    predict_with(gpu_sms, tile, p, fit, None)
}

/// [`predict_fit`] with `forced_tail` K pieces for the last round ([`forced_tail_splits`]).
fn predict_with(
    gpu_sms: u32,
    tile: &TileShape,
    p: &Problem,
    fit: Option<u32>,
    forced_tail: Option<u32>,
) -> (f64, ModelTerms) {
    let sms = gpu_sms.max(1) as u64;
    let cluster_norm = usable_norm_cluster(tile, p, fit);
    let norm_ctas = cluster_norm.map_or(1, |c| c as u64);
    let cluster = cluster_m(tile) as u64 * norm_ctas;
    let (m, n, k) = (p.m as u64, p.n as u64, p.k as u64);
    let (bm, bn) = (tile.bm as u64, tile.bn as u64);
    // Work units: tiles, or the tiles of a cluster (a pair along M, or a row-norm cluster's
    // tiles along N); one unit per cluster of CTAs at a time.
    let units = m.div_ceil(bm) * n.div_ceil(bn).div_ceil(norm_ctas);
    let slots = match fit {
        Some(f) if norm_ctas > 1 => (f as u64).clamp(1, (sms / cluster).max(1)),
        _ => (sms / cluster).max(1),
    };
    let concurrent = units.min(slots).max(1);
    let rounds = units.div_ceil(concurrent);
    let k_pad = k.div_ceil(sm90::BK as u64) * sm90::BK as u64;
    let pingpong = is_pingpong(tile);
    let cta_m = cta_rows(tile) as u64;
    let tile_us = tile_mainloop_us(gpu_sms, tile, p);
    let out_cols = if p.pairs { bn / 2 } else { bn };
    let out_bytes = p.out_dtype.size() as f64 + p.epilogue_read_bytes_per_output;
    // The store of the CTA's tile at the SM's share of DRAM bandwidth, and the epilogue's time:
    // one consumer warpgroup's share of it (a cooperative CTA's two warpgroups finish their
    // halves at once; a ping-pong warpgroup finishes its whole tile). C lands in L2, so the
    // stores of a round do not wait on DRAM; `dram_us` bounds the whole.
    let store_us = (cta_m * out_cols) as f64 * out_bytes / (DRAM_TBS * 1e6 / sms as f64);
    let epi_us = if pingpong { store_us } else { store_us / 2.0 };
    // A row-norm group's epilogue makes two passes over the tile and waits for the other
    // CTAs' statistics: about 3× the store time and 9 µs per tile in all, fit to the H200 at
    // 4096×1024×{1024, 4096} in one round (global exchange: 34.9 and 70.8 µs measured, 35.3
    // and 68.5 predicted). The two rounds of
    // clusters there (58.6 and 122.7 µs) come out 9-15 % high: the second round's mainloop
    // starts under the first's epilogue.
    let cluster_epi_us = if cluster_norm.is_some() {
        3.0 * store_us + 9.0 - epi_us
    } else {
        0.0
    };
    // Each CTA's last tile reads its residual from the ring and stores C from there with TMA
    // (`sm90::ring_epilogue_offset`): 3.3-4.7 µs less than the per-thread path at those two
    // shapes over two builds (H200); 4.5 µs is
    // taken off the last round. Without both tensor maps nothing is: the kernel then moves C
    // or the residual per thread, and only the path with both was measured against none.
    let ring_saving_us =
        if cluster_norm.is_some() && sm90::ring_epilogue_fits(tile) && p.epilogue_tma {
            4.5
        } else {
            0.0
        };
    // A split tail's last round takes one piece's mainloop and the fixup's reads.
    let pieces = match forced_tail {
        Some(s) => forced_tail_splits(gpu_sms, tile, p, s),
        None => tail_splits(gpu_sms, tile, p),
    };
    let sm_us = if pingpong && pieces > 1 {
        let last = tile_us / pieces as f64 + pieces as f64 * fixup_read_us(tile);
        (rounds - 1) as f64 * tile_us.max(epi_us) + last.max(epi_us) + epi_us
    } else if pingpong {
        rounds as f64 * tile_us.max(epi_us) + epi_us
    } else {
        rounds as f64 * (tile_us + epi_us + cluster_epi_us) - ring_saving_us
    };
    let in_size = p.in_dtype.size() as f64;
    // Products of dimensions in f64: M·K + N·K exceeds 64 bits at u32::MAX-scale dims.
    let (mf, nf, kf) = (m as f64, n as f64, k as f64);
    let out_elems = mf * p.n_out() as f64;
    let dram_us = ((mf * kf + nf * kf) * in_size + out_elems * out_bytes) / (DRAM_TBS * 1e6);
    let partials = p.row_norm && cluster_norm.is_none() && !in_one_tile(p);
    // The finishing kernel's launch and its pass over C, and the partial statistics the GEMM
    // writes: about 20 µs at 4096×1024 bf16 on the H200 (measured), 2 launches and 6 passes.
    let norm_us = if partials {
        let gap = if units < slots {
            UNDERFILLED_PARTIALS_US
        } else {
            0.0
        };
        2.0 * LAUNCH_US + 6.0 * out_elems * p.out_dtype.size() as f64 / (DRAM_TBS * 1e6) + gap
    } else {
        0.0
    };
    let total = LAUNCH_US + sm_us.max(dram_us) + norm_us;
    let terms = ModelTerms {
        regs_per_thread: sm90::CONSUMER_REGS,
        ctas_per_sm: 1,
        ctas: concurrent * cluster,
        waves: rounds,
        last_wave_fraction: (units - (rounds - 1) * concurrent) as f64 / concurrent as f64,
        sm_us,
        l2_us: 0.0,
        dram_us,
        overhead_us: LAUNCH_US + norm_us,
        bound: if LAUNCH_US + norm_us > sm_us.max(dram_us) {
            Bound::Overhead
        } else if dram_us > sm_us {
            Bound::Dram
        } else {
            Bound::Sm
        },
        // M·N·K over the padded extents, one factor at a time (M·N·K reaches 2⁹⁶): each in
        // (0, 1], so the product is too; 1 for K = 0.
        tile_efficiency: padded_fraction(m, m.div_ceil(bm) * bm)
            * padded_fraction(n, n.div_ceil(bn).div_ceil(norm_ctas) * norm_ctas * bn)
            * padded_fraction(k, k_pad),
    };
    (total, terms)
}

/// `x / padded` for `0 < x ≤ padded`, 1 when either is 0.
fn padded_fraction(x: u64, padded: u64) -> f64 {
    if x == 0 || padded == 0 {
        1.0
    } else {
        (x as f64 / padded as f64).min(1.0)
    }
}

/// CTAs of the row-norm cluster that finishes `p`'s row norm on `tile` in the epilogue, or
/// `None`: cooperative 128-row tiles ([`row_norm_cluster_tile`]) when ⌈N/BN⌉ ≤
/// [`MAX_NORM_CLUSTER`] (N ≤ 2048 on 128×256 tiles, ≤ 1024 on 128×128).
pub fn norm_cluster(tile: &TileShape, p: &Problem) -> Option<u32> {
    let ctas = p.n.div_ceil(tile.bn);
    (p.row_norm && row_norm_cluster_tile(tile) && (1..=MAX_NORM_CLUSTER).contains(&ctas))
        .then_some(ctas)
}

/// [`norm_cluster`], unless `fit` says that no such cluster can run (`Some(0)`: the row norm
/// then takes the partial-statistics path on this tile).
fn usable_norm_cluster(tile: &TileShape, p: &Problem, fit: Option<u32>) -> Option<u32> {
    norm_cluster(tile, p).filter(|_| fit != Some(0))
}

/// Whether a row of `p` fits in one 64-column epilogue chunk (the norm finishes per chunk on
/// any tile).
fn in_one_tile(p: &Problem) -> bool {
    p.n <= sm90::EPI_COLS
}

/// The Hopper plan of `tile` for `p` on a device with `sms` SMs: one CTA per SM (at most one
/// per tile; CTAs in pairs for a cluster tile), 384 threads, no split-K. Row norms finish in
/// the epilogue on cooperative 128-row tiles with ⌈N/BN⌉ ≤ [`MAX_NORM_CLUSTER`] (a row-norm
/// cluster, [`NormPath::Cluster`]) and on any tile when N ≤ [`sm90::EPI_COLS`]; otherwise
/// through partial statistics, one per tile and row (the epilogue merges its 64-column
/// chunks'), and the finishing kernel.
pub fn plan(sms: u32, tile: &TileShape, p: &Problem) -> Plan {
    plan_fit(sms, tile, p, None)
}

/// [`plan`] with `fit` row-norm clusters running at once (see [`predict_fit`]): the grid has at
/// most `fit` clusters; `Some(0)` (none can run) plans the partial-statistics path instead.
pub fn plan_fit(sms: u32, tile: &TileShape, p: &Problem, fit: Option<u32>) -> Plan {
    plan_with(sms, tile, p, fit, None)
}

/// [`plan_fit`] with `forced_tail` K pieces for the last round ([`forced_tail_splits`]) instead
/// of the model's.
pub fn plan_with(
    sms: u32,
    tile: &TileShape,
    p: &Problem,
    fit: Option<u32>,
    forced_tail: Option<u32>,
) -> Plan {
    let (predicted_us, model) = predict_with(sms, tile, p, fit, forced_tail);
    let tiles_n_stats = p.n.div_ceil(tile.bn);
    let norm = match (
        p.row_norm,
        usable_norm_cluster(tile, p, fit),
        in_one_tile(p),
    ) {
        (false, _, _) => NormPath::None,
        (true, Some(ctas), _) => NormPath::Cluster { ctas },
        (true, None, true) => NormPath::InCta,
        (true, None, false) => NormPath::Partials {
            tiles_n: tiles_n_stats,
            stats_bytes: (p.m as u64 * tiles_n_stats as u64).saturating_mul(NORM_STATS_BYTES),
        },
    };
    // Room to stage C: the kernel stores it with TMA when C allows a tensor map (the launch
    // passes one), and otherwise, without a row norm, its threads copy it out of the buffers.
    let smem_bytes = if matches!(norm, NormPath::Cluster { .. }) {
        sm90::smem_bytes_row_norm(tile)
    } else if stages_c(p) {
        sm90::smem_bytes_staged(tile)
    } else {
        sm90::smem_bytes(tile)
    };
    let tail_splits = match forced_tail {
        Some(s) => forced_tail_splits(sms, tile, p, s),
        None => tail_splits(sms, tile, p),
    };
    let (workspace_bytes, counter_bytes) = tail_workspace_bytes(sms, tile, p, tail_splits);
    Plan {
        tile: *tile,
        splits: 1,
        // Saturates only for K beyond 2^32 − BK, which the path refuses (`ineligible`).
        k_per_split: p.k.div_ceil(sm90::BK).saturating_mul(sm90::BK),
        grid: (model.ctas as u32, 1, 1),
        block: (sm90::THREADS, 1, 1),
        smem_bytes,
        workspace_bytes,
        counter_bytes,
        tail_splits,
        norm,
        predicted_us,
        model,
    }
}

/// Whether the kernel stages C for TMA stores for `p` ([`sm90::stages_c`]: 16-bit C, no pair
/// stage). A row norm's plan stages C on the partial-statistics and in-chunk paths only:
/// [`plan_fit`] gives a row-norm cluster its exchange instead of the staging buffers.
pub fn stages_c(p: &Problem) -> bool {
    sm90::stages_c(p.out_dtype.size(), epilogue_traits(p))
}

/// Whether the kernel for `p` stages C in shared memory even without C's tensor map
/// ([`sm90::always_stages_c`]): it needs [`sm90::smem_bytes_staged`].
pub fn always_stages_c(p: &Problem) -> bool {
    sm90::always_stages_c(p.out_dtype.size(), epilogue_traits(p))
}

/// The epilogue constants of `p`'s kernel that decide how it stores C.
fn epilogue_traits(p: &Problem) -> EpilogueTraits {
    EpilogueTraits {
        pairs: p.pairs,
        row_reduction: p.row_norm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_gemm_device::gemm::sm90::TILES_SM90;
    use fused_gemm_device::types::DType;

    fn problem(m: u32, n: u32, k: u32) -> Problem {
        Problem::gemm(m, n, k, DType::Bf16)
    }

    /// The regions of a Hopper CTA's dynamic shared memory, in the order the device lays them
    /// out, never overlap and fit the allocation of every launch that uses them: a row-norm
    /// group's statistics exchange (written by its peers at any time) once overlapped the
    /// residual mbarriers and the column bias buffers.
    #[test]
    fn shared_memory_regions_are_disjoint_and_allocated() {
        use fused_gemm_device::gemm::sm90::{
            BIAS_BYTES, NORM_XCHG_BYTES, STAGING_BYTES, bias_offset, empty_bar, full_bar,
            norm_xchg_offset, residual_bar, smem_bytes_row_norm, smem_bytes_staged, stage_bytes,
            staging_offset, turn_bar, xchg_bar,
        };
        for t in TILES_SM90 {
            let (s, ring) = (t.stages, t.stages * stage_bytes(t));
            let common = [
                ("ring", 0, ring),
                (
                    "full mbarriers",
                    ring + full_bar(0),
                    ring + full_bar(s - 1) + 8,
                ),
                (
                    "empty mbarriers",
                    ring + empty_bar(s, 0),
                    ring + empty_bar(s, s - 1) + 8,
                ),
                (
                    "turn mbarriers",
                    ring + turn_bar(s, 0),
                    ring + turn_bar(s, 1) + 8,
                ),
                (
                    "exchange mbarriers or tail flags",
                    ring + xchg_bar(s, 0),
                    ring + xchg_bar(s, 1) + 8,
                ),
                (
                    "residual mbarriers",
                    ring + residual_bar(s, 0, 0),
                    ring + residual_bar(s, 1, 1) + 8,
                ),
                (
                    "column bias",
                    bias_offset(ring, s),
                    bias_offset(ring, s) + BIAS_BYTES,
                ),
            ];
            let xchg = norm_xchg_offset(ring, s);
            let staging = staging_offset(t);
            for (last, alloc) in [
                (
                    ("norm exchange", xchg, xchg + NORM_XCHG_BYTES),
                    smem_bytes_row_norm(t),
                ),
                (
                    ("staging", staging, staging + 4 * STAGING_BYTES),
                    smem_bytes_staged(t),
                ),
            ] {
                let regions: Vec<_> = common.iter().copied().chain([last]).collect();
                for w in regions.windows(2) {
                    assert!(w[0].2 <= w[1].1, "{t:?}: {:?} overlaps {:?}", w[0], w[1]);
                }
                assert!(last.2 <= alloc, "{t:?}: {last:?} ends past {alloc} bytes");
            }
            assert_eq!(xchg % 16, 0, "{t:?}");
            assert_eq!(staging % 1024, 0, "{t:?}");
        }
    }

    #[test]
    fn big_square_gemm_prefers_the_pingpong_tile() {
        let best = TILES_SM90
            .iter()
            .min_by(|a, b| {
                predict(132, a, &problem(8192, 8192, 8192))
                    .0
                    .total_cmp(&predict(132, b, &problem(8192, 8192, 8192)).0)
            })
            .unwrap();
        // Measured fastest at 8192³ on the H200 (1.58 ms against 1.61-1.62 for the others).
        assert!(is_pingpong(best), "{best:?}");
        // 2·8192³ at 800 TFLOP/s is 1374 µs; the prediction is in that range.
        let t = predict(132, best, &problem(8192, 8192, 8192)).0;
        assert!((1374.0..1700.0).contains(&t), "{t}");
    }

    /// The tile the model predicts fastest for `p`, with the row-norm cluster occupancy measured
    /// on the H200 (30 clusters of 4 CTAs, 15 of 8), and its plan.
    fn modelled_best(p: &Problem) -> (TileShape, Plan) {
        let fit = |t: &TileShape| norm_cluster(t, p).map(|c| if c > 4 { 15 } else { 30 });
        let time = |t: &TileShape| predict_fit(132, t, p, fit(t)).0;
        let best = *TILES_SM90
            .iter()
            .min_by(|a, b| time(a).total_cmp(&time(b)))
            .unwrap();
        (best, plan_fit(132, &best, p, fit(&best)))
    }

    /// The model's tile is the one measured fastest at each benchmark shape (the Hopper
    /// benchmark's forced-tile columns on the H200; another run agreed except at
    /// 4096×1024×1024, where 128×128 cooperative beat 128×256 by 0.3 µs; row-norm cluster
    /// occupancy as measured: 30 clusters of 4 CTAs, 15 of 8).
    #[test]
    fn model_picks_the_measured_fastest_tile_at_the_benchmark_shapes() {
        let (pp, coop) = ((128, 128, true), (128, 256, false));
        let cases = [
            (8192, 8192, 8192, false, pp),
            (4096, 3072, 1024, false, pp),
            // One round of 128×256 tiles: ping-pong warpgroups get one tile each.
            (4096, 1024, 1024, false, coop),
            (4096, 1024, 1024, true, pp),
            (4096, 4096, 1024, false, pp),
            (4096, 1024, 4096, false, coop),
            (4096, 1024, 4096, true, pp),
            (4096, 3072, 768, false, pp),
            (8192, 6144, 4096, false, pp),
            (8192, 4096, 4096, false, pp),
            (8192, 28672, 4096, false, pp),
            (8192, 4096, 14336, false, coop),
            (8192, 16384, 2048, false, pp),
        ];
        for (m, n, k, norm, (bm, bn, ping)) in cases {
            let mut p = problem(m, n, k);
            if norm {
                p.row_norm = true;
                p.epilogue_read_bytes_per_output = 2.0;
            }
            let (best, _) = modelled_best(&p);
            assert_eq!(
                (best.bm, best.bn, is_pingpong(&best)),
                (bm, bn, ping),
                "{m}x{n}x{k} norm={norm}"
            );
        }
    }

    #[test]
    fn cluster_plans_launch_pairs_of_ctas() {
        let t = TILES_SM90[3];
        assert_eq!(cluster_m(&t), 2);
        // 8192² in 256×256 tile pairs: 1024 pairs, 66 at a time on 132 SMs.
        let p = plan(132, &t, &problem(8192, 8192, 8192));
        assert_eq!(p.grid, (132, 1, 1));
        assert_eq!(p.model.waves, 1024u64.div_ceil(66));
        // One pair when M ≤ 256: still both CTAs (the second one's rows may all be past M).
        assert_eq!(plan(132, &t, &problem(100, 200, 64)).grid, (2, 1, 1));
    }

    #[test]
    fn plans_stage_c_without_pairs_or_norm_clusters() {
        for t in TILES_SM90 {
            let staged = sm90::smem_bytes_staged(t);
            assert_eq!(sm90::staging_offset(t) % 1024, 0, "{t:?}");
            assert!(sm90::staging_offset(t) >= sm90::smem_bytes(t));
            assert!(staged <= 227 * 1024, "{t:?}: {staged} bytes");
            let gemm = plan(132, t, &problem(4096, 4096, 1024));
            assert_eq!(gemm.smem_bytes, staged, "{t:?}");
            assert!(always_stages_c(&problem(4096, 4096, 1024)));
            // f32 C and a pair stage (N/2-wide output) store C directly.
            let mut f32_out = problem(4096, 4096, 1024);
            f32_out.out_dtype = DType::F32;
            let mut pairs = problem(4096, 4096, 1024);
            pairs.pairs = true;
            for p in [f32_out, pairs] {
                assert!(!stages_c(&p) && !always_stages_c(&p), "{t:?} {p:?}");
                assert_ne!(plan(132, t, &p).smem_bytes, staged, "{t:?} {p:?}");
            }
            // A row norm wider than any row-norm cluster (16+ tiles along N) stages its
            // pre-norm C next to the partial statistics; one within a chunk stages it too,
            // except where a cluster of one CTA finishes it (cooperative 128-row tiles).
            let mut norm = problem(4096, 4096, 1024);
            norm.row_norm = true;
            // Its kernel stages only with C's tensor map: a cluster has no staging buffers.
            assert!(stages_c(&norm) && !always_stages_c(&norm));
            let np = plan(132, t, &norm);
            assert!(matches!(np.norm, NormPath::Partials { .. }), "{t:?}");
            assert_eq!(np.smem_bytes, staged, "{t:?}");
            let mut narrow = problem(4096, 64, 1024);
            narrow.row_norm = true;
            let np = plan(132, t, &narrow);
            match np.norm {
                NormPath::InCta => assert_eq!(np.smem_bytes, staged, "{t:?}"),
                NormPath::Cluster { ctas: 1 } => assert!(row_norm_cluster_tile(t), "{t:?}"),
                other => panic!("{t:?}: {other:?}"),
            }
        }
        let mut p = problem(4096, 1024, 1024);
        p.row_norm = true;
        let c = plan(132, &TILES_SM90[0], &p);
        assert!(matches!(c.norm, NormPath::Cluster { .. }));
        assert_eq!(c.smem_bytes, sm90::smem_bytes_row_norm(&TILES_SM90[0]));
        let partials = plan(132, &TILES_SM90[1], &p);
        assert!(matches!(partials.norm, NormPath::Partials { .. }));
        assert_eq!(partials.smem_bytes, sm90::smem_bytes_staged(&TILES_SM90[1]));
    }

    #[test]
    fn one_round_of_row_norm_groups_is_modelled_faster_than_pingpong_partials_at_bert_large() {
        // Measured on the H200: 128×256 groups of 4 in one round (global exchange, the
        // epilogue through the ring) 30.0 and 64.9-65.4 µs, ping-pong tiles with partial
        // statistics 31.2-32.1 and 67.0-68.4 µs.
        for k in [1024, 4096] {
            let mut p = problem(4096, 1024, k);
            p.row_norm = true;
            // The bf16 residual.
            p.epilogue_read_bytes_per_output = 2.0;
            let groups = plan_fit(132, &TILES_SM90[0], &p, Some(33));
            assert_eq!(groups.norm, NormPath::Cluster { ctas: 4 });
            assert_eq!((groups.grid.0, groups.model.waves), (128, 1));
            let pingpong = plan(132, &TILES_SM90[1], &p);
            assert!(matches!(pingpong.norm, NormPath::Partials { .. }));
            assert!(
                groups.predicted_us < pingpong.predicted_us,
                "K = {k}: {} vs {}",
                pingpong.predicted_us,
                groups.predicted_us
            );
        }
    }

    #[test]
    fn a_row_norm_of_few_tiles_finishes_in_a_cluster_rather_than_through_partials() {
        // Measured on an H100 (bf16): the 128×128 cooperative cluster took 13.7 and 20.3 µs,
        // ping-pong tiles with partial statistics 18.4 and 25.8.
        for k in [384, 1536] {
            let mut p = problem(128, 384, k);
            p.row_norm = true;
            p.epilogue_read_bytes_per_output = 2.0;
            let (best, plan) = modelled_best(&p);
            assert_eq!(
                (best.bm, best.bn, is_pingpong(&best)),
                (128, 128, false),
                "K = {k}"
            );
            assert_eq!(plan.norm, NormPath::Cluster { ctas: 3 }, "K = {k}");
        }
    }

    #[test]
    fn row_norm_groups_without_tensor_maps_lose_the_ring_saving() {
        let mut p = problem(4096, 1024, 1024);
        p.row_norm = true;
        p.epilogue_read_bytes_per_output = 2.0;
        let with = plan_fit(132, &TILES_SM90[0], &p, Some(33));
        p.epilogue_tma = false;
        let without = plan_fit(132, &TILES_SM90[0], &p, Some(33));
        assert_eq!(without.norm, NormPath::Cluster { ctas: 4 });
        let lost = without.predicted_us - with.predicted_us;
        assert!((lost - 4.5).abs() < 1e-9, "{lost}");
        // Paths without groups do not use the ring.
        let pingpong = |tma| {
            let mut q = p;
            q.epilogue_tma = tma;
            plan(132, &TILES_SM90[1], &q).predicted_us
        };
        assert_eq!(pingpong(true), pingpong(false));
    }

    #[test]
    fn plans_are_persistent_and_never_split() {
        let t = TILES_SM90[0];
        let p = plan(132, &t, &problem(4096, 3072, 768));
        assert_eq!(p.grid, (132, 1, 1));
        assert_eq!((p.splits, p.block), (1, (384, 1, 1)));
        assert_eq!(p.k_per_split, 768);
        let small = plan(132, &t, &problem(1, 1, 1));
        assert_eq!(small.grid, (1, 1, 1), "one CTA per tile at most");
        assert_eq!(small.k_per_split, 64);
    }

    #[test]
    fn the_last_partial_round_of_pingpong_tiles_is_split_along_k() {
        let pp = *TILES_SM90.iter().find(|t| is_pingpong(t)).unwrap();
        let coop = *TILES_SM90
            .iter()
            .find(|t| !is_pingpong(t) && cluster_m(t) == 1)
            .unwrap();
        // 8192³: 4096 tiles, 31 whole rounds on 132 SMs, 4 tiles left. A 44 µs mainloop per
        // tile against 0.66 µs of fixup reads per piece: 8 pieces, 64 KiB of partials each.
        let big = problem(8192, 8192, 8192);
        assert_eq!(tail_splits(132, &pp, &big), 8);
        let p = plan(132, &pp, &big);
        assert_eq!((p.tail_splits, p.grid.0), (8, 132));
        assert_eq!(p.workspace_bytes, 4 * 8 * 128 * 128 * 4);
        assert_eq!(p.counter_bytes, 4 * 4);
        let whole = plan_with(132, &pp, &big, None, Some(1));
        assert_eq!((whole.tail_splits, whole.workspace_bytes), (1, 0));
        assert!(
            whole.predicted_us - p.predicted_us > 30.0,
            "{} vs {}",
            whole.predicted_us,
            p.predicted_us
        );
        // No split: cooperative tiles, no partial round (132 tiles), no whole round (64 tiles),
        // and a short mainloop (K = 64: one k-tile).
        assert_eq!(tail_splits(132, &coop, &big), 1);
        assert_eq!(tail_splits(132, &pp, &problem(128 * 12, 128 * 11, 8192)), 1);
        assert_eq!(tail_splits(132, &pp, &problem(1024, 1024, 8192)), 1);
        assert_eq!(tail_splits(132, &pp, &problem(8192, 8192, 64)), 1);
        // Pieces are capped by the k-tiles and by the SMs per tail tile; an override is too.
        let forced = |s: u32, p: &Problem| forced_tail_splits(132, &pp, p, s);
        assert_eq!(forced(64, &problem(8192, 8192, 128)), 2);
        assert_eq!(forced(64, &big), 33);
        assert_eq!(forced(0, &big), 1);
        // 136 tiles: 4 left, 33 SMs each.
        assert_eq!(forced(64, &problem(17 * 128, 8 * 128, 8192)), 33);
    }

    #[test]
    fn row_norms_use_clusters_on_cooperative_tiles_and_partials_elsewhere() {
        let mut p = problem(4096, 1024, 4096);
        p.row_norm = true;
        // 128×256 cooperative: four CTAs span a 1024-wide row; 32 row blocks, 32 clusters.
        let c = plan(132, &TILES_SM90[0], &p);
        assert_eq!(c.norm, NormPath::Cluster { ctas: 4 });
        assert_eq!(c.grid, (128, 1, 1));
        assert_eq!(c.smem_bytes, sm90::smem_bytes_row_norm(&TILES_SM90[0]));
        assert!(c.smem_bytes <= 227 * 1024);
        assert_eq!(
            plan(132, &TILES_SM90[2], &p).norm,
            NormPath::Cluster { ctas: 8 }
        );
        // Ping-pong tiles (BN = 128) write one partial per tile and row.
        match plan(132, &TILES_SM90[1], &p).norm {
            NormPath::Partials {
                tiles_n,
                stats_bytes,
            } => {
                assert_eq!(tiles_n, 8);
                assert_eq!(stats_bytes, 4096 * 8 * 16);
            }
            other => panic!("{other:?}"),
        }
        // Wider than eight tiles: partials; one column or one tile: a cluster of one.
        for (n, want) in [
            (2049, None),
            (2048, Some(8)),
            (1, Some(1)),
            (256, Some(1)),
            (257, Some(2)),
        ] {
            let mut q = problem(17, n, 64);
            q.row_norm = true;
            assert_eq!(norm_cluster(&TILES_SM90[0], &q), want, "N = {n}");
        }
        let mut narrow = problem(100, 64, 64);
        narrow.row_norm = true;
        assert_eq!(plan(132, &TILES_SM90[1], &narrow).norm, NormPath::InCta);
        assert_eq!(norm_cluster(&TILES_SM90[0], &problem(100, 64, 64)), None);
    }

    /// u32::MAX-scale dimensions: M·N·K (2⁹⁶) and the padded product overflowed u64.
    #[test]
    fn u32_max_scale_dimensions_give_finite_sane_models() {
        let big = [
            problem(65_535 * 64, u32::MAX, u32::MAX),
            problem(u32::MAX, u32::MAX, u32::MAX),
            problem(1, u32::MAX, u32::MAX),
            Problem {
                row_norm: true,
                ..problem(u32::MAX, 1024, u32::MAX)
            },
        ];
        for p in big {
            for t in TILES_SM90 {
                for fit in [None, Some(0), Some(30)] {
                    let (us, m) = predict_fit(132, t, &p, fit);
                    assert!(us.is_finite() && us > 0.0, "{p:?} {t:?}: {us}");
                    assert!(m.sm_us.is_finite() && m.dram_us.is_finite(), "{m:?}");
                    let e = m.tile_efficiency;
                    assert!(e > 0.0 && e <= 1.0, "{p:?} {t:?}: efficiency {e}");
                    let plan = plan_fit(132, t, &p, fit);
                    assert!(plan.k_per_split >= p.k.min(u32::MAX - sm90::BK));
                }
            }
        }
        // K = 0 on whole tiles pads nothing: efficiency 1, not 0/0.
        let t = &TILES_SM90[0];
        let (_, m) = predict(132, t, &problem(t.bm, t.bn, 0));
        assert_eq!(m.tile_efficiency, 1.0);
    }
}
