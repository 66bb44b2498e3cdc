//! GPU stress: random shapes through the public launchers ([`shapes`]) and many threads using
//! one device at once ([`threads`]), each result against the f64 reference. One binary for
//! both, so that the test build links one more executable, not two.

use fused_gemm::device::types::DType;
use fused_gemm::host::kernel::AsMatrix;
use fused_gemm::host::reference::epilogue::{PairLayout, RefStage};
use fused_gemm::host::{Gpu, LaunchReport, Result, Tensor};
use fused_gemm::kernels::{blocks, gemm};

/// The epilogues both tests launch, through the built-in launchers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Epilogue {
    Plain,
    BiasGelu,
    BiasResidualLayerNorm,
    SwiGlu,
}

impl Epilogue {
    const ALL: [Epilogue; 4] = [
        Epilogue::Plain,
        Epilogue::BiasGelu,
        Epilogue::BiasResidualLayerNorm,
        Epilogue::SwiGlu,
    ];

    /// Columns of C for a GEMM of N columns.
    fn width(self, n: usize) -> usize {
        if self == Epilogue::SwiGlu { n / 2 } else { n }
    }

    /// The f64 stages of the epilogue; `residual` gives the rows of R the reference covers.
    fn stages(
        self,
        bias: &[f64],
        residual: impl FnOnce() -> Vec<f64>,
        gamma: &[f64],
        beta: &[f64],
    ) -> Vec<RefStage> {
        match self {
            Epilogue::Plain => vec![],
            Epilogue::BiasGelu => vec![RefStage::BiasCol(bias.to_vec()), RefStage::Gelu],
            Epilogue::BiasResidualLayerNorm => vec![
                RefStage::BiasCol(bias.to_vec()),
                RefStage::Residual(residual()),
                RefStage::LayerNorm {
                    gamma: gamma.to_vec(),
                    beta: beta.to_vec(),
                    eps: 1e-12,
                },
            ],
            Epilogue::SwiGlu => vec![RefStage::SwiGlu(PairLayout::Interleaved)],
        }
    }

    /// Launches the epilogue's built-in kernel for `dtype` inputs (bf16 or f16), B stored N×K
    /// (`b_col`) or K×N, C in `out` (f32 only for the plain bf16 GEMM); `(bias, residual,
    /// gamma, beta)` are read by the epilogues that use them.
    #[allow(clippy::too_many_arguments)]
    fn launch(
        self,
        g: &Gpu,
        (dtype, b_col, out): (DType, bool, DType),
        a: &impl AsMatrix,
        b: &impl AsMatrix,
        c: &mut impl AsMatrix,
        (bias, residual, gamma, beta): (&Tensor, &impl AsMatrix, &Tensor, &Tensor),
    ) -> Result<LaunchReport> {
        let bf16 = dtype == DType::Bf16;
        match self {
            Epilogue::Plain => match (bf16, b_col, out) {
                (true, true, DType::F32) => gemm::gemm_bf16_f32(g, a, b, c),
                (true, true, _) => gemm::gemm_bf16(g, a, b, c),
                (true, false, _) => gemm::gemm_bf16_brow(g, a, b, c),
                (false, true, _) => gemm::gemm_f16(g, a, b, c),
                (false, false, _) => gemm::gemm_f16_brow(g, a, b, c),
            },
            Epilogue::BiasGelu if bf16 => blocks::ffn_up_bias_gelu(g, a, b, c, bias),
            Epilogue::BiasGelu => blocks::ffn_up_bias_gelu_f16(g, a, b, c, bias),
            Epilogue::BiasResidualLayerNorm if bf16 => {
                blocks::proj_bias_residual_layer_norm(g, a, b, c, bias, residual, gamma, beta)
            }
            Epilogue::BiasResidualLayerNorm => {
                blocks::proj_bias_residual_layer_norm_f16(g, a, b, c, bias, residual, gamma, beta)
            }
            Epilogue::SwiGlu if bf16 => blocks::mlp_up_swiglu(g, a, b, c),
            Epilogue::SwiGlu => blocks::mlp_up_swiglu_f16(g, a, b, c),
        }
    }
}

mod shapes {
    //! GPU shape fuzz: random GEMMs through the public launchers against the f64 reference.
    //!
    //! Each case draws M, N and K from 1 to 5,000 (an awkward value — one off a tile
    //! multiple, a power of two, 1 — half the time, log-uniform otherwise), a dtype, a B
    //! layout and an epilogue (none, bias + GELU, bias + residual + LayerNorm, SwiGLU). A, B
    //! and the residual are views at random offsets into one large buffer per dtype (leading
    //! dimension 5,072, offsets aligned to 16 bytes half the time); C is a view at a random
    //! offset into a larger buffer filled with NaN. Per case: every element of C is written
    //! and nothing around it; the first, last and two random rows match the f64 reference
    //! within `assert_close`'s per-element bounds. Every launcher has a variant for operands
    //! aligned only to their element, so any error fails the test.
    //!
    //! `FUSED_GEMM_SEED` replays a run (the seed is printed first); `FUSED_GEMM_FUZZ_CASES`
    //! sets the number of cases (default 2,000). Under `FUSED_GEMM_SANITIZE` dimensions stop at
    //! 640.

    use super::Epilogue;
    use fused_gemm::device::types::DType;
    use fused_gemm::host::reference::epilogue::{apply_stages, round_slice};
    use fused_gemm::host::testing::{Tolerance, compare, gpu_or_skip, rng, sanitizing};
    use fused_gemm::host::{Gpu, LaunchReport, Result, Tensor};
    use rand::RngExt;
    use rand::rngs::StdRng;

    /// Largest M, N and K.
    const MAX_DIM: usize = 5000;
    /// Rows and columns of the operand pools (a multiple of 8: aligned rows).
    const POOL: usize = 5072;
    const AWKWARD: &[usize] = &[
        1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 383, 384,
        511, 513, 767, 768, 1023, 1025, 2047, 2048, 2049, 3071, 3072, 4095, 4096, 4097, 5000,
    ];

    /// One operand pool: a POOL × POOL buffer of values in [-1, 1) and its host copy.
    struct Pool {
        t: Tensor,
        host: Vec<f32>,
    }

    impl Pool {
        fn new(gpu: &Gpu, rng: &mut StdRng, dtype: DType) -> Pool {
            let data: Vec<f64> = (0..POOL * POOL)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let host: Vec<f32> = round_slice(dtype, &data)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            Pool {
                t: Tensor::from_f32(gpu, POOL, POOL, dtype, &host).unwrap(),
                host,
            }
        }

        fn at(&self, r: usize, c: usize) -> f64 {
            self.host[r * POOL + c] as f64
        }
    }

    /// Largest M, N and K under compute-sanitizer ([`sanitizing`]): past it one case takes
    /// racecheck minutes.
    const MAX_DIM_SANITIZING: usize = 640;

    fn dim(rng: &mut StdRng) -> usize {
        let max = if sanitizing() {
            MAX_DIM_SANITIZING
        } else {
            MAX_DIM
        };
        let awkward = AWKWARD.partition_point(|&d| d <= max);
        if rng.random_bool(0.5) {
            AWKWARD[rng.random_range(0..awkward)]
        } else {
            let x: f64 = rng.random_range(0.0..(max as f64).ln());
            (x.exp().round() as usize).clamp(1, max)
        }
    }

    /// A random offset of a `len`-long range in `0..POOL`, a multiple of 8 when `aligned`.
    fn offset(rng: &mut StdRng, len: usize, aligned: bool) -> usize {
        let o = rng.random_range(0..=POOL - len);
        if aligned { o / 8 * 8 } else { o }
    }

    fn random_vec(rng: &mut StdRng, len: usize, dtype: DType) -> Vec<f64> {
        let v: Vec<f64> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
        round_slice(dtype, &v)
    }

    fn upload_vec(gpu: &Gpu, dtype: DType, v: &[f64]) -> Tensor {
        let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        Tensor::vector_from_f32(gpu, dtype, &f).unwrap()
    }

    #[test]
    fn random_shapes_offsets_and_epilogues_match_the_reference() {
        let Some(gpu) = gpu_or_skip("gpu_fuzz") else {
            return;
        };
        let mut rng = rng("gpu_fuzz");
        let cases: usize = std::env::var("FUSED_GEMM_FUZZ_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2000);
        let start = std::time::Instant::now();
        let pools = [
            (DType::Bf16, Pool::new(&gpu, &mut rng, DType::Bf16)),
            (DType::F16, Pool::new(&gpu, &mut rng, DType::F16)),
        ];
        let mut worst = 0.0f64;
        // Every failing case is reported (up to a limit), with the kernel that ran it: one run
        // shows whether failures share an entry point.
        let mut failures: Vec<String> = Vec::new();
        for case in 0..cases {
            if failures.len() >= MAX_FAILURES {
                break;
            }
            let (dtype, pool) = {
                let (d, p) = &pools[rng.random_range(0..pools.len())];
                (*d, p)
            };
            let epilogue = Epilogue::ALL[rng.random_range(0..Epilogue::ALL.len())];
            let b_col = epilogue != Epilogue::Plain || rng.random_bool(0.5);
            let f32_out = epilogue == Epilogue::Plain
                && b_col
                && dtype == DType::Bf16
                && rng.random_bool(0.3);
            let out = if f32_out { DType::F32 } else { dtype };
            let (m, k) = (dim(&mut rng), dim(&mut rng));
            let mut n = dim(&mut rng);
            if epilogue == Epilogue::SwiGlu {
                n = (n + n % 2).min(MAX_DIM);
            }
            let width = epilogue.width(n);
            let aligned = rng.random_bool(0.5);
            let (ar, ac) = (offset(&mut rng, m, false), offset(&mut rng, k, aligned));
            let (br, bc) = if b_col {
                (offset(&mut rng, n, false), offset(&mut rng, k, aligned))
            } else {
                (offset(&mut rng, k, false), offset(&mut rng, n, aligned))
            };
            let (rr, rc) = (offset(&mut rng, m, false), offset(&mut rng, n, aligned));
            // C inside a NaN-filled buffer: up to 3 rows above and below, 0-16 columns either side.
            let (top, bottom) = (rng.random_range(0..4), rng.random_range(0..4));
            let left = if aligned {
                8 * rng.random_range(0..3)
            } else {
                rng.random_range(0..17)
            };
            let right = rng.random_range(0..17);
            // Aligned cases keep C's rows 16-byte aligned too.
            let c_cols = if aligned {
                (left + width + right).next_multiple_of(8)
            } else {
                left + width + right
            };
            let c_rows = top + m + bottom;
            let mut c_buf = Tensor::zeros(&gpu, c_rows, c_cols, out).unwrap();
            c_buf.poison(&gpu).unwrap();

            let bias = random_vec(&mut rng, n, dtype);
            let gamma = random_vec(&mut rng, n, dtype);
            let beta = random_vec(&mut rng, n, dtype);
            let (bias_t, gamma_t, beta_t) = (
                upload_vec(&gpu, dtype, &bias),
                upload_vec(&gpu, dtype, &gamma),
                upload_vec(&gpu, dtype, &beta),
            );
            let label = format!(
                "case {case}: {epilogue:?} {}->{} {m}x{n}x{k} b_col {b_col} A@({ar},{ac}) \
                 B@({br},{bc}) R@({rr},{rc}) C@({top},{left}) in {c_rows}x{c_cols}",
                dtype.name(),
                out.name()
            );
            let launched: Result<LaunchReport> = (|| {
                let a = pool.t.slice(ar..ar + m, ac..ac + k)?;
                let b = if b_col {
                    pool.t.slice(br..br + n, bc..bc + k)?
                } else {
                    pool.t.slice(br..br + k, bc..bc + n)?
                };
                let res = pool.t.slice(rr..rr + m, rc..rc + n)?;
                let mut c = c_buf.slice_mut(top..top + m, left..left + width)?;
                epilogue.launch(
                    &gpu,
                    (dtype, b_col, out),
                    &a,
                    &b,
                    &mut c,
                    (&bias_t, &res, &gamma_t, &beta_t),
                )
            })();
            // Every launcher has a variant for element-aligned operands: nothing is refused.
            let report = launched.unwrap_or_else(|e| panic!("{label}: {e}"));

            let ran = format!(
                "{} {:?} tile {:?} tma_store {}",
                report.entry.unwrap_or("-"),
                report.mainloop,
                report.plan.map(|p| p.tile),
                report.tma_store
            );
            let got = c_buf.download_f32(&gpu).unwrap();
            let (mut unwritten, mut outside) = (Vec::new(), Vec::new());
            for (i, v) in got.iter().enumerate() {
                let (r, col) = (i / c_cols, i % c_cols);
                let inside = (top..top + m).contains(&r) && (left..left + width).contains(&col);
                if inside && !v.is_finite() {
                    unwritten.push((r - top, col - left));
                } else if !inside && !v.is_nan() {
                    outside.push((r, col, *v));
                }
            }
            if !unwritten.is_empty() || !outside.is_empty() {
                fail(
                    &mut failures,
                    format!(
                        "{label}: {} element(s) of C not written (first {:?}); {} outside C written \
                     (first {:?}); ran {ran}",
                        unwritten.len(),
                        unwritten.first(),
                        outside.len(),
                        &outside[..outside.len().min(4)],
                    ),
                );
                continue;
            }

            let mut rows = vec![0, m - 1, rng.random_range(0..m), rng.random_range(0..m)];
            rows.sort_unstable();
            rows.dedup();
            for &r in &rows {
                let acc: Vec<f64> = (0..n)
                    .map(|j| {
                        (0..k)
                            .map(|kk| {
                                let bv = if b_col {
                                    pool.at(br + j, bc + kk)
                                } else {
                                    pool.at(br + kk, bc + j)
                                };
                                pool.at(ar + r, ac + kk) * bv
                            })
                            .sum()
                    })
                    .collect();
                let residual = || (0..n).map(|j| pool.at(rr + r, rc + j)).collect();
                let stages = epilogue.stages(&bias, residual, &gamma, &beta);
                let want = apply_stages(1, n, &acc, &stages, None).unwrap();
                let row: Vec<f64> = got[(top + r) * c_cols + left..][..width]
                    .iter()
                    .map(|&v| v as f64)
                    .collect();
                let close = compare(&row, &want, row_tolerance(dtype, out).for_stages(&stages));
                worst = worst.max(close.worst);
                if !close.passed() {
                    fail(
                        &mut failures,
                        format!("{label}: row {r}: {close}; ran {ran}"),
                    );
                    break;
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} failing case(s){}:\n{}",
            failures.len(),
            if failures.len() >= MAX_FAILURES {
                " (stopped at the limit)"
            } else {
                ""
            },
            failures.join("\n")
        );
        println!(
            "{cases} cases matched the reference (worst element at {worst:.2} of its bound) \
             in {:.1} s",
            start.elapsed().as_secs_f64()
        );
    }

    /// The bounds of one row of C. A row is a few elements when N is small, so its own
    /// magnitude can be far below the errors the output type and the epilogue allow; such a row
    /// is judged against a floor magnitude ([`Tolerance::with_floor`]), which bounds both its
    /// Frobenius error and each element:
    /// - an f16 output below f16's smallest normal number (6.1e-5) holds one subnormal step of
    ///   absolute precision, so an f16 row is judged against at least that magnitude;
    /// - erf-GELU's own absolute error ([`Tolerance::for_stages`]) adds to that floor: a row of
    ///   far-negative pre-activations (GELU outputs near or below its error, one element when
    ///   N = 1) is judged against the magnitude whose tolerance is that error.
    fn row_tolerance(dtype: DType, out: DType) -> Tolerance {
        let tol = Tolerance::rel(if dtype == DType::Bf16 { 1e-2 } else { 2e-3 });
        let f16 = if out == DType::F16 {
            6.103_515_6e-5
        } else {
            0.0
        };
        tol.with_floor(f16)
    }

    /// Failing cases after which the fuzz stops.
    const MAX_FAILURES: usize = 40;

    /// Records a failing case and prints it at once: a run stopped before the end still shows
    /// what failed.
    fn fail(failures: &mut Vec<String>, what: String) {
        eprintln!("FAILED {what}");
        failures.push(what);
    }
}

mod threads {
    //! Concurrency stress: 1, 4 and 16 threads share one `Gpu` (and, separately, open one `Gpu`
    //! each) and mix eager GEMM launches of several epilogues, CUDA-graph captures and replays of
    //! them, and long-K launches that grow the split-K workspace (eagerly and inside captures).
    //! Every result is checked in full against the f64 reference; a capture must leave its output
    //! untouched until the replay, and a replay must see its inputs' current contents. A, B and
    //! the residual are views at random offsets into operands each thread uploads once; vectors
    //! and C are allocated per operation, so allocations and frees meet other threads' captures.
    //!
    //! `FUSED_GEMM_STRESS_OPS` sets the operations per run (default 10,000, split across the
    //! threads); `FUSED_GEMM_SEED` replays a run. Twenty runs in a row, and two processes at
    //! once, are a loop over this binary.

    use super::Epilogue;
    use fused_gemm::device::types::DType;
    use fused_gemm::host::reference::epilogue::{apply_stages, round_slice};
    use fused_gemm::host::testing::{Tolerance, compare, gpu_or_skip, rng};
    use fused_gemm::host::{Gpu, Result, Tensor};
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// Rows of the operand pools: one more than the largest M or N.
    const POOL_ROWS: usize = 97;
    /// Columns of the A and B pools: the longest K.
    const POOL_K: usize = 16384;
    /// Columns of the residual pool.
    const POOL_RESIDUAL: usize = 512;

    /// A random bf16 matrix on the device and its values on the host.
    struct Matrix {
        t: Tensor,
        v: Vec<f32>,
        cols: usize,
    }

    impl Matrix {
        fn new(gpu: &Gpu, rng: &mut StdRng, rows: usize, cols: usize) -> Matrix {
            let v = random_values(rng, rows * cols);
            let t = Tensor::from_f32(gpu, rows, cols, DType::Bf16, &v).unwrap();
            Matrix { t, v, cols }
        }

        /// Columns `cols` of row `r`.
        fn row(&self, r: usize, cols: std::ops::Range<usize>) -> &[f32] {
            &self.v[r * self.cols..][cols]
        }
    }

    /// Values uniform in [-1, 1), rounded to bf16 (so the device holds them exactly).
    fn random_values(rng: &mut StdRng, len: usize) -> Vec<f32> {
        let v: Vec<f64> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
        round_slice(DType::Bf16, &v)
            .into_iter()
            .map(|x| x as f32)
            .collect()
    }

    /// One thread's operands, made once: problems are views into them, so a long-K problem
    /// costs no upload. A and B have one slot per problem of a capture, so that refilling one
    /// problem's A between replays leaves the others' operands alone.
    struct Pools {
        slots: Vec<(Matrix, Matrix)>,
        residual: Matrix,
    }

    impl Pools {
        fn new(gpu: &Gpu, rng: &mut StdRng) -> Pools {
            let slots = (0..MAX_CAPTURED)
                .map(|_| {
                    (
                        Matrix::new(gpu, rng, POOL_ROWS, POOL_K),
                        Matrix::new(gpu, rng, POOL_ROWS, POOL_K),
                    )
                })
                .collect();
            let residual = Matrix::new(gpu, rng, POOL_ROWS, POOL_RESIDUAL);
            Pools { slots, residual }
        }
    }

    /// Launches one capture records, at most.
    const MAX_CAPTURED: usize = 3;

    /// A random vector on the device and its values.
    fn vector(gpu: &Gpu, rng: &mut StdRng, len: usize) -> (Tensor, Vec<f64>) {
        let v = random_values(rng, len);
        let t = Tensor::from_f32(gpu, 1, len, DType::Bf16, &v).unwrap();
        (t, v.into_iter().map(f64::from).collect())
    }

    /// A start in `0..=limit - len`, a multiple of 8 elements (16 bytes) half the time.
    fn offset(rng: &mut StdRng, len: usize, limit: usize) -> usize {
        let at = rng.random_range(0..=limit - len);
        if rng.random_bool(0.5) { at & !7 } else { at }
    }

    /// One GEMM: views of A, B and the residual in a thread's [`Pools`], its own vectors and a
    /// fresh C (allocated and poisoned per problem, so allocations and frees interleave with
    /// other threads' captures).
    struct Problem {
        m: usize,
        n: usize,
        k: usize,
        epilogue: Epilogue,
        /// The A/B slot of [`Pools`].
        slot: usize,
        /// (row, column) of A, B and the residual in their pools.
        a_at: (usize, usize),
        b_at: (usize, usize),
        r_at: (usize, usize),
        bias: (Tensor, Vec<f64>),
        gamma: (Tensor, Vec<f64>),
        beta: (Tensor, Vec<f64>),
        c: Tensor,
        /// What the last launch ran: entry point and plan (norm path included), for failures.
        ran: String,
    }

    impl Problem {
        /// A small problem, or with `long_k` a narrow one with a long K (log-uniform from 2,048
        /// to 16,384), which the planner splits along K (8 to 16 ways on its model, growing the
        /// workspace).
        fn new(gpu: &Gpu, rng: &mut StdRng, slot: usize, long_k: bool) -> Problem {
            let epilogue = if long_k {
                Epilogue::Plain
            } else {
                Epilogue::ALL[rng.random_range(0..Epilogue::ALL.len())]
            };
            let (m, mut n, k) = if long_k {
                let k = 2048.0 * 8f64.powf(rng.random::<f64>());
                (
                    rng.random_range(1..48),
                    rng.random_range(1..48),
                    (k as usize).min(POOL_K),
                )
            } else {
                (
                    rng.random_range(1..POOL_ROWS),
                    rng.random_range(1..POOL_ROWS),
                    rng.random_range(1..257),
                )
            };
            if epilogue == Epilogue::SwiGlu {
                n += n % 2;
            }
            let mut c = Tensor::zeros(gpu, m, epilogue.width(n), DType::Bf16).unwrap();
            c.poison(gpu).unwrap();
            Problem {
                m,
                n,
                k,
                epilogue,
                slot,
                a_at: (offset(rng, m, POOL_ROWS), offset(rng, k, POOL_K)),
                b_at: (offset(rng, n, POOL_ROWS), offset(rng, k, POOL_K)),
                r_at: (offset(rng, m, POOL_ROWS), offset(rng, n, POOL_RESIDUAL)),
                bias: vector(gpu, rng, n),
                gamma: vector(gpu, rng, n),
                beta: vector(gpu, rng, n),
                c,
                ran: String::new(),
            }
        }

        fn launch(&mut self, gpu: &Gpu, pools: &Pools) -> Result<()> {
            let (m, n, k) = (self.m, self.n, self.k);
            let (pa, pb) = &pools.slots[self.slot];
            let ((ar, ac), (br, bc), (rr, rc)) = (self.a_at, self.b_at, self.r_at);
            let a = pa.t.slice(ar..ar + m, ac..ac + k)?;
            let b = pb.t.slice(br..br + n, bc..bc + k)?;
            let residual = pools.residual.t.slice(rr..rr + m, rc..rc + n)?;
            let vectors = (&self.bias.0, &residual, &self.gamma.0, &self.beta.0);
            let bf16 = (DType::Bf16, true, DType::Bf16);
            let report = self
                .epilogue
                .launch(gpu, bf16, &a, &b, &mut self.c, vectors)?;
            self.ran = format!(
                "{} {:?}",
                report.entry.unwrap_or(report.kernel),
                report
                    .plan
                    .map(|p| (p.tile, p.splits, p.tail_splits, p.norm))
            );
            Ok(())
        }

        /// Refills this problem's view of A with fresh values.
        fn refill_a(&self, gpu: &Gpu, rng: &mut StdRng, pools: &mut Pools) {
            let (m, k, (ar, ac)) = (self.m, self.k, self.a_at);
            let fresh = random_values(rng, m * k);
            let pa = &mut pools.slots[self.slot].0;
            pa.t.slice_mut(ar..ar + m, ac..ac + k)
                .unwrap()
                .upload_f32(gpu, &fresh)
                .unwrap();
            for (r, row) in fresh.chunks(k).enumerate() {
                let at = (ar + r) * pa.cols + ac;
                pa.v[at..at + k].copy_from_slice(row);
            }
        }

        /// The f64 reference, and the bound it is held to: 1e-2 relative, plus the rounding
        /// of an f32 dot product of length K, 4·√K·2⁻²⁴·Σ|a||b| (about four standard
        /// deviations; the largest Σ over the outputs), which decides outputs that cancel to
        /// far below their terms.
        fn want(&self, pools: &Pools) -> (Vec<f64>, Tolerance) {
            let (m, n, k) = (self.m, self.n, self.k);
            let (pa, pb) = &pools.slots[self.slot];
            let ((ar, ac), (br, bc), (rr, rc)) = (self.a_at, self.b_at, self.r_at);
            // Rows of C on rayon's pool, shared by every stress thread of the process: a
            // one-thread run otherwise spent more than half its time here, other cores idle.
            use rayon::prelude::*;
            let rows: Vec<(Vec<f64>, f64)> = (0..m)
                .into_par_iter()
                .map(|r| {
                    let a = pa.row(ar + r, ac..ac + k);
                    let mut terms = 0f64;
                    let row = (0..n)
                        .map(|j| {
                            let (dot, abs) = dot_and_abs(a, pb.row(br + j, bc..bc + k));
                            terms = terms.max(abs);
                            dot
                        })
                        .collect();
                    (row, terms)
                })
                .collect();
            let terms = rows.iter().map(|p| p.1).fold(0f64, f64::max);
            let acc: Vec<f64> = rows.into_iter().flat_map(|p| p.0).collect();
            let rounding = 4.0 * (k as f64).sqrt() * 2f64.powi(-24) * terms;
            let residual = || {
                (0..m)
                    .flat_map(|r| pools.residual.row(rr + r, rc..rc + n).to_vec())
                    .map(f64::from)
                    .collect()
            };
            let stages = self
                .epilogue
                .stages(&self.bias.1, residual, &self.gamma.1, &self.beta.1);
            (
                apply_stages(m, n, &acc, &stages, None).unwrap(),
                Tolerance::rel(1e-2).plus_abs(rounding).for_stages(&stages),
            )
        }

        fn check(&mut self, gpu: &Gpu, pools: &Pools, what: &str, ph: &mut Phases) {
            let got: Vec<f64> = timed(&mut ph.downloads, || self.c.download_f32(gpu))
                .unwrap()
                .iter()
                .map(|&v| v as f64)
                .collect();
            let close = timed(&mut ph.reference, || {
                let (want, tol) = self.want(pools);
                compare(&got, &want, tol)
            });
            if !close.passed() {
                // Launched again alone: a result that is right now points at interference
                // from other threads, one that is wrong again at the kernel or its plan.
                let again = self
                    .launch(gpu, pools)
                    .and_then(|_| self.c.download_f32(gpu));
                let again = again.map(|v| {
                    let v: Vec<f64> = v.iter().map(|&x| x as f64).collect();
                    let (want, tol) = self.want(pools);
                    compare(&v, &want, tol).passed()
                });
                panic!(
                    "{what}: {}: {close}; launched again: {}",
                    self.describe(),
                    match again {
                        Ok(true) => "right".to_string(),
                        Ok(false) => "wrong again".to_string(),
                        Err(e) => format!("failed: {e}"),
                    }
                );
            }
        }

        /// The problem and what ran, for failure messages.
        fn describe(&self) -> String {
            format!(
                "{:?} {}x{}x{} A@{:?} B@{:?} R@{:?} slot {}, ran {}",
                self.epilogue,
                self.m,
                self.n,
                self.k,
                self.a_at,
                self.b_at,
                self.r_at,
                self.slot,
                self.ran
            )
        }

        fn still_poisoned(&self, gpu: &Gpu) -> bool {
            self.c.download_f32(gpu).unwrap().iter().all(|v| v.is_nan())
        }
    }
    /// Σ a·b and Σ|a·b| in f64, over four running sums each: independent chains let the
    /// reference keep up with the launches (one chain made it most of a run's time).
    fn dot_and_abs(a: &[f32], b: &[f32]) -> (f64, f64) {
        let (mut dot, mut abs) = ([0f64; 4], [0f64; 4]);
        let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
        let tail = ca.remainder().iter().zip(cb.remainder());
        for (x, y) in ca.zip(cb) {
            for i in 0..4 {
                let p = x[i] as f64 * y[i] as f64;
                dot[i] += p;
                abs[i] += p.abs();
            }
        }
        let (mut d, mut s) = (dot.iter().sum::<f64>(), abs.iter().sum::<f64>());
        for (&x, &y) in tail {
            let p = x as f64 * y as f64;
            d += p;
            s += p.abs();
        }
        (d, s)
    }

    /// Thread-seconds a run spent in each phase: where a slow run's time goes.
    #[derive(Default)]
    struct Phases {
        /// Allocating, filling and uploading operands.
        operands: Duration,
        /// Eager launches (host work until the launch is queued).
        launches: Duration,
        /// Captures and graph replays.
        graphs: Duration,
        /// Downloading C (waiting for the device's work first).
        downloads: Duration,
        /// The f64 reference and the comparison.
        reference: Duration,
    }

    impl Phases {
        fn add(&mut self, o: &Phases) {
            self.operands += o.operands;
            self.launches += o.launches;
            self.graphs += o.graphs;
            self.downloads += o.downloads;
            self.reference += o.reference;
        }
    }

    /// Runs `f`, adding its time to `into`.
    fn timed<T>(into: &mut Duration, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        *into += t.elapsed();
        r
    }

    /// One thread's share of a run: eager launches, captures with replays, long-K launches.
    fn worker(gpu: &Gpu, test: &str, seed: u64, ops: usize) -> Phases {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut ph = Phases::default();
        let mut pools = timed(&mut ph.operands, || Pools::new(gpu, &mut rng));
        let mut done = 0;
        while done < ops {
            match rng.random_range(0..10) {
                0..5 => {
                    let mut p = timed(&mut ph.operands, || Problem::new(gpu, &mut rng, 0, false));
                    timed(&mut ph.launches, || p.launch(gpu, &pools))
                        .unwrap_or_else(|e| panic!("{test}: eager launch: {e}"));
                    p.check(gpu, &pools, &format!("{test}: eager launch"), &mut ph);
                    done += 1;
                }
                5..8 => {
                    let count = rng.random_range(1..=MAX_CAPTURED);
                    let mut ps: Vec<Problem> = timed(&mut ph.operands, || {
                        (0..count)
                            .map(|slot| {
                                let long_k = rng.random_bool(0.2);
                                Problem::new(gpu, &mut rng, slot, long_k)
                            })
                            .collect()
                    });
                    let graph = timed(&mut ph.graphs, || {
                        gpu.capture(|g| ps.iter_mut().try_for_each(|p| p.launch(g, &pools)))
                    })
                    .unwrap_or_else(|e| {
                        let what: Vec<String> = ps.iter().map(|p| p.describe()).collect();
                        panic!("{test}: capture of {what:?}: {e}")
                    });
                    let untouched = timed(&mut ph.downloads, || {
                        ps.iter().all(|p| p.still_poisoned(gpu))
                    });
                    assert!(untouched, "a captured launch ran before its replay");
                    timed(&mut ph.graphs, || graph.replay()).unwrap();
                    ps.iter_mut()
                        .for_each(|p| p.check(gpu, &pools, &format!("{test}: replay"), &mut ph));
                    // A replay reads its inputs' current contents.
                    timed(&mut ph.operands, || {
                        ps[0].refill_a(gpu, &mut rng, &mut pools)
                    });
                    timed(&mut ph.graphs, || graph.replay()).unwrap();
                    let again = format!("{test}: replay after refilling A");
                    ps.iter_mut()
                        .for_each(|p| p.check(gpu, &pools, &again, &mut ph));
                    done += 2 * ps.len();
                }
                _ => {
                    let mut p = timed(&mut ph.operands, || Problem::new(gpu, &mut rng, 0, true));
                    timed(&mut ph.launches, || p.launch(gpu, &pools))
                        .unwrap_or_else(|e| panic!("{test}: long-K launch: {e}"));
                    p.check(gpu, &pools, &format!("{test}: long-K launch"), &mut ph);
                    done += 1;
                }
            }
        }
        ph
    }

    fn ops_per_run() -> usize {
        std::env::var("FUSED_GEMM_STRESS_OPS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10_000)
    }

    fn run(test: &str, threads: usize, one_gpu: bool) {
        let Some(gpu) = gpu_or_skip(test) else {
            return;
        };
        let seed: u64 = rng(test).random();
        let ops = ops_per_run();
        let start = Instant::now();
        let total = Mutex::new(Phases::default());
        std::thread::scope(|s| {
            for t in 0..threads {
                let (gpu, total) = (&gpu, &total);
                s.spawn(move || {
                    let own;
                    let g = if one_gpu {
                        gpu
                    } else {
                        // The model's tiles, as `gpu_or_skip` gives the shared handle.
                        own = Gpu::new(0).unwrap();
                        own.set_autotuner(None);
                        &own
                    };
                    let ph = worker(g, test, seed.wrapping_add(t as u64), ops.div_ceil(threads));
                    total.lock().unwrap().add(&ph);
                });
            }
        });
        let ph = total.into_inner().unwrap();
        println!(
            "{test}: {threads} thread(s), {} GPU handle(s), {ops} operations in {:.1} s \
             (thread-seconds: operands {:.1}, launches {:.1}, captures and replays {:.1}, \
             downloads {:.1}, reference {:.1})",
            if one_gpu {
                "one shared"
            } else {
                "one per thread"
            },
            start.elapsed().as_secs_f64(),
            ph.operands.as_secs_f64(),
            ph.launches.as_secs_f64(),
            ph.graphs.as_secs_f64(),
            ph.downloads.as_secs_f64(),
            ph.reference.as_secs_f64(),
        );
    }

    #[test]
    fn one_thread() {
        run("stress_1", 1, true);
    }

    #[test]
    fn four_threads_share_one_gpu() {
        run("stress_4_shared", 4, true);
    }

    #[test]
    fn sixteen_threads_share_one_gpu() {
        run("stress_16_shared", 16, true);
    }

    #[test]
    fn four_threads_one_gpu_each() {
        run("stress_4_own", 4, false);
    }

    #[test]
    fn sixteen_threads_one_gpu_each() {
        run("stress_16_own", 16, false);
    }
}
