//! The epilogues the benchmark compares, what each computes (the contract every path meets),
//! the bytes it must move at least, and its f64 reference.
//!
//! Every epilogue starts from `C = A·Bᵀ`: A is M×K row-major (activations), B is N×K row-major
//! (a PyTorch/safetensors `Linear` weight), C is M×N. Vectors (bias, γ, β) have one value per
//! column (length N), broadcast down the rows. Storage is the run's dtype (bf16 or f16), math
//! f32 on the GPU and f64 in the references.

use serde::{Deserialize, Serialize};

/// One epilogue. Names on the command line and in JSON are kebab-case (`bias-gelu`, …).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Epilogue {
    /// `out = gelu(C + bias)`, GELU with the exact (erf) normal CDF (BERT's `"gelu"`). cuBLASLt's
    /// fused GELU is the tanh approximation, so its column computes bias-gelu-tanh instead.
    BiasGelu,
    /// `out = gelu_tanh(C + bias)` (GPT-2's `"gelu_new"`; what cuBLASLt fuses).
    BiasGeluTanh,
    /// `out = relu(C + bias)`.
    BiasRelu,
    /// `out = C + bias`.
    Bias,
    /// `out = LayerNorm(C + bias + residual)` with γ, β and ε = 1e-12 (BERT post-norm); the
    /// residual is M×N. cuBLASLt has no such epilogue.
    BiasResidualLayernorm,
    /// `out[r, j] = silu(C[r, 2j])·C[r, 2j + 1]`: gate/up weight rows interleaved
    /// `[g0, u0, g1, u1, …]`; N even, output M×N/2 (LLaMA MLP up-projection).
    Swiglu,
    /// CODA's RMSNorm-scale (the GEMM that consumes a normalized input): `out = RMSNorm(A)·Bᵀ
    /// = diag(r)·(A·Bᵀ)` with `r[m] = 1/√(mean_k A[m, k]² + ε)` (ε = 1e-5, LLaMA-3) and γ folded
    /// into B offline, as CODA does. Ours: r by a row kernel, then a GEMM whose epilogue scales
    /// rows by r. Unfused: the RMSNorm materialized (`rms_norm`, unit γ), then the GEMM.
    RmsnormScale,
    /// The producer side of RMSNorm-scale: `out = C` (M×N) and
    /// `rstd[r] = 1/√(mean_c C[r, c]² + ε)` (f32, length M; ε = 1e-5), the `r` the next GEMM
    /// applies as a row scale.
    RmsRstd,
}

/// What cuBLASLt runs for an epilogue in the "cublaslt" column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LtEpilogue {
    /// Plain GEMM.
    None,
    /// `CUBLASLT_EPILOGUE_BIAS`.
    Bias,
    /// `CUBLASLT_EPILOGUE_RELU_BIAS`.
    BiasRelu,
    /// `CUBLASLT_EPILOGUE_GELU_BIAS` (tanh approximation).
    BiasGelu,
}

/// Which operands an epilogue reads and writes besides A, B and `out`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Operands {
    /// Bias, length N.
    pub bias: bool,
    /// Residual, M×N.
    pub residual: bool,
    /// γ, length N.
    pub gamma: bool,
    /// β, length N.
    pub beta: bool,
    /// Per-row f32 buffer, length M (rms-rstd's output; rmsnorm-scale's r).
    pub rstd: bool,
    /// rmsnorm-scale: the unfused path's normalized copy of A (M×K) and its unit γ (length K).
    pub normalized_input: bool,
}

impl Epilogue {
    /// Every epilogue.
    pub const ALL: [Epilogue; 8] = [
        Epilogue::BiasGelu,
        Epilogue::BiasGeluTanh,
        Epilogue::BiasRelu,
        Epilogue::Bias,
        Epilogue::BiasResidualLayernorm,
        Epilogue::Swiglu,
        Epilogue::RmsnormScale,
        Epilogue::RmsRstd,
    ];

    /// The command-line and JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Epilogue::BiasGelu => "bias-gelu",
            Epilogue::BiasGeluTanh => "bias-gelu-tanh",
            Epilogue::BiasRelu => "bias-relu",
            Epilogue::Bias => "bias",
            Epilogue::BiasResidualLayernorm => "bias-residual-layernorm",
            Epilogue::Swiglu => "swiglu",
            Epilogue::RmsnormScale => "rmsnorm-scale",
            Epilogue::RmsRstd => "rms-rstd",
        }
    }

    /// Operands besides A, B and `out`.
    pub fn operands(self) -> Operands {
        match self {
            Epilogue::BiasGelu | Epilogue::BiasGeluTanh | Epilogue::BiasRelu | Epilogue::Bias => {
                Operands {
                    bias: true,
                    ..Operands::default()
                }
            }
            Epilogue::BiasResidualLayernorm => Operands {
                bias: true,
                residual: true,
                gamma: true,
                beta: true,
                ..Operands::default()
            },
            Epilogue::Swiglu => Operands::default(),
            Epilogue::RmsnormScale => Operands {
                rstd: true,
                normalized_input: true,
                ..Operands::default()
            },
            Epilogue::RmsRstd => Operands {
                rstd: true,
                ..Operands::default()
            },
        }
    }

    /// Columns of `out` for a GEMM of width N.
    pub fn out_cols(self, n: usize) -> usize {
        if self == Epilogue::Swiglu { n / 2 } else { n }
    }

    /// ε of the norm epilogues (0 for the others).
    pub fn eps(self) -> f32 {
        match self {
            Epilogue::BiasResidualLayernorm => 1e-12,
            Epilogue::RmsnormScale | Epilogue::RmsRstd => 1e-5,
            _ => 0.0,
        }
    }

    /// Why a GEMM of width `n` and depth `k` cannot take this epilogue, or `None`.
    pub fn check_width(self, n: usize, k: usize, max_row: usize) -> Option<String> {
        match self {
            Epilogue::Swiglu if !n.is_multiple_of(2) => {
                Some(format!("SwiGLU needs an even N, got {n}"))
            }
            Epilogue::BiasResidualLayernorm | Epilogue::RmsRstd if n > max_row => Some(format!(
                "row kernels hold at most {max_row} columns, N = {n}"
            )),
            Epilogue::RmsnormScale if k > max_row => Some(format!(
                "row kernels hold at most {max_row} columns, K = {k}"
            )),
            _ => None,
        }
    }

    /// The activation of a bias epilogue (for the unfused `bias_act` kernel).
    pub fn activation(self) -> Option<fused_gemm::rowwise::Activation> {
        use fused_gemm::rowwise::Activation as A;
        match self {
            Epilogue::BiasGelu => Some(A::Gelu),
            Epilogue::BiasGeluTanh => Some(A::GeluTanh),
            Epilogue::BiasRelu => Some(A::Relu),
            Epilogue::Bias => Some(A::None),
            _ => None,
        }
    }

    /// What the cuBLASLt column runs, and what that computes relative to the contract:
    /// `"full"`, `"GELU tanh"` (bias-gelu: cuBLASLt only has the approximation) or
    /// `"GEMM only"` (no fused epilogue exists: the column is the bare GEMM, a lower bound).
    pub fn cublaslt(self) -> (LtEpilogue, &'static str) {
        match self {
            Epilogue::BiasGelu => (LtEpilogue::BiasGelu, "GELU tanh"),
            Epilogue::BiasGeluTanh => (LtEpilogue::BiasGelu, "full"),
            Epilogue::BiasRelu => (LtEpilogue::BiasRelu, "full"),
            Epilogue::Bias => (LtEpilogue::Bias, "full"),
            Epilogue::BiasResidualLayernorm
            | Epilogue::Swiglu
            | Epilogue::RmsnormScale
            | Epilogue::RmsRstd => (LtEpilogue::None, "GEMM only"),
        }
    }

    /// Bytes any implementation must move at least (each operand read or written once):
    /// A, B, `out`, and the epilogue's vectors, residual and per-row output. `elem` is the
    /// storage size in bytes.
    pub fn bytes_min(self, m: usize, n: usize, k: usize, elem: usize) -> f64 {
        let o = self.operands();
        let mut e = (m * k + n * k + m * self.out_cols(n)) as f64;
        e += [o.bias, o.gamma, o.beta].iter().filter(|&&b| b).count() as f64 * n as f64;
        if o.residual {
            e += (m * n) as f64;
        }
        let mut bytes = e * elem as f64;
        if self == Epilogue::RmsRstd {
            bytes += 4.0 * m as f64;
        }
        bytes
    }

    /// Floating-point operations of the GEMM (2·M·N·K); the epilogue's are not counted.
    pub fn flops(m: usize, n: usize, k: usize) -> f64 {
        2.0 * m as f64 * n as f64 * k as f64
    }
}

// ---- f64 references ---------------------------------------------------------------------------

/// erf-GELU in f64.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

/// tanh-GELU in f64.
pub fn gelu_tanh(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

/// SiLU in f64.
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// `1/√(mean(v²) + ε)` in f64.
pub fn inverse_rms(v: &[f64], eps: f32) -> f64 {
    let ms = v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64;
    1.0 / (ms + eps as f64).sqrt()
}

/// One row of C = A·Bᵀ in f64: `a_row` has K values, `b` is N×K row-major.
pub fn gemm_row(a_row: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let k = a_row.len();
    (0..n)
        .map(|j| {
            b[j * k..(j + 1) * k]
                .iter()
                .zip(a_row)
                .map(|(x, y)| x * y)
                .sum()
        })
        .collect()
}

/// The operands of one output row, as f64.
#[derive(Clone, Copy, Debug, Default)]
pub struct RowInputs<'a> {
    /// The row of A, K values.
    pub a_row: &'a [f64],
    /// Bias, N values.
    pub bias: &'a [f64],
    /// The residual's row, N values.
    pub residual: &'a [f64],
    /// γ, N values.
    pub gamma: &'a [f64],
    /// β, N values.
    pub beta: &'a [f64],
}

/// Reference output of one row: `out` values and, for RMSNorm-scale, the row's 1/rms.
#[derive(Clone, Debug, PartialEq)]
pub struct RowOutput {
    /// The row of `out` (N or N/2 values).
    pub out: Vec<f64>,
    /// 1/rms of the row (RMSNorm-scale only).
    pub rstd: Option<f64>,
}

impl Epilogue {
    /// The contract's output for one row, from the GEMM row `c` (N values, f64).
    pub fn reference_row(self, c: &[f64], x: &RowInputs<'_>) -> RowOutput {
        let plus_bias = |f: fn(f64) -> f64| -> Vec<f64> {
            c.iter().zip(x.bias).map(|(v, b)| f(v + b)).collect()
        };
        let out = match self {
            Epilogue::BiasGelu => plus_bias(gelu),
            Epilogue::BiasGeluTanh => plus_bias(gelu_tanh),
            Epilogue::BiasRelu => plus_bias(|v| v.max(0.0)),
            Epilogue::Bias => plus_bias(|v| v),
            Epilogue::BiasResidualLayernorm => {
                let s: Vec<f64> = c
                    .iter()
                    .zip(x.bias)
                    .zip(x.residual)
                    .map(|((v, b), r)| v + b + r)
                    .collect();
                let n = s.len() as f64;
                let mean = s.iter().sum::<f64>() / n;
                let var = s.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
                let rstd = 1.0 / (var + self.eps() as f64).sqrt();
                s.iter()
                    .enumerate()
                    .map(|(j, v)| (v - mean) * rstd * x.gamma[j] + x.beta[j])
                    .collect()
            }
            Epilogue::Swiglu => c.chunks_exact(2).map(|p| silu(p[0]) * p[1]).collect(),
            Epilogue::RmsnormScale => {
                let r = inverse_rms(x.a_row, self.eps());
                c.iter().map(|v| v * r).collect()
            }
            Epilogue::RmsRstd => c.to_vec(),
        };
        let rstd = (self == Epilogue::RmsRstd).then(|| inverse_rms(c, self.eps()));
        RowOutput { out, rstd }
    }

    /// What the cuBLASLt column computes for one row (see [`Epilogue::cublaslt`]).
    pub fn cublaslt_reference_row(self, c: &[f64], x: &RowInputs<'_>) -> Vec<f64> {
        match self.cublaslt().0 {
            LtEpilogue::None => c.to_vec(),
            LtEpilogue::Bias => Epilogue::Bias.reference_row(c, x).out,
            LtEpilogue::BiasRelu => Epilogue::BiasRelu.reference_row(c, x).out,
            LtEpilogue::BiasGelu => Epilogue::BiasGeluTanh.reference_row(c, x).out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn names_agree_between_cli_json_and_name() {
        for e in Epilogue::ALL {
            let cli = e.to_possible_value().unwrap();
            assert_eq!(cli.get_name(), e.name());
            assert_eq!(
                serde_json::to_string(&e).unwrap(),
                format!("\"{}\"", e.name())
            );
            assert_eq!(Epilogue::from_str(e.name(), false).unwrap(), e);
        }
    }

    // known-faults #2: cuBLASLt's GELU is the tanh one; the erf one is reported as such.
    #[test]
    fn gelu_variants_and_cublaslt_cover() {
        assert!((gelu(-1.5) - -0.100_210_8).abs() < 1e-7);
        assert!((gelu_tanh(-1.5) - -0.100_428_4).abs() < 1e-7);
        assert_eq!(
            Epilogue::BiasGelu.cublaslt(),
            (LtEpilogue::BiasGelu, "GELU tanh")
        );
        assert_eq!(Epilogue::BiasGeluTanh.cublaslt().1, "full");
        assert_eq!(Epilogue::Swiglu.cublaslt(), (LtEpilogue::None, "GEMM only"));
        let c = [1.0, -1.0];
        let x = RowInputs {
            bias: &[0.5, 0.0],
            ..RowInputs::default()
        };
        assert_eq!(
            Epilogue::BiasGelu.cublaslt_reference_row(&c, &x),
            vec![gelu_tanh(1.5), gelu_tanh(-1.0)]
        );
    }

    #[test]
    fn reference_rows_follow_the_contract() {
        let x = RowInputs {
            a_row: &[],
            bias: &[1.0, 2.0, 3.0, 4.0],
            residual: &[0.0, 0.0, 0.0, 4.0],
            gamma: &[1.0, 1.0, 1.0, 2.0],
            beta: &[0.0, 0.0, 0.0, 1.0],
        };
        // s = [1, 2, 3, 8]: mean 3.5, var 7.25.
        let ln = Epilogue::BiasResidualLayernorm
            .reference_row(&[0.0; 4], &x)
            .out;
        let r = 1.0 / (7.25f64 + 1e-12).sqrt();
        assert!(
            (ln[0] - (-2.5 * r)).abs() < 1e-12 && (ln[3] - (4.5 * r * 2.0 + 1.0)).abs() < 1e-12
        );
        // known-faults #10, interleaved: gate [0, 1, −1], up 2.
        let sw = Epilogue::Swiglu
            .reference_row(&[0.0, 2.0, 1.0, 2.0, -1.0, 2.0], &x)
            .out;
        for (g, w) in sw.iter().zip([0.0, 1.462_117_2, -0.537_882_8]) {
            assert!((g - w).abs() < 1e-7, "{sw:?}");
        }
        let eps = Epilogue::RmsRstd.eps() as f64;
        let rms = Epilogue::RmsRstd.reference_row(&[3.0, 4.0], &x);
        assert_eq!(rms.out, vec![3.0, 4.0]);
        assert!((rms.rstd.unwrap() - 1.0 / (12.5f64 + eps).sqrt()).abs() < 1e-15);
        // The consumer scales the GEMM row by A's row 1/rms (A = [1, 7]: mean square 25).
        let xa = RowInputs {
            a_row: &[1.0, 7.0],
            ..x
        };
        let scaled = Epilogue::RmsnormScale.reference_row(&[3.0, 4.0], &xa);
        let r = 1.0 / (25.0 + eps).sqrt();
        assert!((scaled.out[0] - 3.0 * r).abs() < 1e-15 && (scaled.out[1] - 4.0 * r).abs() < 1e-15);
        assert_eq!(scaled.rstd, None);
        assert_eq!(
            gemm_row(&[1.0, 2.0], &[1.0, 0.0, 0.5, 0.5, 3.0, -1.0], 3),
            vec![1.0, 1.5, 1.0]
        );
    }

    #[test]
    fn minimal_traffic_counts_each_operand_once() {
        // bf16 4096×3072×768 bias-gelu: A, B, out, bias.
        let b = Epilogue::BiasGelu.bytes_min(4096, 3072, 768, 2);
        assert_eq!(
            b,
            2.0 * (4096.0 * 768.0 + 3072.0 * 768.0 + 4096.0 * 3072.0 + 3072.0)
        );
        let s = Epilogue::Swiglu.bytes_min(8, 16, 4, 2);
        assert_eq!(s, 2.0 * (32.0 + 64.0 + 64.0));
        let r = Epilogue::RmsRstd.bytes_min(8, 16, 4, 2);
        assert_eq!(r, 2.0 * (32.0 + 64.0 + 128.0) + 32.0);
        let c = Epilogue::RmsnormScale.bytes_min(8, 16, 4, 2);
        assert_eq!(c, 2.0 * (32.0 + 64.0 + 128.0));
        let l = Epilogue::BiasResidualLayernorm.bytes_min(8, 16, 4, 2);
        assert_eq!(l, 2.0 * (32.0 + 64.0 + 128.0 + 3.0 * 16.0 + 128.0));
        assert_eq!(Epilogue::flops(2, 3, 4), 48.0);
        assert!(Epilogue::Swiglu.check_width(7, 4, 100).is_some());
        assert!(Epilogue::RmsRstd.check_width(101, 4, 100).is_some());
        assert!(Epilogue::RmsnormScale.check_width(101, 4, 100).is_none());
        assert!(Epilogue::RmsnormScale.check_width(4, 101, 100).is_some());
        assert!(Epilogue::BiasGelu.check_width(101, 101, 100).is_none());
    }
}
