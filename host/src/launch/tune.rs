//! Measured tile choice on the Hopper path: the first launch of a kernel and shape class times
//! the model's best few candidates on scratch operands and records the fastest in the device's
//! [`crate::autotune::Autotuner`].

use std::collections::HashMap;
use std::sync::Mutex;

use super::sm90::launch as launch_sm90;
use crate::autotune::{Entry, Mainloop, SM90_MARGIN, TUNE_MIN_US, TuneKey, tile_tuple};
use crate::kernel::{GemmKernelSpec, KernelVariant};
use crate::plan::{Plan, Problem};
use crate::validate::{Checked, GemmCall};
use crate::{Error, Gpu, Result};

/// Timed rounds per Hopper candidate (their median counts). Each round runs one burst of every
/// candidate's launches, in turn, so that clock changes fall on all of them alike (timed one
/// after another, the first candidate ran while the clocks rose).
const SM90_ROUNDS: usize = 9;

/// Untimed rounds come first until the device has run the candidates for this long, ms: with
/// about 100 ms of rounds, two tunings of the same H100 shapes ranked the tiles differently by
/// up to 12 %, and both differed from the benchmark's steady state.
const SM90_WARMUP_MS: f32 = 250.0;

/// Device time one burst of a candidate's launches aims at, µs (by the model's prediction).
const SM90_BURST_US: f64 = 4000.0;

/// At most this many operand sets rotate ([`pick_sm90`]).
const SM90_MAX_SETS: usize = 8;

/// Per device, the build checksum of each kernel crate's module
/// ([`crate::module::PtxModule::checksum`]), keyed by the address of its
/// [`crate::module::PtxSet`]: computed once, as it reads the whole embedded module.
#[derive(Default)]
struct Builds(Mutex<HashMap<usize, u32>>);

/// The build checksum of `spec`'s module for `gpu` (0 when none runs there).
fn build_of(gpu: &Gpu, spec: &GemmKernelSpec) -> u32 {
    let builds = gpu.state::<Builds>();
    let mut map = builds.0.lock().unwrap_or_else(|e| e.into_inner());
    *map.entry(spec.ptx as *const _ as usize).or_insert_with(|| {
        spec.ptx
            .select(gpu.props().compute_capability)
            .map_or(0, |m| m.checksum())
    })
}

/// Bytes from element (0, 0) of `m` to the end of its last row, and its address modulo 256.
fn footprint(m: &crate::tensor::MatrixDesc) -> (usize, u64) {
    let bytes = ((m.rows.max(1) - 1) * m.ld + m.cols) * m.dtype.size();
    (bytes, m.ptr % 256)
}

/// A device buffer laid out like `m` (same leading dimension, same address modulo 256, so the
/// same load and store paths apply), holding a copy of `m` when `copy`; and its descriptor.
fn buffer_like(
    gpu: &Gpu,
    m: &crate::tensor::MatrixDesc,
    copy: bool,
) -> Result<(cudarc::driver::CudaSlice<u8>, crate::tensor::MatrixDesc)> {
    let (bytes, offset) = footprint(m);
    let buf = gpu.zeros::<u8>(bytes + offset as usize)?;
    let ptr = cudarc::driver::DevicePtr::device_ptr(&buf, gpu.stream()).0 + offset;
    if copy {
        // SAFETY: both ranges are `bytes` long: the source is the operand `check_gemm`
        // validated, the destination was just allocated; the copy is ordered on the stream.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(ptr, m.ptr, bytes, gpu.stream().cu_stream())
        }?;
    }
    Ok((buf, crate::tensor::MatrixDesc { ptr, ..*m }))
}

/// The Hopper candidate to launch (see [the module docs](self)): `candidates` is
/// [`super::sm90::choose`]'s list, the model's fastest first; `build` gives the epilogue's
/// parameters as for [`super::dispatch::launch`].
///
/// # Errors
/// Driver errors from querying the stream or timing. A failure to allocate the scratch operand
/// sets is a warning, and the model's choice is returned; so is a candidate that fails to
/// launch (skipped), and when all fail, the model's choice is returned (its own launch then
/// reports the error).
pub(crate) fn pick_sm90<P, N, Q>(
    gpu: &Gpu,
    spec: &'static GemmKernelSpec,
    call: &GemmCall<'_>,
    checked: &Checked,
    mut candidates: Vec<(&'static KernelVariant, Plan)>,
    build: &impl Fn(u64) -> (P, Option<(N, Q)>),
) -> Result<(&'static KernelVariant, Plan)>
where
    P: fused_gemm_device::params::KernelParam,
    N: fused_gemm_device::params::KernelParam,
    Q: fused_gemm_device::params::KernelParam,
{
    // A forced tile leaves one candidate; other overrides change what a launch measures. Row
    // norms keep the model's tile: it was the fastest forced tile (or within 1 %) at all three
    // LayerNorm shapes of the Hopper benchmark on both an H100 and an H200, while timing here
    // put 128×256 at 1.58 ms and the benchmark at 1.85 ms at 8192³ on the H100 (the model's
    // 128×128 ping-pong: 1.78 and 1.73), a difference not understood yet.
    if candidates.len() <= 1
        || !gpu.options().is_default()
        || spec.norm_finish.is_some()
        || candidates[0].1.predicted_us < TUNE_MIN_US
    {
        return Ok(candidates.swap_remove(0));
    }
    let held = gpu.state::<crate::autotune::Slot>();
    let mut slot = held.0.lock().unwrap_or_else(|e| e.into_inner());
    let Some(tuner) = slot.as_mut() else {
        return Ok(candidates.swap_remove(0));
    };
    let problem = Problem::from_call(call, checked, spec.accumulate);
    let props = gpu.props();
    let key = TuneKey::new(gpu.name(), props.compute_capability, spec.name, &problem)
        .with_mainloop(Mainloop::Sm90)
        .with_build(gpu.driver_version(), build_of(gpu, spec));
    if let Some(e) = tuner.entry(&key) {
        // A cached tile this shape cannot use (another member of its class): the model's.
        let i = candidates
            .iter()
            .position(|(v, _)| tile_tuple(&v.tile) == e.tile)
            .unwrap_or(0);
        return Ok(candidates.swap_remove(i));
    }
    // Timing would synchronize inside a graph capture, which invalidates it.
    let capture = gpu.stream().capture_status()?;
    if capture != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Ok(candidates.swap_remove(0));
    }

    // Operand sets as the Hopper benchmark rotates them: the caller's A and B first, then
    // copies until the sets hold twice the L2 (so that each launch reads A and B from DRAM,
    // as a model's layers do); every set has its own scratch C, so the caller's C is never
    // written.
    let (a_bytes, b_bytes, c_bytes) = (
        footprint(&call.a).0,
        footprint(&call.b).0,
        footprint(&call.c).0,
    );
    let set_bytes = (a_bytes + b_bytes + c_bytes).max(1);
    let sets = (2 * props.l2_bytes as usize)
        .div_ceil(set_bytes)
        .clamp(1, SM90_MAX_SETS);
    let mut buffers = Vec::new();
    let mut calls = Vec::with_capacity(sets);
    let made = (0..sets).try_for_each(|i| {
        let mut timed = *call;
        if i > 0 {
            let (a, a_desc) = buffer_like(gpu, &call.a, true)?;
            let (b, b_desc) = buffer_like(gpu, &call.b, true)?;
            (timed.a, timed.b) = (a_desc, b_desc);
            buffers.extend([a, b]);
        }
        let (c, c_desc) = buffer_like(gpu, &call.c, false)?;
        timed.c = c_desc;
        buffers.push(c);
        calls.push(timed);
        Ok::<_, Error>(())
    });
    if let Err(e) = made {
        // Out of memory for the scratch sets, say: the caller's launch still runs.
        tuner.warn(format!(
            "{key}: no room to time candidates ({e}); the model's tile"
        ));
        return Ok(candidates.swap_remove(0));
    }
    let n = candidates.len().min(tuner.top_k);
    // Each candidate once on every set before timing: workspaces grow and tensor maps are made
    // here. A candidate that fails to launch is skipped.
    let mut runnable: Vec<(usize, usize)> = Vec::with_capacity(n);
    for (i, (variant, plan)) in candidates.iter().enumerate().take(n) {
        let warm = calls
            .iter()
            .try_for_each(|c| {
                launch_sm90(gpu, spec, c, checked, variant, *plan, build, String::new()).map(|_| ())
            })
            .and_then(|()| gpu.synchronize());
        match warm {
            Ok(()) => {
                let reps = (SM90_BURST_US / plan.predicted_us.max(1.0)).ceil() as usize;
                runnable.push((i, reps.clamp(sets, 200)));
            }
            Err(e) => tuner.warn(format!(
                "{key}: tile {:?} failed: {e}; skipped",
                variant.tile
            )),
        }
    }
    let times = gpu.time_rounds(runnable.len(), SM90_WARMUP_MS, SM90_ROUNDS, |j, g| {
        let (i, reps) = runnable[j];
        let (variant, plan) = &candidates[i];
        for r in 0..reps {
            launch_sm90(
                g,
                spec,
                &calls[r % sets],
                checked,
                variant,
                *plan,
                build,
                String::new(),
            )?;
        }
        Ok(reps)
    });
    let times = match times.and_then(|t| gpu.synchronize().map(|()| t)) {
        Ok(t) => t,
        Err(e) => {
            tuner.warn(format!("{key}: timing failed ({e}); the model's tile"));
            return Ok(candidates.swap_remove(0));
        }
    };
    drop(buffers);
    let timed: Vec<(usize, f32)> = runnable
        .iter()
        .zip(&times)
        .map(|(&(i, _), &t)| (i, t))
        .filter(|(_, t)| t.is_finite() && *t > 0.0)
        .collect();
    let Some(&(mut i, mut ms)) = timed.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
        return Ok(candidates.swap_remove(0));
    };
    if let Some(&(_, model)) = timed
        .iter()
        .find(|&&(j, t)| j == 0 && t <= ms * (1.0 + SM90_MARGIN))
    {
        (i, ms) = (0, model);
    }
    let timed = timed
        .iter()
        .map(|&(j, t)| (tile_tuple(&candidates[j].0.tile), t))
        .collect();
    tuner.record(Entry {
        key,
        tile: tile_tuple(&candidates[i].0.tile),
        splits: 1,
        measured_ms: ms,
        tuned_on: (problem.m, problem.n, problem.k),
        timed,
    });
    Ok(candidates.swap_remove(i))
}
