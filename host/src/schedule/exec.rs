//! Running a [`Schedule`] on the GPU: device tables, split-K scratch, the occupancy check, and
//! the launches.

use cudarc::driver::{CudaSlice, LaunchConfig};
use fused_gemm_device::kernel::persistent::{ProgramArgs, Task, Wait};
use serde::Serialize;

use super::dag::WaveGraph;
use super::family::{EpiWords, Family};
use super::table::{SplitScratch, encode, gemm_args, split_scratch_bytes};
use super::waves::{Program, Schedule, VDevice};
use crate::launch::{GemmParams, Kernel, LaunchShape};
use crate::{Error, Gpu, Result};

/// Occupancy of `family`'s persistent entry point on `gpu` as the driver reports it
/// (`cuOccupancyMaxActiveBlocksPerMultiprocessor` with its block size and shared memory).
///
/// # Errors
/// Module-loading and driver errors.
pub fn vdevice(gpu: &Gpu, family: &Family) -> Result<VDevice> {
    let f = gpu.function(family.ptx, family.entry)?;
    let shape = LaunchShape {
        grid: (1, 1, 1),
        block: (family.threads, 1, 1),
        smem_bytes: family.smem_bytes,
    };
    shape.prepare(&f, gpu.props())?;
    let per_sm = f.occupancy_max_active_blocks_per_multiprocessor(
        family.threads,
        family.smem_bytes as usize,
        None,
    )?;
    Ok(VDevice {
        sms: gpu.props().sm_count,
        ctas_per_sm: per_sm,
    })
}

enum Step {
    Persistent {
        kernel: Kernel<ProgramArgs>,
        cfg: LaunchConfig,
        args: ProgramArgs,
    },
    Grid {
        kernel: Kernel<GemmParams<EpiWords>>,
        cfg: LaunchConfig,
        args: GemmParams<EpiWords>,
    },
}

/// What one launch of a [`WaveRunner`] occupies.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LaunchInfo {
    /// Kernel entry point.
    pub entry: &'static str,
    /// Operators it computes.
    pub ops: Vec<usize>,
    /// CTAs launched.
    pub ctas: u64,
    /// CTAs the device holds at once for this entry point (SMs × occupancy).
    pub slots: u64,
    /// `min(ctas, slots) / slots`: the fraction of CTA slots (vEUs) the launch keeps busy at its
    /// start.
    pub resident_fraction: f64,
}

/// A [`Schedule`] made ready to launch: tables uploaded, scratch allocated, functions loaded,
/// occupancy checked. [`WaveRunner::launch`] enqueues one execution.
///
/// Dropping it waits for the device's work first. A CUDA graph that recorded its launches
/// holds the addresses of its tables: drop the graph before the runner.
pub struct WaveRunner {
    steps: Vec<Step>,
    info: Vec<LaunchInfo>,
    _buffers: Vec<CudaSlice<u8>>,
}

impl std::fmt::Debug for WaveRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaveRunner")
            .field("launches", &self.info)
            .finish()
    }
}

impl Drop for WaveRunner {
    fn drop(&mut self) {
        drop_after_device_work(&self._buffers);
    }
}

/// Waits for the context's work before the tables and scratch are freed: a launch passes
/// their raw addresses, which cudarc does not track, possibly on another stream than the one
/// that frees them. A CUDA graph that recorded a launch must still be dropped first.
pub(crate) fn drop_after_device_work(buffers: &[CudaSlice<u8>]) {
    if let Some(b) = buffers.first() {
        // An error cannot be reported from a drop; the buffers are freed regardless.
        let ctx = b.context();
        let _ = crate::gpu::outside_captures(ctx, || ctx.synchronize());
    }
}

fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: only called on `Task`, `Wait` and `u32` slices: `#[repr(C)]` integers without
    // implicit padding (sizes asserted in the device crate), so every byte is initialized.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

impl WaveRunner {
    /// Prepares `s` (scheduled from `graph` on `family`) on `gpu`.
    ///
    /// # Errors
    /// [`Error::LaunchLimit`] when a persistent program has more CTAs than the device holds at
    /// once (it could deadlock) or a launch exceeds a limit; allocation, module-loading and
    /// driver errors.
    pub fn new(gpu: &Gpu, graph: &WaveGraph, family: &Family, s: &Schedule) -> Result<Self> {
        family.check()?;
        let props = *gpu.props();
        let mut buffers: Vec<CudaSlice<u8>> = Vec::new();
        let mut scratch = vec![SplitScratch::default(); graph.ops().len()];
        for (op, v) in s.variants.iter().enumerate() {
            let (pb, cb) = split_scratch_bytes(v);
            if pb > 0 {
                let p = gpu.zeros::<u8>(pb as usize)?;
                let c = gpu.zeros::<u8>(cb as usize)?;
                scratch[op] = SplitScratch {
                    partials: addr(gpu, &p),
                    counters: addr(gpu, &c),
                };
                buffers.push(p);
                buffers.push(c);
            }
        }
        let mut steps = Vec::new();
        let mut info = Vec::new();
        for prog in &s.programs {
            match prog {
                Program::Persistent(p) => {
                    // SAFETY: a wave family's persistent entry point takes `ProgramArgs`
                    // (`fused_gemm::kernels::waves`).
                    let kernel = unsafe {
                        Kernel::<ProgramArgs>::from_function(
                            gpu.function(family.ptx, family.entry)?,
                        )
                    };
                    let shape = LaunchShape {
                        grid: (p.ctas, 1, 1),
                        block: (family.threads, 1, 1),
                        smem_bytes: family.smem_bytes,
                    };
                    let cfg = shape.prepare(&kernel, &props)?;
                    let per_sm = kernel.occupancy_max_active_blocks_per_multiprocessor(
                        family.threads,
                        family.smem_bytes as usize,
                        None,
                    )?;
                    let slots = per_sm as u64 * props.sm_count as u64;
                    if p.ctas as u64 > slots {
                        return Err(Error::LaunchLimit(format!(
                            "persistent program of {} CTAs, but only {slots} of `{}` are co-resident \
                             ({per_sm} per SM): it could deadlock; schedule with the driver's \
                             occupancy (`schedule::exec::vdevice`)",
                            p.ctas, family.entry
                        )));
                    }
                    let t = encode(graph, &s.variants, p, &|op| scratch[op])?;
                    let tasks = gpu.upload(as_bytes(&t.tasks))?;
                    let offsets = gpu.upload(as_bytes(&t.cta_offsets))?;
                    let overflow = if t.overflow.is_empty() {
                        gpu.zeros::<u8>(std::mem::size_of::<Wait>())?
                    } else {
                        gpu.upload(as_bytes(&t.overflow))?
                    };
                    let counters = gpu.zeros::<u8>((t.counters as usize + 1) * 4)?;
                    let args = ProgramArgs {
                        tasks: addr(gpu, &tasks),
                        cta_offsets: addr(gpu, &offsets),
                        waits: addr(gpu, &overflow),
                        counters: addr(gpu, &counters),
                        n_counters: t.counters,
                        _pad: 0,
                        skip_if: 0,
                    };
                    debug_assert_eq!(args.tasks % std::mem::align_of::<Task>() as u64, 0);
                    buffers.extend([tasks, offsets, overflow, counters]);
                    info.push(LaunchInfo {
                        entry: family.entry,
                        ops: p.ops.clone(),
                        ctas: p.ctas as u64,
                        slots,
                        resident_fraction: (p.ctas as u64).min(slots) as f64 / slots as f64,
                    });
                    steps.push(Step::Persistent { kernel, cfg, args });
                }
                Program::Launches(ops) => {
                    for &op in ops {
                        let v = &s.variants[op];
                        let arm = &family.arms[v.arm];
                        let kernel = arm.grid_kernel(gpu, family.ptx)?;
                        let shape = LaunchShape {
                            grid: (v.tiles_n, v.tiles_m, v.splits),
                            block: (family.threads, 1, 1),
                            smem_bytes: arm.tile.smem_bytes(true),
                        };
                        let cfg = shape.prepare(&kernel, &props)?;
                        let per_sm = kernel.occupancy_max_active_blocks_per_multiprocessor(
                            family.threads,
                            shape.smem_bytes as usize,
                            None,
                        )?;
                        let slots = (per_sm as u64 * props.sm_count as u64).max(1);
                        let ctas = v.tasks() as u64;
                        info.push(LaunchInfo {
                            entry: arm.grid_entry,
                            ops: vec![op],
                            ctas,
                            slots,
                            resident_fraction: ctas.min(slots) as f64 / slots as f64,
                        });
                        steps.push(Step::Grid {
                            kernel,
                            cfg,
                            args: GemmParams {
                                args: gemm_args(graph, op, v, scratch[op]),
                                epilogue: EpiWords(graph.ops()[op].epi),
                            },
                        });
                    }
                }
            }
        }
        Ok(WaveRunner {
            steps,
            info,
            _buffers: buffers,
        })
    }

    /// Enqueues one execution on `gpu`'s stream (may be a capturing handle from
    /// [`Gpu::capture`]). The operands' buffers must be alive and unchanged in place.
    ///
    /// # Errors
    /// Driver errors from the launches.
    pub fn launch(&self, gpu: &Gpu) -> Result<()> {
        self.launch_with(gpu, 0)
    }

    /// [`WaveRunner::launch`], but every program returns at once when the `u32` at `skip_if`
    /// is nonzero when it starts (set by an earlier kernel of the stream, e.g. an early-exit
    /// head): a branch over the whole execution decided on the device.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a null or misaligned `skip_if`, or when the schedule has
    /// plain launches (they cannot read it: schedule with `merge` on and `fallback` off);
    /// driver errors.
    pub fn launch_unless(&self, gpu: &Gpu, skip_if: u64) -> Result<()> {
        if skip_if == 0 || !skip_if.is_multiple_of(4) {
            return Err(Error::invalid(
                "skip_if",
                "a 4-byte aligned device address",
                skip_if,
            ));
        }
        if self.steps.iter().any(|s| matches!(s, Step::Grid { .. })) {
            return Err(Error::invalid(
                "schedule",
                "persistent programs only (merge on, fallback off)",
                "plain launches",
            ));
        }
        self.launch_with(gpu, skip_if)
    }

    fn launch_with(&self, gpu: &Gpu, skip_if: u64) -> Result<()> {
        for step in &self.steps {
            match step {
                Step::Persistent { kernel, cfg, args } => {
                    let args = ProgramArgs { skip_if, ..*args };
                    // SAFETY: the tables were encoded from a schedule over validated
                    // operators, with arms of this family, and the grid fits the device's
                    // co-resident CTAs (checked in `new`).
                    unsafe { kernel.launch(gpu, *cfg, &args) }?;
                }
                Step::Grid { kernel, cfg, args } => {
                    // SAFETY: operands validated when the graph was built.
                    unsafe { kernel.launch(gpu, *cfg, args) }?;
                }
            }
        }
        Ok(())
    }

    /// Kernel launches per execution.
    pub fn launches(&self) -> usize {
        self.steps.len()
    }

    /// Per launch: entry point, operators, CTAs and CTA slots.
    pub fn info(&self) -> &[LaunchInfo] {
        &self.info
    }

    /// Mean over launches of [`LaunchInfo::resident_fraction`].
    pub fn mean_resident_fraction(&self) -> f64 {
        if self.info.is_empty() {
            return 0.0;
        }
        self.info.iter().map(|i| i.resident_fraction).sum::<f64>() / self.info.len() as f64
    }
}

fn addr(gpu: &Gpu, b: &CudaSlice<u8>) -> u64 {
    use cudarc::driver::DevicePtr;
    b.device_ptr(gpu.stream()).0
}
