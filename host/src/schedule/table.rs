//! Encoding a [`PersistentProgram`] as the device tables of
//! [`fused_gemm_device::kernel::persistent`]: tasks CTA by CTA, per-CTA offsets, overflow waits.

use fused_gemm_device::gemm::GemmArgs;
use fused_gemm_device::kernel::persistent::{INLINE_WAITS, NO_SIGNAL, Task, Wait};

use super::dag::WaveGraph;
use super::waves::{PersistentProgram, Variant};
use crate::{Error, Result};

/// Device addresses of one operator's split-K scratch: f32 partials and zeroed arrival
/// counters (both 0 when it does not split K).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitScratch {
    /// Partial tiles, `Variant::tasks() · BM · BN · 4` bytes.
    pub partials: u64,
    /// One zeroed `u32` per output tile.
    pub counters: u64,
}

/// Bytes of split-K partials and counters `v` needs (0 and 0 without split-K).
pub fn split_scratch_bytes(v: &Variant) -> (u64, u64) {
    if v.splits <= 1 {
        return (0, 0);
    }
    let tiles = v.tiles_m as u64 * v.tiles_n as u64;
    (
        tiles * v.splits as u64 * v.tile.bm as u64 * v.tile.bn as u64 * 4,
        tiles * 4,
    )
}

/// The kernel's [`GemmArgs`] of operator `op` run as `v`.
pub fn gemm_args(graph: &WaveGraph, op: usize, v: &Variant, scratch: SplitScratch) -> GemmArgs {
    GemmArgs {
        splits: v.splits,
        k_per_split: v.k_per_split,
        workspace: scratch.partials,
        counters: scratch.counters,
        ..graph.ops()[op].args
    }
}

/// The device tables of one persistent program.
#[derive(Clone, Debug, PartialEq)]
pub struct Tables {
    /// Tasks, CTA by CTA, each CTA's in global placement order.
    pub tasks: Vec<Task>,
    /// `ctas + 1` offsets into `tasks`.
    pub cta_offsets: Vec<u32>,
    /// Waits beyond each task's inline ones.
    pub overflow: Vec<Wait>,
    /// Ready counters (the done counter follows them).
    pub counters: u32,
}

/// Encodes `prog`. `scratch(op)` gives each operator's split-K scratch.
///
/// # Errors
/// [`Error::TooLarge`] when a table index does not fit in 32 bits.
pub fn encode(
    graph: &WaveGraph,
    variants: &[Variant],
    prog: &PersistentProgram,
    scratch: &dyn Fn(usize) -> SplitScratch,
) -> Result<Tables> {
    let too_large = |what: &'static str, n: usize| Error::TooLarge {
        arg: what,
        max: u32::MAX as u64,
        actual: n as u64,
    };
    let mut tasks = Vec::with_capacity(prog.tasks.len());
    let mut offsets = Vec::with_capacity(prog.cta_lists.len() + 1);
    let mut overflow = Vec::new();
    for list in &prog.cta_lists {
        offsets.push(u32::try_from(tasks.len()).map_err(|_| too_large("tasks", tasks.len()))?);
        for &i in list {
            let t = &prog.tasks[i];
            let v = &variants[t.op];
            let mut waits = [Wait::default(); INLINE_WAITS];
            for (w, x) in waits.iter_mut().zip(&t.waits) {
                *w = *x;
            }
            let waits_overflow =
                u32::try_from(overflow.len()).map_err(|_| too_large("waits", overflow.len()))?;
            overflow.extend(t.waits.iter().skip(INLINE_WAITS).copied());
            tasks.push(Task {
                args: gemm_args(graph, t.op, v, scratch(t.op)),
                arm: v.arm as u32,
                tile_m: t.tile_m,
                tile_n: t.tile_n,
                split: t.split,
                tiles_n: v.tiles_n,
                signal: t.signal.unwrap_or(NO_SIGNAL),
                n_waits: t.waits.len() as u32,
                waits_overflow,
                waits,
                epi: graph.ops()[t.op].epi,
                _pad: [0; 2],
            });
        }
    }
    offsets.push(u32::try_from(tasks.len()).map_err(|_| too_large("tasks", tasks.len()))?);
    Ok(Tables {
        tasks,
        cta_offsets: offsets,
        overflow,
        counters: prog.counters,
    })
}
