//! Choosing where the forward pass runs and in which dtype.

use crate::backend::Dtype;
use crate::error::{Error, Result};

/// The `--device` choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceChoice {
    /// CUDA when a driver is present and GPU 0 opens, else the CPU.
    Auto,
    /// The CUDA backend (fused kernels).
    Cuda,
    /// The CPU backend (f32).
    Cpu,
}

/// The `--dtype` choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DtypeChoice {
    /// f16 on the GPU, f32 on the CPU.
    Auto,
    /// IEEE binary32 (CPU only for now).
    F32,
    /// IEEE binary16 storage, f32 accumulation (GPU).
    F16,
    /// bfloat16 storage, f32 accumulation (GPU).
    Bf16,
}

/// The `--devices` choice: the GPUs one embedding run shares its batches across.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceList {
    /// Every GPU the driver sees.
    All,
    /// These ordinals, in this order (distinct).
    Ordinals(Vec<usize>),
}

impl std::str::FromStr for DeviceList {
    type Err = String;

    /// `all`, or comma-separated distinct ordinals (`0,1,3`).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let all = |p: &str| p.trim().eq_ignore_ascii_case("all");
        if all(s) {
            return Ok(DeviceList::All);
        }
        if s.split(',').any(all) {
            return Err("all stands alone: all, or a list of ordinals such as 0,1".into());
        }
        let mut ordinals = Vec::new();
        for part in s.split(',') {
            let o: usize = part
                .trim()
                .parse()
                .map_err(|_| format!("expected all or GPU ordinals such as 0,1; got {part:?}"))?;
            if ordinals.contains(&o) {
                return Err(format!("GPU {o} is listed twice"));
            }
            ordinals.push(o);
        }
        Ok(DeviceList::Ordinals(ordinals))
    }
}

impl DeviceList {
    /// The ordinals to run on, given the driver's device `count`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when there is no GPU or an ordinal is not below `count`.
    pub fn resolve(&self, count: usize) -> Result<Vec<usize>> {
        let ordinals = match self {
            DeviceList::All => (0..count).collect(),
            DeviceList::Ordinals(o) => o.clone(),
        };
        if count == 0 {
            return Err(Error::invalid("--devices", "a GPU the driver sees", "none"));
        }
        if let Some(&bad) = ordinals.iter().find(|&&o| o >= count) {
            return Err(Error::invalid(
                "--devices",
                format!("ordinals below {count} (the GPUs the driver sees)"),
                bad,
            ));
        }
        Ok(ordinals)
    }
}

/// The `--dtype` of the weights `random-model` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightDtype {
    /// IEEE binary32 (what the CPU backend runs).
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

/// The `--dtype` of the weights `convert-model` writes: 16-bit only, as it exists to halve a
/// model for the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HalfDtype {
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

impl From<WeightDtype> for Dtype {
    fn from(d: WeightDtype) -> Dtype {
        match d {
            WeightDtype::F32 => Dtype::F32,
            WeightDtype::F16 => Dtype::F16,
            WeightDtype::Bf16 => Dtype::Bf16,
        }
    }
}

impl From<HalfDtype> for Dtype {
    fn from(d: HalfDtype) -> Dtype {
        match d {
            HalfDtype::F16 => Dtype::F16,
            HalfDtype::Bf16 => Dtype::Bf16,
        }
    }
}

impl DtypeChoice {
    /// The dtype to run: `Auto` is f16 on the GPU and f32 on the CPU; others as given (the
    /// backend rejects what it cannot run).
    pub fn resolve(self, on_gpu: bool) -> Dtype {
        match self {
            DtypeChoice::Auto if on_gpu => Dtype::F16,
            DtypeChoice::Auto | DtypeChoice::F32 => Dtype::F32,
            DtypeChoice::F16 => Dtype::F16,
            DtypeChoice::Bf16 => Dtype::Bf16,
        }
    }
}

/// The `--layer-norm` choice: where the GPU path applies each post-norm LayerNorm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LayerNormChoice {
    /// In the GEMM that produces the norm's input (a tile spanning the row, a cluster, or a
    /// second kernel).
    #[default]
    Fused,
    /// In the GEMMs that read it: the producer stores its rows centred with row statistics,
    /// the next GEMM folds the norm into its weights and the next residual normalizes on load.
    Deferred,
}

impl LayerNormChoice {
    /// Whether the norms are deferred.
    pub fn deferred(self) -> bool {
        self == LayerNormChoice::Deferred
    }
}

/// Where the forward pass will run; `G` is the opened device (a [`fused_gemm::Gpu`] in the
/// tool).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement<G> {
    /// [`crate::backend::cpu::CpuBackend`].
    Cpu,
    /// [`crate::backend::cuda::CudaBackend`] on this device.
    Cuda(G),
}

impl<G> Placement<G> {
    /// Short name for messages (`"cpu"`, `"cuda"`).
    pub fn name(&self) -> &'static str {
        match self {
            Placement::Cpu => "cpu",
            Placement::Cuda(_) => "cuda",
        }
    }

    /// Whether this is the GPU.
    pub fn is_cuda(&self) -> bool {
        matches!(self, Placement::Cuda(_))
    }
}

/// Resolves `choice`, calling `open_gpu` (e.g. `|| Gpu::new(0)`) unless the choice is the CPU.
/// Returns the placement and, when the choice was `auto`, a note for stderr saying what was
/// chosen and why.
///
/// # Errors
/// For [`DeviceChoice::Cuda`]: the GPU runtime's error (e.g. "no CUDA driver").
pub fn resolve_device<G>(
    choice: DeviceChoice,
    open_gpu: impl FnOnce() -> fused_gemm::Result<G>,
) -> Result<(Placement<G>, Option<String>)> {
    match choice {
        DeviceChoice::Cpu => Ok((Placement::Cpu, None)),
        DeviceChoice::Cuda => Ok((Placement::Cuda(open_gpu().map_err(Error::Gpu)?), None)),
        DeviceChoice::Auto => match open_gpu() {
            Ok(g) => Ok((
                Placement::Cuda(g),
                Some("CUDA GPU found; running on the GPU (--device cpu for the CPU)".into()),
            )),
            Err(fused_gemm::Error::NoDriver) => Ok((
                Placement::Cpu,
                Some("no CUDA driver found; running on the CPU".into()),
            )),
            Err(e) => Ok((
                Placement::Cpu,
                Some(format!(
                    "CUDA driver found but GPU 0 cannot be used ({e}); running on the CPU"
                )),
            )),
        },
    }
}

/// Rejects a dtype the placement cannot run, before the model is loaded.
///
/// # Errors
/// [`Error::UnsupportedDtype`] for f16/bf16 on the CPU; [`Error::NotImplemented`] for f32 on the
/// GPU (the tensor-core mainloop takes 16-bit inputs).
pub fn check_dtype<G>(placement: &Placement<G>, dtype: Dtype) -> Result<()> {
    match (placement, dtype) {
        (Placement::Cpu, Dtype::F16 | Dtype::Bf16) => Err(Error::UnsupportedDtype {
            backend: "cpu",
            requested: dtype,
            supported: "f32",
        }),
        (Placement::Cuda(_), Dtype::F32) => Err(f32_on_gpu()),
        _ => Ok(()),
    }
}

/// The error for `--dtype f32` on the GPU: [`Error::NotImplemented`], saying to use f16/bf16
/// there or the CPU for f32. (Adding an f32 mainloop is one kernel declaration per GEMM step in
/// [`crate::backend::cuda::element`].)
pub fn f32_on_gpu() -> Error {
    Error::NotImplemented {
        what: "--dtype f32 on the GPU (the tensor-core GEMM mainloop takes f16 or bf16 inputs: \
               use --dtype f16 or bf16 there, or --device cpu for f32)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_driver() -> fused_gemm::Result<()> {
        Err(fused_gemm::Error::NoDriver)
    }

    fn no_device() -> fused_gemm::Result<()> {
        Err(fused_gemm::Error::NoDevice {
            ordinal: 0,
            count: 0,
        })
    }

    #[test]
    fn device_lists_parse_and_resolve_against_the_count() {
        let all: DeviceList = "all".parse().unwrap();
        assert_eq!("ALL".parse::<DeviceList>(), Ok(DeviceList::All));
        let mixed = "all,1".parse::<DeviceList>().unwrap_err();
        assert!(mixed.contains("stands alone"), "{mixed}");
        assert_eq!(all.resolve(3).unwrap(), vec![0, 1, 2]);
        let some: DeviceList = "2, 0".parse().unwrap();
        assert_eq!(some, DeviceList::Ordinals(vec![2, 0]));
        assert_eq!(some.resolve(3).unwrap(), vec![2, 0]);
        for bad in ["", "0,,1", "x", "-1", "1,1", "0;1"] {
            assert!(bad.parse::<DeviceList>().is_err(), "{bad:?} parsed");
        }
        let e = some.resolve(2).unwrap_err();
        assert!(e.to_string().contains("below 2"), "{e}");
        assert!(all.resolve(0).is_err());
        assert!("0".parse::<DeviceList>().unwrap().resolve(0).is_err());
    }

    #[test]
    fn auto_uses_the_gpu_when_it_opens_and_says_why_otherwise() {
        let (p, note) = resolve_device(DeviceChoice::Auto, || Ok(7u8)).unwrap();
        assert_eq!(p, Placement::Cuda(7));
        assert!(note.unwrap().contains("running on the GPU"));

        let (p, note) = resolve_device(DeviceChoice::Auto, no_driver).unwrap();
        assert_eq!(p, Placement::Cpu);
        assert!(note.unwrap().contains("no CUDA driver"));

        let (p, note) = resolve_device(DeviceChoice::Auto, no_device).unwrap();
        assert_eq!(p, Placement::Cpu);
        let note = note.unwrap();
        assert!(
            note.contains("cannot be used") && note.contains("running on the CPU"),
            "{note}"
        );
    }

    #[test]
    fn cpu_never_opens_the_gpu() {
        let (p, note) =
            resolve_device::<()>(DeviceChoice::Cpu, || panic!("opened the GPU")).unwrap();
        assert_eq!((p, note), (Placement::Cpu, None));
    }

    #[test]
    fn explicit_cuda_without_a_gpu_is_a_clear_error() {
        let e = resolve_device(DeviceChoice::Cuda, no_driver).unwrap_err();
        assert!(e.to_string().contains("no CUDA driver"), "{e}");
        let (p, _) = resolve_device(DeviceChoice::Cuda, || Ok(())).unwrap();
        assert!(p.is_cuda());
    }

    #[test]
    fn dtypes_resolve_per_device_and_bad_pairs_are_rejected() {
        assert_eq!(DtypeChoice::Auto.resolve(true), Dtype::F16);
        assert_eq!(DtypeChoice::Auto.resolve(false), Dtype::F32);
        assert_eq!(DtypeChoice::Bf16.resolve(false), Dtype::Bf16);
        let gpu = Placement::Cuda(());
        let e = check_dtype(&gpu, Dtype::F32).unwrap_err().to_string();
        assert!(
            e.contains("f32 on the GPU") && e.contains("f16 or bf16"),
            "{e}"
        );
        assert!(check_dtype(&gpu, Dtype::Bf16).is_ok());
        let e = check_dtype(&Placement::<()>::Cpu, Dtype::F16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("f32 only"), "{e}");
        assert!(check_dtype(&Placement::<()>::Cpu, Dtype::F32).is_ok());
    }
}
