//! Our kernels for each (storage type, epilogue): adapters from [`FusedArgs`] to the
//! `#[fused_gemm]` launchers. An epilogue without an entry is reported as `n/a`.
//!
//! Each adapter calls one launcher: on an H100/H200 it takes the kernel's TMA + `wgmma`
//! variants (sm_90a module) where it can, its `mma.sync` ones elsewhere, and reports which
//! ([`LaunchReport`]). Which tile runs is the launcher's business: the harness restricts it
//! (a handle from `Gpu::with_options`) for the forced-tile columns, installs the run's
//! autotuner for `ours` (the launcher's default) and none for the model's tile.
//!
//! # Plugging a kernel in
//! Write a function with the signature [`FusedFn`] that computes the epilogue's contract
//! ([`Epilogue`] documents each) into `args.out` (and `args.rstd`), queued on `gpu.stream()`
//! without synchronizing, and list it in the table of its storage type.

use cudarc::driver::{CudaSlice, DeviceRepr};
use fused_gemm::device::gemm::TileShape;
use fused_gemm::device::gemm::sm90::TILES_SM90;
use fused_gemm::host::LaunchReport;
use fused_gemm::host::cudarc;
use fused_gemm::host::kernel::{GemmKernelSpec, MatRef};
use fused_gemm::host::module::Arch;
use fused_gemm::host::tensor::HostElement;
use fused_gemm::kernels::{blocks, gemm};
use fused_gemm::{Error, Gpu, Result};
use half::{bf16, f16};

use crate::epilogue::Epilogue;

/// What a fused kernel gets for one run: the problem and one rotation set's buffers. Every
/// buffer is a whole, contiguous allocation (leading dimension = row length).
#[derive(Debug)]
pub struct FusedArgs<'a, T> {
    /// Rows of A and `out`.
    pub m: usize,
    /// Columns of the GEMM (before SwiGLU halves them).
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// A, M×K row-major (activations).
    pub a: &'a CudaSlice<T>,
    /// B, N×K row-major (a `Linear` weight; for SwiGLU gate/up rows interleaved).
    pub b: &'a CudaSlice<T>,
    /// Bias, N values.
    pub bias: Option<&'a CudaSlice<T>>,
    /// Residual, M×N row-major.
    pub residual: Option<&'a CudaSlice<T>>,
    /// γ, N values.
    pub gamma: Option<&'a CudaSlice<T>>,
    /// β, N values.
    pub beta: Option<&'a CudaSlice<T>>,
    /// Per-row f32 values, M: rms-consumer's input, rms-producer's output.
    pub rstd: Option<&'a mut CudaSlice<f32>>,
    /// The output, M×`Epilogue::out_cols(N)` row-major.
    pub out: &'a mut CudaSlice<T>,
}

/// A fused GEMM + epilogue launcher; returns what ran.
pub type FusedFn<T> = fn(&Gpu, FusedArgs<'_, T>) -> Result<LaunchReport>;

/// One of our kernels: the epilogue it computes, its adapter, and the description of the
/// `#[fused_gemm]` launcher the adapter calls (its compiled variants).
#[derive(Debug)]
pub struct Fused<T> {
    /// What it computes.
    pub epilogue: Epilogue,
    /// The adapter.
    pub launch: FusedFn<T>,
    /// The launcher's kernel.
    pub spec: &'static GemmKernelSpec,
}

impl<T> Clone for Fused<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Fused<T> {}

impl<T> Fused<T> {
    const fn new(epilogue: Epilogue, launch: FusedFn<T>, spec: &'static GemmKernelSpec) -> Self {
        Fused {
            epilogue,
            launch,
            spec,
        }
    }

    /// The Hopper tiles its launcher can be forced to ([`LaunchOptions::tile`]), in
    /// [`TILES_SM90`] order: those of the kernel's TMA + `wgmma` variants where `gpu` loads the
    /// sm_90a module (an H100/H200); none elsewhere.
    ///
    /// [`LaunchOptions::tile`]: fused_gemm::host::LaunchOptions::tile
    pub fn hopper_tiles(&self, gpu: &Gpu) -> Vec<TileShape> {
        match gpu.module_arch(self.spec.ptx) {
            Ok(Arch::Sm90a) => self.sm90_tiles(),
            _ => Vec::new(),
        }
    }

    /// The tiles of the kernel's TMA + `wgmma` variants, in [`TILES_SM90`] order.
    fn sm90_tiles(&self) -> Vec<TileShape> {
        TILES_SM90
            .iter()
            .filter(|t| {
                self.spec
                    .variants
                    .iter()
                    .any(|v| v.mainloop.is_sm90() && v.tile == **t)
            })
            .copied()
            .collect()
    }
}

/// What a launch of ours ran, for the `kernel` field of results: the mainloop and the tile
/// (`sm90-tma 128x256x64`), and the split-K factor when above 1; why nothing ran otherwise.
pub fn describe(report: &LaunchReport) -> String {
    match (report.mainloop, &report.plan) {
        (Some(mainloop), Some(plan)) => {
            let t = plan.tile;
            let mut s = format!("{mainloop} {}x{}x{}", t.bm, t.bn, t.bk);
            if plan.splits > 1 {
                s += &format!(" split-K {}", plan.splits);
            }
            s
        }
        _ => report.why.clone(),
    }
}

/// Our bf16 kernels. rms-producer has none: no stage writes per-row statistics yet.
pub const OURS_BF16: &[Fused<bf16>] = &[
    Fused::new(Epilogue::Gemm, gemm_bf16, &gemm::GEMM_BF16),
    Fused::new(Epilogue::Bias, bias_bf16, &blocks::BIAS_BF16),
    Fused::new(
        Epilogue::BiasGelu,
        bias_gelu_bf16,
        &blocks::FFN_UP_BIAS_GELU,
    ),
    Fused::new(
        Epilogue::BiasGeluTanh,
        bias_gelu_tanh_bf16,
        &blocks::FFN_UP_BIAS_GELU_TANH,
    ),
    Fused::new(
        Epilogue::BiasResidualLayernorm,
        bias_residual_layer_norm_bf16,
        &blocks::PROJ_BIAS_RESIDUAL_LAYER_NORM,
    ),
    Fused::new(Epilogue::Swiglu, swiglu_bf16, &blocks::MLP_UP_SWIGLU),
    Fused::new(
        Epilogue::RmsConsumer,
        rms_consumer_bf16,
        &blocks::RMS_SCALED_GEMM,
    ),
];

/// Our f16 kernels.
pub const OURS_F16: &[Fused<f16>] = &[
    Fused::new(Epilogue::Gemm, gemm_f16, &gemm::GEMM_F16),
    Fused::new(Epilogue::Bias, bias_f16, &blocks::BIAS_F16),
    Fused::new(
        Epilogue::BiasGelu,
        bias_gelu_f16,
        &blocks::FFN_UP_BIAS_GELU_F16,
    ),
    Fused::new(
        Epilogue::BiasResidualLayernorm,
        bias_residual_layer_norm_f16,
        &blocks::PROJ_BIAS_RESIDUAL_LAYER_NORM_F16,
    ),
    Fused::new(Epilogue::Swiglu, swiglu_f16, &blocks::MLP_UP_SWIGLU_F16),
];

/// A (M×K), B (N×K) and `out` (M×`cols`) as matrix operands.
fn operands<'a, T: HostElement + DeviceRepr>(
    x: &'a FusedArgs<'_, T>,
    out_cols: usize,
) -> Result<(MatRef<'a, T>, MatRef<'a, T>, MatRef<'a, T>)> {
    Ok((
        MatRef::new(x.a, x.m, x.k)?,
        MatRef::new(x.b, x.n, x.k)?,
        MatRef::new(&*x.out, x.m, out_cols)?,
    ))
}

fn need<X>(v: Option<X>, what: &'static str) -> Result<X> {
    v.ok_or_else(|| Error::invalid(what, "an operand this epilogue reads", "none"))
}

/// Launchers without epilogue operands; `$cols` is the output width for a GEMM of width `n`.
macro_rules! no_operands {
    ($($name:ident: $t:ty, $cols:expr => $launch:path;)*) => {$(
        fn $name(gpu: &Gpu, x: FusedArgs<'_, $t>) -> Result<LaunchReport> {
            let cols: fn(usize) -> usize = $cols;
            let (a, b, mut c) = operands(&x, cols(x.n))?;
            $launch(gpu, &a, &b, &mut c)
        }
    )*};
}

no_operands! {
    gemm_bf16: bf16, |n| n => gemm::gemm_bf16;
    gemm_f16: f16, |n| n => gemm::gemm_f16;
    swiglu_bf16: bf16, |n| n / 2 => blocks::mlp_up_swiglu;
    swiglu_f16: f16, |n| n / 2 => blocks::mlp_up_swiglu_f16;
}

macro_rules! bias_act {
    ($($name:ident: $t:ty => $launch:path;)*) => {$(
        fn $name(gpu: &Gpu, x: FusedArgs<'_, $t>) -> Result<LaunchReport> {
            let bias = need(x.bias, "bias")?;
            let (a, b, mut c) = operands(&x, x.n)?;
            $launch(gpu, &a, &b, &mut c, bias)
        }
    )*};
}

bias_act! {
    bias_bf16: bf16 => blocks::bias_bf16;
    bias_f16: f16 => blocks::bias_f16;
    bias_gelu_bf16: bf16 => blocks::ffn_up_bias_gelu;
    bias_gelu_f16: f16 => blocks::ffn_up_bias_gelu_f16;
    bias_gelu_tanh_bf16: bf16 => blocks::ffn_up_bias_gelu_tanh;
}

macro_rules! layer_norm {
    ($($name:ident: $t:ty => $launch:path;)*) => {$(
        fn $name(gpu: &Gpu, x: FusedArgs<'_, $t>) -> Result<LaunchReport> {
            let bias = need(x.bias, "bias")?;
            let residual = MatRef::new(need(x.residual, "residual")?, x.m, x.n)?;
            let (gamma, beta) = (need(x.gamma, "gamma")?, need(x.beta, "beta")?);
            let (a, b, mut c) = operands(&x, x.n)?;
            $launch(gpu, &a, &b, &mut c, bias, &residual, gamma, beta)
        }
    )*};
}

layer_norm! {
    bias_residual_layer_norm_bf16: bf16 => blocks::proj_bias_residual_layer_norm;
    bias_residual_layer_norm_f16: f16 => blocks::proj_bias_residual_layer_norm_f16;
}

/// The RMSNorm consumer: the GEMM with `scale(row)` by the given rstd.
fn rms_consumer_bf16(gpu: &Gpu, mut x: FusedArgs<'_, bf16>) -> Result<LaunchReport> {
    let r = need(x.rstd.take(), "rstd")?;
    let (a, b, mut c) = operands(&x, x.n)?;
    blocks::rms_scaled_gemm(gpu, &a, &b, &mut c, &*r)
}

/// The table of a storage type.
pub trait Ours: Sized + 'static {
    /// The entries for this type.
    const TABLE: &'static [Fused<Self>];

    /// Our kernel for `e`, if there is one.
    fn fused(e: Epilogue) -> Option<Fused<Self>> {
        Self::TABLE.iter().find(|f| f.epilogue == e).copied()
    }
}

impl Ours for bf16 {
    const TABLE: &'static [Fused<bf16>] = OURS_BF16;
}

impl Ours for f16 {
    const TABLE: &'static [Fused<f16>] = OURS_F16;
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_gemm::device::target::Mainloop;
    use fused_gemm::device::types::DType;
    use fused_gemm::host::gpu::DeviceProps;
    use fused_gemm::host::plan::{Planner, Problem};

    #[test]
    fn every_bf16_epilogue_but_the_producer_has_a_kernel() {
        for e in Epilogue::ALL {
            assert_eq!(
                bf16::fused(e).is_some(),
                e != Epilogue::RmsProducer,
                "{e:?}"
            );
        }
        assert!(f16::fused(Epilogue::Gemm).is_some());
        assert!(f16::fused(Epilogue::RmsConsumer).is_none());
    }

    /// Each entry calls a launcher of its storage type with B stored N×K (the layout
    /// [`FusedArgs::b`] has), and every one has TMA + `wgmma` variants to force.
    #[test]
    fn kernels_match_their_tables() {
        fn check<T>(table: &[Fused<T>], dtype: DType) {
            for f in table {
                let s = f.spec;
                assert_eq!(
                    (s.input, s.output, s.b_col),
                    (dtype, dtype, true),
                    "{}",
                    s.name
                );
                let tiles = f.sm90_tiles();
                assert!(!tiles.is_empty(), "{}: no Hopper tiles", s.name);
                assert!(tiles.iter().all(|t| TILES_SM90.contains(t)), "{}", s.name);
            }
        }
        check(OURS_BF16, DType::Bf16);
        check(OURS_F16, DType::F16);
    }

    #[test]
    fn describe_names_mainloop_tile_and_splits() {
        let planner = Planner::new(DeviceProps::h200());
        let mut plan = planner
            .plan(&Problem::gemm(4096, 3072, 768, DType::Bf16))
            .unwrap();
        let t = plan.tile;
        let mut r = LaunchReport::nothing("gemm_bf16");
        assert_eq!(describe(&r), r.why);
        r.mainloop = Some(Mainloop::Sm90Tma { cluster_m: 1 });
        plan.splits = 1;
        r.plan = Some(plan);
        assert_eq!(describe(&r), format!("sm90-tma {}x{}x{}", t.bm, t.bn, t.bk));
        r.mainloop = Some(Mainloop::Sm80);
        plan.splits = 3;
        r.plan = Some(plan);
        assert_eq!(
            describe(&r),
            format!("sm80 {}x{}x{} split-K 3", t.bm, t.bn, t.bk)
        );
    }
}
