//! Global-memory helpers for stages: element and pair loads/stores of any [`Element`] type at
//! `(row, col)` of a row-major matrix, vectorized when the address allows it.

use crate::arch::global;
use crate::types::Element;

/// Loads element `idx` of a vector of `E` at device address `base`, widened to f32.
///
/// # Safety
/// `base` must be a valid device address of at least `idx + 1` elements of `E`.
#[inline(always)]
pub unsafe fn load<E: Element>(base: u64, idx: u32) -> f32 {
    E::load_global((base as *const E).add(idx as usize))
}

/// Loads elements `(col, col + 1)` of row `row` of a row-major matrix of `E` (leading dimension
/// `ld` elements) with one 4- or 8-byte load when the address is aligned for it, else two
/// scalar loads. `col + 1 ≥ n` reads only `col` and returns 0 for the second value.
///
/// # Safety
/// The matrix must hold `row` and the columns `< n` that are read.
#[inline(always)]
pub unsafe fn load_pair<E: Element>(base: u64, ld: u32, row: u32, col: u32, n: u32) -> (f32, f32) {
    let p = (base as *const E).add(row as usize * ld as usize + col as usize);
    let pair_bytes = 2 * core::mem::size_of::<E>() as u64;
    if col + 1 < n && (p as u64) % pair_bytes == 0 {
        load_pair_aligned::<E>(base, ld, row, col)
    } else {
        let a = E::load_global(p);
        let b = if col + 1 < n {
            E::load_global(p.add(1))
        } else {
            0.0
        };
        (a, b)
    }
}

/// Stores `(v0, v1)` at `(row, col)`, `(row, col + 1)` of a row-major matrix of `E`, as one
/// 4- or 8-byte store when aligned, else scalar stores; `col + 1 ≥ n` stores only `v0`.
///
/// # Safety
/// The matrix must hold `row` and the columns `< n` that are written.
#[inline(always)]
pub unsafe fn store_pair<E: Element>(
    base: u64,
    ld: u32,
    row: u32,
    col: u32,
    n: u32,
    v0: f32,
    v1: f32,
) {
    let p = (base as *mut E).add(row as usize * ld as usize + col as usize);
    let pair_bytes = 2 * core::mem::size_of::<E>() as u64;
    if col + 1 < n && (p as u64) % pair_bytes == 0 {
        store_pair_aligned::<E>(base, ld, row, col, v0, v1);
    } else {
        E::store_global(p, v0);
        if col + 1 < n {
            E::store_global(p.add(1), v1);
        }
    }
}

/// Stores `(v0, v1)` at `(row, col)`, `(row, col + 1)` with one 4- or 8-byte store, no check.
///
/// # Safety
/// Both elements lie in the matrix and their address is aligned to two elements.
#[inline(always)]
pub unsafe fn store_pair_aligned<E: Element>(
    base: u64,
    ld: u32,
    row: u32,
    col: u32,
    v0: f32,
    v1: f32,
) {
    let p = (base as *mut E).add(row as usize * ld as usize + col as usize);
    if core::mem::size_of::<E>() == 2 {
        global::st_u32(p as *mut u32, E::pack2(v0, v1));
    } else {
        global::st_f32x2(p as *mut [f32; 2], [v0, v1]);
    }
}

/// Loads `(row, col)`, `(row, col + 1)` with one 4- or 8-byte load, no check.
///
/// # Safety
/// Both elements lie in the matrix and their address is aligned to two elements.
#[inline(always)]
pub unsafe fn load_pair_aligned<E: Element>(base: u64, ld: u32, row: u32, col: u32) -> (f32, f32) {
    let p = (base as *const E).add(row as usize * ld as usize + col as usize);
    if core::mem::size_of::<E>() == 2 {
        E::unpack2(global::ld_u32(p as *const u32))
    } else {
        let w = global::ld_f32x2(p as *const [f32; 2]);
        (w[0], w[1])
    }
}

/// Stores one element at `(row, col)`.
///
/// # Safety
/// The matrix must hold `(row, col)`.
#[inline(always)]
pub unsafe fn store_one<E: Element>(base: u64, ld: u32, row: u32, col: u32, v: f32) {
    E::store_global(
        (base as *mut E).add(row as usize * ld as usize + col as usize),
        v,
    );
}
