//! The tensor memory accelerator (TMA): bulk copies of 2-D tiles between global and shared
//! memory described by a tensor map (PTX ISA §9.7.9.27 `cp.async.bulk.tensor`, §5.5.8 tensor
//! maps), sm_90.
//!
//! A tensor map is the 128-byte `CUtensorMap` the host encodes with `cuTensorMapEncodeTiled`
//! (global address, sizes, strides, box, swizzle). Here it lives in global memory, written by
//! the host before the launch and never modified afterwards; each CTA runs
//! [`fence_tensormap_acquire`] once before its first copy (CUDA C++ Programming Guide, "Using
//! TMA to transfer multi-dimensional arrays": a map copied from the host needs a
//! `.sys`-scoped proxy fence). Copies complete on an mbarrier
//! ([`crate::arch::mbarrier::arrive_expect_tx`]); out-of-bounds elements of the box are written
//! as zeros and still count towards the transaction bytes.

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// `cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes`: copies
/// the box whose first element is at `(x, y)` (x the contiguous dimension, in elements; y the
/// row) of the tensor `tmap` describes to `dst`, laid out (and swizzled) as the map says, and
/// completes its bytes on `bar`.
///
/// # Safety
/// `tmap` is the generic address of a valid tensor map in global memory that this thread has
/// fenced ([`fence_tensormap_acquire`]); `dst` is a `.shared` address aligned as the map's
/// swizzle requires (1024 bytes for 128-byte swizzle) with room for the whole box; `bar` is an
/// initialised mbarrier whose current phase expects these bytes.
#[inline(always)]
pub unsafe fn load_2d(dst: u32, tmap: u64, x: i32, y: i32, bar: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}}}], [{b}];",
        d = in(reg32) dst, m = in(reg64) tmap, x = in(reg32) x, y = in(reg32) y, b = in(reg32) bar,
        options(nostack)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (dst, tmap, x, y, bar);
        crate::arch::host_unreachable("tma::load_2d")
    }
}

/// [`load_2d`] multicast to the CTAs of this cluster whose ranks are set in `cta_mask`
/// (`.multicast::cluster`, sm_90a): the box lands at the same shared-memory offset as `dst` in
/// each of them and completes its bytes on the barrier at `bar`'s offset in each.
///
/// # Safety
/// As [`load_2d`], for every destination CTA (each expects the bytes on its own barrier and
/// has released the destination).
#[inline(always)]
pub unsafe fn load_2d_multicast(dst: u32, tmap: u64, x: i32, y: i32, bar: u32, cta_mask: u16) {
    #[cfg(target_arch = "nvptx64")]
    asm!(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [{d}], [{m}, {{{x}, {y}}}], [{b}], {k};",
        d = in(reg32) dst, m = in(reg64) tmap, x = in(reg32) x, y = in(reg32) y, b = in(reg32) bar,
        k = in(reg16) cta_mask,
        options(nostack)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (dst, tmap, x, y, bar, cta_mask);
        crate::arch::host_unreachable("tma::load_2d_multicast")
    }
}

/// `cp.async.bulk.tensor.2d.global.shared::cta.bulk_group` + `cp.async.bulk.commit_group`
/// (PTX ISA §9.7.9.27, sm_90), by this thread only when `issue`: stores the box at `src` (laid
/// out and swizzled as the map says) to the tensor `tmap` describes, first element at `(x, y)`
/// (x the contiguous dimension, in elements; y the row), and closes this thread's bulk
/// async-group. Elements outside the tensor are not written. Predicated inside one `asm` block,
/// so the caller has no branch on `issue` (LLVM may duplicate a neighbouring barrier into both
/// sides of a branch: it does not know a barrier must stay converged).
///
/// # Safety
/// For an issuing thread: `tmap` is the generic address of a valid tensor map in global memory
/// that it has fenced ([`fence_tensormap_acquire`]); `src` is a `.shared::cta` address aligned
/// as the map's swizzle requires, holding the whole box, whose writes by other threads were
/// made visible to the async proxy ([`fence_proxy_async_shared`] before a barrier), and which
/// nobody writes until [`bulk_read_wait_barrier`] has seen this copy read it.
#[inline(always)]
pub unsafe fn store_2d_commit_if(issue: bool, tmap: u64, src: u32, x: i32, y: i32) {
    #[cfg(target_arch = "nvptx64")]
    asm!(
        "{{ .reg .pred p; setp.ne.u32 p, {i}, 0;",
        "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [{m}, {{{x}, {y}}}], [{s}];",
        "@p cp.async.bulk.commit_group; }}",
        i = in(reg32) issue as u32, m = in(reg64) tmap, x = in(reg32) x, y = in(reg32) y,
        s = in(reg32) src,
        options(nostack)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (issue, tmap, src, x, y);
        crate::arch::host_unreachable("tma::store_2d_commit_if")
    }
}

/// Named barrier `id` of `threads` threads (`bar.sync id, threads`, PTX ISA §9.7.13.1; 0 is
/// `__syncthreads`'s), which this thread reaches, when `wait`, only after its bulk stores have
/// finished reading shared memory (`cp.async.bulk.wait_group.read 0`): once it passes, every
/// thread of the barrier may overwrite those sources. One `asm` block with the wait predicated,
/// so no branch surrounds the barrier (LLVM duplicated a barrier placed after `if wait { … }`
/// into both sides: two divergent `BAR.SYNC`s in the SASS, and a hang).
///
/// `bar.sync` is `.aligned`: every lane of a warp must reach the same copy of it. Rust's `asm!`
/// is not `convergent` to LLVM, which may still copy it into both sides of a branch on the
/// thread index. So no such branch comes just before it: write the branch's work as predicated
/// asm (as [`leader_arrive_counted`](crate::arch::atomic::leader_arrive_counted)), or, where
/// that cannot be done (a spin), use [`named_barrier`](crate::arch::sync::named_barrier). Not
/// that one by default: in a kernel, `barrier.sync` cost ping-pong GEMMs up to 35 % on an H100.
///
/// # Safety
/// Exactly `threads` threads (a multiple of 32), in whole converged warps, reach each use of
/// `id`, and no other barrier shares `id` meanwhile; otherwise the CTA hangs.
#[inline(always)]
pub unsafe fn bulk_read_wait_barrier(wait: bool, id: u32, threads: u32) {
    #[cfg(target_arch = "nvptx64")]
    asm!(
        "{{ .reg .pred p; setp.ne.u32 p, {w}, 0;",
        "@p cp.async.bulk.wait_group.read 0;",
        "bar.sync {i}, {n}; }}",
        w = in(reg32) wait as u32, i = in(reg32) id, n = in(reg32) threads,
        options(nostack)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = (wait, id, threads);
        crate::arch::host_unreachable("tma::bulk_read_wait_barrier")
    }
}

/// `cp.async.bulk.wait_group N`: waits until at most `N` of this thread's bulk async-groups
/// are incomplete (their global writes done).
#[inline(always)]
pub fn bulk_wait_group<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("cp.async.bulk.wait_group {n};", n = const N, options(nostack))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::arch::host_unreachable("tma::bulk_wait_group")
}

/// `cp.async.bulk.wait_group.read N` (PTX ISA, `cp.async.bulk.wait_group`): waits until at
/// most `N` of this thread's bulk async-groups still read their shared-memory sources, so the
/// sources of the others may be overwritten.
#[inline(always)]
pub fn bulk_wait_group_read<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("cp.async.bulk.wait_group.read {n};", n = const N, options(nostack))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::arch::host_unreachable("tma::bulk_wait_group_read")
}

/// `fence.proxy.tensormap::generic.acquire.sys [tmap], 128`: makes the host's write of the
/// tensor map at `tmap` visible to this thread's later TMA operations (PTX ISA §9.7.13.4,
/// PTX 8.3).
///
/// # Safety
/// `tmap` is the generic address of a 128-byte tensor map in global memory.
#[inline(always)]
pub unsafe fn fence_tensormap_acquire(tmap: u64) {
    #[cfg(target_arch = "nvptx64")]
    asm!("fence.proxy.tensormap::generic.acquire.sys [{m}], 128;", m = in(reg64) tmap, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = tmap;
        crate::arch::host_unreachable("tma::fence_tensormap_acquire")
    }
}

/// `prefetch.tensormap [tmap]`: starts fetching the tensor map into the TMA unit's cache.
///
/// # Safety
/// `tmap` is the generic address of a tensor map.
#[inline(always)]
pub unsafe fn prefetch_tensormap(tmap: u64) {
    #[cfg(target_arch = "nvptx64")]
    asm!("prefetch.tensormap [{m}];", m = in(reg64) tmap, options(nostack));
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = tmap;
        crate::arch::host_unreachable("tma::prefetch_tensormap")
    }
}

/// `fence.proxy.async.shared::cta`: orders this thread's ordinary shared-memory accesses before
/// later async-proxy accesses (TMA, `wgmma` operand reads) of the same memory, and the reverse.
#[inline(always)]
pub fn fence_proxy_async_shared() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        asm!("fence.proxy.async.shared::cta;", options(nostack))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::arch::host_unreachable("tma::fence_proxy_async_shared")
}

/// Byte offset of element `(row, col)` (16-bit elements, `col < 64`) inside a tile that TMA
/// wrote with 128-byte swizzle and 128-byte rows: the 16-byte chunk index is XORed with
/// `row % 8` (CUtensorMap `CU_TENSOR_MAP_SWIZZLE_128B`; the tile base is 1024-byte aligned).
#[inline(always)]
pub const fn swizzle_128b_offset(row: u32, col: u32) -> u32 {
    let chunk = (col / 8) ^ (row % 8);
    row * 128 + chunk * 16 + (col % 8) * 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swizzle_is_a_permutation_of_each_8_row_atom() {
        let mut seen = [false; 512];
        for row in 0..8 {
            for col in 0..64 {
                let o = swizzle_128b_offset(row, col);
                assert_eq!(o % 2, 0);
                assert!(!seen[(o / 2) as usize], "({row}, {col}) collides");
                seen[(o / 2) as usize] = true;
            }
        }
        // Row 0 is not permuted; row 1 swaps neighbouring 16-byte chunks.
        assert_eq!(swizzle_128b_offset(0, 9), 18);
        assert_eq!(swizzle_128b_offset(1, 0), 128 + 16);
        assert_eq!(swizzle_128b_offset(9, 8), 9 * 128);
    }
}
