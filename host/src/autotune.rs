//! Measured tile choice: time the planner's top-k candidates on the device, keep the fastest,
//! and cache the choice on disk so later runs (and other shapes of the same class) reuse it
//! without timing.
//!
//! The cache is one JSON file, [`CACHE_FILE`], in the directory named by the environment
//! variable [`CACHE_ENV`] (`FUSED_GEMM_CACHE_DIR`), by default `fused-gemm/` under the user's
//! cache directory (`$XDG_CACHE_HOME` or `~/.cache` on Linux). Entries are keyed by
//! [`TuneKey`]: device name and compute capability, the driver's CUDA version, the kernel
//! crate's build (a checksum of its embedded module), kernel name, shape class and dtype. A
//! missing, unreadable or corrupt file is ignored with a warning (never a panic or an error);
//! writes go to a temporary file renamed over the cache, merged with entries other processes
//! wrote meanwhile.
//!
//! # The Hopper path
//!
//! Every [`Gpu`] has an autotuner unless `FUSED_GEMM_AUTOTUNE=0` when the autotuner is first
//! needed ([`autotune_from_env`]) or [`Gpu::set_autotuner`] removes it. A launch on the Hopper
//! path ([`crate::launch::sm90`]) with no override in effect then picks its tile by measurement
//! instead of by the model alone. Why: the model was fitted on an H200, and on an H100 its tile
//! took up to 1.38× the tuned one's time (LLaMA-3-8B MLP up with SwiGLU, 8192×28672×4096).
//!
//! - Launches the model predicts under [`TUNE_MIN_US`] keep its tile: there the candidates
//!   differ by a few microseconds and a tuning would take more than 10⁵ launches to repay.
//! - The first launch of a [`TuneKey`] (with [`Mainloop::Sm90`]) times the model's best
//!   candidates ([`Autotuner::with_top_k`], 4 by default, of at most five compiled tiles) and
//!   caches the fastest; later launches, in this process or another, reuse it. That first
//!   launch costs about 0.4 s: 250 ms of untimed rounds while the clocks settle, then nine
//!   rounds of each candidate. Nothing is timed again until the card, driver, build or shape
//!   class changes.
//! - Candidates run as the Hopper benchmark runs them: bursts of launches that cycle through
//!   operand sets holding together twice the L2 (copies of A and B, so that launches read them
//!   from DRAM), queued on the caller's stream between CUDA events, the candidates in turn
//!   (starting one later each round, [`Gpu::time_rounds`]); medians compared. The model's
//!   choice stays unless another is [`SM90_MARGIN`] faster. No graph is captured, so tuning
//!   changes nothing for other threads' launches on other streams.
//! - Candidates write scratch C buffers, never the caller's C, so epilogues that read C
//!   (`accumulate`, a `residual` aliasing C) see C as the caller left it. Tuning allocates the
//!   sets (up to twice the L2, plus C's footprint per set) for its duration.
//! - While the stream is being captured into a CUDA graph nothing is timed: a cached choice is
//!   used, else the model's. Run a shape once outside the capture to capture its tuned tile.
//! - Tuning holds its [`Gpu`]'s autotuner for its duration, so other threads' Hopper launches
//!   through that `Gpu` (and its clones) that need it wait. Each [`Gpu::new`] has its own
//!   autotuner: handles opened separately on one device may tune at once, each then timing
//!   under the other's load; share one `Gpu` between threads to avoid that.
//! - Candidates may grow the device's shared split-K and statistics workspaces, as any launch
//!   that needs more does; the replaced buffers are kept
//!   ([`crate::launch::workspace::Growing`]), so graphs captured earlier stay valid. Each
//!   tuning leaves its scratch operands' tensor maps (128 bytes each) in the device's map
//!   cache.
//! - Epilogues with a row norm keep the model's tile: it was the fastest at every LayerNorm
//!   shape of the Hopper benchmark on an H100 and an H200, while there this timing and the
//!   benchmark's disagreed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fused_gemm_device::gemm::TileShape;
use serde::{Deserialize, Serialize};

use crate::plan::{Plan, Planner, Problem};
use crate::{Error, Gpu, Result};

/// Environment variable naming the cache directory.
pub const CACHE_ENV: &str = "FUSED_GEMM_CACHE_DIR";

/// The cache file's name in that directory.
pub const CACHE_FILE: &str = "autotune-v1.json";

const VERSION: u32 = 1;

/// Launches the model predicts to take less than this, µs, keep the model's tile on the Hopper
/// path (see the [module docs](self)).
pub const TUNE_MIN_US: f64 = 15.0;

/// How much faster than the model's choice another candidate must measure to replace it (a
/// fraction): closer than this is noise.
pub const SM90_MARGIN: f32 = 0.01;

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
    /// The Hopper TMA + `wgmma` mainloop of [`crate::launch::sm90`] (see [the module docs](self)).
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
    /// The CUDA version the driver supports ([`Gpu::driver_version`]), 0 when not part of the
    /// key (absent in older files).
    #[serde(default)]
    pub driver: u32,
    /// The kernel crate's build: a CRC-32 of its embedded module for this device (PTX and
    /// cubin as embedded), 0 when not part of the key (absent in older files).
    #[serde(default)]
    pub build: u32,
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
            driver: 0,
            build: 0,
        }
    }

    /// The same key for the driver's CUDA version `driver` and the kernel crate's `build`.
    pub fn with_build(mut self, driver: u32, build: u32) -> Self {
        (self.driver, self.build) = (driver, build);
        self
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
    /// [`Mainloop::Sm90`] and `|cudaV|bBUILD` when the key has a driver or build (so that keys
    /// without them read the same as before those fields existed).
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
        if self.mainloop == Mainloop::Sm90 {
            write!(f, "|sm90")?;
        }
        if (self.driver, self.build) != (0, 0) {
            write!(f, "|cuda{}|b{:08x}", self.driver, self.build)?;
        }
        Ok(())
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

pub(crate) fn tile_tuple(t: &TileShape) -> TileTuple {
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
    pub(crate) top_k: usize,
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

    pub(crate) fn warn(&mut self, msg: String) {
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
        // Unique per save: autotuners of several `Gpu` handles in one process may save at once.
        static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let save = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self
            .dir
            .join(format!("{CACHE_FILE}.{}.{save}.tmp", std::process::id()));
        std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))
    }
}

/// Environment variable that, set to `0` (or `false`, `off`) when a [`Gpu`]'s autotuner is
/// first needed (its first Hopper launch that could tune), leaves it without one: the model
/// alone picks tiles.
pub const AUTOTUNE_ENV: &str = "FUSED_GEMM_AUTOTUNE";

/// Whether a [`Gpu`] gets an autotuner: yes unless [`AUTOTUNE_ENV`] is `0`, `false` or `off`
/// (any case, surrounding spaces ignored).
pub fn autotune_from_env() -> bool {
    !std::env::var(AUTOTUNE_ENV).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "off"
        )
    })
}

/// A device's autotuner slot ([`Gpu::state`]): starts as [`Autotuner::from_env`] unless
/// `FUSED_GEMM_AUTOTUNE=0` ([`autotune_from_env`]).
pub(crate) struct Slot(pub(crate) Mutex<Option<Autotuner>>);

impl Default for Slot {
    fn default() -> Self {
        Slot(Mutex::new(autotune_from_env().then(Autotuner::from_env)))
    }
}

impl Gpu {
    /// Sets the autotuner of this device (all handles sharing it) and returns the previous one:
    /// with `Some`, launches on the Hopper path pick their tile by measurement, cached per
    /// [`TuneKey`] in memory and on disk (see the [module docs](self)); with `None`, by the
    /// model alone. Without a call to this, a device's slot is filled when it is first read (its
    /// first Hopper launch): with [`Autotuner::from_env`], or `None` under
    /// `FUSED_GEMM_AUTOTUNE=0`.
    pub fn set_autotuner(&self, tuner: Option<Autotuner>) -> Option<Autotuner> {
        let slot = self.state::<Slot>();
        let mut guard = slot.0.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *guard, tuner)
    }
}
