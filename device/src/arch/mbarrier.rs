//! Shared-memory barriers with phases (`mbarrier`, PTX ISA §9.7.13.15), sm_90.
//!
//! # Model
//!
//! An mbarrier is a 64-bit object in shared memory with an expected arrival count, a pending
//! transaction count (bytes) and a phase bit. A phase completes when every expected arrival has
//! happened and the transaction count is back to zero; the barrier then resets its counts and
//! moves to the next phase. A producer/consumer ring uses two per stage: `full` (one arrival
//! with [`arrive_expect_tx`] by the producer; TMA copies complete the bytes) and `empty` (one
//! arrival per consumer warp once its MMAs have read the stage).
//!
//! Waiting is by parity: [`wait_parity`]`(bar, p)` returns once the phase with parity `p` has
//! completed. A fresh barrier is in phase 0, so waiting for parity 1 returns at once (the
//! "previous" phase counts as complete): producers wait on `empty` with the inverted parity and
//! so find every stage free on their first lap.
//!
//! Addresses are `.shared` window addresses ([`super::shared::shared_addr`]), 8-byte aligned.

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// Nanoseconds a wait may take before the kernel traps: no correct launch waits this long on
/// one barrier phase, so a lost arrival becomes `CUDA_ERROR_LAUNCH_FAILED` instead of a hang.
pub const WAIT_TIMEOUT_NS: u64 = 10_000_000_000;

/// `mbarrier.init.shared::cta.b64 [bar], count`: a barrier in phase 0 expecting `count`
/// arrivals per phase.
///
/// # Safety
/// `bar` is an 8-byte aligned `.shared` address that no thread uses as a barrier until a CTA
/// barrier after [`fence_init`] orders the initialisation before them.
#[inline(always)]
pub unsafe fn init(bar: u32, count: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!("mbarrier.init.shared::cta.b64 [{b}], {c};", b = in(reg32) bar, c = in(reg32) count, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (bar, count);
        super::host_unreachable("mbarrier::init")
    }
}

/// `fence.mbarrier_init.release.cluster`: makes this thread's [`init`]s visible to the other
/// threads and to the async proxy (TMA completes transactions on the barriers).
#[inline(always)]
pub fn fence_init() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("fence.mbarrier_init.release.cluster;", options(nostack))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    super::host_unreachable("mbarrier::fence_init")
}

/// `mbarrier.arrive.release.cta.shared::cta.b64 _, [bar]`: one arrival; this thread's earlier
/// shared-memory reads and writes happen before the phase completes.
///
/// # Safety
/// `bar` is an initialised barrier that still expects an arrival in its current phase.
#[inline(always)]
pub unsafe fn arrive(bar: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!("mbarrier.arrive.release.cta.shared::cta.b64 _, [{b}];", b = in(reg32) bar, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = bar;
        super::host_unreachable("mbarrier::arrive")
    }
}

/// `mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [bar], bytes`: adds `bytes` to the
/// phase's pending transactions, then arrives. The phase completes once asynchronous copies
/// naming this barrier (`mbarrier::complete_tx::bytes`) have delivered that many bytes.
///
/// # Safety
/// As [`arrive`]; `bytes` < 2²⁰.
#[inline(always)]
pub unsafe fn arrive_expect_tx(bar: u32, bytes: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [{b}], {n};", b = in(reg32) bar, n = in(reg32) bytes, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (bar, bytes);
        super::host_unreachable("mbarrier::arrive_expect_tx")
    }
}

/// `mbarrier.try_wait.parity.acquire.cta.shared::cta.b64`: whether the phase with parity
/// `parity` has completed, after waiting a hardware-chosen time for it. On `true` the writes
/// that completed the phase (including TMA's) are visible to this thread.
///
/// # Safety
/// `bar` is an initialised barrier.
#[inline(always)]
pub unsafe fn try_wait_parity(bar: u32, parity: u32) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let done: u32;
        asm!(
            "{{ .reg .pred p; mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [{b}], {ph}; selp.u32 {d}, 1, 0, p; }}",
            b = in(reg32) bar, ph = in(reg32) parity, d = out(reg32) done, options(nostack)
        );
        done != 0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (bar, parity);
        super::host_unreachable("mbarrier::try_wait_parity")
    }
}

/// [`try_wait_parity`] with cluster-scope acquire: also orders this thread after arrivals
/// other CTAs of the cluster made with [`arrive_remote`].
///
/// # Safety
/// As [`try_wait_parity`].
#[inline(always)]
pub unsafe fn try_wait_parity_cluster(bar: u32, parity: u32) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let done: u32;
        asm!(
            "{{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [{b}], {ph}; selp.u32 {d}, 1, 0, p; }}",
            b = in(reg32) bar, ph = in(reg32) parity, d = out(reg32) done, options(nostack)
        );
        done != 0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (bar, parity);
        super::host_unreachable("mbarrier::try_wait_parity_cluster")
    }
}

/// Waits until the phase with parity `parity` of `bar` has completed (see the [module
/// docs](self)). Traps after [`WAIT_TIMEOUT_NS`] so a protocol error cannot hang the GPU.
///
/// # Safety
/// As [`try_wait_parity`].
#[inline(always)]
pub unsafe fn wait_parity(bar: u32, parity: u32) {
    wait_with(bar, parity, |b, p| unsafe { try_wait_parity(b, p) })
}

/// [`wait_parity`] with cluster-scope acquire ([`try_wait_parity_cluster`]).
///
/// # Safety
/// As [`try_wait_parity`].
#[inline(always)]
pub unsafe fn wait_parity_cluster(bar: u32, parity: u32) {
    wait_with(bar, parity, |b, p| unsafe { try_wait_parity_cluster(b, p) })
}

#[inline(always)]
fn wait_with(bar: u32, parity: u32, try_wait: impl Fn(u32, u32) -> bool) {
    // Inline, slow path included: a call here would make ptxas save the live wgmma
    // accumulators around it.
    if try_wait(bar, parity) {
        return;
    }
    let start = global_timer_ns();
    while !try_wait(bar, parity) {
        if global_timer_ns().wrapping_sub(start) > WAIT_TIMEOUT_NS {
            super::trap();
        }
    }
}

/// `mapa` + `mbarrier.arrive.release.cluster.shared::cluster.b64`: one arrival on the barrier
/// at the same offset as `bar` in the shared memory of CTA `rank` of this cluster, ordered after
/// this thread's earlier writes at cluster scope (a peer that waits with
/// [`wait_parity_cluster`] then sees them, e.g. row statistics stored into its shared memory).
/// Costs a GPU-scope memory barrier; see [`arrive_remote_cta`] for pure signals.
///
/// # Safety
/// The kernel runs in clusters with a CTA of that rank, whose barrier is initialised (a
/// cluster barrier after the initialisation) and still expects the arrival; that CTA has not
/// exited.
#[inline(always)]
pub unsafe fn arrive_remote(bar: u32, rank: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!(
        "{{ .reg .b32 ra; mapa.shared::cluster.u32 ra, {b}, {r}; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra]; }}",
        b = in(reg32) bar, r = in(reg32) rank, options(nostack)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (bar, rank);
        super::host_unreachable("mbarrier::arrive_remote")
    }
}

/// `mapa` + `mbarrier.arrive.release.cta.shared::cluster.b64`: one arrival on the barrier at the
/// same offset as `bar` in the shared memory of CTA `rank`, with no cluster-scope ordering of
/// this thread's earlier memory operations. For signals that carry no data of this thread's
/// generic-proxy writes, such as a ring stage whose `wgmma` reads `wgmma.wait_group` already
/// completed (CUTLASS's `ClusterBarrier::arrive(cta_id)` has the same form). The cluster-scope
/// release of [`arrive_remote`] compiles to `MEMBAR.ALL.GPU` before the arrival: issued per
/// k-tile by every consumer warp, it stalled the 2-CTA cluster tile half of its cycles.
///
/// # Safety
/// As [`arrive_remote`].
#[inline(always)]
pub unsafe fn arrive_remote_cta(bar: u32, rank: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!(
        "{{ .reg .b32 ra; mapa.shared::cluster.u32 ra, {b}, {r}; mbarrier.arrive.release.cta.shared::cluster.b64 _, [ra]; }}",
        b = in(reg32) bar, r = in(reg32) rank, options(nostack)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (bar, rank);
        super::host_unreachable("mbarrier::arrive_remote_cta")
    }
}

/// This CTA's rank in its cluster (`%cluster_ctarank`), 0 without clusters.
#[inline(always)]
pub fn cluster_ctarank() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let r: u32;
        asm!("mov.u32 {r}, %cluster_ctarank;", r = out(reg32) r, options(nomem, nostack));
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    super::host_unreachable("cluster_ctarank")
}

/// `barrier.cluster.arrive.release` + `barrier.cluster.wait.acquire` (PTX ISA §9.7.13.3): every
/// thread of every CTA of the cluster waits for all the others; orders the barrier
/// initialisations before remote arrivals and multicast copies. Not `.aligned`: LLVM may copy
/// this `asm` into both sides of a branch on the thread index (the kernels call it after thread
/// 0's barrier initialisation), which `.aligned` forbids (see
/// [`named_barrier`](crate::arch::sync::named_barrier)).
///
/// # Safety
/// Every thread of the cluster executes it, or the cluster hangs.
#[inline(always)]
pub unsafe fn cluster_sync() {
    #[cfg(target_arch = "nvptx64")]
    asm!(
        "barrier.cluster.arrive.release; barrier.cluster.wait.acquire;",
        options(nostack)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    super::host_unreachable("cluster_sync")
}

/// `%globaltimer`: a nanosecond clock shared by the whole GPU.
#[inline(always)]
pub fn global_timer_ns() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        let t: u64;
        asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack));
        t
    }
    #[cfg(not(target_arch = "nvptx64"))]
    super::host_unreachable("global_timer_ns")
}
