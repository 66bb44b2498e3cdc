//! Every `Error` variant, produced through the public API without using a GPU (the test passes
//! the same with or without one), or named as GPU-only with the GPU test that produces it. `kind` matches without a wildcard, so a new
//! variant does not compile until it is listed here.

use std::collections::BTreeSet;

use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;
use fused_gemm_device::types::DType;
use fused_gemm_host::autotune::{Autotuner, TuneKey};
use fused_gemm_host::gpu::DeviceProps;
use fused_gemm_host::launch::LaunchShape;
use fused_gemm_host::module::{Arch, Image, PtxModule, PtxSet};
use fused_gemm_host::plan::{Planner, Problem};
use fused_gemm_host::validate::{BLayout, EpilogueArg, GemmCall, Operand, check_gemm};
use fused_gemm_host::{Error, Gpu, MatrixDesc, VectorDesc};

fn kind(e: &Error) -> &'static str {
    match e {
        Error::NoDriver => "NoDriver",
        Error::NoDevice { .. } => "NoDevice",
        Error::PtxNotBuilt { .. } => "PtxNotBuilt",
        Error::UnsupportedArch { .. } => "UnsupportedArch",
        Error::ModuleImage { .. } => "ModuleImage",
        Error::KernelNotFound { .. } => "KernelNotFound",
        Error::InvalidArgument { .. } => "InvalidArgument",
        Error::ShapeMismatch { .. } => "ShapeMismatch",
        Error::DtypeMismatch { .. } => "DtypeMismatch",
        Error::LeadingDimension { .. } => "LeadingDimension",
        Error::Misaligned { .. } => "Misaligned",
        Error::NullPointer { .. } => "NullPointer",
        Error::TooLarge { .. } => "TooLarge",
        Error::Aliasing { .. } => "Aliasing",
        Error::OutOfRange { .. } => "OutOfRange",
        Error::HostLength { .. } => "HostLength",
        Error::LaunchLimit(_) => "LaunchLimit",
        Error::OutOfMemory { .. } => "OutOfMemory",
        Error::Capture(_) => "Capture",
        Error::Io { .. } => "Io",
        Error::Timing { .. } => "Timing",
        Error::Driver(_) => "Driver",
    }
}

/// Variants that need a device, and the GPU test that produces each.
const GPU_ONLY: &[(&str, &str)] = &[
    (
        "KernelNotFound",
        "host/tests/gpu_runtime.rs: missing_kernel_is_named",
    ),
    (
        "Capture",
        "host/tests/gpu_runtime.rs: failed_capture_leaves_the_gpu_usable",
    ),
    (
        "OutOfRange",
        "host/tests/gpu_runtime.rs: views_upload_download_and_range_errors (also unit tests)",
    ),
    (
        "HostLength",
        "host/tests/gpu_runtime.rs: views_upload_download_and_range_errors (also unit tests)",
    ),
];

fn gemm(a: MatrixDesc, b: MatrixDesc, c: MatrixDesc, ep: &[EpilogueArg]) -> Error {
    check_gemm(&GemmCall {
        a,
        b,
        b_layout: BLayout::NxK,
        c,
        in_dtype: DType::Bf16,
        out_dtype: DType::Bf16,
        epilogue: ep,
        pair_stage: None,
        row_norm_stage: None,
    })
    .unwrap_err()
}

#[test]
fn every_error_kind_is_produced_and_named() {
    let m = |p, r, c| MatrixDesc::contiguous(p, r, c, DType::Bf16);
    let (a, b, c) = (m(0x1000, 8, 16), m(0x2000, 8, 16), m(0x3000, 8, 8));
    let mut errors: Vec<Error> = Vec::new();

    // Without a driver `Gpu::new` is NoDriver; with one (a GPU host), a missing ordinal is
    // NoDevice.
    let e = Gpu::new(usize::MAX).unwrap_err();
    if fused_gemm_host::gpu::driver_present() {
        // (Driver: a driver that cannot initialize.)
        assert!(
            matches!(
                e,
                Error::NoDevice {
                    ordinal: usize::MAX,
                    ..
                } | Error::Driver(_)
            ),
            "driver present: {e}"
        );
    } else {
        assert!(matches!(e, Error::NoDriver), "no driver: {e}");
    }
    errors.push(e);
    errors.push(Error::NoDevice {
        ordinal: 1,
        count: 1,
    });
    errors.push(PtxSet::new("empty", &[]).select(90).unwrap_err());
    static NEWER: PtxSet = PtxSet::new(
        "newer",
        &[PtxModule {
            arch: Arch::Sm90,
            ptx: Image::Plain(b".target sm_90"),
            cubin: Image::Plain(&[]),
        }],
    );
    errors.push(NEWER.select(80).unwrap_err());
    errors.push(
        Image::Zstd(b"not a zstd frame")
            .bytes("damaged", "sm_80")
            .unwrap_err(),
    );
    errors.push(LaunchShape::linear(1, 0, 1).unwrap_err());
    errors.push(gemm(a, m(0x2000, 8, 15), c, &[]));
    errors.push(gemm(
        MatrixDesc {
            dtype: DType::F16,
            ..a
        },
        b,
        c,
        &[],
    ));
    errors.push(gemm(MatrixDesc { ld: 4, ..a }, b, c, &[]));
    errors.push(gemm(m(0x1001, 8, 16), b, c, &[]));
    errors.push(gemm(m(0, 8, 16), b, c, &[]));
    errors.push(gemm(MatrixDesc { ld: 1 << 33, ..a }, b, c, &[]));
    errors.push(gemm(a, b, m(0x1000, 8, 8), &[]));
    let bad_bias = [EpilogueArg {
        name: "bias",
        stage: 0,
        operand: Operand::Bias(VectorDesc::new(0x4000, 7, DType::Bf16)),
    }];
    errors.push(gemm(a, b, c, &bad_bias));
    errors.push(
        LaunchShape {
            grid: (1, 70_000, 1),
            block: (32, 1, 1),
            smem_bytes: 0,
        }
        .check(&DeviceProps::h200())
        .unwrap_err(),
    );
    errors.push(
        Planner::new(DeviceProps::h200())
            .plan(&Problem::gemm(u32::MAX, 8, 8, DType::Bf16))
            .unwrap_err(),
    );
    errors.push(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY).into());
    errors.push(DriverError(CUresult::CUDA_ERROR_LAUNCH_FAILED).into());

    // Autotune: saving into a path that is a file is Io; a timer returning NaN is Timing.
    let file = std::env::temp_dir().join(format!("fused-gemm-errors-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    let mut tuner = Autotuner::new(&file);
    errors.push(tuner.save().unwrap_err());
    std::fs::remove_file(&file).unwrap();
    let planner = Planner::new(DeviceProps::h200());
    let p = Problem::gemm(64, 64, 64, DType::Bf16);
    let key = TuneKey::new("cpu", 90, "k", &p);
    let dir = std::env::temp_dir().join(format!("fused-gemm-errors-dir-{}", std::process::id()));
    let mut tuner = Autotuner::new(&dir);
    errors.push(
        tuner
            .tune(&planner, &key, &p, |_| Ok(f32::NAN))
            .unwrap_err(),
    );
    let _ = std::fs::remove_dir_all(&dir);

    let mut seen = BTreeSet::new();
    for e in &errors {
        println!("{:>16}: {e}", kind(e));
        assert!(!e.to_string().is_empty());
        seen.insert(kind(e));
    }
    // Gpu::new(usize::MAX) gives one of the two, depending on the machine.
    seen.insert("NoDriver");
    seen.insert("NoDevice");
    for (k, _) in GPU_ONLY {
        seen.insert(k);
    }
    let all = [
        "NoDriver",
        "NoDevice",
        "PtxNotBuilt",
        "UnsupportedArch",
        "ModuleImage",
        "KernelNotFound",
        "InvalidArgument",
        "ShapeMismatch",
        "DtypeMismatch",
        "LeadingDimension",
        "Misaligned",
        "NullPointer",
        "TooLarge",
        "Aliasing",
        "OutOfRange",
        "HostLength",
        "LaunchLimit",
        "OutOfMemory",
        "Capture",
        "Io",
        "Timing",
        "Driver",
    ];
    let missing: Vec<_> = all.iter().filter(|k| !seen.contains(*k)).collect();
    assert!(missing.is_empty(), "not produced: {missing:?}");
}

/// The row-statistics operands of a deferred LayerNorm (`row_moments`, `folded_layer_norm`):
/// f32, M rows of at least 4·ceil(width/64) values, 16-byte aligned rows, not aliasing A or B;
/// the consumer's column sums ceil(K/64) × N, f32; each error names the operand.
#[test]
fn row_statistics_operands_are_checked() {
    let m = |p, r, c| MatrixDesc::contiguous(p, r, c, DType::Bf16);
    // M = 8, K = 130 (3 groups), N = 70 (2 groups).
    let (a, b, c) = (m(0x10000, 8, 130), m(0x20000, 70, 130), m(0x30000, 8, 70));
    let stats = |ptr, rows, cols, ld, dtype| MatrixDesc::new(ptr, rows, cols, ld, dtype);
    let out = |d| {
        [EpilogueArg {
            name: "stats",
            stage: 0,
            operand: Operand::RowStats(d),
        }]
    };
    let input = |d| {
        [EpilogueArg {
            name: "input_stats",
            stage: 0,
            operand: Operand::InputStats(d),
        }]
    };
    let ok = |ep: &[EpilogueArg]| {
        check_gemm(&GemmCall {
            a,
            b,
            b_layout: BLayout::NxK,
            c,
            in_dtype: DType::Bf16,
            out_dtype: DType::Bf16,
            epilogue: ep,
            pair_stage: None,
            row_norm_stage: None,
        })
    };
    assert!(ok(&out(stats(0x40000, 8, 8, 8, DType::F32))).is_ok());
    assert!(ok(&input(stats(0x40000, 8, 12, 12, DType::F32))).is_ok());
    // Wider than needed is fine (a buffer sized for a wider layer).
    assert!(ok(&out(stats(0x40000, 8, 16, 16, DType::F32))).is_ok());
    let cases = [
        (out(stats(0x40000, 8, 8, 8, DType::Bf16)), "DtypeMismatch"),
        (out(stats(0x40000, 8, 4, 4, DType::F32)), "ShapeMismatch"),
        (out(stats(0x40000, 7, 8, 8, DType::F32)), "ShapeMismatch"),
        (input(stats(0x40000, 8, 8, 8, DType::F32)), "ShapeMismatch"),
        (out(stats(0x40004, 8, 8, 8, DType::F32)), "Misaligned"),
        (out(stats(0x40000, 8, 8, 10, DType::F32)), "Misaligned"),
        (out(stats(0x40000, 8, 8, 6, DType::F32)), "LeadingDimension"),
        (out(stats(0x10000, 8, 8, 8, DType::F32)), "Aliasing"),
        (out(stats(0x30000, 8, 8, 8, DType::F32)), "Aliasing"),
    ];
    // Written statistics that meet an operand the epilogue reads (the residual's statistics
    // reused in place).
    let both = [
        EpilogueArg {
            name: "residual_stats",
            stage: 0,
            operand: Operand::ResidualStats(stats(0x40000, 8, 8, 8, DType::F32)),
        },
        EpilogueArg {
            name: "stats",
            stage: 1,
            operand: Operand::RowStats(stats(0x40000, 8, 8, 8, DType::F32)),
        },
    ];
    let e = ok(&both).unwrap_err();
    assert_eq!(kind(&e), "Aliasing", "{e}");
    let k0 = check_gemm(&GemmCall {
        a: m(0x10000, 8, 0),
        b: m(0x20000, 70, 0),
        b_layout: BLayout::NxK,
        c,
        in_dtype: DType::Bf16,
        out_dtype: DType::Bf16,
        epilogue: &input(stats(0x40000, 8, 4, 4, DType::F32)),
        pair_stage: None,
        row_norm_stage: None,
    })
    .unwrap_err();
    assert_eq!(kind(&k0), "InvalidArgument", "{k0}");
    for (ep, want) in cases {
        let e = ok(&ep).unwrap_err();
        assert_eq!(kind(&e), want, "{ep:?}: {e}");
        assert!(e.to_string().contains("stats"), "{e}");
    }
    // The consumer's column sums: f32, a row of N per group of 64 K columns (3 × 70 here).
    let colsum = |d| {
        [EpilogueArg {
            name: "colsum",
            stage: 0,
            operand: Operand::Colsum(d),
        }]
    };
    assert!(ok(&colsum(stats(0x40000, 3, 70, 72, DType::F32))).is_ok());
    for (d, want) in [
        (stats(0x40000, 1, 70, 70, DType::F32), "ShapeMismatch"),
        (stats(0x40000, 3, 69, 70, DType::F32), "ShapeMismatch"),
        (stats(0x40000, 3, 70, 70, DType::Bf16), "DtypeMismatch"),
        (stats(0x40000, 3, 70, 60, DType::F32), "LeadingDimension"),
    ] {
        let e = ok(&colsum(d)).unwrap_err();
        assert_eq!(kind(&e), want, "{d:?}: {e}");
        assert!(e.to_string().contains("colsum"), "{e}");
    }
}
