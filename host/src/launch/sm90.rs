//! The Hopper launch path: GEMMs whose operands TMA can read, of kernels with TMA + `wgmma`
//! variants on a device that loads their sm_90a module, go to the warp-specialized mainloop
//! ([`fused_gemm_device::gemm::sm90`]); everything else to the sm_80 path
//! ([`super::dispatch`]).
//!
//! # When the Hopper path runs
//!
//! All of: the spec has [`Mainloop::Sm90Tma`] variants; the device loads the spec's `sm_90a`
//! module; A and B are 16-bit, B stored N×K; K ≥ 1; A and B allow the 16-byte path (16-byte
//! aligned addresses and row strides, which is what TMA needs; otherwise
//! [`crate::validate::VectorPath`] sends the call to the bounds-checked sm_80 path); M, N, K
//! below 2³¹; no option asks for an sm_80 tile or for split-K; and the plan model
//! ([`crate::plan::sm90`]) does not predict the sm_80 path faster.
//!
//! With an autotuner on the [`Gpu`] ([`Gpu::set_autotuner`]), the Hopper tile is measured
//! instead: [`choose`] lists the candidates in the model's order and [`super::tune`] times the
//! first few once per kernel and shape class. Whether the Hopper path runs at all stays the
//! model's decision.

use fused_gemm_device::gemm::sm90::{self, Sm90Args, cluster_m, cta_rows, is_sm90_tile};
use fused_gemm_device::params::KernelParam;
use fused_gemm_device::target::Mainloop;
use fused_gemm_device::types::DType;

use super::entry::{Kernel, LaunchMode, Sm90Params};
use super::norm_finish::{launch_norm_finish, norm_finish_grid};
use super::report::LaunchReport;
use super::workspace::{grow, row_stats};
use crate::kernel::{GemmKernelSpec, KernelVariant};
use crate::options::NormExchange;
use crate::plan::sm90::{GROUP_M, always_stages_c, norm_cluster, plan_with};
use crate::plan::{NORM_STATS_BYTES, NormPath, Plan, Problem};
use crate::tensor_map::{MapKey, output_map_key, residual_map_key};
use crate::validate::{BLayout, Checked, GemmCall, Work};
use crate::{Error, Gpu, Result};

/// Why the Hopper path cannot run `call`, or `None` when it can (see the [module
/// docs](self)).
pub fn ineligible(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    call: &GemmCall<'_>,
    checked: &Checked,
) -> Result<Option<&'static str>> {
    let reason = if !spec.variants.iter().any(|v| v.mainloop.is_sm90()) {
        Some(
            "the kernel has no TMA variants (16-bit inputs, B stored N×K, no `tile` and no `arch = sm_80`)",
        )
    } else if !gpu
        .module_arch(spec.ptx)?
        .has(Mainloop::Sm90Tma { cluster_m: 1 })
    {
        Some("the device does not run the kernel crate's sm_90a module")
    } else if !spec.b_col || call.b_layout != BLayout::NxK {
        Some("B must be stored N×K (K-major) for the TMA mainloop")
    } else if !matches!(spec.input, DType::Bf16 | DType::F16) {
        Some("the TMA mainloop takes bf16 or f16 inputs")
    } else if checked.work != Work::Gemm {
        Some("K = 0 (nothing for the mainloop to load)")
    } else if !checked.vector.mainloop() {
        Some("A or B is not 16-byte aligned (address, row stride or row length)")
    } else if checked.m >= 1 << 31 || checked.n >= 1 << 31 || checked.k >= 1 << 31 {
        Some("M, N and K must be below 2^31 (TMA coordinates are 32-bit signed)")
    } else {
        None
    };
    Ok(reason)
}

/// Which mainloop a launch takes ([`choose`]).
#[derive(Debug)]
pub enum Choice {
    /// The Hopper path: its variants and plans, the model's fastest first (never empty), and
    /// why.
    Sm90(Vec<(&'static KernelVariant, Plan)>, String),
    /// The sm_80 path, and why not the Hopper one.
    Sm80(String),
}

/// How much longer an sm_80 row tile that finishes a row norm in the CTA takes than the sm_80
/// model predicts, applied when it competes with the TMA tiles: measured 20.5, 26.7 and 26.4 µs
/// against 8.9, 13.1 and 13.7 predicted at MiniLM's LayerNorm GEMMs (128×384×{384, 1536},
/// 4096×384×384, bf16, H100), and 39 against 14.4 at 128×768×768 (H200). The model's
/// tensor-core rate does not hold for these few, latency-bound CTAs.
pub const ROW_TILE_UNDERESTIMATE: f64 = 2.0;

/// The variants and plans the Hopper path could launch for `call`, or why the sm_80 path runs
/// it. Honours `gpu`'s [`LaunchOptions`](crate::launch::LaunchOptions): a Hopper tile forces
/// this path with that tile alone (an error when it cannot run), an sm_80 tile or split-K > 1
/// rules it out. The launcher takes the first, or with an autotuner the fastest measured
/// ([`crate::autotune`]).
///
/// # Errors
/// [`Error::LaunchLimit`] when an override names an sm_90 tile the call cannot use; driver
/// errors from selecting the module.
pub fn choose(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    call: &GemmCall<'_>,
    checked: &Checked,
) -> Result<Choice> {
    let o = *gpu.options();
    let forced = o.tile.filter(is_sm90_tile);
    if o.tile.is_some() && forced.is_none() {
        return Ok(Choice::Sm80("the options force an sm_80 tile".into()));
    }
    if o.splits.is_some_and(|s| s > 1) {
        return Ok(Choice::Sm80("the options force split-K".into()));
    }
    if let Some(why) = ineligible(gpu, spec, call, checked)? {
        return match forced {
            Some(t) => Err(Error::LaunchLimit(format!(
                "`{}`: the sm_90 tile {}x{}x{} was requested but {why}",
                spec.name, t.bm, t.bn, t.bk
            ))),
            None => Ok(Choice::Sm80(why.into())),
        };
    }
    let problem = Problem::from_call(call, checked, spec.accumulate);
    let sms = gpu.props().sm_count;
    let mut candidates: Vec<(&'static KernelVariant, Plan)> = Vec::new();
    for v in spec
        .variants
        .iter()
        .filter(|v| v.mainloop.is_sm90() && v.vec)
    {
        if forced.is_some_and(|t| t != v.tile) || sm90::check(&v.tile).is_some() {
            continue;
        }
        if sm90::smem_bytes(&v.tile) > gpu.props().smem_per_block_optin {
            continue;
        }
        let row_smem = sm90::smem_bytes_row_norm(&v.tile);
        let (fit, global) = match norm_cluster(&v.tile, &problem) {
            // The exchange does not fit next to this tile's ring: partial statistics instead.
            Some(_) if row_smem > gpu.props().smem_per_block_optin => (Some(0), false),
            Some(ctas) => norm_fit(gpu, spec, v, row_smem, ctas, o.norm_exchange),
            None => (None, false),
        };
        let mut p = plan_with(sms, &v.tile, &problem, fit, o.tail_splits);
        if let (NormPath::Cluster { ctas }, true) = (p.norm, global) {
            p.norm = NormPath::GlobalExchange { ctas };
        }
        let optin = gpu.props().smem_per_block_optin;
        if p.smem_bytes == sm90::smem_bytes_staged(&v.tile) && p.smem_bytes > optin {
            if always_stages_c(&problem) {
                // The kernel has no other way to store C.
                continue;
            }
            // No room to stage C: threads store it directly.
            p.smem_bytes = sm90::smem_bytes(&v.tile);
        }
        if p.smem_bytes > gpu.props().smem_per_block_optin {
            continue;
        }
        candidates.push((v, p));
    }
    // Stable: equal predictions keep the variants' order.
    candidates.sort_by(|(_, a), (_, b)| a.predicted_us.total_cmp(&b.predicted_us));
    let Some(best) = candidates.first() else {
        return match forced {
            Some(t) => Err(Error::LaunchLimit(format!(
                "`{}` has no compiled sm_90 variant for tile {t:?}",
                spec.name
            ))),
            None => Ok(Choice::Sm80(
                "no TMA variant fits the device's shared memory".into(),
            )),
        };
    };
    if forced.is_none() {
        // The sm_80 path with split-K can win on skinny problems; and where its row tile
        // finishes a row norm in the CTA while this path, with fewer tiles than SMs, would write
        // partial statistics and launch the finishing kernel, the extra pass over C costs more
        // than the mainloop gains. Measured on the H200: LayerNorm at 128×768×768 0.084 ms
        // here vs 0.039 there; at 4096×1024×4096 (256 tiles) 0.144 here vs 0.544 there.
        let planner = spec.planner(gpu, true);
        if let Ok(p80) = planner.plan(&problem) {
            let in_cta = |p: &Plan| {
                matches!(
                    p.norm,
                    NormPath::InCta | NormPath::Cluster { .. } | NormPath::GlobalExchange { .. }
                )
            };
            let tiles = problem.m.div_ceil(best.0.tile.bm) * problem.n.div_ceil(best.0.tile.bn);
            let underfilled = tiles < sms;
            let p80_us = if p80.norm == NormPath::InCta {
                p80.predicted_us * ROW_TILE_UNDERESTIMATE
            } else {
                p80.predicted_us
            };
            if p80_us < best.1.predicted_us {
                return Ok(Choice::Sm80(format!(
                    "the model predicts {:.1} µs for sm_80 tile {}x{}x{} with {} K splits, {:.1} µs for the best TMA tile",
                    p80_us, p80.tile.bm, p80.tile.bn, p80.tile.bk, p80.splits, best.1.predicted_us
                )));
            }
            if underfilled && in_cta(&p80) && !in_cta(&best.1) {
                return Ok(Choice::Sm80(
                    "fewer tiles than SMs: the sm_80 row tile finishes the norm in the CTA".into(),
                ));
            }
        }
    }
    let why = match forced {
        Some(_) => "the options force this TMA tile".to_string(),
        None => format!(
            "sm_90a module; the model predicts {:.1} µs for TMA tile {}x{}x{}",
            best.1.predicted_us, best.0.tile.bm, best.0.tile.bn, best.0.tile.bk
        ),
    };
    Ok(Choice::Sm90(candidates, why))
}

/// How many row blocks a row norm over `ctas` tiles of `variant` (with `smem_bytes` of shared
/// memory per CTA) runs at once, and whether its CTAs swap statistics through global memory
/// ([`NormPath::GlobalExchange`]) rather than in a cluster: the way `exchange` asks for, or
/// ([`NormExchange::Auto`]) whichever runs more at once, a cluster on a tie and for one CTA.
/// `Some(0)` when the asked-for way cannot run (a driver that cannot place or answer for such
/// a cluster, or a grid that could not be co-resident): partial statistics then.
fn norm_fit(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    variant: &'static KernelVariant,
    smem_bytes: u32,
    ctas: u32,
    exchange: NormExchange,
) -> (Option<u32>, bool) {
    let fit = |global| group_fit(gpu, spec, variant, smem_bytes, ctas, global).unwrap_or(0);
    match exchange {
        NormExchange::Cluster => (Some(fit(false)), false),
        NormExchange::Global => (Some(fit(true)), true),
        NormExchange::Auto if ctas == 1 => (None, false),
        NormExchange::Auto => {
            let (c, g) = (fit(false), fit(true));
            if g > c {
                (Some(g), true)
            } else {
                (Some(c), false)
            }
        }
    }
}

/// How many groups of `ctas` CTAs of `variant`, with `smem_bytes` of shared memory each, the
/// device runs at once: as clusters (`cuOccupancyMaxActiveClusters`), or with `global` as
/// consecutive CTAs of a cooperative grid (`cuOccupancyMaxActiveBlocksPerMultiprocessor` ×
/// SMs ÷ `ctas`, the most a cooperative launch accepts). Cached per (entry point, bytes, CTAs,
/// `global`).
///
/// # Errors
/// Driver errors from loading the function or the query.
fn group_fit(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    variant: &'static KernelVariant,
    smem_bytes: u32,
    ctas: u32,
    global: bool,
) -> Result<u32> {
    let key = (variant.entry, smem_bytes, ctas, global);
    // Before the lock: a first use loads code (see `GemmKernelSpec::resolve`).
    let func = gpu.function(spec.ptx, variant.entry)?;
    let cell = gpu.workspace();
    let mut ws = cell
        .lock()
        .map_err(|_| Error::LaunchLimit("GEMM workspace lock poisoned".into()))?;
    if let Some(&fit) = ws.cluster_fit.get(&key) {
        return Ok(fit);
    }
    let block = (sm90::THREADS, 1, 1);
    let shape = crate::shape::LaunchShape {
        grid: (ctas, 1, 1),
        block,
        smem_bytes,
    };
    // Sets the function's dynamic shared-memory limit, which the query takes into account.
    shape.prepare(&func, gpu.props())?;
    let fit = if global {
        let per_sm = func.occupancy_max_active_blocks_per_multiprocessor(
            sm90::THREADS,
            smem_bytes as usize,
            None,
        )?;
        per_sm * gpu.props().sm_count / ctas
    } else {
        // SAFETY: the function is loaded and allows `smem_bytes` of dynamic shared memory.
        unsafe {
            crate::driver_ext::launch::max_active_clusters(
                func.cu_function(),
                block,
                smem_bytes,
                (ctas, 1, 1),
            )?
        }
    };
    ws.cluster_fit.insert(key, fit);
    Ok(fit)
}

/// Launches `variant` with `plan` (from [`choose`]): tensor maps, row statistics, the GEMM,
/// and the norm finishing kernel when the plan defers the norm.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch<P, N, Q>(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    call: &GemmCall<'_>,
    checked: &Checked,
    variant: &'static KernelVariant,
    plan: Plan,
    build: impl FnOnce(u64) -> (P, Option<(N, Q)>),
    why: String,
) -> Result<LaunchReport>
where
    P: KernelParam,
    N: KernelParam,
    Q: KernelParam,
{
    let t = plan.tile;
    let function = spec.resolve(gpu, variant, &plan.norm)?;
    // The GEMM and its finishing kernel are queued as one: see `Gpu::queue_lock`.
    let _queued = gpu.queue_lock();
    let cell = gpu.workspace();
    let mut ws = cell
        .lock()
        .map_err(|_| Error::LaunchLimit("GEMM workspace lock poisoned".into()))?;
    let dtype = call.in_dtype;
    let (k, m, n) = (checked.k as u64, checked.m as u64, checked.n as u64);
    let cluster = cluster_m(&t);
    let tmap_a = ws.tensor_maps.get(
        gpu,
        MapKey::new(call.a.ptr, dtype, k, m, call.a.ld as u64, cta_rows(&t)),
    )?;
    // With a cluster each CTA loads (and multicasts) half of the B block.
    let tmap_b = ws.tensor_maps.get(
        gpu,
        MapKey::new(call.b.ptr, dtype, k, n, call.b.ld as u64, t.bn / cluster),
    )?;
    let overrides = *gpu.options();
    let tmap_c = match c_map_key(call, checked, &plan).filter(|_| !overrides.direct_store) {
        Some(key) => ws.tensor_maps.get(gpu, key)?,
        None => 0,
    };
    let residual = residual_map_key(call, checked).filter(|_| !overrides.global_residual);
    // With staged C, or in a row-norm group (which copies its last tile's residual into the
    // ring, `sm90::ring_epilogue_offset`).
    let tmap_r = match residual.filter(|_| tmap_c != 0 || row_norm_group(&plan)) {
        Some(key) => ws.tensor_maps.get(gpu, key)?,
        None => 0,
    };
    let (stats, tiles_n) = row_stats(gpu, &mut ws, &plan.norm)?;
    // A split tail's partial tiles and counters (self-resetting, as split-K's: shared with it);
    // or a global row-statistics exchange's slots and counters (self-resetting too).
    let (workspace, counters) = if plan.tail_splits > 1 {
        let w = grow(gpu, &mut ws.partials, plan.workspace_bytes)?;
        let c = grow(gpu, &mut ws.counters, plan.counter_bytes)?;
        (w, c)
    } else if let NormPath::GlobalExchange { ctas } = plan.norm {
        let blocks = m.div_ceil(t.bm as u64);
        let slots = blocks * ctas as u64 * t.bm as u64 * NORM_STATS_BYTES;
        let w = grow(gpu, &mut ws.stats, slots)?;
        let c = grow(gpu, &mut ws.counters, blocks * 4)?;
        (w, c)
    } else {
        (0, 0)
    };
    // Checked before the GEMM writes C.
    let finish_grid = (stats != 0)
        .then(|| norm_finish_grid::<Q>(gpu, spec, call, checked))
        .transpose()?;
    let (params, finish) = build(stats);
    let (norm_cluster, norm_exchange) = match plan.norm {
        NormPath::Cluster { ctas } => (ctas, 0),
        NormPath::GlobalExchange { ctas } => (ctas, 1),
        _ => (0, 0),
    };
    let args = Sm90Params {
        // Hopper plans never split K (`plan.splits` is 1); a split tail is in `Sm90Args`.
        args: plan.gemm_args(checked, call, workspace, counters),
        epilogue: params,
        sm90: Sm90Args {
            tmap_a,
            tmap_b,
            group_m: GROUP_M,
            norm_cluster,
            tmap_c,
            tmap_r,
            tail_splits: plan.tail_splits,
            norm_exchange,
        },
    };
    // SAFETY: `#[fused_gemm]` declares the Hopper variants with (GemmArgs, E::Params, Sm90Args),
    // and the launcher it generates passes `E::Params` as `P`.
    let kernel = unsafe { Kernel::<Sm90Params<P>>::from_function(function) };
    // A row-norm plan's grid holds at most as many clusters as run at once (`choose`).
    let cfg = plan.launch_shape().prepare(&kernel, gpu.props())?;
    // CTAs per cluster: pairs along M, a row-norm cluster along N (launched as a cluster even
    // of one, so that its distributed shared-memory accesses have a cluster to address), or 1.
    let cluster = if norm_exchange == 0 && norm_cluster > 0 {
        norm_cluster
    } else {
        cluster
    };
    let mode = if cluster > 1 || (norm_cluster > 0 && norm_exchange == 0) {
        LaunchMode::Cluster((cluster, 1, 1))
    } else if norm_exchange != 0 {
        // A global exchange spins on its group's CTAs: a cooperative launch makes them all
        // resident together (or fails), and `choose` sized the grid to what fits.
        LaunchMode::Cooperative
    } else {
        LaunchMode::Plain
    };
    // SAFETY: `check_gemm` validated every operand, `ineligible` checked what TMA needs, the maps
    // describe A and B with the variant's boxes, the workspaces were sized by the plan, and the
    // launch shape is the one `sm90::run` documents.
    unsafe { kernel.launch_as(gpu, cfg, mode, &args) }?;
    let mut report = LaunchReport::ran(spec.name, variant, plan, why);
    report.tma_store = tmap_c != 0;
    report.tma_residual = tmap_r != 0;
    if let Some(shape) = finish_grid {
        report.finish_dependent =
            launch_norm_finish(gpu, spec, call, checked, tiles_n, shape, finish)?;
    }
    Ok(report)
}

/// The tensor map key of C when `plan` stores C with TMA ([`Sm90Args::tmap_c`]), or `None` for
/// direct stores: a plan with the staging buffers (which [`plan_fit`](crate::plan::sm90::plan_fit)
/// gives only where [`stages_c`](crate::plan::sm90::stages_c) holds) or a row-norm group
/// ([`NormPath::Cluster`], [`NormPath::GlobalExchange`]), and a C that TMA can move (16-bit,
/// 16-byte aligned address and row stride, M and N not zero).
pub fn c_map_key(call: &GemmCall<'_>, checked: &Checked, plan: &Plan) -> Option<MapKey> {
    if plan.smem_bytes != sm90::smem_bytes_staged(&plan.tile) && !row_norm_group(plan) {
        return None;
    }
    output_map_key(&call.c, call.out_dtype, checked)
}

/// Whether `plan` finishes a row norm in groups of CTAs ([`NormPath::Cluster`],
/// [`NormPath::GlobalExchange`]): their kernels stage the CTA's last tile's C (and residual) in
/// the ring (`fused_gemm_device::gemm::sm90::ring_epilogue_offset`), not in staging buffers.
fn row_norm_group(plan: &Plan) -> bool {
    matches!(
        plan.norm,
        NormPath::Cluster { .. } | NormPath::GlobalExchange { .. }
    )
}
