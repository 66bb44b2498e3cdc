//! Device buffers every GEMM launch on one [`Gpu`] reuses: split-K and split-tail partials,
//! arrival counters, row statistics and the Hopper path's tensor maps.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, DevicePtr};

use crate::plan::NormPath;
use crate::tensor_map::{MapKey, TensorMapCache};
use crate::{Error, Gpu, Result};

/// Growing device buffers for split-K partials, arrival counters and row statistics, reused by
/// every GEMM launched on one [`Gpu`]. Launches on different streams must not share it
/// concurrently (each launch holds its lock only while enqueuing; launches and graph replays
/// on one stream are kept from interleaving by the device's launch-queue lock).
#[derive(Default)]
pub struct Workspace {
    pub(crate) partials: Growing,
    pub(crate) counters: Growing,
    pub(crate) stats: Growing,
    /// TMA descriptors of the Hopper path ([`crate::launch::sm90`]).
    pub(crate) tensor_maps: TensorMapCache,
    /// Row-norm CTA groups the device runs at once, per (entry point, shared-memory bytes,
    /// CTAs per group, whether the group is a cluster) of the Hopper path ([`crate::launch::sm90`]).
    pub(crate) cluster_fit: std::collections::HashMap<(&'static str, u32, u32, bool), u32>,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("partials", &self.partials)
            .field("counters", &self.counters)
            .field("stats", &self.stats)
            .field("tensor_maps", &self.tensor_maps.len())
            .finish()
    }
}

impl Workspace {
    /// Split-K (and split-tail) partial tiles, f32.
    pub fn partials(&self) -> &Growing {
        &self.partials
    }

    /// Arrival counters of split-K, split tails and the global row-statistics exchange, u32.
    pub fn counters(&self) -> &Growing {
        &self.counters
    }

    /// Row statistics: partial moments for a finishing kernel, or exchange slots.
    pub fn stats(&self) -> &Growing {
        &self.stats
    }

    /// Bytes of device memory held: the buffers in use and the retired ones.
    pub fn bytes(&self) -> usize {
        [&self.partials, &self.counters, &self.stats]
            .iter()
            .map(|g| g.bytes())
            .sum()
    }
}

/// One growing workspace buffer: zeroed when allocated, at least doubled when a launch needs
/// more. The buffer it replaces is retired, not freed: a CUDA graph captured earlier holds its
/// device address ([`crate::graph`]) and may still be replayed, so it lives as long as the
/// [`Gpu`]. Doubling keeps the retired buffers smaller, together, than the one in use.
#[derive(Default)]
pub struct Growing {
    live: Option<CudaSlice<u8>>,
    retired: Vec<CudaSlice<u8>>,
}

impl std::fmt::Debug for Growing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Growing")
            .field("live", &self.live.as_ref().map(|b| b.len()))
            .field(
                "retired",
                &self.retired.iter().map(|b| b.len()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Growing {
    /// Bytes held, the live buffer and the retired ones.
    pub fn bytes(&self) -> usize {
        self.live.as_ref().map_or(0, |b| b.len())
            + self.retired.iter().map(|b| b.len()).sum::<usize>()
    }

    /// Bytes of the buffer in use (0 before the first launch that needs it).
    pub fn live_bytes(&self) -> usize {
        self.live.as_ref().map_or(0, |b| b.len())
    }

    /// How many replaced buffers are kept for earlier graphs.
    pub fn retired(&self) -> usize {
        self.retired.len()
    }
}

/// The per-device workspace holder (one per [`Gpu`]).
pub type WorkspaceCell = Mutex<Workspace>;

/// A zeroed buffer of at least `bytes` (1 MiB multiples, at least double the one it replaces,
/// which is retired: see [`Growing`]); its device address.
///
/// While `gpu`'s stream is being captured, the buffer is allocated and zeroed on a stream of
/// its own and waited for: on the captured stream the allocation would become a node of the
/// graph, whose memory exists only while the graph runs, and later eager launches would use
/// an address that is not mapped.
pub(crate) fn grow(gpu: &Gpu, slot: &mut Growing, bytes: u64) -> Result<u64> {
    let bytes = usize::try_from(bytes).map_err(|_| Error::OutOfMemory { bytes: usize::MAX })?;
    let have = slot.live_bytes();
    if slot.live.is_none() || have < bytes {
        let size = bytes.next_multiple_of(1 << 20).max(2 * have);
        let capturing = gpu.stream().capture_status()?
            != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let fresh = if capturing {
            let side = gpu.on(&gpu.new_stream()?);
            let b = side.zeros::<u8>(size)?;
            side.synchronize()?;
            b
        } else {
            gpu.zeros::<u8>(size)?
        };
        slot.retired.extend(slot.live.replace(fresh));
    }
    Ok(slot
        .live
        .as_ref()
        .expect("allocated above")
        .device_ptr(gpu.stream())
        .0)
}

/// The row-statistics buffer of a plan that finishes its norm in a separate kernel
/// ([`NormPath::Partials`]): its device address and the partial statistics per row; (0, 0) for
/// other plans.
pub(crate) fn row_stats(gpu: &Gpu, ws: &mut Workspace, norm: &NormPath) -> Result<(u64, u32)> {
    match *norm {
        NormPath::Partials {
            tiles_n,
            stats_bytes,
        } => Ok((grow(gpu, &mut ws.stats, stats_bytes)?, tiles_n)),
        _ => Ok((0, 0)),
    }
}

impl Gpu {
    /// The GEMM workspace of this device, shared by all its handles.
    pub fn workspace(&self) -> Arc<WorkspaceCell> {
        self.state::<WorkspaceCell>()
    }
}

/// The device address of `key`'s tensor map in `gpu`'s cache (see [`TensorMapCache::get`]).
///
/// # Errors
/// As [`TensorMapCache::get`].
pub fn tensor_map(gpu: &Gpu, key: MapKey) -> Result<u64> {
    gpu.workspace()
        .lock()
        .map_err(|_| Error::LaunchLimit("GEMM workspace lock poisoned".into()))?
        .tensor_maps
        .get(gpu, key)
}
