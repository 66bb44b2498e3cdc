//! One benchmark case on the device: rotation sets of buffers filled with fresh random data,
//! the host copy of set 0 for the f64 reference, and output comparison.
//!
//! Data: A uniform in [−1, 1); B uniform in [−1, 1)·√(3/K) (so C has unit-order values for
//! every K); bias and β uniform in [−½, ½); γ in [½, 1½); residual in [−1, 1). Never zeros.
//! Set 0 is generated on the host (in parallel, one seeded generator per chunk) and uploaded;
//! the other sets are device copies of it (the rotation defeats the L2 by address, not by
//! content).

use cudarc::driver::{CudaSlice, DevicePtrMut};
use fused_gemm::Gpu;
use fused_gemm::host::cudarc;
use fused_gemm::rowwise::RowElement;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::epilogue::{Epilogue, RowInputs, RowOutput};
use crate::error::Result;
use crate::ours::Ours;

/// A storage type the benchmark runs: bf16 or f16.
pub trait BenchElement: RowElement + Ours {}
impl BenchElement for half::bf16 {}
impl BenchElement for half::f16 {}

/// One rotation set.
pub struct Set<T> {
    /// A, M×K.
    pub a: CudaSlice<T>,
    /// B, N×K.
    pub b: CudaSlice<T>,
    /// Bias, N.
    pub bias: Option<CudaSlice<T>>,
    /// Residual, M×N.
    pub residual: Option<CudaSlice<T>>,
    /// γ, N.
    pub gamma: Option<CudaSlice<T>>,
    /// β, N.
    pub beta: Option<CudaSlice<T>>,
    /// Output, M×out_cols.
    pub out: CudaSlice<T>,
    /// Per-row f32 output, M.
    pub rstd: Option<CudaSlice<f32>>,
    /// The unfused path's intermediate: the GEMM output before SwiGLU (M×N), or the
    /// normalized A of rmsnorm-scale (M×K).
    pub tmp: Option<CudaSlice<T>>,
}

/// Host copies of set 0's inputs.
pub struct HostInputs<T> {
    /// A, M×K.
    pub a: Vec<T>,
    /// B, N×K.
    pub b: Vec<T>,
    /// Bias (empty if unused).
    pub bias: Vec<T>,
    /// Residual (empty if unused).
    pub residual: Vec<T>,
    /// γ (empty if unused; ones of length K for rmsnorm-scale).
    pub gamma: Vec<T>,
    /// β (empty if unused).
    pub beta: Vec<T>,
}

/// A case's device buffers and host inputs.
pub struct Problem<T> {
    /// Rows.
    pub m: usize,
    /// GEMM columns.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// The epilogue.
    pub epilogue: Epilogue,
    /// Rotation sets (at least one).
    pub sets: Vec<Set<T>>,
    /// Set 0's inputs on the host.
    pub host: HostInputs<T>,
}

/// Device bytes one rotation set of `(m, n, k, epilogue)` takes.
pub fn set_bytes(m: usize, n: usize, k: usize, epilogue: Epilogue, elem: usize) -> u64 {
    let o = epilogue.operands();
    let mut e = (m * k + n * k + m * epilogue.out_cols(n)) as u64;
    e += [o.bias, o.gamma, o.beta].iter().filter(|&&b| b).count() as u64 * n as u64;
    if o.residual {
        e += (m * n) as u64;
    }
    if epilogue == Epilogue::Swiglu {
        e += (m * n) as u64;
    }
    if o.normalized_input {
        e += (m * k + k) as u64;
    }
    e * elem as u64 + if o.rstd { 4 * m as u64 } else { 0 }
}

/// `len` values `offset + scale·u`, u uniform in [−1, 1), rounded to `T`; chunks of 1 Mi values
/// are filled in parallel, each from its own generator seeded by `(seed, chunk)`.
pub fn random_vec<T: RowElement>(len: usize, seed: u64, scale: f32, offset: f32) -> Vec<T> {
    const CHUNK: usize = 1 << 20;
    let mut v = vec![T::default(); len];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunks: Vec<(usize, &mut [T])> = v.chunks_mut(CHUNK).enumerate().collect();
    let per = chunks.len().div_ceil(threads).max(1);
    let mut groups: Vec<Vec<(usize, &mut [T])>> = Vec::new();
    let mut it = chunks.into_iter().peekable();
    while it.peek().is_some() {
        groups.push(it.by_ref().take(per).collect());
    }
    std::thread::scope(|s| {
        for g in groups {
            s.spawn(move || {
                for (i, c) in g {
                    let mut r = StdRng::seed_from_u64(
                        seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    );
                    for x in c.iter_mut() {
                        *x = T::from_f32(offset + scale * r.random_range(-1.0f32..1.0));
                    }
                }
            });
        }
    });
    v
}

impl<T: BenchElement> Problem<T> {
    /// Generates set 0 from `seed`, uploads it and makes `sets − 1` device copies.
    ///
    /// # Errors
    /// Allocation or copy failures.
    pub fn new(
        gpu: &Gpu,
        (m, n, k): (usize, usize, usize),
        epilogue: Epilogue,
        sets: usize,
        seed: u64,
    ) -> Result<Problem<T>> {
        let o = epilogue.operands();
        let opt = |used: bool, len: usize, s: u64, scale: f32, off: f32| {
            if used {
                random_vec::<T>(len, seed.wrapping_add(s), scale, off)
            } else {
                Vec::new()
            }
        };
        let host = HostInputs {
            a: random_vec::<T>(m * k, seed, 1.0, 0.0),
            b: random_vec::<T>(n * k, seed.wrapping_add(1), (3.0 / k as f32).sqrt(), 0.0),
            bias: opt(o.bias, n, 2, 0.5, 0.0),
            residual: opt(o.residual, m * n, 3, 1.0, 0.0),
            // rmsnorm-scale's γ is folded into B; the unfused RMSNorm gets a unit γ of length K.
            gamma: if o.normalized_input {
                vec![T::from_f32(1.0); k]
            } else {
                opt(o.gamma, n, 4, 0.5, 1.0)
            },
            beta: opt(o.beta, n, 5, 0.5, 0.0),
        };
        let up = |v: &Vec<T>| -> Result<Option<CudaSlice<T>>> {
            Ok(if v.is_empty() {
                None
            } else {
                Some(gpu.upload(v)?)
            })
        };
        let first = Set {
            a: gpu.upload(&host.a)?,
            b: gpu.upload(&host.b)?,
            bias: up(&host.bias)?,
            residual: up(&host.residual)?,
            gamma: up(&host.gamma)?,
            beta: up(&host.beta)?,
            out: gpu.zeros(m * epilogue.out_cols(n))?,
            rstd: if o.rstd { Some(gpu.zeros(m)?) } else { None },
            tmp: if epilogue == Epilogue::Swiglu {
                Some(gpu.zeros(m * n)?)
            } else if o.normalized_input {
                Some(gpu.zeros(m * k)?)
            } else {
                None
            },
        };
        let mut all = Vec::with_capacity(sets);
        for _ in 1..sets.max(1) {
            let s = gpu.stream();
            let copy = |b: &Option<CudaSlice<T>>| -> Result<Option<CudaSlice<T>>> {
                Ok(match b {
                    Some(b) => Some(s.clone_dtod(b)?),
                    None => None,
                })
            };
            all.push(Set {
                a: s.clone_dtod(&first.a)?,
                b: s.clone_dtod(&first.b)?,
                bias: copy(&first.bias)?,
                residual: copy(&first.residual)?,
                gamma: copy(&first.gamma)?,
                beta: copy(&first.beta)?,
                out: gpu.zeros(first.out.len())?,
                rstd: match &first.rstd {
                    Some(r) => Some(gpu.zeros(r.len())?),
                    None => None,
                },
                tmp: match &first.tmp {
                    Some(t) => Some(gpu.zeros(t.len())?),
                    None => None,
                },
            });
        }
        all.insert(0, first);
        gpu.synchronize()?;
        Ok(Problem {
            m,
            n,
            k,
            epilogue,
            sets: all,
            host,
        })
    }

    /// Fills set 0's outputs (and the unfused GEMM buffer) with NaN (all bits set), so an
    /// element a path does not write fails the comparison.
    ///
    /// # Errors
    /// Driver errors.
    pub fn poison_outputs(&mut self, gpu: &Gpu) -> Result<()> {
        let s = gpu.stream();
        let set = &mut self.sets[0];
        fn fill<U>(s: &cudarc::driver::CudaStream, b: &mut CudaSlice<U>) -> Result<()> {
            let bytes = b.len() * std::mem::size_of::<U>();
            let (p, _g) = b.device_ptr_mut(s);
            // SAFETY: `p` addresses `bytes` bytes of `b`, which outlives the queued memset
            // (the caller synchronizes before reading or freeing).
            unsafe { cudarc::driver::result::memset_d8_async(p, 0xff, bytes, s.cu_stream()) }?;
            Ok(())
        }
        fill(s, &mut set.out)?;
        if let Some(r) = set.rstd.as_mut() {
            fill(s, r)?;
        }
        if let Some(t) = set.tmp.as_mut() {
            fill(s, t)?;
        }
        Ok(())
    }

    /// Rows the f64 reference checks: the first, the last and evenly spaced ones between, as
    /// many as keep the reference under about 4·10⁸ multiply-adds (2 to 8 rows).
    pub fn sample_rows(&self) -> Vec<usize> {
        let want = (4e8 / (self.n as f64 * self.k as f64)).clamp(2.0, 8.0) as usize;
        let count = want.min(self.m);
        let mut rows: Vec<usize> = (0..count)
            .map(|i| {
                if count == 1 {
                    0
                } else {
                    i * (self.m - 1) / (count - 1)
                }
            })
            .collect();
        rows.dedup();
        rows
    }

    /// The f64 reference of the sampled rows: for each, the contract's output and what the
    /// cuBLASLt column computes. Rows are computed in parallel.
    pub fn reference(&self, rows: &[usize]) -> Vec<(RowOutput, Vec<f64>)> {
        let (n, k) = (self.n, self.k);
        let h = &self.host;
        let f = |v: &[T]| -> Vec<f64> { v.iter().map(|x| x.to_f32() as f64).collect() };
        let (bias, gamma, beta) = (f(&h.bias), f(&h.gamma), f(&h.beta));
        std::thread::scope(|s| {
            let handles: Vec<_> = rows
                .iter()
                .map(|&r| {
                    let (bias, gamma, beta) = (&bias, &gamma, &beta);
                    s.spawn(move || {
                        let a: Vec<f64> = f(&h.a[r * k..(r + 1) * k]);
                        let c: Vec<f64> = (0..n)
                            .map(|j| {
                                h.b[j * k..(j + 1) * k]
                                    .iter()
                                    .zip(&a)
                                    .map(|(b, a)| b.to_f32() as f64 * a)
                                    .sum()
                            })
                            .collect();
                        let res = if h.residual.is_empty() {
                            Vec::new()
                        } else {
                            f(&h.residual[r * n..(r + 1) * n])
                        };
                        let x = RowInputs {
                            a_row: &a,
                            bias,
                            residual: &res,
                            gamma,
                            beta,
                        };
                        (
                            self.epilogue.reference_row(&c, &x),
                            self.epilogue.cublaslt_reference_row(&c, &x),
                        )
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("reference thread panicked"))
                .collect()
        })
    }
}

/// Relative Frobenius error of `got` against `want` (f64), streaming; `INFINITY` if `got` has
/// a non-finite value where `want` is finite.
pub fn rel_error<G: Copy>(got: &[G], want: &[f64], to_f64: impl Fn(G) -> f64) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (g, &w) in got.iter().zip(want) {
        let g = to_f64(*g);
        if !g.is_finite() && w.is_finite() {
            return f64::INFINITY;
        }
        num += (g - w) * (g - w);
        den += w * w;
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Relative Frobenius error between two outputs of the same type (e.g. ours vs unfused),
/// streaming, and how many elements of `got` are not finite.
pub fn rel_error_between<T: RowElement>(got: &[T], want: &[T]) -> (f64, usize) {
    let (mut num, mut den, mut bad) = (0.0f64, 0.0f64, 0usize);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.to_f32() as f64, w.to_f32() as f64);
        if !g.is_finite() {
            bad += 1;
            continue;
        }
        num += (g - w) * (g - w);
        den += w * w;
    }
    let err = if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    };
    (if bad > 0 { f64::INFINITY } else { err }, bad)
}

/// Relative Frobenius error each storage type must meet against the f64 reference (issue 4:
/// bf16 < 1e-2, f16 < 2e-3).
pub fn tolerance(dtype: fused_gemm::device::types::DType) -> f64 {
    match dtype {
        fused_gemm::device::types::DType::F16 => 2e-3,
        _ => 1e-2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn random_data_is_fresh_bounded_and_reproducible() {
        let a = random_vec::<bf16>(3 << 20, 7, 0.5, 1.0);
        let b = random_vec::<bf16>(3 << 20, 7, 0.5, 1.0);
        let c = random_vec::<bf16>(3 << 20, 8, 0.5, 1.0);
        assert_eq!(a, b, "same seed, same data");
        assert_ne!(a, c, "another seed, other data");
        assert!(a.iter().all(|x| (0.5..=1.5).contains(&x.to_f32())));
        // Chunks differ from each other (each has its own generator).
        assert_ne!(a[..1024], a[1 << 20..(1 << 20) + 1024]);
        let zeros = a.iter().filter(|x| x.to_f32() == 0.0).count();
        assert_eq!(zeros, 0);
        let mean = a.iter().map(|x| x.to_f32() as f64).sum::<f64>() / a.len() as f64;
        assert!((mean - 1.0).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn set_bytes_counts_every_buffer() {
        let e = 2;
        assert_eq!(
            set_bytes(4, 8, 2, Epilogue::Swiglu, e),
            ((4 * 2 + 8 * 2 + 4 * 4 + 4 * 8) * 2) as u64
        );
        assert_eq!(
            set_bytes(4, 8, 2, Epilogue::RmsRstd, e),
            ((4 * 2 + 8 * 2 + 4 * 8) * 2 + 16) as u64
        );
        assert_eq!(
            set_bytes(4, 8, 2, Epilogue::RmsnormScale, e),
            ((4 * 2 + 8 * 2 + 4 * 8 + 4 * 2 + 2) * 2 + 16) as u64
        );
        assert_eq!(
            set_bytes(4, 8, 2, Epilogue::BiasResidualLayernorm, e),
            ((4 * 2 + 8 * 2 + 4 * 8 + 3 * 8 + 4 * 8) * 2) as u64
        );
    }

    #[test]
    fn errors_flag_unwritten_outputs() {
        let want = [1.0, 2.0, -2.0];
        assert_eq!(rel_error(&[1.0f32, 2.0, -2.0], &want, |x| x as f64), 0.0);
        assert!(rel_error(&[1.0f32, f32::NAN, -2.0], &want, |x| x as f64).is_infinite());
        let x = [bf16::from_f32(1.0), bf16::from_f32(2.0)];
        let y = [bf16::from_f32(1.0), bf16::NAN];
        assert_eq!(rel_error_between(&x, &x), (0.0, 0));
        let (e, bad) = rel_error_between(&y, &x);
        assert!(e.is_infinite() && bad == 1);
        assert_eq!(tolerance(fused_gemm::device::types::DType::F16), 2e-3);
    }
}
