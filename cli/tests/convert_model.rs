//! `convert-model`: the f16/bf16 copy of the model is a working model directory under the
//! 64 MiB transfer limit, and what rounding the weights costs the f32 CPU path.

mod common;

use std::path::Path;

use common::{fixture, model, model_dir};
use fused_gemm::host::testing::nan_min;
use fused_gemm_cli::convert::convert_model;
use fused_gemm_cli::embed::cosine;
use fused_gemm_cli::{CpuBackend, Dtype, Error, Model, embed};

/// Min cosine of the CPU f32 path with `m`'s weights against the 128-token fixtures.
fn min_cosine_vs_fixtures(m: &Model) -> f64 {
    let fx = fixture("embeddings_128.json");
    let texts: Vec<&str> = fx.sentences.iter().map(|s| s.text.as_str()).collect();
    let mut cpu = CpuBackend::new(m.weights.clone(), Dtype::F32).unwrap();
    let emb = embed(&mut cpu, &m.tokenizer, &texts, 8, |_, _| {}, None).unwrap();
    // NaN-propagating (`f64::min` skips a NaN): a NaN cosine fails the caller's `>=`.
    nan_min(
        fx.sentences
            .iter()
            .enumerate()
            .map(|(i, s)| cosine(emb.row(i), &s.embedding)),
    )
}

#[test]
fn f16_copy_is_small_loads_and_stays_close_to_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let r = convert_model(&model_dir(), dir.path(), Dtype::F16).unwrap();
    let size = std::fs::metadata(&r.weights).unwrap().len();
    println!(
        "f16: {} tensors converted, {} copied, {} -> {} bytes, max rounding {:.2e} abs / {:.2e} rel",
        r.converted, r.copied, r.bytes_in, size, r.max_abs_rounding, r.max_rel_rounding
    );
    assert_eq!(size, r.bytes_out);
    assert!(
        size < 64 << 20,
        "{size} bytes is over the 64 MiB transfer limit"
    );
    assert!(r.converted >= 100 && r.copied >= 1, "{r:?}");
    assert!(r.max_rel_rounding <= 1.0 / 2048.0, "{r:?}");
    for f in ["config.json", "tokenizer.json"] {
        assert_eq!(
            std::fs::read(dir.path().join(f)).unwrap(),
            std::fs::read(model_dir().join(f)).unwrap(),
            "{f}"
        );
    }

    let half = Model::load(dir.path(), 128).unwrap();
    // The loader widens the f16 values exactly: every weight is the f16 rounding of the f32 one.
    let (a, b) = (
        &model().weights.layers[3].ffn_up,
        &half.weights.layers[3].ffn_up,
    );
    for (x, y) in a.weight.iter().zip(&b.weight) {
        assert_eq!(half::f16::from_f32(*x).to_f32(), *y);
    }
    let full = Model::load(&model_dir(), 128).unwrap();
    let (c32, c16) = (min_cosine_vs_fixtures(&full), min_cosine_vs_fixtures(&half));
    println!(
        "CPU f32 path vs sentence-transformers at 128 tokens: min cosine {c32:.7} with the f32 \
         weights, {c16:.7} with the f16 copy"
    );
    assert!(c16 >= 0.9999, "f16-rounded weights: min cosine {c16}");
}

#[test]
fn bf16_copy_loads() {
    let dir = tempfile::tempdir().unwrap();
    let r = convert_model(&model_dir(), dir.path(), Dtype::Bf16).unwrap();
    assert!(r.max_rel_rounding <= 1.0 / 256.0, "{r:?}");
    let m = Model::load(dir.path(), 128).unwrap();
    let w = &m.weights.embeddings.word;
    assert!(w.iter().all(|v| half::bf16::from_f32(*v).to_f32() == *v));
}

#[test]
fn bad_conversions_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = convert_model(&model_dir(), dir.path(), Dtype::F32).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "--dtype", .. }),
        "{e}"
    );
    let e = convert_model(&model_dir(), &model_dir(), Dtype::F16).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                arg: "--output",
                ..
            }
        ),
        "{e}"
    );
    let e = convert_model(&dir.path().join("nothing"), dir.path(), Dtype::F16).unwrap_err();
    assert!(matches!(e, Error::ModelFileMissing { .. }), "{e}");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    // An output "directory" below a regular file cannot be created.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let e = convert_model(&model_dir(), &file.join("out"), Dtype::F16).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
}

#[test]
fn an_f16_model_converts_to_bf16() {
    let dir = tempfile::tempdir().unwrap();
    let (f16_dir, bf16_dir, again) = (
        dir.path().join("f16"),
        dir.path().join("bf16"),
        dir.path().join("bf16-again"),
    );
    convert_model(&model_dir(), &f16_dir, Dtype::F16).unwrap();
    let r = convert_model(&f16_dir, &bf16_dir, Dtype::Bf16).unwrap();
    assert!(r.converted >= 100 && r.copied >= 1, "{r:?}");
    // bf16 has 8 significant bits, f16 11: rounding f16 values to bf16 loses up to 2^-9.
    assert!(
        r.max_rel_rounding > 0.0 && r.max_rel_rounding <= 1.0 / 256.0,
        "{r:?}"
    );

    let (a, b) = (
        std::fs::read(f16_dir.join("model.safetensors")).unwrap(),
        std::fs::read(&r.weights).unwrap(),
    );
    let (sa, sb) = (
        safetensors::SafeTensors::deserialize(&a).unwrap(),
        safetensors::SafeTensors::deserialize(&b).unwrap(),
    );
    assert_eq!(sa.len(), sb.len());
    let mut converted = 0;
    for (name, tb) in sb.tensors() {
        let ta = sa.tensor(&name).unwrap();
        assert_eq!(ta.shape(), tb.shape(), "{name}");
        if ta.dtype() != safetensors::Dtype::F16 {
            assert_eq!((ta.dtype(), ta.data()), (tb.dtype(), tb.data()), "{name}");
            continue;
        }
        assert_eq!(tb.dtype(), safetensors::Dtype::BF16, "{name}");
        for (x, y) in ta.data().chunks_exact(2).zip(tb.data().chunks_exact(2)) {
            let want = half::bf16::from_f32(half::f16::from_le_bytes([x[0], x[1]]).to_f32());
            assert_eq!(half::bf16::from_le_bytes([y[0], y[1]]), want, "{name}");
        }
        converted += 1;
    }
    assert_eq!(converted, r.converted);

    // Tensors already in the target dtype are copied unchanged.
    let r = convert_model(&bf16_dir, &again, Dtype::Bf16).unwrap();
    assert_eq!((r.converted, r.max_abs_rounding), (0, 0.0), "{r:?}");
    assert_eq!(std::fs::read(&r.weights).unwrap(), b);
    Model::load(&again, 128).unwrap();
}

/// Output files that are links to the source model's files are refused before anything is
/// written: following them would overwrite the model being converted.
#[cfg(unix)]
#[test]
fn links_back_to_the_source_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    // A copy, so that a failure cannot touch the cached model.
    convert_model(&model_dir(), &src, Dtype::F16).unwrap();
    let before = std::fs::read(src.join("model.safetensors")).unwrap();
    std::fs::create_dir(&dst).unwrap();
    for f in ["model.safetensors", "config.json", "tokenizer.json"] {
        std::os::unix::fs::symlink(Path::new("../src").join(f), dst.join(f)).unwrap();
    }
    let e = convert_model(&src, &dst, Dtype::Bf16).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                arg: "--output",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        std::fs::read(src.join("model.safetensors")).unwrap(),
        before
    );
}

/// A finite value that rounds to infinity in the target dtype is an error naming the tensor,
/// for bf16 (beyond about 3.39e38) as for f16 (|x| ≥ 65520); 65519, which rounds to 65504, is
/// converted.
#[test]
fn values_that_round_to_infinity_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, values: &[f32]| {
        let m = dir.path().join(name);
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = safetensors::tensor::TensorView::new(
            safetensors::Dtype::F32,
            vec![values.len()],
            &data,
        )
        .unwrap();
        let bytes = safetensors::serialize([("big", view)], None).unwrap();
        common::write_model_dir(&m, common::TINY_CONFIG, &bytes);
        m
    };
    for (dtype, v) in [
        (Dtype::Bf16, f32::MAX),
        (Dtype::F16, 65520.0),
        (Dtype::F16, -1e6),
    ] {
        let src = write("src", &[1.0, v]);
        let e = convert_model(&src, &dir.path().join("out"), dtype).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "weights", .. }),
            "{dtype} {v}: {e}"
        );
        assert!(e.to_string().contains("big"), "{e}");
    }
    // 65519 rounds to the largest f16; the conversion then fails only because this is not a
    // whole model, after the weights were written.
    let src = write("src", &[65519.0]);
    let e = convert_model(&src, &dir.path().join("ok"), Dtype::F16).unwrap_err();
    assert!(
        !matches!(e, Error::InvalidArgument { arg: "weights", .. }),
        "{e}"
    );
}
