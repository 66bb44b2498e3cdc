//! cuBLASLt for the baselines, through cudarc's `cublaslt::result` layer: descriptors, layouts
//! and the heuristic's top algorithms are built once per shape ([`LtPlan`]); the harness times
//! each candidate and keeps the fastest ([`LtPlan::select`]), as a framework's autotuner would;
//! a timed run is one `cublasLtMatmul` call ([`Lt::run`]). The workspace is 32 MiB, what
//! NVIDIA recommends on Hopper and what PyTorch gives cuBLASLt there.
//!
//! Row-major `C = A·Bᵀ` (A M×K, B N×K as `Linear` weights are stored, C M×N) is, read
//! column-major, `Cᵀ = B·Aᵀ`: cuBLASLt's "A" is our B (stored K×N column-major, ld K,
//! transposed), its "B" is our A (K×M column-major, ld K, not transposed), and D is N×M
//! column-major (ld N), i.e. our row-major C. The bias epilogues add a vector along cuBLASLt's
//! rows (length N): a per-column bias of the row-major C, as a `Linear` layer's.

use std::sync::Arc;

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use fused_gemm::Gpu;
use fused_gemm::device::types::DType;
use fused_gemm::host::cudarc;

use crate::epilogue::LtEpilogue;
use crate::error::{BenchError, Result};

/// Whether libcublasLt can be loaded. Never panics (cudarc panics on first use of a missing
/// library; this probes first).
pub fn available() -> bool {
    std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

/// Workspace cuBLASLt may use (NVIDIA recommends 32 MiB on Hopper).
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// Algorithms asked of cuBLASLt's heuristic per shape; the harness times each.
pub const HEURISTIC_ALGOS: usize = 8;

/// A cuBLASLt handle bound to the benchmark's stream, with its workspace.
pub struct Lt {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for Lt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lt").finish_non_exhaustive()
    }
}

/// Descriptors and algorithm for one GEMM shape and epilogue.
pub struct LtPlan {
    desc: sys::cublasLtMatmulDesc_t,
    a_layout: sys::cublasLtMatrixLayout_t,
    b_layout: sys::cublasLtMatrixLayout_t,
    d_layout: sys::cublasLtMatrixLayout_t,
    candidates: Vec<sys::cublasLtMatmulAlgo_t>,
    chosen: std::cell::Cell<usize>,
    epilogue: LtEpilogue,
    /// M, N, K of the row-major problem.
    pub mnk: (usize, usize, usize),
}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // SAFETY: created in `Lt::plan` (or still null), destroyed once; failures here cannot
        // be acted on.
        unsafe {
            for l in [self.a_layout, self.b_layout, self.d_layout] {
                if !l.is_null() {
                    let _ = lt::destroy_matrix_layout(l);
                }
            }
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
        }
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        // SAFETY: created in `Lt::new`, destroyed once.
        unsafe {
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

fn status_of(r: std::result::Result<(), lt::CublasError>) -> Result<()> {
    r.map_err(BenchError::from)
}

impl LtPlan {
    /// How many algorithms the heuristic offered (at least one).
    pub fn candidates(&self) -> usize {
        self.candidates.len()
    }

    /// Runs use candidate `i` (0 is the heuristic's favourite); out of range keeps the choice.
    pub fn select(&self, i: usize) {
        if i < self.candidates.len() {
            self.chosen.set(i);
        }
    }

    /// The candidate in use.
    pub fn chosen(&self) -> usize {
        self.chosen.get()
    }
}

/// A column-major matrix layout as cuBLASLt takes it: stored rows × cols with leading
/// dimension `ld`, transposed by the operation or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColMajor {
    /// Stored rows.
    pub rows: u64,
    /// Stored columns.
    pub cols: u64,
    /// Leading dimension (elements between columns).
    pub ld: i64,
    /// `CUBLAS_OP_T` for this operand.
    pub trans: bool,
}

/// cuBLASLt's (A, B, D) for row-major `C = A·Bᵀ` with A M×K, B N×K, C M×N: A := our B (K×N,
/// transposed), B := our A (K×M), D := our C read as N×M (see the [module docs](self)).
pub fn layouts(m: usize, n: usize, k: usize) -> [ColMajor; 3] {
    let (m, n, k) = (m as u64, n as u64, k as u64);
    [
        ColMajor {
            rows: k,
            cols: n,
            ld: k as i64,
            trans: true,
        },
        ColMajor {
            rows: k,
            cols: m,
            ld: k as i64,
            trans: false,
        },
        ColMajor {
            rows: n,
            cols: m,
            ld: n as i64,
            trans: false,
        },
    ]
}

fn data_type(dtype: DType) -> Result<sys::cudaDataType> {
    match dtype {
        DType::Bf16 => Ok(sys::cudaDataType_t::CUDA_R_16BF),
        DType::F16 => Ok(sys::cudaDataType_t::CUDA_R_16F),
        DType::F32 => Err(BenchError::Usage {
            what: "dtype",
            detail: "the benchmark runs bf16 or f16".into(),
        }),
    }
}

/// Sets a descriptor attribute to `v`.
///
/// # Safety
/// `desc` must be a live descriptor and `V` the attribute's documented type.
unsafe fn set_desc<V>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    v: &V,
) -> Result<()> {
    // SAFETY: forwarded from the caller; `v` is read during the call only.
    unsafe {
        lt::set_matmul_desc_attribute(
            desc,
            attr,
            v as *const V as *const _,
            std::mem::size_of::<V>(),
        )
    }?;
    Ok(())
}

impl Lt {
    /// A handle on `gpu`'s stream and a workspace of [`WORKSPACE_BYTES`].
    ///
    /// # Errors
    /// [`BenchError::NoCublasLt`] when the library is absent; cuBLASLt or allocation errors.
    pub fn new(gpu: &Gpu) -> Result<Lt> {
        if !available() {
            return Err(BenchError::NoCublasLt);
        }
        gpu.context().bind_to_thread()?;
        let handle = lt::create_handle()?;
        let workspace = match gpu.zeros::<u8>(WORKSPACE_BYTES) {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: just created, not shared.
                unsafe {
                    let _ = lt::destroy_handle(handle);
                }
                return Err(e.into());
            }
        };
        Ok(Lt {
            handle,
            workspace,
            stream: gpu.stream().clone(),
        })
    }

    /// Builds descriptors for `C = A·Bᵀ (+ epilogue)` with row-major M×K A, N×K B, M×N C of
    /// `dtype`, f32 accumulation and scale, and asks the heuristic for its
    /// [`HEURISTIC_ALGOS`] best algorithms (the first, its favourite, is selected).
    /// `bias_for_heuristic` is a device address of the kind the runs will pass (alignment
    /// matters to the heuristic), or 0 without a bias epilogue.
    ///
    /// # Errors
    /// cuBLASLt's status when a descriptor fails or no algorithm supports the problem.
    pub fn plan(
        &self,
        dtype: DType,
        m: usize,
        n: usize,
        k: usize,
        epilogue: LtEpilogue,
        bias_for_heuristic: u64,
    ) -> Result<LtPlan> {
        let ty = data_type(dtype)?;
        // Filled one by one so that `Drop` frees whatever was created if a later step fails.
        let mut plan = LtPlan {
            desc: std::ptr::null_mut(),
            a_layout: std::ptr::null_mut(),
            b_layout: std::ptr::null_mut(),
            d_layout: std::ptr::null_mut(),
            candidates: Vec::new(),
            chosen: std::cell::Cell::new(0),
            epilogue,
            mnk: (m, n, k),
        };
        let [la, lb, ld] = layouts(m, n, k);
        plan.a_layout = lt::create_matrix_layout(ty, la.rows, la.cols, la.ld)?;
        plan.b_layout = lt::create_matrix_layout(ty, lb.rows, lb.cols, lb.ld)?;
        plan.d_layout = lt::create_matrix_layout(ty, ld.rows, ld.cols, ld.ld)?;
        plan.desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType_t::CUDA_R_32F,
        )?;
        // cublasOperation_t: 0 = N, 1 = T.
        let (trans_a, trans_b) = (la.trans as i32, lb.trans as i32);
        let epi = match epilogue {
            LtEpilogue::None => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
            LtEpilogue::Bias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            LtEpilogue::BiasGelu => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
        };
        use sys::cublasLtMatmulDescAttributes_t as A;
        // SAFETY: valid descriptor; each value has the attribute's documented type
        // (int32 operations, uint32 epilogue enum, device pointer).
        unsafe {
            set_desc(plan.desc, A::CUBLASLT_MATMUL_DESC_TRANSA, &trans_a)?;
            set_desc(plan.desc, A::CUBLASLT_MATMUL_DESC_TRANSB, &trans_b)?;
            set_desc(plan.desc, A::CUBLASLT_MATMUL_DESC_EPILOGUE, &(epi as u32))?;
            if epilogue != LtEpilogue::None {
                set_desc(
                    plan.desc,
                    A::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    &bias_for_heuristic,
                )?;
            }
        }
        let pref = lt::create_matmul_pref()?;
        let ws = self.workspace.len();
        let mut results = [sys::cublasLtMatmulHeuristicResult_t {
            algo: sys::cublasLtMatmulAlgo_t { data: [0; 8] },
            workspaceSize: 0,
            state: sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS,
            wavesCount: 0.0,
            reserved: [0; 4],
        }; HEURISTIC_ALGOS];
        let mut returned = 0i32;
        // SAFETY: all handles valid; `results` holds HEURISTIC_ALGOS entries; the preference
        // is destroyed right after.
        let status = unsafe {
            let r = lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const usize as *const _,
                std::mem::size_of::<usize>(),
            )
            .and_then(|_| {
                sys::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    plan.desc,
                    plan.a_layout,
                    plan.b_layout,
                    plan.d_layout,
                    plan.d_layout,
                    pref,
                    HEURISTIC_ALGOS as i32,
                    results.as_mut_ptr(),
                    &mut returned,
                )
                .result()
            });
            let _ = lt::destroy_matmul_pref(pref);
            status_of(r)
        };
        status?;
        plan.candidates = results[..returned.clamp(0, HEURISTIC_ALGOS as i32) as usize]
            .iter()
            .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect();
        if plan.candidates.is_empty() {
            return Err(BenchError::Cublas(
                "the heuristic returned no algorithm for this problem".into(),
            ));
        }
        Ok(plan)
    }

    /// Queues `D = A·Bᵀ (+ epilogue)` on the stream.
    ///
    /// # Safety
    /// `a`, `b`, `d` (and `bias` for a bias epilogue) must be device addresses of buffers of
    /// the plan's dtype holding M×K, N×K, M×N (and N) elements, alive until the work is done.
    pub unsafe fn run(&mut self, plan: &LtPlan, a: u64, b: u64, d: u64, bias: u64) -> Result<()> {
        if plan.epilogue != LtEpilogue::None {
            // SAFETY: live descriptor; the bias pointer attribute is a device address.
            unsafe {
                set_desc(
                    plan.desc,
                    sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    &bias,
                )
            }?;
        }
        let (alpha, beta) = (1.0f32, 0.0f32);
        let ws_len = self.workspace.len();
        let (ws, _guard) = self.workspace.device_ptr_mut(&self.stream);
        // SAFETY: descriptors, layouts and algorithm come from `plan`; the operand addresses
        // are the caller's promise; C = D (beta = 0, so C is not read).
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                &alpha as *const f32 as *const _,
                &beta as *const f32 as *const _,
                b as *const _,
                plan.a_layout,
                a as *const _,
                plan.b_layout,
                d as *const _,
                plan.d_layout,
                d as *mut _,
                plan.d_layout,
                &plan.candidates[plan.chosen.get()],
                ws as *mut _,
                ws_len,
                self.stream.cu_stream() as *mut _,
            )
        }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element (i, j) of op(X) for a column-major X with layout `l`.
    fn op_at(x: &[f64], l: &ColMajor, i: usize, j: usize) -> f64 {
        let (r, c) = if l.trans { (j, i) } else { (i, j) };
        assert!(
            (r as u64) < l.rows && (c as u64) < l.cols,
            "index outside the stored matrix"
        );
        x[r + c * l.ld as usize]
    }

    /// BLAS semantics, D = op(A)·op(B), D column-major, on the buffers cuBLASLt would get,
    /// must equal the row-major C = A·Bᵀ the benchmark wants.
    #[test]
    fn column_major_call_computes_row_major_a_times_b_transposed() {
        let (m, n, k) = (3usize, 5usize, 4usize);
        let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect(); // M×K row-major
        let b: Vec<f64> = (0..n * k).map(|i| (i as f64 * 0.71).cos()).collect(); // N×K row-major
        let [la, lb, ld] = layouts(m, n, k);
        // cuBLASLt's A is our B buffer, its B our A buffer.
        let (cm, cn) = (ld.rows as usize, ld.cols as usize);
        assert_eq!((cm, cn), (n, m));
        let mut d = vec![0.0; (ld.ld as usize) * cn];
        for i in 0..cm {
            for j in 0..cn {
                d[i + j * ld.ld as usize] = (0..k)
                    .map(|p| op_at(&b, &la, i, p) * op_at(&a, &lb, p, j))
                    .sum();
            }
        }
        // Read D's buffer as row-major M×N.
        for r in 0..m {
            for c in 0..n {
                let want: f64 = (0..k).map(|p| a[r * k + p] * b[c * k + p]).sum();
                assert!((d[r * n + c] - want).abs() < 1e-12, "C[{r}, {c}]");
            }
        }
        // The bias epilogue adds along D's rows: index i < N, a per-column bias of C.
        assert_eq!(ld.rows as usize, n);
    }
}
