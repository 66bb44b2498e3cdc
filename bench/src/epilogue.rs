//! The epilogues the comparison runs, what each computes (the contract every column meets), the
//! bytes it must move at least, and its f64 reference.
//!
//! Every epilogue starts from `C = A·Bᵀ`: A is M×K row-major (activations), B is N×K row-major
//! (a PyTorch/safetensors `Linear` weight), C is M×N. Vectors (bias, γ, β) have one value per
//! column (length N), broadcast down the rows; per-row values (`rstd`) are f32, length M.
//! Storage is the run's dtype (bf16 or f16), math f32 on the GPU and f64 in the references.
//! `bench/compare/torch_rows.py` implements the same contracts in PyTorch by these names.

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
    /// `out = C`: the plain GEMM.
    Gemm,
    /// `out = C + bias`.
    Bias,
    /// `out = gelu(C + bias)`, GELU with the exact (erf) normal CDF (BERT's `"gelu"`).
    /// cuBLASLt's fused GELU is the tanh approximation, so its column computes bias-gelu-tanh.
    BiasGelu,
    /// `out = gelu_tanh(C + bias)` (GPT-2's `"gelu_new"`; what cuBLASLt fuses).
    BiasGeluTanh,
    /// `out = LayerNorm(C + bias + residual)` with γ, β and ε = 1e-12 (BERT post-norm); the
    /// residual is M×N.
    BiasResidualLayernorm,
    /// `out[r, j] = silu(C[r, 2j])·C[r, 2j + 1]`: gate/up weight rows interleaved
    /// `[g0, u0, g1, u1, …]`; N even, output M×N/2 (LLaMA MLP up-projection).
    Swiglu,
    /// The producer of CODA's RMSNorm pair (an out-projection or MLP down): `out = C + residual`
    /// (M×N) and `rstd[r] = 1/√(mean_c out[r, c]² + ε)` (f32, length M; ε = 1e-5), the row
    /// statistics the next GEMM needs.
    RmsProducer,
    /// The consumer of CODA's RMSNorm pair: `out = diag(rstd)·(A·Bᵀ) = RMSNorm(A)·Bᵀ` with γ
    /// folded into B offline and `rstd` (f32, length M) given by the producer.
    RmsConsumer,
}

/// What the cuBLASLt fused column runs for an epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LtEpilogue {
    /// Plain GEMM (`CUBLASLT_EPILOGUE_DEFAULT`).
    None,
    /// `CUBLASLT_EPILOGUE_BIAS`.
    Bias,
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
    /// γ and β, length N each.
    pub gamma_beta: bool,
    /// Per-row f32 values, length M: read (rms-consumer) or written (rms-producer).
    pub rstd: bool,
}

impl Epilogue {
    /// Every epilogue.
    pub const ALL: [Epilogue; 8] = [
        Epilogue::Gemm,
        Epilogue::Bias,
        Epilogue::BiasGelu,
        Epilogue::BiasGeluTanh,
        Epilogue::BiasResidualLayernorm,
        Epilogue::Swiglu,
        Epilogue::RmsProducer,
        Epilogue::RmsConsumer,
    ];

    /// The command-line and JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Epilogue::Gemm => "gemm",
            Epilogue::Bias => "bias",
            Epilogue::BiasGelu => "bias-gelu",
            Epilogue::BiasGeluTanh => "bias-gelu-tanh",
            Epilogue::BiasResidualLayernorm => "bias-residual-layernorm",
            Epilogue::Swiglu => "swiglu",
            Epilogue::RmsProducer => "rms-producer",
            Epilogue::RmsConsumer => "rms-consumer",
        }
    }

    /// Operands besides A, B and `out`.
    pub fn operands(self) -> Operands {
        let none = Operands::default();
        match self {
            Epilogue::Gemm | Epilogue::Swiglu => none,
            Epilogue::Bias | Epilogue::BiasGelu | Epilogue::BiasGeluTanh => {
                Operands { bias: true, ..none }
            }
            Epilogue::BiasResidualLayernorm => Operands {
                bias: true,
                residual: true,
                gamma_beta: true,
                ..none
            },
            Epilogue::RmsProducer => Operands {
                residual: true,
                rstd: true,
                ..none
            },
            Epilogue::RmsConsumer => Operands { rstd: true, ..none },
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
            Epilogue::RmsProducer => 1e-5,
            _ => 0.0,
        }
    }

    /// Whether `rstd` is an output (else, where present, an input).
    pub fn writes_rstd(self) -> bool {
        self == Epilogue::RmsProducer
    }

    /// Why a GEMM of width `n` cannot take this epilogue, or `None`.
    pub fn check_width(self, n: usize) -> Option<String> {
        (self == Epilogue::Swiglu && !n.is_multiple_of(2))
            .then(|| format!("SwiGLU needs an even N, got {n}"))
    }

    /// cuBLASLt's fused epilogue for this contract, if it has one, and what it computes
    /// relative to the contract: `"full"` or `"gelu_tanh, not erf"` (bias-gelu: cuBLASLt only
    /// has the approximation).
    pub fn cublaslt(self) -> Option<(LtEpilogue, &'static str)> {
        match self {
            Epilogue::Bias => Some((LtEpilogue::Bias, "full")),
            Epilogue::BiasGeluTanh => Some((LtEpilogue::BiasGelu, "full")),
            Epilogue::BiasGelu => Some((LtEpilogue::BiasGelu, "gelu_tanh, not erf")),
            _ => None,
        }
    }

    /// Bytes any implementation must move at least (each operand read or written once):
    /// A, B, `out`, and the epilogue's vectors, residual and per-row values. `elem` is the
    /// storage size in bytes.
    pub fn bytes_min(self, m: usize, n: usize, k: usize, elem: usize) -> f64 {
        let o = self.operands();
        let mut e = (m * k + n * k + m * self.out_cols(n)) as f64;
        e += (o.bias as usize + 2 * o.gamma_beta as usize) as f64 * n as f64;
        if o.residual {
            e += (m * n) as f64;
        }
        e * elem as f64 + if o.rstd { 4.0 * m as f64 } else { 0.0 }
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

/// The operands of one output row, as f64.
#[derive(Clone, Copy, Debug, Default)]
pub struct RowInputs<'a> {
    /// Bias, N values.
    pub bias: &'a [f64],
    /// The residual's row, N values.
    pub residual: &'a [f64],
    /// γ, N values.
    pub gamma: &'a [f64],
    /// β, N values.
    pub beta: &'a [f64],
    /// The row's given `rstd` (rms-consumer).
    pub rstd: f64,
}

/// Reference output of one row: `out` values and, for rms-producer, the row's 1/rms.
#[derive(Clone, Debug, PartialEq)]
pub struct RowOutput {
    /// The row of `out` (N or N/2 values).
    pub out: Vec<f64>,
    /// 1/rms of the row (rms-producer only).
    pub rstd: Option<f64>,
}

impl Epilogue {
    /// The contract's output for one row, from the GEMM row `c` (N values, f64).
    pub fn reference_row(self, c: &[f64], x: &RowInputs<'_>) -> RowOutput {
        let plus_bias = |f: fn(f64) -> f64| -> Vec<f64> {
            c.iter().zip(x.bias).map(|(v, b)| f(v + b)).collect()
        };
        let plus_residual =
            || -> Vec<f64> { c.iter().zip(x.residual).map(|(v, r)| v + r).collect() };
        let mut rstd = None;
        let out = match self {
            Epilogue::Gemm => c.to_vec(),
            Epilogue::Bias => plus_bias(|v| v),
            Epilogue::BiasGelu => plus_bias(gelu),
            Epilogue::BiasGeluTanh => plus_bias(gelu_tanh),
            Epilogue::BiasResidualLayernorm => {
                let s: Vec<f64> = plus_residual()
                    .iter()
                    .zip(x.bias)
                    .map(|(v, b)| v + b)
                    .collect();
                let n = s.len() as f64;
                let mean = s.iter().sum::<f64>() / n;
                let var = s.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
                let r = 1.0 / (var + self.eps() as f64).sqrt();
                s.iter()
                    .enumerate()
                    .map(|(j, v)| (v - mean) * r * x.gamma[j] + x.beta[j])
                    .collect()
            }
            Epilogue::Swiglu => c.chunks_exact(2).map(|p| silu(p[0]) * p[1]).collect(),
            Epilogue::RmsProducer => {
                let h = plus_residual();
                rstd = Some(inverse_rms(&h, self.eps()));
                h
            }
            Epilogue::RmsConsumer => c.iter().map(|v| v * x.rstd).collect(),
        };
        RowOutput { out, rstd }
    }

    /// What cuBLASLt's fused column computes for one row (see [`Epilogue::cublaslt`]).
    pub fn cublaslt_reference_row(self, c: &[f64], x: &RowInputs<'_>) -> Vec<f64> {
        match self.cublaslt().map(|(e, _)| e) {
            None | Some(LtEpilogue::None) => c.to_vec(),
            Some(LtEpilogue::Bias) => Epilogue::Bias.reference_row(c, x).out,
            Some(LtEpilogue::BiasGelu) => Epilogue::BiasGeluTanh.reference_row(c, x).out,
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

    /// cuBLASLt's GELU is the tanh one: its column on an erf-GELU row says so and is checked
    /// against the tanh reference.
    #[test]
    fn cublaslt_gelu_is_the_tanh_form_and_says_so() {
        assert!((gelu(-1.5) - -0.100_210_8).abs() < 1e-7);
        assert!((gelu_tanh(-1.5) - -0.100_428_4).abs() < 1e-7);
        assert_eq!(
            Epilogue::BiasGelu.cublaslt(),
            Some((LtEpilogue::BiasGelu, "gelu_tanh, not erf"))
        );
        assert_eq!(Epilogue::BiasGeluTanh.cublaslt().unwrap().1, "full");
        assert_eq!(Epilogue::Swiglu.cublaslt(), None);
        assert_eq!(Epilogue::Gemm.cublaslt(), None);
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
            bias: &[1.0, 2.0, 3.0, 4.0],
            residual: &[0.0, 0.0, 0.0, 4.0],
            gamma: &[1.0, 1.0, 1.0, 2.0],
            beta: &[0.0, 0.0, 0.0, 1.0],
            rstd: 0.25,
        };
        // s = [1, 2, 3, 8]: mean 3.5, var 7.25.
        let ln = Epilogue::BiasResidualLayernorm
            .reference_row(&[0.0; 4], &x)
            .out;
        let r = 1.0 / (7.25f64 + 1e-12).sqrt();
        assert!(
            (ln[0] - (-2.5 * r)).abs() < 1e-12 && (ln[3] - (4.5 * r * 2.0 + 1.0)).abs() < 1e-12
        );
        // SwiGLU on interleaved pairs: gate [0, 1, −1], up 2.
        let sw = Epilogue::Swiglu
            .reference_row(&[0.0, 2.0, 1.0, 2.0, -1.0, 2.0], &x)
            .out;
        for (g, w) in sw.iter().zip([0.0, 1.462_117_2, -0.537_882_8]) {
            assert!((g - w).abs() < 1e-7, "{sw:?}");
        }
        // The producer adds the residual and reports the sum's 1/rms: h = [3, 4, 0, 4].
        let eps = Epilogue::RmsProducer.eps() as f64;
        let p = Epilogue::RmsProducer.reference_row(&[3.0, 4.0, 0.0, 0.0], &x);
        assert_eq!(p.out, vec![3.0, 4.0, 0.0, 4.0]);
        assert!((p.rstd.unwrap() - 1.0 / (41.0 / 4.0 + eps).sqrt()).abs() < 1e-15);
        // The consumer scales the GEMM row by the given rstd.
        let s = Epilogue::RmsConsumer.reference_row(&[3.0, 4.0], &x);
        assert_eq!((s.out, s.rstd), (vec![0.75, 1.0], None));
        assert_eq!(Epilogue::Gemm.reference_row(&[3.0], &x).out, vec![3.0]);
    }

    #[test]
    fn minimal_traffic_counts_each_operand_once() {
        // bf16 4096×3072×768 bias-gelu: A, B, out, bias.
        let b = Epilogue::BiasGelu.bytes_min(4096, 3072, 768, 2);
        assert_eq!(
            b,
            2.0 * (4096.0 * 768.0 + 3072.0 * 768.0 + 4096.0 * 3072.0 + 3072.0)
        );
        assert_eq!(
            Epilogue::Swiglu.bytes_min(8, 16, 4, 2),
            2.0 * (32.0 + 64.0 + 64.0)
        );
        // Producer: A, B, residual, out and the f32 rstd.
        assert_eq!(
            Epilogue::RmsProducer.bytes_min(8, 16, 4, 2),
            2.0 * (32.0 + 64.0 + 128.0 + 128.0) + 32.0
        );
        assert_eq!(
            Epilogue::RmsConsumer.bytes_min(8, 16, 4, 2),
            2.0 * (32.0 + 64.0 + 128.0) + 32.0
        );
        assert_eq!(
            Epilogue::BiasResidualLayernorm.bytes_min(8, 16, 4, 2),
            2.0 * (32.0 + 64.0 + 128.0 + 3.0 * 16.0 + 128.0)
        );
        assert_eq!(Epilogue::flops(2, 3, 4), 48.0);
        assert!(Epilogue::Swiglu.check_width(7).is_some());
        assert!(Epilogue::BiasGelu.check_width(7).is_none());
    }
}
