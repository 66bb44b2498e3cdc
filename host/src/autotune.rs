//! Optional autotuning: time the planner's top-k candidates on the device, keep the fastest,
//! and cache the choice on disk so later runs (and other shapes of the same class) reuse it
//! without timing.
//!
//! The cache is one JSON file, [`CACHE_FILE`], in the directory named by the environment
//! variable [`CACHE_ENV`] (`FUSED_GEMM_CACHE_DIR`), by default `fused-gemm/` under the user's
//! cache directory (`$XDG_CACHE_HOME` or `~/.cache` on Linux). Entries are keyed by
//! [`TuneKey`]: device name and compute capability, kernel name, shape class and dtype. A
//! missing, unreadable or corrupt file is ignored with a warning (never a panic or an error);
//! writes go to a temporary file renamed over the cache, merged with entries other processes
//! wrote meanwhile.
//!
//! # The Hopper path
//!
//! With an autotuner set on a [`Gpu`] ([`Gpu::set_autotuner`], or `FUSED_GEMM_AUTOTUNE=1` when
//! the `Gpu` is opened), a launch on the Hopper path ([`crate::sm90`]) with no override in
//! effect picks its tile by measurement instead of by the model. Why: the model was fitted on
//! an H200, and on an H100 its tile ran up to 28 % slower than the fastest one.
//!
//! - The first launch of a [`TuneKey`] (with [`Mainloop::Sm90`]) times the model's best
//!   candidates ([`Autotuner::with_top_k`], 4 by default, of at most five compiled tiles) and
//!   caches the fastest; later launches, in this process or another, reuse it.
//! - Candidates are timed as the Hopper benchmark times them: each captured into a CUDA graph
//!   of launches that cycle through operand sets holding together twice the L2 (copies of A
//!   and B, so that launches read them from DRAM); the graphs replayed in interleaved rounds
//!   ([`Gpu::time_interleaved`]), the first 250 ms of them untimed (the clocks settle); medians
//!   compared. The model's choice stays unless another is [`SM90_MARGIN`] faster.
//! - Candidates write scratch C buffers, never the caller's C, so epilogues that read C
//!   (`accumulate`, a `residual` aliasing C) see C as the caller left it. Tuning allocates the
//!   sets (up to twice the L2, plus C's footprint per set) for its duration.
//! - While the stream is being captured into a CUDA graph nothing is timed: a cached choice is
//!   used, else the model's.
//! - Tuning holds the device's autotuner for its duration (0.3 s to a few seconds), so other
//!   threads' Hopper launches on the device wait for it. It records graphs with
//!   [`Gpu::capture`], which switches cudarc's per-buffer event tracking off for the context
//!   while it records: do not tune on one thread while another launches on several streams
//!   (captures on other threads are fine: tracking returns when the last capture ends).
//!   Candidates may grow the device's shared split-K and statistics workspaces, as any launch
//!   that needs more does; the replaced buffers are kept ([`crate::gemm::Growing`]), so graphs
//!   captured earlier stay valid. Each tuning leaves its scratch operands' tensor maps (128
//!   bytes each) in the device's map cache.
//! - Epilogues with a row norm keep the model's tile: it was the fastest at every LayerNorm
//!   shape of the Hopper benchmark on an H100 and an H200, while there this timing and the
//!   benchmark's disagreed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fused_gemm_device::gemm::TileShape;
use serde::{Deserialize, Serialize};

use crate::gemm::{GemmKernelSpec, KernelVariant};
use crate::plan::{Plan, Planner, Problem};
use crate::validate::{Checked, GemmCall};
use crate::{Error, Gpu, Result};

/// Environment variable naming the cache directory.
pub const CACHE_ENV: &str = "FUSED_GEMM_CACHE_DIR";

/// The cache file's name in that directory.
pub const CACHE_FILE: &str = "autotune-v1.json";

const VERSION: u32 = 1;

/// M rounded up to a power of two (1, 2, 4, ..., 2³¹): token counts vary, and a tile choice
/// changes slowly with M.
pub fn m_class(m: u32) -> u32 {
    m.max(1).checked_next_power_of_two().unwrap_or(1 << 31)
}

/// N or K rounded up to a multiple of 128 (layer widths are fixed per model; 128 keeps
/// different tile counts apart).
pub fn nk_class(x: u32) -> u32 {
    x.div_ceil(128).saturating_mul(128)
}

/// The mainloop a cached choice is for: the same kernel has tiles for both on an H100/H200.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Mainloop {
    /// The sm_80 `mma.sync` mainloop of [`crate::plan`]'s tiles ([`Autotuner::tune`]).
    #[default]
    Sm80,
    /// The Hopper TMA + `wgmma` mainloop of [`crate::sm90`] (see [the module docs](self)).
    Sm90,
}

/// A tile as `(BM, BN, BK, warps_m, warps_n, stages)`.
pub type TileTuple = (u32, u32, u32, u32, u32, u32);

/// What a cached choice is valid for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TuneKey {
    /// Device name as the driver reports it.
    pub device: String,
    /// Compute capability, major·10 + minor.
    pub compute_capability: u32,
    /// Kernel name (the `#[fused_gemm]` item, which fixes the epilogue).
    pub kernel: String,
    /// dtype of A and B.
    pub dtype: String,
    /// [`m_class`] of M.
    pub m_class: u32,
    /// [`nk_class`] of N.
    pub n_class: u32,
    /// [`nk_class`] of K.
    pub k_class: u32,
    /// N and K multiples of 8 (the 16-byte vector path is possible for 16-bit types).
    pub aligned: bool,
    /// The mainloop the choice is for (absent in files written before the Hopper path was
    /// tuned: [`Mainloop::Sm80`]).
    #[serde(default)]
    pub mainloop: Mainloop,
}

impl TuneKey {
    /// The key of `problem` run by `kernel` on a device.
    pub fn new(device: &str, compute_capability: u32, kernel: &str, problem: &Problem) -> Self {
        TuneKey {
            device: device.to_owned(),
            compute_capability,
            kernel: kernel.to_owned(),
            dtype: problem.in_dtype.name().to_owned(),
            m_class: m_class(problem.m),
            n_class: nk_class(problem.n),
            k_class: nk_class(problem.k),
            aligned: problem.n.is_multiple_of(8) && problem.k.is_multiple_of(8),
            mainloop: Mainloop::Sm80,
        }
    }

    /// The same key for `mainloop`.
    pub fn with_mainloop(mut self, mainloop: Mainloop) -> Self {
        self.mainloop = mainloop;
        self
    }
}

impl std::fmt::Display for TuneKey {
    /// The key as it appears in the cache file:
    /// `device|sm_CC|kernel|dtype|mM|nN|kK|aligned`, with `|sm90` appended for
    /// [`Mainloop::Sm90`] (so that sm_80 keys read the same as before that field existed).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}|sm_{}|{}|{}|m{}|n{}|k{}|{}",
            self.device,
            self.compute_capability,
            self.kernel,
            self.dtype,
            self.m_class,
            self.n_class,
            self.k_class,
            if self.aligned { "aligned" } else { "unaligned" }
        )?;
        match self.mainloop {
            Mainloop::Sm80 => Ok(()),
            Mainloop::Sm90 => write!(f, "|sm90"),
        }
    }
}

/// One cached choice.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The key, spelled out.
    pub key: TuneKey,
    /// `(BM, BN, BK, warps_m, warps_n, stages)` of the winner.
    pub tile: TileTuple,
    /// Its split-K factor.
    pub splits: u32,
    /// Its time on the shape it was tuned on, ms.
    pub measured_ms: f32,
    /// The shape it was tuned on.
    pub tuned_on: (u32, u32, u32),
    /// Every candidate timed, as `(tile, ms)` (Hopper choices; empty in older files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timed: Vec<(TileTuple, f32)>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    entries: BTreeMap<String, Entry>,
}

fn tile_tuple(t: &TileShape) -> TileTuple {
    (t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages)
}

/// The default cache directory: `$FUSED_GEMM_CACHE_DIR`, else `fused-gemm` under the user's
/// cache directory, else under the system temporary directory.
pub fn default_cache_dir() -> PathBuf {
    match std::env::var_os(CACHE_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => dirs::cache_dir()
            .unwrap_or_else(std::env::temp_dir)
            .join("fused-gemm"),
    }
}

/// Times top-k candidates and caches winners (see the [module docs](self)).
#[derive(Debug)]
pub struct Autotuner {
    dir: PathBuf,
    top_k: usize,
    entries: BTreeMap<String, Entry>,
    warnings: Vec<String>,
}

impl Autotuner {
    /// An autotuner caching in [`default_cache_dir`], timing the top 4 candidates.
    pub fn from_env() -> Self {
        Self::new(default_cache_dir())
    }

    /// An autotuner caching in `dir` (created on first save), timing the top 4 candidates. The
    /// cache is read now; problems reading it become [`Autotuner::warnings`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let mut t = Autotuner {
            dir: dir.into(),
            top_k: 4,
            entries: BTreeMap::new(),
            warnings: Vec::new(),
        };
        t.entries = t.read_file(true);
        t
    }

    /// Times the `k` (≥ 1) fastest predicted candidates.
    pub fn with_top_k(mut self, k: usize) -> Self {
        self.top_k = k.max(1);
        self
    }

    /// The cache file.
    pub fn cache_path(&self) -> PathBuf {
        self.dir.join(CACHE_FILE)
    }

    /// Warnings so far (corrupt or unreadable cache, failed saves, failed candidates). Each is
    /// also printed to stderr when it happens.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn warn(&mut self, msg: String) {
        eprintln!("fused-gemm autotune: warning: {msg}");
        self.warnings.push(msg);
    }

    fn read_file(&mut self, report: bool) -> BTreeMap<String, Entry> {
        let path = self.cache_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return BTreeMap::new(),
            Err(e) => {
                if report {
                    self.warn(format!("cannot read {}: {e}; ignoring it", path.display()));
                }
                return BTreeMap::new();
            }
        };
        match serde_json::from_str::<CacheFile>(&text) {
            Ok(f) if f.version == VERSION => f.entries,
            Ok(f) => {
                if report {
                    self.warn(format!(
                        "{} has version {}, expected {VERSION}; ignoring it",
                        path.display(),
                        f.version
                    ));
                }
                BTreeMap::new()
            }
            Err(e) => {
                if report {
                    self.warn(format!(
                        "{} is corrupt ({e}); ignoring it (it is rewritten on the next save)",
                        path.display()
                    ));
                }
                BTreeMap::new()
            }
        }
    }

    /// The cached entry for `key`, if any.
    pub fn entry(&self, key: &TuneKey) -> Option<&Entry> {
        self.entries.get(&key.to_string())
    }

    /// Every cached entry, in key order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Caches `entry` under its key and saves the cache; a failure to save is only a warning.
    pub fn record(&mut self, entry: Entry) {
        self.entries.insert(entry.key.to_string(), entry);
        if let Err(e) = self.save() {
            self.warn(format!("cannot save the cache: {e}"));
        }
    }

    /// The cached choice for `key` as a plan for `problem`: the candidate of `planner` with the
    /// cached tile and split-K factor, if that candidate can launch for `problem`.
    pub fn lookup(&self, planner: &Planner, key: &TuneKey, problem: &Problem) -> Option<Plan> {
        let e = self.entry(key)?;
        let (bm, bn, bk, wm, wn, st) = e.tile;
        planner.evaluate(problem, &TileShape::new(bm, bn, bk, wm, wn, st), e.splits)
    }

    /// The plan for `problem`: the cached choice when there is one, else the fastest of the
    /// planner's top-k candidates as timed by `time_ms` (ms per launch), which is then cached
    /// and saved. Candidates whose timing fails are skipped with a warning.
    ///
    /// # Errors
    /// The planner's errors; [`Error::Timing`] when every candidate fails or a time is not
    /// finite and positive. A failure to save the cache is only a warning.
    pub fn tune(
        &mut self,
        planner: &Planner,
        key: &TuneKey,
        problem: &Problem,
        mut time_ms: impl FnMut(&Plan) -> Result<f32>,
    ) -> Result<Plan> {
        if let Some(p) = self.lookup(planner, key, problem) {
            return Ok(p);
        }
        let mut best: Option<(Plan, f32)> = None;
        let mut failures = Vec::new();
        for plan in planner.top_k(problem, self.top_k)? {
            match time_ms(&plan) {
                Ok(ms) if ms.is_finite() && ms > 0.0 => {
                    if best.as_ref().is_none_or(|(_, b)| ms < *b) {
                        best = Some((plan, ms));
                    }
                }
                Ok(ms) => {
                    return Err(Error::Timing {
                        what: format!("{} {:?}/s{}", key, plan.tile, plan.splits),
                        detail: format!("timer returned {ms} ms"),
                    });
                }
                Err(e) => {
                    failures.push(format!("{:?}/s{}: {e}", plan.tile, plan.splits));
                }
            }
        }
        for f in &failures {
            self.warn(format!("candidate failed: {f}"));
        }
        let Some((plan, ms)) = best else {
            return Err(Error::Timing {
                what: key.to_string(),
                detail: format!("every candidate failed: {}", failures.join("; ")),
            });
        };
        self.record(Entry {
            key: key.clone(),
            tile: tile_tuple(&plan.tile),
            splits: plan.splits,
            measured_ms: ms,
            tuned_on: (problem.m, problem.n, problem.k),
            timed: Vec::new(),
        });
        Ok(plan)
    }

    /// Writes the cache (merged with entries written meanwhile by other processes; ours win).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub fn save(&mut self) -> Result<()> {
        let io = |path: &Path, source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| io(&self.dir, e))?;
        // A corrupt file was reported when it was first read; here it is just replaced.
        let mut merged = self.read_file(false);
        merged.extend(self.entries.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.entries = merged;
        let file = CacheFile {
            version: VERSION,
            entries: self.entries.clone(),
        };
        let text = serde_json::to_string_pretty(&file).expect("cache serializes");
        let path = self.cache_path();
        let tmp = self
            .dir
            .join(format!("{CACHE_FILE}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))
    }
}

/// Environment variable that, set to `1` when a [`Gpu`] is opened, gives it an autotuner
/// caching in [`default_cache_dir`] ([`Gpu::set_autotuner`]).
pub const AUTOTUNE_ENV: &str = "FUSED_GEMM_AUTOTUNE";

/// Whether [`AUTOTUNE_ENV`] asks for an autotuner (`1`, `true`, `on`, any case).
pub fn autotune_from_env() -> bool {
    std::env::var(AUTOTUNE_ENV)
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "on"))
}

/// Timed rounds per Hopper candidate (their median counts). Each round replays every
/// candidate's graph once, in turn, so that clock changes fall on all of them alike (timed one
/// after another, the first candidate ran while the clocks rose).
const SM90_ROUNDS: usize = 9;

/// Untimed rounds come first until the device has run the candidates for this long, ms: with
/// about 100 ms of rounds, two tunings of the same H100 shapes ranked the tiles differently by
/// up to 12 %, and both differed from the benchmark's steady state.
const SM90_WARMUP_MS: f32 = 250.0;

/// Device time one replay of a candidate's graph aims at, µs (by the model's prediction).
const SM90_REPLAY_US: f64 = 4000.0;

/// At most this many operand sets rotate ([`pick_sm90`]).
const SM90_MAX_SETS: usize = 8;

/// How much faster than the model's choice another candidate must measure to replace it (a
/// fraction): closer than this is noise.
pub const SM90_MARGIN: f32 = 0.01;

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
/// [`crate::sm90::choose`]'s list, the model's fastest first; `build` gives the epilogue's
/// parameters as for [`crate::gemm::launch`].
///
/// # Errors
/// Driver errors from querying the stream or timing. A failure to allocate the scratch operand
/// sets is a warning, and the model's choice is returned; so is a candidate that fails to
/// launch (skipped), and when all fail, the model's choice is returned (its own launch then
/// reports the error).
pub(crate) fn pick_sm90<P, N, Q>(
    gpu: &Gpu,
    spec: &GemmKernelSpec,
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
    if candidates.len() <= 1 || !gpu.options().is_default() || spec.norm_finish.is_some() {
        return Ok(candidates.swap_remove(0));
    }
    let mut slot = gpu.autotuner();
    let Some(tuner) = slot.as_mut() else {
        return Ok(candidates.swap_remove(0));
    };
    let problem = Problem::from_call(call, checked, spec.accumulate);
    let props = gpu.props();
    let key = TuneKey::new(gpu.name(), props.compute_capability, spec.name, &problem)
        .with_mainloop(Mainloop::Sm90);
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
    // Each candidate once on every set, outside a capture: workspaces grow and tensor maps are
    // made here, not while a graph is recorded.
    let mut graphs = Vec::with_capacity(n);
    for (i, (variant, plan)) in candidates.iter().enumerate().take(n) {
        let warm = calls
            .iter()
            .try_for_each(|c| {
                crate::sm90::launch(gpu, spec, c, checked, variant, *plan, build, String::new())
                    .map(|_| ())
            })
            .and_then(|()| gpu.synchronize());
        let reps = ((SM90_REPLAY_US / plan.predicted_us.max(1.0)).ceil() as usize).clamp(sets, 200);
        let graph = warm.and_then(|()| {
            gpu.capture(|g| {
                for r in 0..reps {
                    crate::sm90::launch(
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
                Ok(())
            })
        });
        match graph.and_then(|g| g.upload().map(|()| g)) {
            Ok(g) => graphs.push((i, g, reps)),
            Err(e) => tuner.warn(format!(
                "{key}: tile {:?} failed: {e}; skipped",
                variant.tile
            )),
        }
    }
    let replays: Vec<_> = graphs.iter().map(|(_, g, reps)| (g, *reps)).collect();
    let times = match gpu.time_interleaved(&replays, SM90_WARMUP_MS, SM90_ROUNDS) {
        Ok(t) => t,
        Err(e) => {
            tuner.warn(format!("{key}: timing failed ({e}); the model's tile"));
            return Ok(candidates.swap_remove(0));
        }
    };
    drop(replays);
    let timed: Vec<(usize, f32)> = graphs
        .iter()
        .zip(&times)
        .map(|((i, _, _), &t)| (*i, t))
        .filter(|(_, t)| t.is_finite() && *t > 0.0)
        .collect();
    drop(graphs);
    gpu.synchronize()?;
    drop(buffers);
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
