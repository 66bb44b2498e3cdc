//! CUDA graphs: record a sequence of launches once, replay it with one call.
//!
//! [`Gpu::capture`] runs a closure that launches through the [`Gpu`] handle it is given; the
//! launches are recorded (stream capture, `cuStreamBeginCapture` in relaxed mode, on a stream
//! of its own because the legacy default stream cannot be captured), not run, and instantiated
//! as a [`Graph`]. [`Graph::replay`] runs the whole sequence, ordered after the work already
//! queued on the capturing `Gpu`'s stream and before the work queued after it.
//!
//! # Hazards
//! - A graph holds the device addresses its launches were given, not the buffers: every buffer
//!   used inside the closure must outlive the graph, and replays see the buffers' current
//!   contents (that is the point: refill inputs, replay, read outputs).
//! - Inside the closure launch only through the handle passed in. Allocations there become
//!   graph nodes. The GEMM workspaces are the exception: one that a captured launch grows is
//!   allocated outside the capture, and the workspaces a graph uses stay allocated when later
//!   launches grow them ([`crate::launch::workspace::Growing`]). Host↔device copies of pageable memory
//!   cannot be captured (the driver's error is returned).
//! - Captures on several threads are safe: relaxed mode lets other threads make calls a
//!   capture forbids on its own thread, and the calls that would synchronize the whole device
//!   (dropping the last handle of a [`Gpu`], a schedule's buffers, a context's first extra
//!   stream, loading a kernel's code) wait until the device's captures have ended. A launch
//!   queues nothing while it waits so (it resolves its kernels before taking the device's
//!   queue and workspace locks, which a capturing thread may need). Only a thread that is
//!   itself capturing loads at once; a capture that fails while code was loaded is recorded
//!   again ([`Gpu::capture`]).
//! - A replay is queued under the device's launch-queue lock, as every GEMM launch is: a launch
//!   that finishes a row norm in a second kernel reads statistics its GEMM left in the shared
//!   workspace, and a replay queued between the two by another thread would overwrite them.
//! - cudarc's per-buffer event tracking is paused during the capture (waits on events recorded
//!   outside a capture are illegal inside it); it is restored afterwards, also on error. With
//!   captures on several threads of one device it stays paused until the last has ended.

use cudarc::driver::CudaGraph;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};

use crate::gpu::CaptureInProgress;
use crate::{Error, Gpu, Result};

/// Recordings [`Gpu::capture`] makes of one graph at most: a first use of kernels by the
/// closure, and another thread's loads, can each fail one.
pub const CAPTURE_ATTEMPTS: u32 = 4;

/// An instantiated CUDA graph, replayable on the stream of the [`Gpu`] that captured it. It
/// keeps the device's shared state alive (loaded modules, GEMM workspaces, tensor maps), whose
/// addresses its launches hold, even after every [`Gpu`] handle is dropped.
pub struct Graph {
    /// Holds the capture's own stream, which replays do not use.
    graph: CudaGraph,
    /// The capturing handle: replays run on its stream, queued under its
    /// [`Gpu::queue_lock`] as every GEMM launch is, so that a replay never lands between
    /// another thread's GEMM and the norm finishing kernel reading the statistics that GEMM
    /// left in the shared workspace. It also keeps the device's shared state alive.
    gpu: Gpu,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("exec", &self.graph.cu_graph_exec())
            .finish()
    }
}

/// One capture in progress: event tracking is off from the first of a device's concurrent
/// captures until the last has ended, and then restored as the first found it.
struct Tracking {
    ctx: std::sync::Arc<cudarc::driver::CudaContext>,
    captures: std::sync::Arc<Captures>,
}

/// Stream captures in progress on a device and whether cudarc's event tracking was on before
/// the first of them (the device's [`Gpu::state`]).
#[derive(Default)]
struct Captures(std::sync::Mutex<(usize, bool)>);

impl Tracking {
    fn begin(gpu: &Gpu) -> Tracking {
        let (ctx, captures) = (gpu.context().clone(), gpu.state::<Captures>());
        let mut c = captures.0.lock().unwrap_or_else(|e| e.into_inner());
        if c.0 == 0 {
            c.1 = ctx.is_event_tracking();
            // SAFETY: during a capture all recorded work is on its one stream, so cudarc need
            // not order buffers across streams; the last capture to end restores the flag.
            unsafe { ctx.disable_event_tracking() };
        }
        c.0 += 1;
        drop(c);
        Tracking { ctx, captures }
    }
}

impl Drop for Tracking {
    fn drop(&mut self) {
        let mut c = self.captures.0.lock().unwrap_or_else(|e| e.into_inner());
        c.0 -= 1;
        if c.0 == 0 && c.1 {
            // SAFETY: restores the state found before the first capture.
            unsafe { self.ctx.enable_event_tracking() };
        }
    }
}

impl Gpu {
    /// Records the launches `record` makes through the handle it is given into a CUDA graph.
    /// Nothing runs on the device until [`Graph::replay`]. See the [module docs](crate::graph)
    /// for what a closure may do.
    ///
    /// `record` runs again (at most [`CAPTURE_ATTEMPTS`] times in all) when a recording fails
    /// with the driver's capture errors while a kernel module or function was loaded: the
    /// first launch of a kernel inside a capture loads its code, which the driver does not
    /// allow during captures, this one's or another thread's; on the next attempt it is loaded.
    ///
    /// # Errors
    /// The closure's error (the partial capture is discarded); [`Error::Capture`] when the
    /// driver invalidates the capture or returns no graph; driver errors.
    pub fn capture(&self, mut record: impl FnMut(&Gpu) -> Result<()>) -> Result<Graph> {
        let mut attempt = 1;
        loop {
            let loads = crate::gpu::loads();
            match self.capture_once(&mut record) {
                Err(e)
                    if attempt < CAPTURE_ATTEMPTS
                        && e.is_capture_failure()
                        && crate::gpu::loads() != loads =>
                {
                    attempt += 1;
                }
                done => return done,
            }
        }
    }

    fn capture_once(&self, record: &mut impl FnMut(&Gpu) -> Result<()>) -> Result<Graph> {
        // The context's first stream is made (and kept) before the capture; the capture's own
        // stream, made after it, does not synchronize the context and is dropped with the
        // graph (or at once, when the closure fails).
        self.keep_first_stream()?;
        let stream = self.context().new_stream()?;
        let in_progress = CaptureInProgress::begin(self.context());
        let tracking = Tracking::begin(self);
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        let handle = self.on_stream(stream.clone());
        let recorded = record(&handle);
        let ended = stream.end_capture(CUgraphInstantiate_flags(0));
        drop(tracking);
        drop(in_progress);
        recorded?;
        match ended {
            Ok(Some(graph)) => Ok(Graph {
                graph,
                gpu: self.clone(),
            }),
            Ok(None) => Err(Error::Capture("the driver returned no graph".into())),
            Err(e) => Err(Error::Capture(format!("ending the capture failed: {e}"))),
        }
    }
}

impl Graph {
    /// Runs the recorded launches once, ordered after the work queued so far on the capturing
    /// `Gpu`'s stream; work queued there afterwards waits for the replay. Does not block the
    /// host.
    ///
    /// # Errors
    /// Driver errors.
    pub fn replay(&self) -> Result<()> {
        // On the capturing handle's stream itself: the replay is ordered with every launch
        // there, also those of other threads sharing the handle, which use the same GEMM
        // workspace. (Ordered by events from the capture's own stream, a launch that another
        // thread queued between the two waits ran beside the replay.)
        self.on_origin(cudarc::driver::result::graph::launch)
    }

    /// Uploads the graph's resources so the first replay does not pay for it.
    pub fn upload(&self) -> Result<()> {
        self.on_origin(cudarc::driver::result::graph::upload)
    }

    /// Calls the driver's `op` (launch or upload) with the executable graph and the capturing
    /// handle's stream.
    fn on_origin(
        &self,
        op: unsafe fn(
            cudarc::driver::sys::CUgraphExec,
            cudarc::driver::sys::CUstream,
        ) -> std::result::Result<(), cudarc::driver::DriverError>,
    ) -> Result<()> {
        let origin = &self.gpu.stream;
        origin.context().bind_to_thread()?;
        let _queued = self.gpu.queue_lock();
        // SAFETY: the executable graph is alive (owned by `self.graph`) and `origin` is a
        // stream of the context it was instantiated in.
        unsafe { op(self.graph.cu_graph_exec(), origin.cu_stream()) }?;
        Ok(())
    }
}

impl Gpu {
    /// Median time per launch of each graph, ms, as `(graph, launches it holds)`: every round
    /// replays the graphs in turn, each between CUDA events on this handle's stream
    /// ([`Gpu::time_rounds`]), so that clock changes and other work on the device fall on all
    /// of them alike. Rounds are untimed until the replays have taken `warmup_ms` of device time
    /// (at least one round), then `rounds` (at least one) are timed. Used by the Hopper
    /// benchmark.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `warmup_ms` is not finite or is negative (the warm-up
    /// would never end); the first replay's or timing's driver error.
    pub fn time_interleaved(
        &self,
        graphs: &[(&Graph, usize)],
        warmup_ms: f32,
        rounds: usize,
    ) -> Result<Vec<f32>> {
        self.time_rounds(graphs.len(), warmup_ms, rounds, |i, _| {
            let (graph, launches) = graphs[i];
            graph.replay()?;
            Ok(launches)
        })
    }
}
