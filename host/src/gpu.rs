//! [`Gpu`]: one device, its primary context, a stream, and the modules loaded on it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits,
};

use crate::module::PtxSet;
use crate::{Error, Result};

/// Limits and sizes read off the device with `cuDeviceGetAttribute`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceProps {
    /// Compute capability, major·10 + minor (90 for H100/H200).
    pub compute_capability: u32,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Largest dynamic shared memory one CTA may opt in to, bytes.
    pub smem_per_block_optin: u32,
    /// Shared memory per SM, bytes.
    pub smem_per_sm: u32,
    /// 32-bit registers per SM.
    pub regs_per_sm: u32,
    /// Resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Resident CTAs per SM.
    pub max_blocks_per_sm: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u32,
    /// Largest `gridDim.y` / `gridDim.z`.
    pub max_grid_y: u32,
}

impl DeviceProps {
    /// The values an NVIDIA H200 (132 SMs, compute capability 9.0) reports, for planning and
    /// CPU tests without a device.
    pub const fn h200() -> Self {
        DeviceProps {
            compute_capability: 90,
            sm_count: 132,
            smem_per_block_optin: 232_448,
            smem_per_sm: 233_472,
            regs_per_sm: 65_536,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            l2_bytes: 62_914_560,
            max_grid_y: 65_535,
        }
    }
}

/// What all handles of one device share: context, limits, module and function caches.
pub(crate) struct Shared {
    pub(crate) ctx: Arc<CudaContext>,
    props: DeviceProps,
    name: String,
    driver_version: u32,
    modules: Mutex<HashMap<usize, (Arc<CudaModule>, &'static str)>>,
    functions: Mutex<HashMap<(usize, String), CudaFunction>>,
    /// Calls of [`Gpu::function`] (lookups by entry name), for tests of the launch path.
    name_lookups: std::sync::atomic::AtomicU64,
    /// Per kernel (keyed by the address of its static description): its entry points'
    /// functions by slot, resolved by name once ([`Gpu::kernel_function`]).
    kernels: Mutex<HashMap<usize, Arc<[std::sync::OnceLock<CudaFunction>]>>>,
    /// Local memory per thread of compiled entry points ([`Gpu::local_bytes`]).
    local_bytes: Mutex<HashMap<(usize, &'static str), i32>>,
    /// Per-device state of the layers above, one value per type ([`Gpu::state`]): the launch
    /// workspace, the autotuner, graph captures in progress.
    state: Mutex<HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>>,
    /// The context's first extra stream ([`Gpu::new_stream`]), kept so that cudarc never makes
    /// another "first" one, which synchronizes the context.
    first_stream: OnceLock<Arc<CudaStream>>,
    /// Held while queuing work that uses the device's shared GEMM workspaces
    /// ([`Gpu::queue_lock`]).
    queue: Mutex<()>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The workspaces and tensor maps in `state` may still be read by kernels in flight on
        // any stream of the context (launches pass their raw addresses, which cudarc does not
        // track), so the context is synchronized before they are freed; an error here cannot
        // be reported and leaves nothing better to do. Unloading a module (`cuModuleUnload`)
        // invalidates other threads' captures as a synchronize does, so the whole teardown
        // runs outside them.
        outside_captures(&self.ctx, || {
            let _ = self.ctx.synchronize();
            clear(&mut self.state);
            clear(&mut self.kernels);
            clear(&mut self.functions);
            let modules = self.modules.get_mut().unwrap_or_else(|e| e.into_inner());
            for (module, _) in modules.drain().map(|(_, m)| m) {
                // Still held by a `Kernel` or a schedule that outlives every handle: dropped
                // there, it would be unloaded outside this guard, so it stays loaded until
                // the process exits instead.
                if Arc::strong_count(&module) > 1 {
                    std::mem::forget(module);
                }
            }
        });
    }
}

/// The first driver version (CUDA 12.4) with `cuFuncLoad`.
const FUNC_LOAD_DRIVER: u32 = 12_040;

/// Empties a cache, dropping what it holds now.
fn clear<K, V>(map: &mut Mutex<HashMap<K, V>>) {
    map.get_mut().unwrap_or_else(|e| e.into_inner()).clear();
}

/// Per CUDA context handle, what this process is doing with it: every [`Gpu`] of a device
/// shares its primary context, and a context-wide synchronize (`cuCtxSynchronize`, also made by
/// cudarc when a `CudaContext` gets its first extra stream) while any thread captures
/// invalidates that capture. Such calls go through [`outside_captures`].
#[derive(Default)]
struct ContextUse {
    /// Stream captures in progress ([`CaptureInProgress`]).
    captures: usize,
    /// [`outside_captures`] calls running their synchronize: no capture begins meanwhile.
    syncing: usize,
    /// [`outside_captures`] calls waiting for the captures to end: no capture begins
    /// meanwhile either, or captures overlapping on many threads would keep the count above
    /// zero until the wait gives up and the call runs during a capture, invalidating it.
    waiting: usize,
}

static CONTEXTS: Mutex<BTreeMap<usize, ContextUse>> = Mutex::new(BTreeMap::new());
/// Notified whenever a capture or a synchronize ends.
static CONTEXT_CHANGED: Condvar = Condvar::new();

/// The longest [`outside_captures`] waits. A capture records launches and takes milliseconds;
/// one whose closure waits for the waiting thread would otherwise never end.
const CAPTURE_WAIT: Duration = Duration::from_secs(30);

/// Module and function loads this process has made ([`loads`]).
static LOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many module and function loads this process has made so far. A load on a thread that
/// is itself capturing cannot wait for other threads' captures (it would wait for its own), so
/// it may invalidate them, and its own: [`Gpu::capture`](crate::graph) records again a capture
/// that failed while this count moved.
pub(crate) fn loads() -> u64 {
    LOADS.load(std::sync::atomic::Ordering::SeqCst)
}

fn count_load() {
    LOADS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

thread_local! {
    /// The contexts of the captures this thread has begun and not ended, one entry each.
    static CAPTURING_HERE: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn contexts() -> std::sync::MutexGuard<'static, BTreeMap<usize, ContextUse>> {
    CONTEXTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops `key`'s entry once nothing uses it, and wakes the waiters.
fn release(mut map: std::sync::MutexGuard<'static, BTreeMap<usize, ContextUse>>, key: usize) {
    if map
        .get(&key)
        .is_some_and(|u| u.captures == 0 && u.syncing == 0 && u.waiting == 0)
    {
        map.remove(&key);
    }
    drop(map);
    CONTEXT_CHANGED.notify_all();
}

/// One stream capture in progress on a context, from before `cuStreamBeginCapture` until
/// after `cuStreamEndCapture`: [`outside_captures`] on other threads waits for it to be
/// dropped.
pub(crate) struct CaptureInProgress {
    key: usize,
}

impl CaptureInProgress {
    /// Registers a capture on `ctx`, once no synchronize of it is running or waiting (a thread
    /// already capturing on it does not wait: the waiter waits for that capture).
    pub(crate) fn begin(ctx: &CudaContext) -> CaptureInProgress {
        Self::begin_keyed(ctx.cu_ctx() as usize)
    }

    fn begin_keyed(key: usize) -> CaptureInProgress {
        let nested = CAPTURING_HERE.with(|c| c.borrow().contains(&key));
        let map = contexts();
        let mut map = CONTEXT_CHANGED
            .wait_while(map, |m| {
                m.get(&key)
                    .is_some_and(|u| u.syncing > 0 || (u.waiting > 0 && !nested))
            })
            .unwrap_or_else(|e| e.into_inner());
        map.entry(key).or_default().captures += 1;
        drop(map);
        CAPTURING_HERE.with(|c| c.borrow_mut().push(key));
        CaptureInProgress { key }
    }
}

impl Drop for CaptureInProgress {
    fn drop(&mut self) {
        CAPTURING_HERE.with(|c| {
            let mut c = c.borrow_mut();
            if let Some(i) = c.iter().rposition(|&k| k == self.key) {
                c.swap_remove(i);
            }
        });
        let mut map = contexts();
        if let Some(u) = map.get_mut(&self.key) {
            u.captures = u.captures.saturating_sub(1);
        }
        release(map, self.key);
    }
}

/// Runs `f`, a call that synchronizes all of `ctx` (see [`ContextUse`]), once no stream of
/// the context is being captured, and keeps captures of it from beginning until `f` returns.
/// On a thread that is itself capturing on `ctx`, `f` runs at once: waiting would never end
/// (the driver then invalidates that capture, whose end reports it). After [`CAPTURE_WAIT`],
/// `f` runs regardless.
pub(crate) fn outside_captures<T>(ctx: &CudaContext, f: impl FnOnce() -> T) -> T {
    outside_captures_keyed(ctx.cu_ctx() as usize, CAPTURE_WAIT, || true, f)
}

/// [`outside_captures`] for a call that synchronizes only while `needed()` holds: the wait
/// ends as soon as it no longer does.
fn outside_captures_keyed<T>(
    key: usize,
    patience: Duration,
    needed: impl Fn() -> bool,
    f: impl FnOnce() -> T,
) -> T {
    if CAPTURING_HERE.with(|c| c.borrow().contains(&key)) {
        return f();
    }
    let mut map = contexts();
    map.entry(key).or_default().waiting += 1;
    let (mut map, _timed_out) = CONTEXT_CHANGED
        .wait_timeout_while(map, patience, |m| {
            needed() && m.get(&key).is_some_and(|u| u.captures > 0)
        })
        .unwrap_or_else(|e| e.into_inner());
    let u = map.entry(key).or_default();
    u.waiting = u.waiting.saturating_sub(1);
    u.syncing += 1;
    drop(map);
    let out = f();
    let mut map = contexts();
    if let Some(u) = map.get_mut(&key) {
        u.syncing = u.syncing.saturating_sub(1);
    }
    release(map, key);
    out
}

/// A CUDA device ready to launch kernels: primary context, the stream launches go to, and a
/// cache of the PTX modules and functions loaded so far (loading is done once per kernel crate
/// and device).
///
/// Cloning is cheap and shares the caches and the stream. [`Gpu::on`] gives a handle that
/// launches on another [`Stream`] of the same device; [`Gpu::capture`](crate::graph) records
/// launches into a CUDA graph.
#[derive(Clone)]
pub struct Gpu {
    pub(crate) shared: Arc<Shared>,
    pub(crate) stream: Arc<CudaStream>,
    options: crate::options::LaunchOptions,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("name", &self.shared.name)
            .field("props", &self.shared.props)
            .field("stream", &self.stream.cu_stream())
            .finish()
    }
}

/// A CUDA stream of a [`Gpu`]'s device (non-blocking with respect to the legacy default
/// stream). Launch on it with [`Gpu::on`]; order it against other streams with
/// [`Stream::wait_for`].
#[derive(Clone, Debug)]
pub struct Stream {
    pub(crate) inner: Arc<CudaStream>,
}

impl Stream {
    /// The cudarc stream.
    pub fn cuda(&self) -> &Arc<CudaStream> {
        &self.inner
    }

    /// Makes all later work on this stream wait until the work queued so far on `other` is
    /// done (an event recorded on `other`, waited on here). Does not block the host.
    pub fn wait_for(&self, other: &Stream) -> Result<()> {
        Ok(self.inner.join(&other.inner)?)
    }

    /// Blocks the host until all work on this stream is done.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.inner.synchronize()?)
    }
}

pub use crate::driver_ext::driver_present;

impl Gpu {
    /// The number of CUDA devices the driver sees (0 when it sees none).
    ///
    /// # Errors
    /// [`Error::NoDriver`] when `libcuda` is absent, [`Error::Driver`] for other driver
    /// failures.
    pub fn device_count() -> Result<usize> {
        if !driver_present() {
            return Err(Error::NoDriver);
        }
        match CudaContext::device_count() {
            Ok(c) => Ok(c.max(0) as usize),
            Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens device `ordinal` (0 for the first GPU).
    ///
    /// # Errors
    /// [`Error::NoDriver`] when `libcuda` is absent, [`Error::NoDevice`] when the driver has no
    /// such device, [`Error::Driver`] for other driver failures.
    pub fn new(ordinal: usize) -> Result<Self> {
        let count = Self::device_count()?;
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal)?;
        let stream = ctx.default_stream();
        let a = |attr| ctx.attribute(attr).map(|v| v.max(0) as u32);
        let (major, minor) = ctx.compute_capability()?;
        let props = DeviceProps {
            compute_capability: (major * 10 + minor) as u32,
            sm_count: a(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            smem_per_block_optin: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            smem_per_sm: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
            regs_per_sm: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
            max_threads_per_sm: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
            max_blocks_per_sm: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)?,
            l2_bytes: a(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
            max_grid_y: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
        };
        let name = ctx.name()?;
        let driver_version = crate::driver_ext::driver_version()?;
        Ok(Gpu {
            shared: Arc::new(Shared {
                ctx,
                props,
                name,
                driver_version,
                modules: Mutex::new(HashMap::new()),
                functions: Mutex::new(HashMap::new()),
                name_lookups: Default::default(),
                kernels: Mutex::new(HashMap::new()),
                local_bytes: Mutex::new(HashMap::new()),
                state: Mutex::new(HashMap::new()),
                first_stream: OnceLock::new(),
                queue: Mutex::new(()),
            }),
            stream,
            options: Default::default(),
        })
    }

    /// This device's value of type `T`, made with `T::default()` on first use and shared by all
    /// its handles: how the layers above keep per-device state (the launch workspace, the
    /// autotuner, graph captures) without this module knowing their types.
    pub(crate) fn state<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut map = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let any = map
            .entry(std::any::TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()))
            .clone();
        any.downcast::<T>()
            .expect("the state map holds values under their own type id")
    }

    /// The device's launch-queue lock: held while queuing work that reads or writes the
    /// shared GEMM workspaces, so that one thread's sequence (a GEMM and the norm finishing
    /// kernel reading the statistics it left there) is never split by another thread's work
    /// on the same stream, a graph replay included. A poisoned lock only means a panic while
    /// queuing; the order it protects is still sound.
    pub(crate) fn queue_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device's name as the driver reports it.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The CUDA version the driver supports, major·1000 + minor·10 (13000 for CUDA 13.0).
    pub fn driver_version(&self) -> u32 {
        self.shared.driver_version
    }

    /// Limits read off the device.
    pub fn props(&self) -> &DeviceProps {
        &self.shared.props
    }

    /// The cudarc context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.shared.ctx
    }

    /// The stream launches go to: the context's default stream for a `Gpu` from [`Gpu::new`],
    /// the chosen stream for one from [`Gpu::on`].
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// This handle's stream as a [`Stream`].
    pub fn current_stream(&self) -> Stream {
        Stream {
            inner: self.stream.clone(),
        }
    }

    /// A new stream on this device.
    ///
    /// Note: the first extra stream switches cudarc into multi-stream mode, where buffers
    /// passed to launches record events so that other streams wait for them.
    pub fn new_stream(&self) -> Result<Stream> {
        self.keep_first_stream()?;
        Ok(Stream {
            inner: self.shared.ctx.new_stream()?,
        })
    }

    /// Makes the context's first extra stream, once per `Gpu` and kept for its lifetime:
    /// cudarc synchronizes the whole context when it makes a `CudaContext`'s first stream, so
    /// this waits while another thread captures a graph on the device. Later streams are
    /// made without synchronizing.
    pub(crate) fn keep_first_stream(&self) -> Result<()> {
        let (ctx, first) = (&self.shared.ctx, &self.shared.first_stream);
        if first.get().is_some() {
            return Ok(());
        }
        let key = ctx.cu_ctx() as usize;
        outside_captures_keyed(
            key,
            CAPTURE_WAIT,
            || first.get().is_none(),
            || {
                if first.get().is_none() {
                    let _ = first.set(ctx.new_stream()?);
                }
                Ok(())
            },
        )
    }

    /// A handle to the same device (same caches) whose launches, uploads and downloads go to
    /// `stream`. Order it against this handle's stream with [`Stream::wait_for`].
    pub fn on(&self, stream: &Stream) -> Gpu {
        Gpu {
            shared: self.shared.clone(),
            stream: stream.inner.clone(),
            options: self.options,
        }
    }

    /// This handle (device and options) on a cudarc stream of its context.
    pub(crate) fn on_stream(&self, stream: Arc<CudaStream>) -> Gpu {
        Gpu {
            stream,
            ..self.clone()
        }
    }

    /// A handle to the same device and stream whose GEMM launches follow `options` (a forced
    /// tile, split-K factor or path); the default options leave every choice to the planner.
    pub fn with_options(&self, options: crate::options::LaunchOptions) -> Gpu {
        Gpu {
            options,
            ..self.clone()
        }
    }

    /// The launch options of this handle.
    pub fn options(&self) -> &crate::options::LaunchOptions {
        &self.options
    }

    /// Waits for all work on the stream.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    /// The arch of the module that `set` loads on this device.
    ///
    /// # Errors
    /// [`Error::UnsupportedArch`] when every module in `set` targets a newer arch than the
    /// device (or an `a` arch of another device), [`Error::PtxNotBuilt`] for an empty set.
    pub fn module_arch(&self, set: &'static PtxSet) -> Result<crate::module::Arch> {
        Ok(set.select(self.shared.props.compute_capability)?.arch)
    }

    /// Looks up kernel `name` in `set`, loading the module for this device's arch on first use.
    ///
    /// # Errors
    /// [`Error::PtxNotBuilt`], [`Error::UnsupportedArch`], [`Error::KernelNotFound`], or the
    /// driver's error when the PTX does not load (JIT failure).
    pub fn function(&self, set: &'static PtxSet, name: &str) -> Result<CudaFunction> {
        self.shared
            .name_lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = (set as *const PtxSet as usize, name.to_owned());
        if let Some(f) = self
            .shared
            .functions
            .lock()
            .expect("function cache poisoned")
            .get(&key)
        {
            return Ok(f.clone());
        }
        let (module, arch) = self.module(set)?;
        // The driver may load the function's code now (lazy loading), which must not happen
        // while another thread captures a graph on this context: see `Gpu::module`.
        outside_captures(&self.shared.ctx, || {
            let mut functions = self
                .shared
                .functions
                .lock()
                .expect("function cache poisoned");
            if let Some(f) = functions.get(&key) {
                return Ok(f.clone());
            }
            let f = module.load_function(name).map_err(|e| {
                if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_FOUND {
                    Error::KernelNotFound {
                        name: name.to_owned(),
                        crate_name: set.crate_name,
                        arch,
                    }
                } else {
                    Error::Driver(e)
                }
            })?;
            // Under lazy loading (CUDA's default) the code is otherwise loaded at the first
            // launch, outside this guard. `cuFuncLoad` is new in CUDA 12.4: calling it on an
            // older driver would panic in cudarc's symbol lookup.
            if self.shared.driver_version >= FUNC_LOAD_DRIVER {
                crate::driver_ext::func_load(&f)?;
            }
            count_load();
            functions.insert(key, f.clone());
            Ok(f)
        })
    }

    /// How many times an entry point was looked up by name on this device ([`Gpu::function`]);
    /// launches through a kernel's launcher look up each entry point once, then index.
    pub fn name_lookups(&self) -> u64 {
        self.shared
            .name_lookups
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Entry point `slot` (of `slots`) of the kernel whose static description is at `kernel`:
    /// looked up by `name` in `set` on first use, then read from a table indexed by slot.
    pub(crate) fn kernel_function(
        &self,
        set: &'static PtxSet,
        kernel: *const (),
        (slot, slots): (usize, usize),
        name: &str,
    ) -> Result<CudaFunction> {
        let table = self
            .shared
            .kernels
            .lock()
            .expect("kernel table poisoned")
            .entry(kernel as usize)
            .or_insert_with(|| (0..slots).map(|_| std::sync::OnceLock::new()).collect())
            .clone();
        let cell = table.get(slot).ok_or_else(|| {
            Error::LaunchLimit(format!("entry point slot {slot} of {slots} for `{name}`"))
        })?;
        if let Some(f) = cell.get() {
            return Ok(f.clone());
        }
        let f = self.function(set, name)?;
        Ok(cell.get_or_init(|| f).clone())
    }

    /// Bytes of local memory per thread (spills, stack arrays) of `entry` in `set`'s module for
    /// this device, as ptxas compiled it (`CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`); 0 where the
    /// entry is missing or the driver cannot say. Asked once per entry, then cached: launch
    /// planning reads it for every candidate tile.
    pub fn local_bytes(&self, set: &'static PtxSet, entry: &'static str) -> i32 {
        let key = (set as *const PtxSet as usize, entry);
        let cache = || {
            self.shared
                .local_bytes
                .lock()
                .expect("local-memory cache poisoned")
        };
        if let Some(&b) = cache().get(&key) {
            return b;
        }
        let b = self
            .function(set, entry)
            .ok()
            .and_then(|f| f.local_size_bytes().ok())
            .unwrap_or(0);
        cache().insert(key, b);
        b
    }

    /// `set`'s module for this device, loaded on first use. Loading allocates device memory for
    /// the code and may synchronize the context, which invalidates a graph capture in progress
    /// on another thread: the load waits until no other thread captures on this context, and no
    /// capture begins during it ([`outside_captures`]).
    fn module(&self, set: &'static PtxSet) -> Result<(Arc<CudaModule>, &'static str)> {
        let key = set as *const PtxSet as usize;
        let cached = self
            .shared
            .modules
            .lock()
            .expect("module cache poisoned")
            .get(&key)
            .cloned();
        match cached {
            Some(m) => Ok(m),
            None => outside_captures(&self.shared.ctx, || self.load_module(set, key)),
        }
    }

    /// `set`'s module from the cache, or loaded and cached under `key` (another thread may have
    /// loaded it since the caller looked).
    fn load_module(
        &self,
        set: &'static PtxSet,
        key: usize,
    ) -> Result<(Arc<CudaModule>, &'static str)> {
        let mut modules = self.shared.modules.lock().expect("module cache poisoned");
        if let Some(m) = modules.get(&key) {
            return Ok(m.clone());
        }
        let chosen = set.select(self.shared.props.compute_capability)?;
        // Machine code for this arch loads without the driver's JIT; otherwise the PTX.
        let cc = self.shared.props.compute_capability;
        let image = if chosen.cubin_runs_on(cc) {
            cudarc::nvrtc::Ptx::from_binary(
                chosen
                    .cubin
                    .bytes(set.crate_name, chosen.arch.name())?
                    .into_owned(),
            )
        } else {
            cudarc::nvrtc::Ptx::from_src(chosen.ptx_text(set.crate_name)?)
        };
        let module = self.shared.ctx.load_module(image)?;
        count_load();
        modules.insert(key, (module.clone(), chosen.arch.name()));
        Ok((module, chosen.arch.name()))
    }

    /// Copies `data` to a new device buffer.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the device cannot hold it (checked first, and mapped from the
    /// driver's `CUDA_ERROR_OUT_OF_MEMORY`).
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        let bytes = self.check_alloc::<T>(data.len())?;
        self.stream
            .clone_htod(data)
            .map_err(|e| Error::from_alloc(e, bytes))
    }

    /// A new zeroed device buffer of `len` elements.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] as [`Gpu::upload`].
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>> {
        let bytes = self.check_alloc::<T>(len)?;
        self.stream
            .alloc_zeros(len)
            .map_err(|e| Error::from_alloc(e, bytes))
    }

    /// Copies a device buffer back to the host (synchronizes the stream).
    pub fn download<T: DeviceRepr + Default + Clone>(&self, buf: &CudaSlice<T>) -> Result<Vec<T>> {
        Ok(self.stream.clone_dtoh(buf)?)
    }

    /// Bytes of `len` elements of `T`, or [`Error::OutOfMemory`] when that exceeds the device's
    /// free memory (or `usize`).
    pub(crate) fn check_alloc<T>(&self, len: usize) -> Result<usize> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::OutOfMemory { bytes: usize::MAX })?;
        let (free, _) = self.shared.ctx.mem_get_info()?;
        if bytes > free {
            return Err(Error::OutOfMemory { bytes });
        }
        Ok(bytes)
    }
}

impl Gpu {
    /// Median time of one call of `launch`, milliseconds, measured with CUDA events on this
    /// handle's stream: `warmup` untimed calls, then `reps` timed ones (at least one).
    ///
    /// # Errors
    /// The first error `launch` returns; driver errors.
    pub fn time_ms(
        &self,
        warmup: usize,
        reps: usize,
        mut launch: impl FnMut(&Gpu) -> Result<()>,
    ) -> Result<f32> {
        for _ in 0..warmup {
            launch(self)?;
        }
        let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut events = Vec::with_capacity(reps.max(1));
        for _ in 0..reps.max(1) {
            let start = self.stream.record_event(timing)?;
            launch(self)?;
            let end = self.stream.record_event(timing)?;
            events.push((start, end));
        }
        let mut ms = events
            .iter()
            .map(|(s, e)| s.elapsed_ms(e))
            .collect::<std::result::Result<Vec<f32>, _>>()?;
        ms.sort_by(f32::total_cmp);
        Ok(ms[ms.len() / 2])
    }

    /// Median time per launch of each of `count` workloads, ms. `run(i, gpu)` queues workload
    /// `i` on `gpu` (this handle) and returns how many launches it queued. Every round queues
    /// all workloads, each between CUDA events on this handle's stream, starting one later each
    /// round (A B C, B C A, C A B, …), so that clock changes, other work on the device and a
    /// round's start from an empty queue fall on all of them alike; a round is read back after
    /// all of it is queued. Rounds are untimed until the workloads have taken `warmup_ms` of
    /// device time (at least one round), then `rounds` (at least one) are timed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `warmup_ms` is not finite or is negative (the warm-up
    /// would never end); `run`'s first error; the first timing's driver error.
    pub fn time_rounds(
        &self,
        count: usize,
        warmup_ms: f32,
        rounds: usize,
        mut run: impl FnMut(usize, &Gpu) -> Result<usize>,
    ) -> Result<Vec<f32>> {
        if !(warmup_ms.is_finite() && warmup_ms >= 0.0) {
            return Err(Error::invalid(
                "warmup_ms",
                "a finite number of milliseconds ≥ 0",
                warmup_ms,
            ));
        }
        let rounds = rounds.max(1);
        let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut samples = vec![Vec::with_capacity(rounds); count];
        let (mut warm_ms, mut warming, mut timed, mut first) = (0.0f32, true, 0, 0);
        while timed < rounds && count > 0 {
            let mut events = Vec::with_capacity(count);
            for j in 0..count {
                let i = (first + j) % count;
                let start = self.stream.record_event(timing)?;
                let launches = run(i, self)?;
                let end = self.stream.record_event(timing)?;
                events.push((i, launches, start, end));
            }
            first = (first + 1) % count;
            for (i, launches, start, end) in events {
                let ms = start.elapsed_ms(&end)?;
                warm_ms += ms;
                if !warming {
                    samples[i].push(ms / launches.max(1) as f32);
                }
            }
            if warming {
                // NaN or a stuck clock must not keep the warm-up going for ever.
                warming = warm_ms < warmup_ms && warm_ms.is_finite() && warm_ms > 0.0;
            } else {
                timed += 1;
            }
        }
        Ok(samples
            .into_iter()
            .map(|mut v| {
                v.sort_by(f32::total_cmp);
                v[v.len() / 2]
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    /// Keys no CUDA context has (context handles are aligned pointers).
    const KEY: usize = 0x11;
    const OTHER_KEY: usize = 0x13;

    #[test]
    fn device_synchronizes_wait_for_another_threads_capture() {
        let ended = Arc::new(AtomicBool::new(false));
        let (began_tx, began_rx) = std::sync::mpsc::channel();
        let capturing = {
            let ended = ended.clone();
            std::thread::spawn(move || {
                let capture = CaptureInProgress::begin_keyed(KEY);
                began_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(200));
                ended.store(true, Ordering::SeqCst);
                drop(capture);
            })
        };
        began_rx.recv().unwrap();
        // Another context does not wait; this one waits for the capture's end.
        assert!(outside_captures_keyed(
            OTHER_KEY,
            CAPTURE_WAIT,
            || true,
            || { !ended.load(Ordering::SeqCst) }
        ));
        assert!(outside_captures_keyed(
            KEY,
            CAPTURE_WAIT,
            || true,
            || { ended.load(Ordering::SeqCst) }
        ));
        capturing.join().unwrap();
        assert!(!contexts().contains_key(&KEY));
    }

    #[test]
    fn captures_wait_for_a_running_synchronize_and_waits_are_per_context() {
        let (k1, k2) = (KEY + 0x200, KEY + 0x300);
        // A capture on k1 here: a synchronize of k2 on this thread still waits for k2's
        // capture on another thread, and one that is no longer needed does not wait.
        let mine = CaptureInProgress::begin_keyed(k1);
        let (began_tx, began_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let c = CaptureInProgress::begin_keyed(k2);
            began_tx.send(()).unwrap();
            end_rx.recv().unwrap();
            drop(c);
        });
        began_rx.recv().unwrap();
        let t = Instant::now();
        outside_captures_keyed(k2, Duration::from_millis(150), || true, || ());
        assert!(t.elapsed() >= Duration::from_millis(150));
        let t = Instant::now();
        outside_captures_keyed(k2, CAPTURE_WAIT, || false, || ());
        assert!(t.elapsed() < Duration::from_secs(1));
        end_tx.send(()).unwrap();
        other.join().unwrap();
        drop(mine);
        // A capture does not begin while a synchronize of its context runs.
        let synced = Arc::new(AtomicBool::new(false));
        let (in_sync_tx, in_sync_rx) = std::sync::mpsc::channel();
        let syncing = {
            let synced = synced.clone();
            std::thread::spawn(move || {
                outside_captures_keyed(
                    k1,
                    CAPTURE_WAIT,
                    || true,
                    || {
                        in_sync_tx.send(()).unwrap();
                        std::thread::sleep(Duration::from_millis(200));
                        synced.store(true, Ordering::SeqCst);
                    },
                )
            })
        };
        in_sync_rx.recv().unwrap();
        let c = CaptureInProgress::begin_keyed(k1);
        assert!(
            synced.load(Ordering::SeqCst),
            "a capture began during a synchronize"
        );
        drop(c);
        syncing.join().unwrap();
        assert!(!contexts().contains_key(&k1) && !contexts().contains_key(&k2));
    }

    /// Captures overlapping on other threads never starve a waiting synchronize: once it
    /// waits, new captures wait for it, so the ones in progress drain and it runs well before
    /// its patience ends.
    #[test]
    fn a_waiting_synchronize_holds_back_new_captures() {
        let key = KEY + 0x400;
        let stop = Arc::new(AtomicBool::new(false));
        // Four threads capturing back to back, each capture overlapping the others'.
        let capturers: Vec<_> = (0..4)
            .map(|i| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(5 * i));
                    while !stop.load(Ordering::SeqCst) {
                        let c = CaptureInProgress::begin_keyed(key);
                        std::thread::sleep(Duration::from_millis(20));
                        drop(c);
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        let during = outside_captures_keyed(
            key,
            Duration::from_secs(5),
            || true,
            || contexts().get(&key).map_or(0, |u| u.captures),
        );
        let waited = t.elapsed();
        stop.store(true, Ordering::SeqCst);
        capturers.into_iter().for_each(|c| c.join().unwrap());
        assert_eq!(
            during, 0,
            "the call ran during a capture (after {waited:?})"
        );
        // The captures in progress drain in about one capture's length (20 ms).
        assert!(waited < Duration::from_millis(300), "{waited:?}");
        assert!(!contexts().contains_key(&key));
    }

    #[test]
    fn a_capturing_thread_does_not_wait_for_itself_and_waits_are_bounded() {
        let capture = CaptureInProgress::begin_keyed(KEY + 0x100);
        let t = Instant::now();
        assert_eq!(
            outside_captures_keyed(KEY + 0x100, CAPTURE_WAIT, || true, || 7),
            7
        );
        assert!(t.elapsed() < Duration::from_secs(1));
        // Another thread gives up after its patience and runs the call anyway.
        let waited = std::thread::spawn(|| {
            let t = Instant::now();
            outside_captures_keyed(
                KEY + 0x100,
                Duration::from_millis(100),
                || true,
                || t.elapsed(),
            )
        })
        .join()
        .unwrap();
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
        drop(capture);
        assert!(!contexts().contains_key(&(KEY + 0x100)));
    }
}
