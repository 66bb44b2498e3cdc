//! Tile construction in the spirit of Roller (Zhu et al., "ROLLER: Fast and Efficient Tensor
//! Compilation for Deep Learning", OSDI'22): construct the configuration from hardware-aligned
//! candidates and a micro performance model instead of searching by timing.
//!
//! The candidates are the tile shapes `#[fused_gemm]` compiles by default
//! ([`DEFAULT_TILES_SM80`], plus [`ROW_TILES_SM80`] for kernels with a row-norm stage; see
//! [`Planner::with_tiles`] for others), each already aligned to the MMA shape (m16n8k16), the
//! 16-byte `cp.async` width and the shared-memory banks (16-byte row padding,
//! [`TileShape::check`]), times split-K factors 1..=16 where K is long enough (every split gets
//! at least [`MIN_K_TILES_PER_SPLIT`] k-tiles and none is empty). A candidate is dropped when it
//! cannot launch: shared memory over the per-block opt-in limit, registers over the SM, or
//! `gridDim.y` over its limit. [`model`] predicts each survivor's time from the device's
//! budgets ([`DeviceProps`]) and a [`Roofline`]; [`Planner::plan`] returns the fastest.
//! Roller grows tiles one dimension at a time; with a fixed instantiated set we evaluate all
//! of them, which takes microseconds ([`Planner::plan`]'s cost is measured in the tests and in
//! `plan_sweep`).
//!
//! Row norms: when some candidate's CTA spans the row (BN ≥ N), only such candidates are
//! considered and the norm finishes in the epilogue ([`NormPath::InCta`]); otherwise each CTA
//! writes per-row partial statistics and a finishing kernel completes the norm
//! ([`NormPath::Partials`], whose cost the model includes).

pub mod model;
pub mod sm90;

use std::collections::HashMap;

use fused_gemm_device::gemm::{DEFAULT_TILES_SM80, GemmArgs, ROW_TILES_SM80, TileShape};
use fused_gemm_device::types::DType;
use serde::{Deserialize, Serialize};

use crate::gpu::DeviceProps;
use crate::shape::LaunchShape;
use crate::validate::{BLayout, Checked, GemmCall, Operand};
use crate::{Error, Result};
pub use model::{Bound, ModelTerms, Roofline};

/// Largest split-K factor considered.
pub const MAX_SPLITS: u32 = 16;

/// Fewest k-tiles (of BK) each split must get.
pub const MIN_K_TILES_PER_SPLIT: u32 = 2;

/// Default cap on split-K workspace, bytes: larger partial buffers only arise for problems
/// with enough output tiles to fill the GPU without splitting.
pub const DEFAULT_MAX_WORKSPACE: u64 = 256 << 20;

/// Bytes of per-row partial statistics per (row, N-tile) on the partial-statistics norm path:
/// `(count, mean, M2, pad)` as f32.
pub const NORM_STATS_BYTES: u64 = 16;

/// A GEMM problem as the planner sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of the product (before a pair reduction).
    pub n: u32,
    /// Inner dimension.
    pub k: u32,
    /// dtype of A and B.
    pub in_dtype: DType,
    /// dtype of C.
    pub out_dtype: DType,
    /// How B is stored (changes the shared-memory layout of B tiles).
    pub b_layout: BLayout,
    /// A pair-reducing stage halves the output columns.
    pub pairs: bool,
    /// The epilogue has a row-norm stage.
    pub row_norm: bool,
    /// Bytes the epilogue reads per output element besides the accumulator (`residual`,
    /// `accumulate`: one output element each).
    pub epilogue_read_bytes_per_output: f64,
    /// Whether the 16-byte vector path is allowed ([`crate::validate::VectorPath::mainloop`]).
    pub vector: bool,
    /// Whether C, and the `residual` when the epilogue reads one, can be moved with TMA
    /// ([`crate::tensor_map::epilogue_tma`]): sm_90's row-norm groups then take each CTA's last tile
    /// through the ring instead of per-thread loads and stores. Only the sm_90 model reads it.
    pub epilogue_tma: bool,
}

impl Problem {
    /// A plain GEMM: `dtype` in and out, B stored N×K, no epilogue operands, vector path.
    pub fn gemm(m: u32, n: u32, k: u32, dtype: DType) -> Self {
        Problem {
            m,
            n,
            k,
            in_dtype: dtype,
            out_dtype: dtype,
            b_layout: BLayout::NxK,
            pairs: false,
            row_norm: false,
            epilogue_read_bytes_per_output: 0.0,
            vector: true,
            epilogue_tma: true,
        }
    }

    /// The problem of a validated call: dimensions and vector path from `checked`, dtypes and
    /// layout from `call`, pair and row-norm stages, the epilogue's matrix reads (one output
    /// element per `residual`, and one when `accumulate` reads C), and whether C and the
    /// residual take tensor maps.
    pub fn from_call(call: &GemmCall<'_>, checked: &Checked, accumulate: bool) -> Self {
        let out = call.out_dtype.size() as f64;
        let residuals = call
            .epilogue
            .iter()
            .filter(|e| matches!(e.operand, Operand::Residual(_) | Operand::NormedResidual(_)))
            .count() as f64;
        Problem {
            m: checked.m,
            n: checked.n,
            k: checked.k,
            in_dtype: call.in_dtype,
            out_dtype: call.out_dtype,
            b_layout: call.b_layout,
            pairs: call.pair_stage.is_some(),
            row_norm: call.row_norm_stage.is_some(),
            epilogue_read_bytes_per_output: out * (residuals + accumulate as u8 as f64),
            vector: checked.vector.mainloop(),
            epilogue_tma: crate::tensor_map::epilogue_tma(call, checked),
        }
    }

    /// Columns of C.
    pub fn n_out(&self) -> u32 {
        if self.pairs { self.n / 2 } else { self.n }
    }

    /// 2·M·N·K.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// How a row-norm stage completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NormPath {
    /// No row-norm stage.
    None,
    /// The CTA spans the row (BN ≥ N): the norm finishes in the epilogue.
    InCta,
    /// Each CTA writes per-row partial statistics (`M × tiles_n` entries of
    /// [`NORM_STATS_BYTES`]); a finishing kernel completes the norm and the later stages.
    Partials {
        /// N-tiles per row: statistics entries per row.
        tiles_n: u32,
        /// Bytes of the statistics workspace.
        stats_bytes: u64,
    },
    /// Hopper cooperative tiles: clusters of `ctas` CTAs along N span each row
    /// (`ctas·BN ≥ N`), swap row statistics through distributed shared memory and finish the
    /// norm in the epilogue (`fused_gemm_device::gemm::sm90::Sm90Args::norm_cluster`).
    Cluster {
        /// CTAs per cluster, 1 to `sm90::MAX_NORM_CLUSTER`.
        ctas: u32,
    },
    /// Hopper cooperative tiles as [`NormPath::Cluster`], but the `ctas` CTAs of a row block
    /// are consecutive CTAs of a cooperative launch without clusters (every CTA resident at
    /// once), and swap row statistics through global memory
    /// (`fused_gemm_device::gemm::sm90::Sm90Args::norm_exchange`): `⌈M/128⌉·ctas·128` slots
    /// of [`NORM_STATS_BYTES`] and `⌈M/128⌉` zeroed `u32` counters. Chosen where more such
    /// groups than clusters fit at once (clusters must sit in one GPC).
    GlobalExchange {
        /// CTAs per row block, 1 to `sm90::MAX_NORM_CLUSTER`.
        ctas: u32,
    },
}

/// A launch configuration for one GEMM.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    /// The CTA tile.
    pub tile: TileShape,
    /// K splits (`gridDim.z`), 1 for none.
    pub splits: u32,
    /// K per split, a multiple of BK (0 when K = 0); `splits · k_per_split ≥ K` and every split
    /// gets at least one element of K. One split of K > 2³² − BK saturates it at `u32::MAX`
    /// (still ≥ K; the kernel reads it only with split-K).
    pub k_per_split: u32,
    /// `(⌈N/BN⌉, ⌈M/BM⌉, splits)`: x walks the N-tiles, so consecutive CTAs share A's row panel.
    pub grid: (u32, u32, u32),
    /// `(threads, 1, 1)`.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per CTA, bytes.
    pub smem_bytes: u32,
    /// Split-K partial tiles (f32): `tiles · splits · BM · BN · 4` bytes, 0 when `splits == 1`.
    pub workspace_bytes: u64,
    /// Split-K arrival counters: one zeroed `u32` per output tile, 0 when `splits == 1`.
    pub counter_bytes: u64,
    /// Hopper mainloop only: K pieces per tile of the last, partial round
    /// (`fused_gemm_device::gemm::sm90::Sm90Args::tail_splits`), 1 for none. With more,
    /// [`Plan::workspace_bytes`] and [`Plan::counter_bytes`] size the pieces' partial tiles and
    /// the tail tiles' counters.
    pub tail_splits: u32,
    /// How a row norm completes.
    pub norm: NormPath,
    /// The model's prediction, µs.
    pub predicted_us: f64,
    /// The model's terms.
    pub model: ModelTerms,
}

impl Plan {
    /// The launch shape (grid, block, dynamic shared memory).
    pub fn launch_shape(&self) -> LaunchShape {
        LaunchShape {
            grid: self.grid,
            block: self.block,
            smem_bytes: self.smem_bytes,
        }
    }

    /// The kernel's [`GemmArgs`] for this plan. `workspace` and `counters` are device buffers of
    /// at least [`Plan::workspace_bytes`] and [`Plan::counter_bytes`] (counters zeroed), or 0
    /// when `splits == 1`.
    pub fn gemm_args(
        &self,
        checked: &Checked,
        call: &GemmCall<'_>,
        workspace: u64,
        counters: u64,
    ) -> GemmArgs {
        GemmArgs {
            a: call.a.ptr,
            b: call.b.ptr,
            c: call.c.ptr,
            workspace,
            counters,
            m: checked.m,
            n: checked.n,
            k: checked.k,
            lda: call.a.ld as u32,
            ldb: call.b.ld as u32,
            ldc: call.c.ld as u32,
            splits: self.splits,
            k_per_split: self.k_per_split,
        }
    }

    /// Total CTAs.
    pub fn ctas(&self) -> u64 {
        self.grid.0 as u64 * self.grid.1 as u64 * self.grid.2 as u64
    }
}

/// Constructs [`Plan`]s for one device. Cheap to build; [`Planner::plan`] takes microseconds.
#[derive(Clone, Debug)]
pub struct Planner {
    props: DeviceProps,
    /// The model's constants.
    pub roofline: Roofline,
    tiles: Vec<TileShape>,
    row_tiles: Vec<TileShape>,
    max_splits: u32,
    max_workspace: u64,
    registers: HashMap<TileShape, u32>,
}

impl Planner {
    /// A planner over the sm_80 tiles `#[fused_gemm]` compiles by default with the default
    /// [`Roofline`].
    pub fn new(props: DeviceProps) -> Self {
        Planner {
            props,
            roofline: Roofline::default(),
            tiles: DEFAULT_TILES_SM80.to_vec(),
            row_tiles: ROW_TILES_SM80.to_vec(),
            max_splits: MAX_SPLITS,
            max_workspace: DEFAULT_MAX_WORKSPACE,
            registers: HashMap::new(),
        }
    }

    /// Restricts or replaces the candidate tiles (e.g. the single tile a `#[fused_gemm(tile =
    /// ...)]` option names). Shapes failing [`TileShape::check`] are dropped.
    pub fn with_tiles(mut self, tiles: &[TileShape], row_tiles: &[TileShape]) -> Self {
        self.tiles = tiles
            .iter()
            .copied()
            .filter(|t| t.check().is_none())
            .collect();
        self.row_tiles = row_tiles
            .iter()
            .copied()
            .filter(|t| t.check().is_none())
            .collect();
        self
    }

    /// Replaces the model's constants.
    pub fn with_roofline(mut self, roofline: Roofline) -> Self {
        self.roofline = roofline;
        self
    }

    /// Caps the split-K factor (1 disables split-K).
    pub fn with_max_splits(mut self, max_splits: u32) -> Self {
        self.max_splits = max_splits.clamp(1, MAX_SPLITS);
        self
    }

    /// Caps the split-K workspace ([`Plan::workspace_bytes`]); candidates needing more are
    /// dropped. Default [`DEFAULT_MAX_WORKSPACE`].
    pub fn with_max_workspace(mut self, bytes: u64) -> Self {
        self.max_workspace = bytes;
        self
    }

    /// Uses a measured register count (from `ptxas -v` or `CU_FUNC_ATTRIBUTE_NUM_REGS`) for
    /// `tile` instead of the estimate.
    pub fn with_registers(mut self, tile: TileShape, regs_per_thread: u32) -> Self {
        self.registers.insert(tile, regs_per_thread);
        self
    }

    /// The device limits planned against.
    pub fn props(&self) -> &DeviceProps {
        &self.props
    }

    fn regs(&self, tile: &TileShape) -> u32 {
        self.registers
            .get(tile)
            .copied()
            .unwrap_or_else(|| model::estimate_registers(tile))
    }

    /// The model for `tile` with `splits`, or `None` when that candidate cannot launch for `p`
    /// (shared memory, registers, grid limits, a split that would be empty or shorter than
    /// [`MIN_K_TILES_PER_SPLIT`] k-tiles, or split-K workspace over the cap).
    pub fn evaluate(&self, p: &Problem, tile: &TileShape, splits: u32) -> Option<Plan> {
        if p.m == 0 || p.n == 0 || splits == 0 || tile.check().is_some() {
            return None;
        }
        let b_col = p.b_layout == BLayout::NxK;
        // TileShape sizes shared memory for 16-bit elements.
        let smem = u64::from(tile.smem_bytes(b_col)) * p.in_dtype.size() as u64 / 2;
        let smem = u32::try_from(smem).ok()?;
        let regs = self.regs(tile);
        let per_sm = model::ctas_per_sm(&self.props, tile, smem, regs);
        if per_sm == 0 {
            return None;
        }
        let k_tiles = p.k.div_ceil(tile.bk);
        let (splits, k_tiles_per_split) = if k_tiles == 0 {
            if splits != 1 {
                return None;
            }
            (1, 0)
        } else {
            let per = k_tiles.div_ceil(splits);
            // Every split non-empty, and long enough to be worth its partial tile.
            if k_tiles.div_ceil(per) != splits || (splits > 1 && per < MIN_K_TILES_PER_SPLIT) {
                return None;
            }
            (splits, per)
        };
        let tiles_m = p.m.div_ceil(tile.bm);
        let tiles_n = p.n.div_ceil(tile.bn);
        if tiles_m > self.props.max_grid_y || splits > self.props.max_grid_y {
            return None;
        }
        let spans = tile.bn >= p.n;
        let norm = match (p.row_norm, spans) {
            (false, _) => NormPath::None,
            (true, true) => NormPath::InCta,
            (true, false) => NormPath::Partials {
                tiles_n,
                // Saturating: u32::MAX-scale M and N exceed 64 bits (and any device).
                stats_bytes: (p.m as u64 * tiles_n as u64).saturating_mul(NORM_STATS_BYTES),
            },
        };
        let inputs = model::Inputs {
            m: p.m as u64,
            n: p.n as u64,
            k: p.k as u64,
            n_out: p.n_out() as u64,
            in_size: p.in_dtype.size() as f64,
            out_size: p.out_dtype.size() as f64,
            f32_inputs: p.in_dtype == DType::F32,
            epilogue_read_bytes_per_output: p.epilogue_read_bytes_per_output,
            vector: p.vector,
            tile: *tile,
            splits: splits as u64,
            k_tiles_per_split: k_tiles_per_split as u64,
            regs,
            ctas_per_sm: per_sm,
            norm_finish: matches!(norm, NormPath::Partials { .. }),
        };
        let terms = model::evaluate(&self.props, &self.roofline, &inputs);
        let tiles = tiles_m as u64 * tiles_n as u64;
        let (workspace_bytes, counter_bytes) = if splits > 1 {
            // Saturating: a saturated size is over any workspace cap, so the candidate drops.
            (
                [splits as u64, tile.bm as u64, tile.bn as u64, 4]
                    .into_iter()
                    .fold(tiles, u64::saturating_mul),
                tiles.saturating_mul(4),
            )
        } else {
            (0, 0)
        };
        if workspace_bytes > self.max_workspace {
            return None;
        }
        Some(Plan {
            tile: *tile,
            splits,
            k_per_split: k_tiles_per_split.saturating_mul(tile.bk),
            grid: (tiles_n, tiles_m, splits),
            block: (tile.threads(), 1, 1),
            smem_bytes: smem,
            workspace_bytes,
            counter_bytes,
            tail_splits: 1,
            norm,
            predicted_us: terms.total_us(),
            model: terms,
        })
    }

    /// Every launchable candidate for `p`, fastest predicted first (ties: fewer splits, then
    /// larger tiles, so the order is deterministic).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for M = 0 or N = 0 (nothing to launch: see
    /// [`crate::validate::Work::Empty`]); [`Error::LaunchLimit`] when no candidate can launch
    /// (M beyond `65535 · BM` for every tile, or no tile fits the device).
    pub fn candidates(&self, p: &Problem) -> Result<Vec<Plan>> {
        if p.m == 0 || p.n == 0 {
            let arg = if p.m == 0 { "m" } else { "n" };
            return Err(Error::invalid(
                arg,
                "> 0 (an empty GEMM is not launched)",
                0,
            ));
        }
        let eval_all = |tiles: &[TileShape]| -> Vec<Plan> {
            let mut out = Vec::with_capacity(tiles.len() * self.max_splits as usize);
            for t in tiles {
                for s in 1..=self.max_splits {
                    if let Some(plan) = self.evaluate(p, t, s) {
                        out.push(plan);
                    }
                }
            }
            out
        };
        let mut plans = if p.row_norm {
            let all: Vec<TileShape> = self.tiles.iter().chain(&self.row_tiles).copied().collect();
            let spanning: Vec<TileShape> = all.iter().copied().filter(|t| t.bn >= p.n).collect();
            let spanning_plans = eval_all(&spanning);
            if spanning_plans.is_empty() {
                eval_all(&self.tiles)
            } else {
                spanning_plans
            }
        } else {
            eval_all(&self.tiles)
        };
        if plans.is_empty() {
            let largest_bm = self.tiles.iter().map(|t| t.bm).max().unwrap_or(0);
            return Err(Error::LaunchLimit(format!(
                "no tile can launch {}×{}×{} on this device (M needs ⌈M/BM⌉ ≤ gridDim.y limit {} \
                 with BM ≤ {largest_bm}; tiles {:?})",
                p.m,
                p.n,
                p.k,
                self.props.max_grid_y,
                self.tiles
                    .iter()
                    .map(|t| (t.bm, t.bn, t.bk))
                    .collect::<Vec<_>>()
            )));
        }
        plans.sort_by(|x, y| {
            x.predicted_us
                .total_cmp(&y.predicted_us)
                .then(x.splits.cmp(&y.splits))
                .then((y.tile.bm * y.tile.bn).cmp(&(x.tile.bm * x.tile.bn)))
                .then(y.tile.bk.cmp(&x.tile.bk))
        });
        Ok(plans)
    }

    /// The fastest predicted launchable configuration for `p`.
    ///
    /// # Errors
    /// As [`Planner::candidates`].
    pub fn plan(&self, p: &Problem) -> Result<Plan> {
        Ok(self.candidates(p)?.swap_remove(0))
    }

    /// Validates `call` ([`crate::validate::check_gemm`]) and plans it: `Ok(None)` when there is
    /// nothing to launch (M or N = 0), else the checked dimensions and the plan. `accumulate`
    /// says whether the epilogue reads C (`accumulate` stage).
    ///
    /// # Errors
    /// Validation errors, then as [`Planner::candidates`].
    pub fn plan_call(
        &self,
        call: &GemmCall<'_>,
        accumulate: bool,
    ) -> Result<Option<(Checked, Plan)>> {
        let checked = crate::validate::check_gemm(call)?;
        if checked.work == crate::validate::Work::Empty {
            return Ok(None);
        }
        let plan = self.plan(&Problem::from_call(call, &checked, accumulate))?;
        Ok(Some((checked, plan)))
    }

    /// The `k` fastest predicted candidates (for autotuning).
    ///
    /// # Errors
    /// As [`Planner::candidates`].
    pub fn top_k(&self, p: &Problem, k: usize) -> Result<Vec<Plan>> {
        let mut c = self.candidates(p)?;
        c.truncate(k.max(1));
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_gemm_device::gemm::TILES_SM80;

    fn planner() -> Planner {
        Planner::new(DeviceProps::h200())
    }

    #[test]
    fn large_square_gemm_uses_the_big_tile_without_split() {
        let p = planner()
            .plan(&Problem::gemm(8192, 8192, 8192, DType::Bf16))
            .unwrap();
        assert_eq!((p.tile.bm, p.tile.bn), (128, 128), "{p:?}");
        assert_eq!(p.splits, 1);
        assert_eq!(p.grid, (64, 64, 1));
        assert_eq!(p.model.bound, Bound::Sm);
        // 2·8192³ FLOP at ≤ 450 TFLOP/s is at least 2443 µs.
        assert!(p.predicted_us > 2443.0, "{}", p.predicted_us);
    }

    #[test]
    fn skinny_problems_split_k() {
        // M = 16, N = 1024: 8 or fewer output tiles on 132 SMs; K = 8192 is long.
        let p = planner()
            .plan(&Problem::gemm(16, 1024, 8192, DType::Bf16))
            .unwrap();
        assert!(p.splits > 1, "{p:?}");
        assert!(p.workspace_bytes > 0 && p.counter_bytes > 0);
        assert!(p.k_per_split as u64 * p.splits as u64 >= 8192);
        assert!((p.k_per_split as u64) * (p.splits as u64 - 1) < 8192);
    }

    #[test]
    fn k_zero_plans_one_split_with_no_k() {
        let p = planner()
            .plan(&Problem::gemm(100, 100, 0, DType::F16))
            .unwrap();
        assert_eq!((p.splits, p.k_per_split), (1, 0));
        assert!(p.ctas() >= 1);
    }

    #[test]
    fn empty_problems_are_not_planned() {
        let e = planner()
            .plan(&Problem::gemm(0, 5, 5, DType::F16))
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { arg: "m", .. }), "{e}");
    }

    #[test]
    fn row_norm_prefers_a_row_spanning_tile() {
        for n in [384u32, 768, 1024] {
            let mut prob = Problem::gemm(4096, n, 768, DType::Bf16);
            prob.row_norm = true;
            let p = planner().plan(&prob).unwrap();
            assert!(p.tile.bn >= n, "N = {n}: {p:?}");
            assert_eq!(p.norm, NormPath::InCta);
        }
        let mut prob = Problem::gemm(4096, 4096, 768, DType::Bf16);
        prob.row_norm = true;
        let p = planner().plan(&prob).unwrap();
        match p.norm {
            NormPath::Partials {
                tiles_n,
                stats_bytes,
            } => {
                assert_eq!(tiles_n, 4096u32.div_ceil(p.tile.bn));
                assert_eq!(stats_bytes, 4096 * tiles_n as u64 * 16);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rows_beyond_the_grid_limit_are_a_launch_limit() {
        let e = planner()
            .plan(&Problem::gemm(u32::MAX, 64, 64, DType::Bf16))
            .unwrap_err();
        assert!(
            matches!(e, Error::LaunchLimit(ref m) if m.contains("65535")),
            "{e}"
        );
        // The largest M one tile still covers: 65535 · 128.
        let p = planner()
            .plan(&Problem::gemm(65_535 * 128, 64, 64, DType::Bf16))
            .unwrap();
        assert!(p.grid.1 <= 65_535);
    }

    #[test]
    fn measured_registers_change_occupancy() {
        let t = TILES_SM80[0];
        let prob = Problem::gemm(8192, 8192, 4096, DType::Bf16);
        let est = planner().evaluate(&prob, &t, 1).unwrap();
        let meas = planner()
            .with_registers(t, 128)
            .evaluate(&prob, &t, 1)
            .unwrap();
        assert_eq!(est.model.ctas_per_sm, 1);
        assert_eq!(meas.model.ctas_per_sm, 2);
        assert!(
            planner()
                .with_registers(t, 256)
                .evaluate(&prob, &t, 1)
                .is_none()
        );
    }

    #[test]
    fn single_tile_option_and_no_split_option() {
        let only = [TILES_SM80[2]];
        let pl = planner().with_tiles(&only, &[]).with_max_splits(1);
        let p = pl
            .plan(&Problem::gemm(16, 1024, 8192, DType::Bf16))
            .unwrap();
        assert_eq!((p.tile, p.splits), (only[0], 1));
    }
}
