//! Weight loading: typed errors for missing, corrupt, truncated and mis-shaped files; QKV
//! packing and dtype conversion for the GPU path.

mod common;

use std::path::Path;

use common::{TINY_CONFIG, model, model_dir, safetensors_bytes, tiny_shapes};
use fused_gemm_cli::weights::{HostElement, Linear};
use fused_gemm_cli::{
    Backend, CpuBackend, Dtype, Error, MiniLmConfig, ModelWeights, TokenBatch, forward,
};

fn tiny_config() -> MiniLmConfig {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    std::fs::write(&p, TINY_CONFIG).unwrap();
    MiniLmConfig::from_file(&p).unwrap()
}

fn load_tiny(bytes: &[u8]) -> fused_gemm_cli::Result<ModelWeights> {
    ModelWeights::from_bytes(bytes, Path::new("tiny.safetensors"), &tiny_config())
}

#[test]
fn real_config_is_all_minilm_l6_v2() {
    let c = MiniLmConfig::from_file(&model_dir().join("config.json")).unwrap();
    assert_eq!(c, MiniLmConfig::ALL_MINILM_L6_V2);
    assert_eq!(c.head_dim(), 32);
}

#[test]
fn qkv_is_packed_from_query_key_value_rows() {
    let bytes = std::fs::read(model_dir().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let f32s = |name: &str| -> Vec<f32> {
        st.tensor(name)
            .unwrap()
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let w = &model().weights;
    assert_eq!(w.layers.len(), 6);
    for layer in [0, 5] {
        let qkv = &w.layers[layer].qkv;
        assert_eq!((qkv.out_features, qkv.in_features), (1152, 384));
        assert_eq!((qkv.weight.len(), qkv.bias.len()), (1152 * 384, 1152));
        for (part, name) in ["query", "key", "value"].iter().enumerate() {
            let p = format!("encoder.layer.{layer}.attention.self.{name}");
            let rows = part * 384..(part + 1) * 384;
            assert_eq!(
                qkv.weight[rows.start * 384..rows.end * 384],
                f32s(&format!("{p}.weight"))[..]
            );
            assert_eq!(qkv.bias[rows], f32s(&format!("{p}.bias"))[..]);
        }
    }
}

#[test]
fn weights_convert_to_f16_and_bf16_by_rounding() {
    let lin = Linear {
        out_features: 1,
        in_features: 4,
        weight: vec![1.0, -0.1, 65504.0, 1e-8],
        bias: vec![0.333_333_34],
    };
    let h: Vec<half::f16> = lin.weight_as();
    let b: Vec<half::bf16> = lin.weight_as();
    for (i, &v) in lin.weight.iter().enumerate() {
        assert_eq!(h[i], half::f16::from_f32(v));
        assert_eq!(b[i], half::bf16::from_f32(v));
    }
    assert_eq!(h[2].to_f32(), 65504.0);
    assert_eq!(b[0].to_f32(), 1.0);
    assert_eq!(lin.bias_as::<f32>(), lin.bias);
    assert_eq!(
        half::bf16::from_f32(-0.1),
        <half::bf16 as HostElement>::from_f32(-0.1)
    );
    // The packed QKV of the real model converts whole.
    let qkv16: Vec<half::bf16> = model().weights.layers[0].qkv.weight_as();
    assert_eq!(qkv16.len(), 1152 * 384);
}

#[test]
fn tiny_model_loads_and_runs() {
    let w = load_tiny(&safetensors_bytes(&tiny_shapes(&[]))).unwrap();
    assert_eq!(w.layers[0].qkv.weight.len(), 12 * 4);
    let mut cpu = CpuBackend::new(std::sync::Arc::new(w), Dtype::F32).unwrap();
    let batch = TokenBatch::pad(&[vec![1u32, 5, 2], vec![1, 2]], 0).unwrap();
    let out = forward(&mut cpu, &batch, None).unwrap();
    assert_eq!(out.len(), 2 * 4);
    for row in out.chunks(4) {
        let n = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-5, "{row:?}");
    }
    // Token ids outside the vocabulary are an error, not an out-of-bounds read.
    let bad = TokenBatch::pad(&[vec![1u32, 10]], 0).unwrap();
    let e = forward(&mut cpu, &bad, None).unwrap_err();
    assert!(e.to_string().contains("token id"), "{e}");
}

#[test]
fn bert_prefix_is_accepted() {
    let shapes: Vec<_> = tiny_shapes(&[])
        .into_iter()
        .map(|(n, s)| (format!("bert.{n}"), s))
        .collect();
    load_tiny(&safetensors_bytes(&shapes)).unwrap();
}

#[test]
fn wrong_shape_names_tensor_and_both_shapes() {
    let name = "encoder.layer.0.intermediate.dense.weight";
    let bytes = safetensors_bytes(&tiny_shapes(&[(name, vec![4, 8])]));
    match load_tiny(&bytes).unwrap_err() {
        Error::TensorShape {
            name: n,
            expected,
            actual,
        } => {
            assert_eq!(n, name);
            assert_eq!(expected, [8, 4]);
            assert_eq!(actual, [4, 8]);
        }
        e => panic!("unexpected error {e}"),
    }
    let e = load_tiny(&bytes).unwrap_err().to_string();
    assert!(
        e.contains(name) && e.contains("[4, 8]") && e.contains("[8, 4]"),
        "{e}"
    );
}

#[test]
fn missing_tensor_is_named() {
    let mut shapes = tiny_shapes(&[]);
    shapes.retain(|(n, _)| n != "encoder.layer.0.output.LayerNorm.bias");
    let e = load_tiny(&safetensors_bytes(&shapes)).unwrap_err();
    assert!(matches!(e, Error::MissingTensor { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("encoder.layer.0.output.LayerNorm.bias")
    );
}

#[test]
fn more_layers_in_the_file_than_the_config_is_an_error() {
    // The tiny config has one layer; a file with a second one is another model.
    let one = tiny_shapes(&[]);
    let mut two = one.clone();
    for (n, s) in &one {
        if let Some(rest) = n.strip_prefix("encoder.layer.0.") {
            two.push((format!("encoder.layer.1.{rest}"), s.clone()));
        }
    }
    let bert: Vec<_> = two
        .iter()
        .map(|(n, s)| (format!("bert.{n}"), s.clone()))
        .collect();
    // One stray tensor of a far layer counts too.
    let mut stray = one.clone();
    stray.push(("encoder.layer.11.output.dense.bias".into(), vec![4]));
    for (shapes, file) in [(&two, 2), (&bert, 2), (&stray, 12)] {
        match load_tiny(&safetensors_bytes(shapes)).unwrap_err() {
            Error::LayerCount {
                config, file: f, ..
            } => assert_eq!((config, f), (1, file)),
            e => panic!("unexpected error {e}"),
        }
    }
    let e = load_tiny(&safetensors_bytes(&two)).unwrap_err().to_string();
    assert!(
        e.contains("2 encoder layers") && e.contains("num_hidden_layers is 1"),
        "{e}"
    );
}

#[test]
fn truncated_and_corrupt_files_are_typed_errors() {
    let good = safetensors_bytes(&tiny_shapes(&[]));
    for cut in [0, 7, 8, 50, good.len() / 2, good.len() - 1] {
        let e = load_tiny(&good[..cut]).unwrap_err();
        assert!(matches!(e, Error::SafeTensors { .. }), "cut {cut}: {e}");
        assert!(e.to_string().contains("corrupt or truncated"), "{e}");
    }
    let mut garbage = good.clone();
    garbage[8..40].fill(b'#');
    assert!(matches!(
        load_tiny(&garbage).unwrap_err(),
        Error::SafeTensors { .. }
    ));
}

#[test]
fn unsupported_dtype_is_named() {
    let mut shapes = tiny_shapes(&[]);
    let name = "embeddings.LayerNorm.bias".to_string();
    shapes.retain(|(n, _)| *n != name);
    let mut bytes_views: Vec<(String, safetensors::tensor::TensorView)> = Vec::new();
    let f32_bytes = safetensors_bytes(&shapes);
    let st = safetensors::SafeTensors::deserialize(&f32_bytes).unwrap();
    for (n, v) in st.tensors() {
        bytes_views.push((n, v));
    }
    let ints = [0u8; 4 * 8];
    bytes_views.push((
        name.clone(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![4], &ints).unwrap(),
    ));
    let bytes = safetensors::serialize(bytes_views, None).unwrap();
    let e = load_tiny(&bytes).unwrap_err();
    assert!(matches!(e, Error::TensorDtype { .. }), "{e}");
    assert!(e.to_string().contains(&name));
}

#[test]
fn missing_files_are_model_file_missing() {
    let dir = tempfile::tempdir().unwrap();
    let e = ModelWeights::load(
        &dir.path().join("model.safetensors"),
        &MiniLmConfig::ALL_MINILM_L6_V2,
    )
    .unwrap_err();
    assert!(matches!(e, Error::ModelFileMissing { .. }), "{e}");
    let e = MiniLmConfig::from_file(&dir.path().join("config.json")).unwrap_err();
    assert!(matches!(e, Error::ModelFileMissing { .. }), "{e}");
    assert!(e.to_string().contains("fetch-model.sh"), "{e}");
}

#[test]
fn bad_configs_are_rejected_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    for (edit, want) in [
        (("\"gelu\"", "\"relu\""), "hidden_act"),
        (
            ("\"num_attention_heads\": 2", "\"num_attention_heads\": 3"),
            "divisible",
        ),
        (("\"bert\"", "\"gpt2\""), "model_type"),
        (("\"hidden_size\": 4,", ""), "hidden_size"),
    ] {
        std::fs::write(&p, TINY_CONFIG.replace(edit.0, edit.1)).unwrap();
        let e = MiniLmConfig::from_file(&p).unwrap_err();
        assert!(matches!(e, Error::Config { .. }), "{e}");
        assert!(e.to_string().contains(want), "{edit:?}: {e}");
    }
    std::fs::write(&p, "{not json").unwrap();
    assert!(matches!(
        MiniLmConfig::from_file(&p).unwrap_err(),
        Error::Config { .. }
    ));
}

#[test]
fn cpu_backend_rejects_half_dtypes() {
    let w = model().weights.clone();
    for d in [Dtype::F16, Dtype::Bf16] {
        let e = CpuBackend::new(w.clone(), d).unwrap_err();
        assert!(e.to_string().contains("f32 only"), "{e}");
    }
    assert_eq!(
        CpuBackend::new(w, Dtype::F32).unwrap().config().hidden_size,
        384
    );
}

#[test]
fn out_of_range_configs_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    for (from, to, field) in [
        (
            "\"num_hidden_layers\": 1",
            "\"num_hidden_layers\": 1000000000000000000",
            "num_hidden_layers",
        ),
        (
            "\"vocab_size\": 10",
            "\"vocab_size\": 10000000000",
            "vocab_size",
        ),
        (
            "\"hidden_size\": 4",
            "\"hidden_size\": 4294967296",
            "hidden_size",
        ),
        (
            "\"intermediate_size\": 8",
            "\"intermediate_size\": 1000000000000",
            "intermediate_size",
        ),
        (
            "\"max_position_embeddings\": 8",
            "\"max_position_embeddings\": 1000000000000000",
            "max_position_embeddings",
        ),
        (
            "\"max_position_embeddings\": 8",
            "\"max_position_embeddings\": 1",
            "max_position_embeddings",
        ),
        (
            "\"type_vocab_size\": 2",
            "\"type_vocab_size\": 0",
            "type_vocab_size",
        ),
        (
            "\"num_attention_heads\": 2",
            "\"num_attention_heads\": 0",
            "num_attention_heads",
        ),
        (
            "\"layer_norm_eps\": 1e-12",
            "\"layer_norm_eps\": 2.0",
            "layer_norm_eps",
        ),
    ] {
        let text = TINY_CONFIG.replace(from, to);
        assert_ne!(text, TINY_CONFIG, "{from}");
        std::fs::write(&p, text).unwrap();
        let e = MiniLmConfig::from_file(&p).unwrap_err();
        assert!(matches!(e, Error::Config { .. }), "{to}: {e}");
        assert!(e.to_string().contains(field), "{to}: {e}");
    }
}

#[test]
fn loader_rejects_a_config_out_of_range_before_allocating() {
    let bytes = safetensors_bytes(&tiny_shapes(&[]));
    let huge = MiniLmConfig {
        num_layers: 1 << 60,
        ..tiny_config()
    };
    let e = ModelWeights::from_bytes(&bytes, Path::new("tiny.safetensors"), &huge).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                arg: "num_hidden_layers",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn malformed_token_batches_are_errors_not_panics() {
    let w = load_tiny(&safetensors_bytes(&tiny_shapes(&[]))).unwrap();
    let mut cpu = CpuBackend::new(std::sync::Arc::new(w), Dtype::F32).unwrap();
    let good = TokenBatch::pad(&[vec![1u32, 5, 2], vec![1, 2]], 0).unwrap();
    assert_eq!((good.batch, good.seq_len), (2, 3));
    forward(&mut cpu, &good, None).unwrap();
    let cases = [
        (
            TokenBatch {
                ids: vec![1, 2],
                ..good.clone()
            },
            "token batch",
        ),
        (
            TokenBatch {
                mask: vec![1, 1],
                ..good.clone()
            },
            "token batch",
        ),
        (
            TokenBatch {
                type_ids: vec![0; 7],
                ..good.clone()
            },
            "token batch",
        ),
        (
            TokenBatch {
                lengths: vec![3],
                ..good.clone()
            },
            "token batch",
        ),
        (
            TokenBatch {
                batch: 0,
                ..good.clone()
            },
            "token batch",
        ),
        (
            TokenBatch {
                batch: usize::MAX,
                ..good.clone()
            },
            "token batch",
        ),
        (
            TokenBatch {
                seq_len: 9,
                ..good.clone()
            },
            "sequence length",
        ),
        (
            TokenBatch {
                lengths: vec![4, 2],
                ..good.clone()
            },
            "sequence length",
        ),
        (
            TokenBatch {
                lengths: vec![3, 0],
                ..good.clone()
            },
            "sequence length",
        ),
        (
            TokenBatch {
                mask: vec![1, 1, 1, 1, 1, 1],
                ..good.clone()
            },
            "attention mask",
        ),
        (
            TokenBatch {
                type_ids: vec![0, 0, 2, 0, 0, 0],
                ..good.clone()
            },
            "token type id",
        ),
    ];
    for (bad, needle) in cases {
        let e = forward(&mut cpu, &bad, None).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains(needle),
            "{bad:?}: {e}"
        );
    }
    // A layer index past the model's layers is an error in every step that reads weights.
    let inputs = cpu.upload_inputs(&good).unwrap();
    let mut a = cpu.activations(good.tokens()).unwrap();
    cpu.embeddings(&inputs, &mut a.x).unwrap();
    let layer_error = |r: fused_gemm_cli::Result<()>| {
        let e = r.unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "layer", .. }),
            "{e}"
        );
    };
    layer_error(cpu.qkv_projection(99, &a.x, &mut a.qkv));
    layer_error(cpu.attn_out_residual_layernorm(1, &a.ctx, &a.x, &mut a.h));
    layer_error(cpu.ffn_up_gelu(99, &a.h, &mut a.mid));
    layer_error(cpu.ffn_down_residual_layernorm(99, &a.mid, &a.h, &mut a.x));
    cpu.qkv_projection(0, &a.x, &mut a.qkv).unwrap();
}

#[test]
fn hand_built_weights_of_the_wrong_size_are_rejected() {
    let mut w = load_tiny(&safetensors_bytes(&tiny_shapes(&[]))).unwrap();
    w.layers[0].ffn_up.weight.pop();
    let e = CpuBackend::new(std::sync::Arc::new(w.clone()), Dtype::F32).unwrap_err();
    assert!(
        e.to_string()
            .contains("encoder.layer.0.intermediate.dense.weight"),
        "{e}"
    );
    w.layers.clear();
    w.config.num_heads = 0;
    let e = CpuBackend::new(std::sync::Arc::new(w), Dtype::F32).unwrap_err();
    assert!(e.to_string().contains("num_attention_heads"), "{e}");
}
