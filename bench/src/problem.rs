//! One benchmark row on the device: rotation sets of buffers filled with fresh random data,
//! the host copy of set 0 and its f64 reference.
//!
//! Data: A uniform in [−1, 1); B uniform in [−1, 1)·√(3/K) (so C has unit-order values for
//! every K); bias and β uniform in [−½, ½); γ and a consumer's rstd in [½, 1½); residual in
//! [−1, 1). Never zeros.
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
    /// Per-row f32 values, M: the consumer's input or the producer's output.
    pub rstd: Option<CudaSlice<f32>>,
    /// The plain GEMM's M×N output where `out` is narrower (SwiGLU): the cuBLAS column's.
    pub gemm_out: Option<CudaSlice<T>>,
}

/// Host copies of set 0's inputs (empty where the epilogue does not read them).
pub struct HostInputs<T> {
    /// A, M×K.
    pub a: Vec<T>,
    /// B, N×K.
    pub b: Vec<T>,
    /// Bias.
    pub bias: Vec<T>,
    /// Residual.
    pub residual: Vec<T>,
    /// γ.
    pub gamma: Vec<T>,
    /// β.
    pub beta: Vec<T>,
    /// The consumer's rstd.
    pub rstd: Vec<f32>,
}

/// A row's device buffers and host inputs.
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
    e += (o.bias as u64 + 2 * o.gamma_beta as u64) * n as u64;
    if o.residual {
        e += (m * n) as u64;
    }
    if epilogue.out_cols(n) != n {
        e += (m * n) as u64;
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
            gamma: opt(o.gamma_beta, n, 4, 0.5, 1.0),
            beta: opt(o.gamma_beta, n, 5, 0.5, 0.0),
            rstd: if o.rstd && !epilogue.writes_rstd() {
                random_vec::<f32>(m, seed.wrapping_add(6), 0.5, 1.0)
            } else {
                Vec::new()
            },
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
            rstd: match (o.rstd, host.rstd.is_empty()) {
                (false, _) => None,
                (true, true) => Some(gpu.zeros(m)?),
                (true, false) => Some(gpu.upload(&host.rstd)?),
            },
            gemm_out: if epilogue.out_cols(n) != n {
                Some(gpu.zeros(m * n)?)
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
                    Some(r) => Some(s.clone_dtod(r)?),
                    None => None,
                },
                gemm_out: match &first.gemm_out {
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

    /// Fills set 0's outputs with NaN (all bits set), so an element a path does not write fails
    /// the comparison.
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
        if self.epilogue.writes_rstd()
            && let Some(r) = set.rstd.as_mut()
        {
            fill(s, r)?;
        }
        if let Some(t) = set.gemm_out.as_mut() {
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

    /// The f64 reference of the sampled rows: for each, the contract's output and what
    /// cuBLAS's plain GEMM and cuBLASLt's fused epilogue compute. Rows are computed in
    /// parallel.
    pub fn reference(&self, rows: &[usize]) -> Vec<Reference> {
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
                            bias,
                            residual: &res,
                            gamma,
                            beta,
                            rstd: h.rstd.get(r).map_or(f64::NAN, |&v| v as f64),
                        };
                        Reference {
                            contract: self.epilogue.reference_row(&c, &x),
                            fused_lt: self.epilogue.cublaslt_reference_row(&c, &x),
                            gemm: c,
                        }
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

/// The f64 reference of one sampled row.
#[derive(Clone, Debug)]
pub struct Reference {
    /// The contract's output.
    pub contract: RowOutput,
    /// What cuBLASLt's fused epilogue computes.
    pub fused_lt: Vec<f64>,
    /// The plain GEMM row.
    pub gemm: Vec<f64>,
}

/// Relative Frobenius error each storage type must meet against the f64 reference (bf16:
/// 1e-2, f16: 2e-3), and per element `|x − ref| ≤ tol·(rms(ref) + |ref|)`
/// (`fused_gemm::host::testing::compare`).
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
        // SwiGLU: A, B, the N/2-wide out and the cuBLAS column's full-width GEMM output.
        assert_eq!(
            set_bytes(4, 8, 2, Epilogue::Swiglu, e),
            ((4 * 2 + 8 * 2 + 4 * 4 + 4 * 8) * 2) as u64
        );
        assert_eq!(
            set_bytes(4, 8, 2, Epilogue::RmsProducer, e),
            ((4 * 2 + 8 * 2 + 4 * 8 + 4 * 8) * 2 + 16) as u64
        );
        assert_eq!(
            set_bytes(4, 8, 2, Epilogue::RmsConsumer, e),
            ((4 * 2 + 8 * 2 + 4 * 8) * 2 + 16) as u64
        );
        assert_eq!(
            set_bytes(4, 8, 2, Epilogue::BiasResidualLayernorm, e),
            ((4 * 2 + 8 * 2 + 4 * 8 + 3 * 8 + 4 * 8) * 2) as u64
        );
    }

    #[test]
    fn tolerances_follow_the_storage_type() {
        assert_eq!(tolerance(fused_gemm::device::types::DType::F16), 2e-3);
        assert_eq!(tolerance(fused_gemm::device::types::DType::Bf16), 1e-2);
    }
}
