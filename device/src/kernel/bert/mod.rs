//! The BERT encoder's kernels other than its GEMMs: embeddings + LayerNorm ([`embed`]),
//! masked multi-head attention ([`attention`] on the CUDA cores, [`attention_mma`] on the tensor
//! cores) and masked mean pooling + L2 normalization ([`pool`]).
//!
//! Every kernel is generic over the storage type `E` ([`Element`]: f32, f16, bf16) and computes
//! in f32. Batches are right-padded: sequence `b` of a `[B, T]` batch holds its tokens at
//! positions `0..len[b]`, and `1 ≤ len[b] ≤ T` (the host launcher validates it; the kernels
//! also clamp `len[b]` to `T` so a bad length can never make them read out of bounds).
//!
//! Rows of 4 consecutive elements ("chunks") are the unit of global memory access: one 16-byte
//! (f32) or 8-byte (f16/bf16) `ld.global`/`st.global` when the row length is a multiple of 4 and
//! every base pointer is aligned to a chunk, else element-wise accesses with bounds checks
//! (no pointer is vector-accessed without its alignment checked). The choice is uniform per
//! launch, so it costs one branch.

/// Repeats `$body` once per listed literal with `$j: usize` bound to it: a full unroll that does
/// not depend on LLVM's unroll thresholds. Loops whose index selects an element of a register
/// array must be unrolled, or the array is demoted to local memory.
macro_rules! unrolled {
    ($j:ident in [$($n:literal),* $(,)?] $body:block) => {{
        $({
            let $j: usize = $n;
            $body
        })*
    }};
}

pub mod attention;
pub mod attention_mma;
pub mod embed;
pub mod pool;

use crate::types::{DType, Element};

/// The thread-level operations the kernel bodies use: indices, the CTA barrier, the warp
/// shuffle and dynamic shared memory. [`Ptx`] is the real thing; a host test harness can
/// implement the trait with one OS thread per GPU thread and run the same bodies on the CPU
/// (`tests/sim_bert.rs`). Bodies call nothing else that is device-only.
pub trait Exec {
    /// `blockIdx.x`.
    fn block_idx_x() -> u32;
    /// `threadIdx.x` (1-D CTAs).
    fn thread_idx_x() -> u32;
    /// `__syncthreads()`.
    ///
    /// # Safety
    /// Every thread of the CTA must reach the same call.
    unsafe fn sync_threads();
    /// `__shfl_xor_sync(FULL_MASK, v, lane_mask)`.
    ///
    /// # Safety
    /// All 32 lanes of the warp must execute the call together.
    unsafe fn shfl_xor_f32(v: f32, lane_mask: u32) -> f32;
    /// This CTA's dynamic shared memory, 1024-byte aligned.
    fn dynamic_shared_base() -> *mut u8;
}

/// [`Exec`] on the GPU: the intrinsics of [`crate::arch`].
#[derive(Clone, Copy, Debug)]
pub struct Ptx;

impl Exec for Ptx {
    #[inline(always)]
    fn block_idx_x() -> u32 {
        crate::arch::thread::block_idx_x()
    }
    #[inline(always)]
    fn thread_idx_x() -> u32 {
        crate::arch::thread::thread_idx_x()
    }
    #[inline(always)]
    unsafe fn sync_threads() {
        crate::arch::sync::sync_threads()
    }
    #[inline(always)]
    unsafe fn shfl_xor_f32(v: f32, lane_mask: u32) -> f32 {
        crate::arch::warp::shfl_xor_f32(v, lane_mask)
    }
    #[inline(always)]
    fn dynamic_shared_base() -> *mut u8 {
        crate::arch::shared::dynamic_shared_base()
    }
}

/// 16 bytes, 16-byte aligned (host side of the vector accesses below).
#[cfg(not(target_arch = "nvptx64"))]
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Chunk16([u32; 4]);

/// 8 bytes, 8-byte aligned (host side of the vector accesses below).
#[cfg(not(target_arch = "nvptx64"))]
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Chunk8([u32; 2]);

// The vector accesses are written in PTX: given a choice between a 16-byte load and four
// element loads of the same addresses (the aligned and unaligned paths), LLVM merges the two
// paths into element loads. Global addresses are their own generic addresses in CUDA, so
// `ld.global`/`st.global` take the pointer as is (PTX ISA §9.7.9.8, §9.7.9.10).

/// `ld.global.v4.b32`.
#[inline(always)]
unsafe fn ld_global_v4(p: *const u32) -> [u32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b, c, d): (u32, u32, u32, u32);
        core::arch::asm!(
            "ld.global.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            p = in(reg64) p,
            options(readonly, nostack, preserves_flags)
        );
        [a, b, c, d]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    (*(p as *const Chunk16)).0
}

/// `ld.global.v2.b32`.
#[inline(always)]
unsafe fn ld_global_v2(p: *const u32) -> [u32; 2] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (a, b): (u32, u32);
        core::arch::asm!(
            "ld.global.v2.b32 {{{a}, {b}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b,
            p = in(reg64) p,
            options(readonly, nostack, preserves_flags)
        );
        [a, b]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    (*(p as *const Chunk8)).0
}

/// `st.global.v4.b32`.
#[inline(always)]
unsafe fn st_global_v4(p: *mut u32, v: [u32; 4]) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!(
        "st.global.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};",
        p = in(reg64) p,
        a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
        options(nostack, preserves_flags)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        *(p as *mut Chunk16) = Chunk16(v);
    }
}

/// `st.global.v2.b32`.
#[inline(always)]
unsafe fn st_global_v2(p: *mut u32, v: [u32; 2]) {
    #[cfg(target_arch = "nvptx64")]
    core::arch::asm!(
        "st.global.v2.b32 [{p}], {{{a}, {b}}};",
        p = in(reg64) p,
        a = in(reg32) v[0], b = in(reg32) v[1],
        options(nostack, preserves_flags)
    );
    #[cfg(not(target_arch = "nvptx64"))]
    {
        *(p as *mut Chunk8) = Chunk8(v);
    }
}

/// `a·b + c` with one rounding; Rust never contracts `a * b + c` on its own.
pub use crate::math::fma;

/// Bytes of one 4-element chunk of `E`.
#[inline(always)]
pub const fn chunk_bytes<E: Element>() -> u64 {
    4 * core::mem::size_of::<E>() as u64
}

/// Whether `p` is aligned for a chunk load or store of `E`.
#[inline(always)]
pub fn chunk_aligned<E: Element>(p: *const E) -> bool {
    (p as u64).is_multiple_of(chunk_bytes::<E>())
}

/// Loads elements `p[0..4]`, widened to f32, with one vector load.
///
/// # Safety
/// `p` must be valid for 4 elements and aligned to [`chunk_bytes`].
#[inline(always)]
pub unsafe fn load_chunk<E: Element>(p: *const E) -> [f32; 4] {
    if E::DTYPE == DType::F32 {
        ld_global_v4(p as *const u32).map(f32::from_bits)
    } else {
        let w = ld_global_v2(p as *const u32);
        let (a, b) = E::unpack2(w[0]);
        let (c, d) = E::unpack2(w[1]);
        [a, b, c, d]
    }
}

/// Loads `p[i]` for `i < count.min(4)` element by element; the rest are 0.
///
/// # Safety
/// `p` must be valid for `count.min(4)` elements.
#[inline(always)]
pub unsafe fn load_partial<E: Element>(p: *const E, count: u32) -> [f32; 4] {
    let mut v = [0.0f32; 4];
    for (i, x) in v.iter_mut().enumerate() {
        if (i as u32) < count {
            *x = (*p.add(i)).to_f32();
        }
    }
    v
}

/// Loads a chunk: [`load_chunk`] when `vector`, else [`load_partial`] of `count` elements.
///
/// # Safety
/// As the function called.
#[inline(always)]
pub unsafe fn load4<E: Element>(p: *const E, vector: bool, count: u32) -> [f32; 4] {
    if vector {
        load_chunk(p)
    } else {
        load_partial(p, count)
    }
}

/// Stores `v` (rounded to `E`) at `p[0..4]` with one vector store when `vector`, else stores the
/// first `count.min(4)` values element by element.
///
/// # Safety
/// `p` must be valid for the elements written and, when `vector`, aligned to [`chunk_bytes`].
#[inline(always)]
pub unsafe fn store4<E: Element>(p: *mut E, v: [f32; 4], vector: bool, count: u32) {
    if vector {
        if E::DTYPE == DType::F32 {
            st_global_v4(p as *mut u32, v.map(f32::to_bits));
        } else {
            st_global_v2(p as *mut u32, [E::pack2(v[0], v[1]), E::pack2(v[2], v[3])]);
        }
    } else {
        for (i, &x) in v.iter().enumerate() {
            if (i as u32) < count {
                *p.add(i) = E::from_f32(x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Bf16, F16};

    #[repr(C, align(16))]
    struct Aligned<T>(T);

    // Vector and element-wise paths must agree on which element lands where (lo at the lower
    // address), for every storage type.
    #[test]
    fn chunk_paths_agree_on_element_order() {
        let xs = [1.5f32, -2.0, 0.25, 300.0];
        let f = Aligned(xs);
        let h = Aligned(xs.map(F16::from_f32));
        let b = Aligned(xs.map(Bf16::from_f32));
        unsafe {
            assert!(chunk_aligned(f.0.as_ptr()) && chunk_aligned(h.0.as_ptr()));
            assert_eq!(load_chunk(f.0.as_ptr()), xs);
            assert_eq!(load_chunk(h.0.as_ptr()), xs);
            assert_eq!(load_chunk(b.0.as_ptr()), xs);
            assert_eq!(load_partial(h.0.as_ptr(), 3), [1.5, -2.0, 0.25, 0.0]);
            let mut v = Aligned([F16::default(); 4]);
            store4(v.0.as_mut_ptr(), xs, true, 4);
            assert_eq!(v.0, h.0);
            let mut w = Aligned([Bf16::default(); 4]);
            store4(w.0.as_mut_ptr(), xs, false, 2);
            assert_eq!(&w.0[..2], &b.0[..2]);
            assert_eq!(&w.0[2..], &[Bf16::default(); 2]);
        }
        assert!(!chunk_aligned(unsafe { f.0.as_ptr().add(1) }));
    }
}
