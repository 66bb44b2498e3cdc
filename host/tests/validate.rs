//! CPU tests of launch validation: every check of `validate::check_gemm`, on descriptors built
//! from fake device addresses (no GPU needed).

use fused_gemm_device::types::DType;
use fused_gemm_host::validate::{
    BLayout, EpilogueArg, GemmCall, Operand, RopeSpec, Work, check_gemm,
};
use fused_gemm_host::{Error, MatrixDesc, VectorDesc};

const A: u64 = 0x1000_0000;
const B: u64 = 0x2000_0000;
const C: u64 = 0x3000_0000;
const V: u64 = 0x4000_0000;
const R: u64 = 0x5000_0000;

const M: usize = 64;
const N: usize = 96;
const K: usize = 32;

fn mat(ptr: u64, rows: usize, cols: usize, dtype: DType) -> MatrixDesc {
    MatrixDesc::contiguous(ptr, rows, cols, dtype)
}

fn call(epilogue: &[EpilogueArg]) -> GemmCall<'_> {
    GemmCall {
        a: mat(A, M, K, DType::F16),
        b: mat(B, N, K, DType::F16),
        b_layout: BLayout::NxK,
        c: mat(C, M, N, DType::F16),
        in_dtype: DType::F16,
        out_dtype: DType::F16,
        epilogue,
        pair_stage: None,
        row_norm_stage: None,
    }
}

fn arg(name: &'static str, stage: usize, operand: Operand) -> EpilogueArg {
    EpilogueArg {
        name,
        stage,
        operand,
    }
}

fn bias(len: usize) -> EpilogueArg {
    arg(
        "bias",
        0,
        Operand::Bias(VectorDesc::new(V, len, DType::F16)),
    )
}

#[track_caller]
fn err(c: &GemmCall<'_>) -> Error {
    match check_gemm(c) {
        Ok(ok) => panic!("expected an error, got {ok:?}"),
        Err(e) => {
            println!("{e}");
            e
        }
    }
}

#[test]
fn a_consistent_call_passes_with_the_vector_path() {
    let ep = [bias(N)];
    let ok = check_gemm(&call(&ep)).unwrap();
    assert_eq!((ok.m, ok.n, ok.k, ok.n_out), (64, 96, 32, 96));
    assert_eq!(ok.work, Work::Gemm);
    assert!(ok.vector.mainloop() && ok.vector.c && ok.vector.epilogue);
    ok.require_vector().unwrap();
    // B stored K×N.
    let mut c = call(&ep);
    c.b = mat(B, K, N, DType::F16);
    c.b_layout = BLayout::KxN;
    check_gemm(&c).unwrap();
}

#[test]
fn wrong_dtypes_name_the_operand() {
    let ep = [bias(N)];
    let mut c = call(&ep);
    c.a.dtype = DType::Bf16;
    assert!(matches!(
        err(&c),
        Error::DtypeMismatch {
            arg: "a",
            expected: DType::F16,
            actual: DType::Bf16
        }
    ));
    let mut c = call(&ep);
    c.b.dtype = DType::F32;
    assert!(matches!(err(&c), Error::DtypeMismatch { arg: "b", .. }));
    let mut c = call(&ep);
    c.c.dtype = DType::F32;
    assert!(matches!(err(&c), Error::DtypeMismatch { arg: "c", .. }));
    let ep = [arg(
        "bias",
        0,
        Operand::Bias(VectorDesc::new(V, N, DType::Bf16)),
    )];
    assert!(matches!(
        err(&call(&ep)),
        Error::DtypeMismatch { arg: "bias", .. }
    ));
    // Row scales are f32 whatever the output type.
    let ep = [arg(
        "row_scale",
        0,
        Operand::ScaleRow(VectorDesc::new(V, M, DType::F16)),
    )];
    let e = err(&call(&ep));
    assert!(matches!(
        e,
        Error::DtypeMismatch {
            arg: "row_scale",
            expected: DType::F32,
            ..
        }
    ));
    assert_eq!(
        e.to_string(),
        "wrong dtype for `row_scale`: expected f32, got f16"
    );
    let ep = [arg(
        "row_scale",
        0,
        Operand::ScaleRow(VectorDesc::new(V, M, DType::F32)),
    )];
    check_gemm(&call(&ep)).unwrap();
    let ep = [arg(
        "col_scale",
        0,
        Operand::ScaleCol(VectorDesc::new(V, N, DType::F32)),
    )];
    check_gemm(&call(&ep)).unwrap();
    let ep = [arg(
        "residual",
        0,
        Operand::Residual(mat(R, M, N, DType::Bf16)),
    )];
    assert!(matches!(
        err(&call(&ep)),
        Error::DtypeMismatch {
            arg: "residual",
            ..
        }
    ));
}

#[test]
fn shape_mismatches_say_expected_and_actual() {
    let mut c = call(&[]);
    c.b = mat(B, N, K + 1, DType::F16);
    let e = err(&c);
    assert!(matches!(e, Error::ShapeMismatch { arg: "b", .. }));
    assert!(
        e.to_string().contains("96×32 (N×K") && e.to_string().contains("got 96×33"),
        "{e}"
    );
    let mut c = call(&[]);
    c.b = mat(B, K + 1, N, DType::F16);
    c.b_layout = BLayout::KxN;
    assert!(err(&c).to_string().contains("32×96 (K×N"));
    let mut c = call(&[]);
    c.c = mat(C, M, N + 1, DType::F16);
    assert!(
        err(&c)
            .to_string()
            .contains("expected 64×96 (M×N), got 64×97")
    );
    let mut c = call(&[]);
    c.c = mat(C, M - 1, N, DType::F16);
    assert!(matches!(err(&c), Error::ShapeMismatch { arg: "c", .. }));

    // A pair-reducing stage: C is M×N/2 and N must be even.
    let mut c = call(&[]);
    c.pair_stage = Some(0);
    assert!(err(&c).to_string().contains("64×48 (M×N/2)"));
    c.c = mat(C, M, N / 2, DType::F16);
    assert_eq!(check_gemm(&c).unwrap().n_out, 48);
    let mut c = call(&[]);
    c.pair_stage = Some(0);
    c.b = mat(B, 95, K, DType::F16);
    c.c = mat(C, M, 47, DType::F16);
    assert!(err(&c).to_string().contains("even N"));

    // Column vectors follow the output width at their stage: N before the pair stage, N/2 after.
    let before = [bias(N)];
    let mut c = call(&before);
    c.pair_stage = Some(1);
    c.c = mat(C, M, N / 2, DType::F16);
    check_gemm(&c).unwrap();
    let after = [arg(
        "bias",
        2,
        Operand::Bias(VectorDesc::new(V, N, DType::F16)),
    )];
    let mut c = call(&after);
    c.pair_stage = Some(1);
    c.c = mat(C, M, N / 2, DType::F16);
    assert!(err(&c).to_string().contains("expected length 48"));

    let ep = [bias(N - 1)];
    assert!(matches!(
        err(&call(&ep)),
        Error::ShapeMismatch { arg: "bias", .. }
    ));
    let ep = [arg(
        "row_bias",
        0,
        Operand::BiasRow(VectorDesc::new(V, N, DType::F16)),
    )];
    let e = err(&call(&ep));
    assert!(e.to_string().contains("length 64 (M, one per row)"), "{e}");
    for op in [
        Operand::Gamma(VectorDesc::new(V, M, DType::F16)),
        Operand::Beta(VectorDesc::new(V, M, DType::F16)),
        Operand::ScaleCol(VectorDesc::new(V, M, DType::F32)),
    ] {
        let ep = [arg("v", 0, op)];
        assert!(matches!(
            err(&call(&ep)),
            Error::ShapeMismatch { arg: "v", .. }
        ));
    }
    let ep = [arg(
        "residual",
        0,
        Operand::Residual(mat(R, M, K, DType::F16)),
    )];
    assert!(
        err(&call(&ep))
            .to_string()
            .contains("64×96 (M×N, output shape)")
    );
}

#[test]
fn leading_dimensions_below_the_columns_are_rejected() {
    let mut c = call(&[]);
    c.a.ld = K - 1;
    let e = err(&c);
    assert!(matches!(
        e,
        Error::LeadingDimension {
            arg: "a",
            ld: 31,
            cols: 32
        }
    ));
    let mut c = call(&[]);
    c.c.ld = 8;
    assert!(matches!(err(&c), Error::LeadingDimension { arg: "c", .. }));
    let mut r = mat(R, M, N, DType::F16);
    r.ld = 1;
    let ep = [arg("residual", 0, Operand::Residual(r))];
    assert!(matches!(
        err(&call(&ep)),
        Error::LeadingDimension {
            arg: "residual",
            ..
        }
    ));
    // Padded rows are fine.
    let mut c = call(&[]);
    c.a.ld = 40;
    c.c.ld = 100;
    check_gemm(&c).unwrap();
}

#[test]
fn sizes_beyond_u32_are_too_large() {
    let big = 1usize << 32;
    let mut c = call(&[]);
    c.a = mat(A, big, K, DType::F16);
    c.c = mat(C, big, N, DType::F16);
    let e = err(&c);
    assert!(
        matches!(
            e,
            Error::TooLarge {
                arg: "m",
                max: 4_294_967_295,
                ..
            }
        ),
        "{e}"
    );
    let mut c = call(&[]);
    c.a.ld = big;
    assert!(matches!(err(&c), Error::TooLarge { arg: "a.ld", .. }));
    // A pointer whose extent wraps the address space.
    let mut c = call(&[]);
    c.c.ptr = u64::MAX - 63;
    assert!(matches!(err(&c), Error::TooLarge { arg: "c", .. }));
    // The largest M still indexable, with 64-bit extents.
    let mut c = call(&[]);
    c.a = mat(A, u32::MAX as usize, K, DType::F16);
    c.c = MatrixDesc::new(1 << 50, u32::MAX as usize, N, N, DType::F16);
    assert_eq!(check_gemm(&c).unwrap().m, u32::MAX);
}

#[test]
fn null_and_element_misaligned_pointers_are_rejected() {
    let mut c = call(&[]);
    c.a.ptr = 0;
    let e = err(&c);
    assert!(matches!(
        e,
        Error::NullPointer {
            arg: "a",
            elements: 2048
        }
    ));
    let ep = [arg(
        "bias",
        0,
        Operand::Bias(VectorDesc::new(0, N, DType::F16)),
    )];
    assert!(matches!(
        err(&call(&ep)),
        Error::NullPointer { arg: "bias", .. }
    ));
    let mut c = call(&[]);
    c.b.ptr = B + 1;
    assert!(matches!(
        err(&c),
        Error::Misaligned {
            arg: "b",
            what: "address",
            align: 2,
            ..
        }
    ));
    let ep = [arg(
        "col_scale",
        0,
        Operand::ScaleCol(VectorDesc::new(V + 2, N, DType::F32)),
    )];
    let e = err(&call(&ep));
    assert!(
        matches!(
            e,
            Error::Misaligned {
                arg: "col_scale",
                align: 4,
                ..
            }
        ),
        "{e}"
    );
}

/// Misaligned operands: f16, M=1, N=3073, K=17, A and bias one element into their buffers. The
/// call is valid; the vector path is not, so the launcher takes the scalar path, or (without
/// one) returns an error naming `a`.
#[test]
fn misaligned_operands_select_the_scalar_path() {
    let (m, n, k) = (1, 3073, 17);
    let ep = [arg(
        "bias",
        0,
        Operand::Bias(VectorDesc::new(V + 2, n, DType::F16)),
    )];
    let c = GemmCall {
        a: mat(A + 2, m, k, DType::F16),
        b: mat(B, n, k, DType::F16),
        c: mat(C, m, n, DType::F16),
        ..call(&ep)
    };
    let ok = check_gemm(&c).unwrap();
    assert!(!ok.vector.a && !ok.vector.b && !ok.vector.c && !ok.vector.epilogue);
    let e = ok.require_vector().unwrap_err();
    assert!(
        matches!(e, Error::Misaligned { arg: "a", what: "address", align: 16, actual } if actual == A + 2)
    );
    assert!(e.to_string().contains("multiple of 16 bytes"), "{e}");

    // Aligned addresses but K = 17 (34-byte rows): still scalar, blamed on the row pitch.
    let c = GemmCall {
        a: mat(A, m, k, DType::F16),
        ..c
    };
    let ok = check_gemm(&c).unwrap();
    assert!(!ok.vector.a);
    let e = ok.require_vector().unwrap_err();
    assert!(
        matches!(
            e,
            Error::Misaligned {
                arg: "a",
                what: "row length (bytes)",
                actual: 34,
                ..
            }
        ),
        "{e}"
    );

    // A padded leading dimension that breaks 16-byte rows.
    let mut c = call(&[]);
    c.a.ld = 36;
    let ok = check_gemm(&c).unwrap();
    assert!(!ok.vector.a && ok.vector.b);
    assert!(matches!(
        ok.require_vector(),
        Err(Error::Misaligned {
            what: "leading dimension (bytes)",
            actual: 72,
            ..
        })
    ));
}

/// Misaligned operands, the whole kind: every pointer the kernel loads in 16-byte vectors is
/// checked, the epilogue's too. Each of bias, residual, γ, β and scale(col) one element past a
/// 16-byte boundary turns the epilogue's vector loads off (the launcher then takes the scalar
/// path); the same operand aligned keeps them, and the mainloop is not affected either way.
#[test]
fn every_misaligned_epilogue_operand_turns_off_vector_loads() {
    type Make = fn(u64) -> Operand;
    let cases: [(&str, u64, u64, Make); 5] = [
        ("bias", V, 2, |p| {
            Operand::Bias(VectorDesc::new(p, N, DType::F16))
        }),
        ("residual", R, 2, |p| {
            Operand::Residual(mat(p, M, N, DType::F16))
        }),
        ("gamma", V, 2, |p| {
            Operand::Gamma(VectorDesc::new(p, N, DType::F16))
        }),
        ("beta", V, 2, |p| {
            Operand::Beta(VectorDesc::new(p, N, DType::F16))
        }),
        ("col_scale", V, 4, |p| {
            Operand::ScaleCol(VectorDesc::new(p, N, DType::F32))
        }),
    ];
    for (name, base, element, make) in cases {
        let ep = [arg(name, 0, make(base))];
        let ok = check_gemm(&call(&ep)).unwrap();
        assert!(ok.vector.epilogue, "{name} aligned: {ok:?}");
        let ep = [arg(name, 0, make(base + element))];
        let ok = check_gemm(&call(&ep)).unwrap();
        assert!(!ok.vector.epilogue, "{name} one element in: {ok:?}");
        assert!(ok.vector.mainloop() && ok.vector.c, "{name}: {ok:?}");
    }
}

#[test]
fn output_aliasing_inputs_is_rejected() {
    let mut c = call(&[]);
    c.c = mat(A, M, K, DType::F16);
    c.b = mat(B, K, K, DType::F16);
    c.a = mat(A, M, K, DType::F16);
    let e = err(&c);
    assert!(
        matches!(
            e,
            Error::Aliasing {
                output: "c",
                input: "a",
                ..
            }
        ),
        "{e}"
    );
    // Partial overlap with B.
    let mut c = call(&[]);
    c.c.ptr = B + 64;
    assert!(matches!(err(&c), Error::Aliasing { input: "b", .. }));
    // C over the bias vector.
    let ep = [arg(
        "bias",
        0,
        Operand::Bias(VectorDesc::new(C + 10 * 96 * 2, N, DType::F16)),
    )];
    assert!(matches!(
        err(&call(&ep)),
        Error::Aliasing { input: "bias", .. }
    ));
}

#[test]
fn output_may_be_exactly_the_residual() {
    let ep = [arg(
        "residual",
        0,
        Operand::Residual(mat(C, M, N, DType::F16)),
    )];
    check_gemm(&call(&ep)).unwrap();
    // ... unless a row norm runs before the residual (deferred finishing kernel).
    let ep = [arg(
        "residual",
        2,
        Operand::Residual(mat(C, M, N, DType::F16)),
    )];
    let mut c = call(&ep);
    c.row_norm_stage = Some(1);
    assert!(matches!(
        err(&c),
        Error::Aliasing {
            input: "residual",
            ..
        }
    ));
    // Shifted by one row: partial overlap.
    let ep = [arg(
        "residual",
        0,
        Operand::Residual(mat(C + 96 * 2, M, N, DType::F16)),
    )];
    let e = err(&call(&ep));
    assert!(e.to_string().contains("partial overlap"), "{e}");
    // Left and right halves of one buffer: disjoint.
    let wide = |ptr| MatrixDesc::new(ptr, M, N, 2 * N, DType::F16);
    let ep = [arg("residual", 0, Operand::Residual(wide(C + 96 * 2)))];
    let c = GemmCall {
        c: wide(C),
        ..call(&ep)
    };
    check_gemm(&c).unwrap();
}

fn rope(spec: RopeSpec) -> [EpilogueArg; 1] {
    [arg("rope", 0, Operand::Rope(spec))]
}

const GOOD_ROPE: RopeSpec = RopeSpec {
    theta: 10000.0,
    head_dim: 32,
    rotary_dim: 32,
    seq_len: 16,
    pos_offset: 0,
};

#[test]
fn rope_parameters_are_checked() {
    check_gemm(&call(&rope(GOOD_ROPE))).unwrap();
    let cases: [(RopeSpec, &str); 9] = [
        (
            RopeSpec {
                head_dim: 0,
                ..GOOD_ROPE
            },
            "head_dim",
        ),
        (
            RopeSpec {
                head_dim: 33,
                rotary_dim: 32,
                ..GOOD_ROPE
            },
            "head_dim",
        ),
        (
            RopeSpec {
                head_dim: 64,
                rotary_dim: 32,
                ..GOOD_ROPE
            },
            "head_dim",
        ),
        // An odd rotary dimension.
        (
            RopeSpec {
                rotary_dim: 33,
                head_dim: 96,
                ..GOOD_ROPE
            },
            "rotary_dim",
        ),
        (
            RopeSpec {
                rotary_dim: 0,
                ..GOOD_ROPE
            },
            "rotary_dim",
        ),
        (
            RopeSpec {
                rotary_dim: 34,
                ..GOOD_ROPE
            },
            "rotary_dim",
        ),
        (
            RopeSpec {
                seq_len: 0,
                ..GOOD_ROPE
            },
            "seq_len",
        ),
        (
            RopeSpec {
                pos_offset: u32::MAX,
                ..GOOD_ROPE
            },
            "pos_offset",
        ),
        (
            RopeSpec {
                theta: f32::NAN,
                ..GOOD_ROPE
            },
            "theta",
        ),
    ];
    for (spec, name) in cases {
        let e = err(&call(&rope(spec)));
        assert!(
            matches!(&e, Error::InvalidArgument { arg, .. } if *arg == name),
            "{spec:?}: {e}"
        );
        assert!(e.to_string().contains("in `rope`"), "{e}");
    }
    assert!(
        err(&call(&rope(RopeSpec {
            theta: -1.0,
            ..GOOD_ROPE
        })))
        .to_string()
        .contains("theta")
    );
    // Rotary dim 64 on head_dim 65 is fine when the row is one head.
    let ep = rope(RopeSpec {
        head_dim: 65,
        rotary_dim: 64,
        ..GOOD_ROPE
    });
    let c = GemmCall {
        b: mat(B, 65, K, DType::F16),
        c: mat(C, M, 65, DType::F16),
        ..call(&ep)
    };
    check_gemm(&c).unwrap();
    // RoPE after a pair stage has no pairs to rotate.
    let ep = [arg("rope", 1, Operand::Rope(GOOD_ROPE))];
    let mut c = call(&ep);
    c.pair_stage = Some(0);
    c.c = mat(C, M, N / 2, DType::F16);
    assert!(matches!(
        err(&c),
        Error::InvalidArgument { arg: "rope", .. }
    ));
}

#[test]
fn norm_epsilon_must_be_finite_and_non_negative() {
    for bad in [-1e-5f32, f32::NAN, f32::INFINITY] {
        let ep = [arg("eps", 0, Operand::Eps(bad))];
        assert!(matches!(
            err(&call(&ep)),
            Error::InvalidArgument { arg: "eps", .. }
        ));
    }
    let ep = [arg("eps", 0, Operand::Eps(0.0))];
    check_gemm(&call(&ep)).unwrap();
}

#[test]
fn zero_sized_problems_have_defined_results() {
    // M = 0: nothing to launch; pointers may be null.
    let c = GemmCall {
        a: mat(0, 0, K, DType::F16),
        c: mat(0, 0, N, DType::F16),
        ..call(&[])
    };
    assert_eq!(check_gemm(&c).unwrap().work, Work::Empty);
    // N = 0.
    let c = GemmCall {
        b: mat(0, 0, K, DType::F16),
        c: mat(0, M, 0, DType::F16),
        ..call(&[])
    };
    assert_eq!(check_gemm(&c).unwrap().work, Work::Empty);
    // K = 0: C = epilogue(0); A and B are not read.
    let ep = [bias(N)];
    let c = GemmCall {
        a: mat(0, M, 0, DType::F16),
        b: mat(0, N, 0, DType::F16),
        ..call(&ep)
    };
    let ok = check_gemm(&c).unwrap();
    assert_eq!((ok.work, ok.k), (Work::ZeroK, 0));
    ok.require_vector().unwrap();
    // ... but C must still be valid.
    let c = GemmCall {
        c: mat(0, M, N, DType::F16),
        ..c
    };
    assert!(matches!(err(&c), Error::NullPointer { arg: "c", .. }));
    // Empty problems still need consistent shapes.
    let c = GemmCall {
        a: mat(0, 0, K, DType::F16),
        c: mat(0, 0, N + 1, DType::F16),
        ..call(&[])
    };
    assert!(matches!(err(&c), Error::ShapeMismatch { arg: "c", .. }));
}

#[test]
fn plan_call_validates_then_plans() {
    use fused_gemm_host::gpu::DeviceProps;
    use fused_gemm_host::plan::Planner;
    let pl = Planner::new(DeviceProps::h200());
    let ep = [bias(N)];
    let (checked, plan) = pl.plan_call(&call(&ep), false).unwrap().unwrap();
    assert_eq!((checked.m, checked.n, checked.k), (64, 96, 32));
    assert_eq!(plan.grid.0, 96u32.div_ceil(plan.tile.bn));
    let args = plan.gemm_args(&checked, &call(&ep), 0, 0);
    assert_eq!(
        (args.a, args.b, args.c, args.lda, args.ldb, args.ldc),
        (A, B, C, 32, 32, 96)
    );
    assert_eq!(
        (args.splits, args.k_per_split),
        (plan.splits, plan.k_per_split)
    );
    // Nothing to launch for M = 0; errors come from validation first.
    let empty = GemmCall {
        a: mat(0, 0, K, DType::F16),
        c: mat(0, 0, N, DType::F16),
        ..call(&[])
    };
    assert!(pl.plan_call(&empty, false).unwrap().is_none());
    let mut bad = call(&[]);
    bad.a.dtype = DType::F32;
    assert!(matches!(
        pl.plan_call(&bad, false),
        Err(Error::DtypeMismatch { arg: "a", .. })
    ));
}
