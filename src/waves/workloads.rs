//! The wave scheduler's workloads, with random weights: independent GEMMs, one
//! MiniLM-shaped encoder layer, and an LSTM stack. Each owns its device buffers and the graphs
//! over them; `fill(len)` supplies `len` random values (e.g. `testing::uniform`).

use cudarc::driver::CudaSlice;
use fused_gemm_device::types::DType;
use fused_gemm_host::kernel::MatRef;
use fused_gemm_host::schedule::WaveGraph;
use fused_gemm_host::{Gpu, Result, Tensor};

use crate::bert::{self, SeqBatch};

/// Random values scaled by `scale`.
fn rand(fill: &mut dyn FnMut(usize) -> Vec<f32>, len: usize, scale: f32) -> Vec<f32> {
    fill(len).into_iter().map(|x| x * scale).collect()
}

/// A bf16 `rows × cols` tensor of random values times `scale`.
pub(crate) fn random(
    gpu: &Gpu,
    fill: &mut dyn FnMut(usize) -> Vec<f32>,
    rows: usize,
    cols: usize,
    scale: f32,
) -> Result<Tensor> {
    Tensor::from_f32(
        gpu,
        rows,
        cols,
        DType::Bf16,
        &rand(fill, rows * cols, scale),
    )
}

/// Independent GEMM + bias + ReLU operators of the given shapes `(M, N, K)`: one wave.
#[derive(Debug)]
pub struct Gemms {
    /// `(M, N, K)` per operator.
    pub shapes: Vec<(usize, usize, usize)>,
    /// A per operator (M×K).
    pub a: Vec<Tensor>,
    /// W per operator (N×K), entries of magnitude ≤ 1/√K.
    pub w: Vec<Tensor>,
    /// Bias per operator (length N).
    pub bias: Vec<Tensor>,
    /// Outputs (M×N).
    pub c: Vec<Tensor>,
    /// The graph: `bias_relu` operators, no dependencies.
    pub graph: WaveGraph,
}

impl Gemms {
    /// Allocates and fills the operands and builds the graph.
    ///
    /// # Errors
    /// Allocation and operand-validation errors.
    pub fn new(
        gpu: &Gpu,
        shapes: &[(usize, usize, usize)],
        fill: &mut dyn FnMut(usize) -> Vec<f32>,
    ) -> Result<Self> {
        let mut g = Gemms {
            shapes: shapes.to_vec(),
            a: Vec::new(),
            w: Vec::new(),
            bias: Vec::new(),
            c: Vec::new(),
            graph: WaveGraph::new(),
        };
        for &(m, n, k) in shapes {
            g.a.push(random(gpu, fill, m, k, 1.0)?);
            g.w.push(random(gpu, fill, n, k, 1.0 / (k as f32).sqrt())?);
            g.bias.push(random(gpu, fill, 1, n, 0.5)?);
            g.c.push(Tensor::zeros(gpu, m, n, DType::Bf16)?);
        }
        for i in 0..shapes.len() {
            let op = super::bias_relu(
                gpu,
                &format!("gemm{i}"),
                &g.a[i],
                &g.w[i],
                &g.bias[i],
                &g.c[i],
            )?;
            g.graph.add(op)?;
        }
        Ok(g)
    }
}

/// MiniLM's width.
pub const MINILM_D: usize = 384;
/// MiniLM's FFN width.
pub const MINILM_FFN: usize = 1536;
/// MiniLM's head dimension.
pub const MINILM_HEAD_DIM: usize = 32;
/// MiniLM's attention heads (12 × 32).
pub const MINILM_HEADS: usize = MINILM_D / MINILM_HEAD_DIM;
/// BERT's LayerNorm ε.
pub const MINILM_EPS: f32 = 1e-12;

/// One post-norm encoder layer with MiniLM's shapes (d = 384, FFN 1536) at batch 1:
/// `qkv = x·W_qkvᵀ + b`; attention (its own launch); `h1 = LN(attn·W_oᵀ + b_o + x)`;
/// `f = gelu(h1·W_1ᵀ + b_1)`; `y = LN(f·W_2ᵀ + b_2 + h1)`.
pub struct MiniLmLayer {
    /// Tokens.
    pub seq: usize,
    /// The input x (seq × 384).
    pub x: Tensor,
    /// Fused QKV weight (1152 × 384) and bias.
    pub w_qkv: Tensor,
    /// QKV bias.
    pub b_qkv: Tensor,
    /// QKV projection output (seq × 1152), `[Q | K | V]`.
    pub qkv: CudaSlice<half::bf16>,
    /// Attention output (seq × 384).
    pub attn: CudaSlice<half::bf16>,
    /// Output projection weight, bias, LayerNorm γ, β.
    pub w_o: Tensor,
    /// Output projection bias.
    pub b_o: Tensor,
    /// First LayerNorm γ.
    pub g1: Tensor,
    /// First LayerNorm β.
    pub be1: Tensor,
    /// `h1` (seq × 384).
    pub h1: Tensor,
    /// FFN up weight (1536 × 384) and bias.
    pub w_1: Tensor,
    /// FFN up bias.
    pub b_1: Tensor,
    /// FFN hidden (seq × 1536).
    pub f: Tensor,
    /// FFN down weight (384 × 1536) and bias.
    pub w_2: Tensor,
    /// FFN down bias.
    pub b_2: Tensor,
    /// Second LayerNorm γ.
    pub g2: Tensor,
    /// Second LayerNorm β.
    pub be2: Tensor,
    /// The layer output y (seq × 384).
    pub y: Tensor,
    /// The attention's batch description (one sequence of `seq` tokens).
    pub batch: SeqBatch,
    /// Before attention: the QKV projection.
    pub pre: WaveGraph,
    /// After attention: out-proj + LN, FFN up + GELU, FFN down + LN.
    pub post: WaveGraph,
}

impl MiniLmLayer {
    /// Allocates and fills the layer for `seq` tokens and builds both graphs.
    ///
    /// # Errors
    /// Allocation and operand-validation errors.
    pub fn new(gpu: &Gpu, seq: usize, fill: &mut dyn FnMut(usize) -> Vec<f32>) -> Result<Self> {
        let d = MINILM_D;
        let ffn = MINILM_FFN;
        let s_d = 1.0 / (d as f32).sqrt();
        let s_f = 1.0 / (ffn as f32).sqrt();
        let ones_ish = |fill: &mut dyn FnMut(usize) -> Vec<f32>, n: usize| -> Vec<f32> {
            fill(n).into_iter().map(|x| 1.0 + 0.1 * x).collect()
        };
        let x = random(gpu, fill, seq, d, 1.0)?;
        let w_qkv = random(gpu, fill, 3 * d, d, s_d)?;
        let b_qkv = random(gpu, fill, 1, 3 * d, 0.1)?;
        let qkv = gpu.zeros::<half::bf16>(seq * 3 * d)?;
        let attn = gpu.zeros::<half::bf16>(seq * d)?;
        let w_o = random(gpu, fill, d, d, s_d)?;
        let b_o = random(gpu, fill, 1, d, 0.1)?;
        let g1 = Tensor::from_f32(gpu, 1, d, DType::Bf16, &ones_ish(fill, d))?;
        let be1 = random(gpu, fill, 1, d, 0.1)?;
        let h1 = Tensor::zeros(gpu, seq, d, DType::Bf16)?;
        let w_1 = random(gpu, fill, ffn, d, s_d)?;
        let b_1 = random(gpu, fill, 1, ffn, 0.1)?;
        let f = Tensor::zeros(gpu, seq, ffn, DType::Bf16)?;
        let w_2 = random(gpu, fill, d, ffn, s_f)?;
        let b_2 = random(gpu, fill, 1, d, 0.1)?;
        let g2 = Tensor::from_f32(gpu, 1, d, DType::Bf16, &ones_ish(fill, d))?;
        let be2 = random(gpu, fill, 1, d, 0.1)?;
        let y = Tensor::zeros(gpu, seq, d, DType::Bf16)?;
        let batch = SeqBatch::new(gpu, &vec![0; seq], &[seq as u32], seq)?;

        let mut pre = WaveGraph::new();
        let qkv_m = MatRef::new(&qkv, seq, 3 * d)?;
        pre.add(super::bias(gpu, "qkv", &x, &w_qkv, &b_qkv, &qkv_m)?)?;
        let mut post = WaveGraph::new();
        let attn_m = MatRef::new(&attn, seq, d)?;
        post.add(super::bias_residual_layer_norm(
            gpu, "out_proj", &attn_m, &w_o, &b_o, &x, &g1, &be1, MINILM_EPS, &h1,
        )?)?;
        post.add(super::bias_gelu(gpu, "ffn_up", &h1, &w_1, &b_1, &f)?)?;
        post.add(super::bias_residual_layer_norm(
            gpu, "ffn_down", &f, &w_2, &b_2, &h1, &g2, &be2, MINILM_EPS, &y,
        )?)?;
        Ok(MiniLmLayer {
            seq,
            x,
            w_qkv,
            b_qkv,
            qkv,
            attn,
            w_o,
            b_o,
            g1,
            be1,
            h1,
            w_1,
            b_1,
            f,
            w_2,
            b_2,
            g2,
            be2,
            y,
            batch,
            pre,
            post,
        })
    }

    /// Launches the attention between the two graphs (reads `qkv`, writes `attn`) on `gpu`'s
    /// stream.
    ///
    /// # Errors
    /// As [`bert::attention`].
    pub fn attention(&mut self, gpu: &Gpu) -> Result<()> {
        bert::attention(
            gpu,
            &self.batch,
            MINILM_HEADS,
            MINILM_HEAD_DIM,
            &self.qkv,
            &mut self.attn,
        )
    }
}

impl std::fmt::Debug for MiniLmLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLmLayer")
            .field("seq", &self.seq)
            .finish()
    }
}

/// A stack of LSTM layers unrolled over time steps (Rammer's LSTM-TC), input size = hidden
/// size H, batch B.
///
/// Layout: cell (layer l ≥ 1, step t) reads `[h^{l−1}_t | h^l_{t−1}]` and writes `h^l_t`; with
/// u = l + t both inputs lie on diagonal u − 1 side by side, so every h lives in one bf16
/// buffer `d` of `(L + T)` diagonals × B rows × `(L + 1)·H` columns: `h^l_t` at diagonal
/// `l + t`, columns `l·H..(l+1)·H` (layer 0 is the input x_t, zero-initial states h^l_{−1}
/// sit at diagonal `l − 1`). A cell's A operand is then one strided B × 2H matrix. The f32 cell
/// states are slots `(l − 1)·(T + 1) + t` of `c` (slot t = 0 is the zero initial state).
pub struct LstmStack {
    /// Layers L.
    pub layers: usize,
    /// Steps T.
    pub steps: usize,
    /// Batch B.
    pub batch: usize,
    /// Hidden size H.
    pub hidden: usize,
    /// The h buffer (see the type docs); diagonal u is rows `u·B..(u+1)·B`.
    pub d: Tensor,
    /// Cell states, f32, `L·(T + 1)` slots of B × H.
    pub c: Tensor,
    /// Per layer, W = `[W_ih | W_hh]` with gate rows interleaved per unit (4H × 2H).
    pub w: Vec<Tensor>,
    /// Per layer, the interleaved gate bias (4H).
    pub bias: Vec<Tensor>,
    /// Cells in (t, l) order.
    pub graph: WaveGraph,
}

impl LstmStack {
    /// Allocates and fills the stack (inputs x_t and weights random, states zero) and builds
    /// the graph of `layers × steps` cells.
    ///
    /// # Errors
    /// Allocation and operand-validation errors.
    pub fn new(
        gpu: &Gpu,
        layers: usize,
        steps: usize,
        batch: usize,
        hidden: usize,
        fill: &mut dyn FnMut(usize) -> Vec<f32>,
    ) -> Result<Self> {
        let (l_n, t_n, b, h) = (layers, steps, batch, hidden);
        let cols = (l_n + 1) * h;
        let mut dh = vec![0f32; (l_n + t_n) * b * cols];
        for t in 0..t_n {
            let x = fill(b * h);
            for r in 0..b {
                let row = (t * b + r) * cols;
                dh[row..row + h].copy_from_slice(&x[r * h..(r + 1) * h]);
            }
        }
        let d = Tensor::from_f32(gpu, (l_n + t_n) * b, cols, DType::Bf16, &dh)?;
        let c = Tensor::zeros(gpu, l_n * (t_n + 1) * b, h, DType::F32)?;
        let scale = 1.0 / ((2 * h) as f32).sqrt();
        let mut w = Vec::new();
        let mut bias = Vec::new();
        for _ in 0..l_n {
            w.push(random(gpu, fill, 4 * h, 2 * h, scale)?);
            bias.push(random(gpu, fill, 1, 4 * h, 0.1)?);
        }
        let mut s = LstmStack {
            layers,
            steps,
            batch,
            hidden,
            d,
            c,
            w,
            bias,
            graph: WaveGraph::new(),
        };
        for t in 0..t_n {
            for l in 1..=l_n {
                let op = s.cell(gpu, l, t)?;
                s.graph.add(op)?;
            }
        }
        Ok(s)
    }

    /// Rows of diagonal `u`.
    fn diag(&self, u: usize) -> std::ops::Range<usize> {
        u * self.batch..(u + 1) * self.batch
    }

    /// Rows of state slot `(l, t)`: c^l_{t−1}.
    fn slot(&self, l: usize, t: usize) -> std::ops::Range<usize> {
        let s = (l - 1) * (self.steps + 1) + t;
        s * self.batch..(s + 1) * self.batch
    }

    fn cell(&self, gpu: &Gpu, l: usize, t: usize) -> Result<fused_gemm_host::schedule::OpSpec> {
        let h = self.hidden;
        let u = l + t;
        let a = self.d.slice(self.diag(u - 1), (l - 1) * h..(l + 1) * h)?;
        let out = self.d.slice(self.diag(u), l * h..(l + 1) * h)?;
        let c_prev = self.c.slice(self.slot(l, t), ..)?;
        let c_out = self.c.slice(self.slot(l, t + 1), ..)?;
        super::lstm_cell(
            gpu,
            &format!("cell l{l} t{t}"),
            &a,
            &self.w[l - 1],
            &self.bias[l - 1],
            Some(&c_prev),
            &c_out,
            &out,
        )
    }

    /// `h^l_t` as a view (l in 1..=L, t in 0..T).
    ///
    /// # Errors
    /// [`fused_gemm_host::Error::OutOfRange`] outside the stack.
    pub fn h(&self, l: usize, t: usize) -> Result<fused_gemm_host::tensor::TensorView<'_>> {
        self.d
            .slice(self.diag(l + t), l * self.hidden..(l + 1) * self.hidden)
    }
}

impl std::fmt::Debug for LstmStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LstmStack")
            .field("layers", &self.layers)
            .field("steps", &self.steps)
            .field("batch", &self.batch)
            .field("hidden", &self.hidden)
            .finish()
    }
}
