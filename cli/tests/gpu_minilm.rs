//! The CUDA backend on the real all-MiniLM-L6-v2 model: embeddings against the
//! sentence-transformers fixtures (cosine ≥ 0.999 in f16, ≥ 0.995 in bf16 per sentence), each
//! step of a layer against the f32 CPU backend, batching invariance, CUDA-graph replay against
//! the eager path, timings, and a short run of the benchmark.
//!
//! Without a GPU every test prints why it is skipped and passes. The model comes from
//! `FUSED_GEMM_MODEL_DIR` (a directory with config.json, model.safetensors, tokenizer.json; the
//! f16 copy written by `fused-gemm convert-model` works) or the repository's `.cache` (these
//! tests never download it: a GPU host may have no network). A `FUSED_GEMM_MODEL_DIR` that
//! lacks the model always fails the tests (a mistyped path must not pass); without the
//! variable and without the cached model they print what they skipped and pass, unless
//! `FUSED_GEMM_REQUIRE_GPU` is set (to anything but empty or `0`), which makes a missing GPU or
//! model a failure. The fixtures are compiled into the test binary.
//!
//! Every activation and output buffer is NaN-filled before the kernels run (`poison`), so an
//! element a kernel fails to write shows up as a NaN embedding (cosine NaN fails every check).

use std::path::{Path, PathBuf};

use fused_gemm::Gpu;
use fused_gemm::host::testing::{
    REQUIRE_GPU_VAR, assert_close, gpu_or_skip, gpu_required, max_abs_diff, sanitizing,
};
use fused_gemm_cli::backend::cpu::CpuTensor;
use fused_gemm_cli::backend::cuda::bench::{self, BenchConfig};
use fused_gemm_cli::backend::cuda::{DeviceMatrix, GpuElement};
use fused_gemm_cli::embed::cosine;
use fused_gemm_cli::{
    AnyCudaBackend, Backend, CpuBackend, CudaBackend, CudaOptions, Dtype, Embeddings, Model, Stage,
    Timings, TokenBatch, default_model_dir, embed,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct FixtureSentence {
    text: String,
    ids: Vec<u32>,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct Fixture {
    max_seq_length: usize,
    sentences: Vec<FixtureSentence>,
}

fn fixtures() -> Vec<Fixture> {
    [
        include_str!("fixtures/minilm/embeddings_128.json"),
        include_str!("fixtures/minilm/embeddings_256.json"),
    ]
    .iter()
    .map(|s| serde_json::from_str(s).expect("fixture JSON"))
    .collect()
}

/// The files a model directory must hold.
const MODEL_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// The files of [`MODEL_FILES`] that `dir` lacks.
fn missing_model_files(dir: &Path) -> Vec<&'static str> {
    MODEL_FILES
        .into_iter()
        .filter(|f| !dir.join(f).is_file())
        .collect()
}

/// The GPU and the model directory, or `None` (with the reason printed) to skip.
///
/// # Panics
/// When `FUSED_GEMM_MODEL_DIR` is set and lacks a model file (with or without a GPU); when
/// `FUSED_GEMM_REQUIRE_GPU` is set and there is no GPU or no model.
fn setup(test: &str) -> Option<(Gpu, PathBuf)> {
    if let Some(dir) = std::env::var_os("FUSED_GEMM_MODEL_DIR").map(PathBuf::from) {
        let missing = missing_model_files(&dir);
        assert!(
            missing.is_empty(),
            "GPU test `{test}`: FUSED_GEMM_MODEL_DIR={} lacks {} (it must hold {}; unset \
             it to use the cached model)",
            dir.display(),
            missing.join(", "),
            MODEL_FILES.join(", ")
        );
        return Some((gpu_or_skip(test)?, dir));
    }
    let gpu = gpu_or_skip(test)?;
    let dir = default_model_dir();
    let missing = missing_model_files(&dir);
    if !missing.is_empty() {
        let why = format!(
            "no model in {} (it lacks {}; scripts/fetch-model.sh fills it, or set \
             FUSED_GEMM_MODEL_DIR to a directory with {})",
            dir.display(),
            missing.join(", "),
            MODEL_FILES.join(", ")
        );
        assert!(
            !gpu_required(),
            "GPU test `{test}` cannot run: {why}, and {REQUIRE_GPU_VAR} is set"
        );
        eprintln!("skipping GPU test `{test}` (the MiniLM model is needed): {why}");
        return None;
    }
    Some((gpu, dir))
}

fn options(graphs: bool) -> CudaOptions {
    CudaOptions {
        graphs,
        poison: true,
        ..CudaOptions::default()
    }
}

/// Every combination of graphs and LayerNorm placement.
fn all_options() -> [CudaOptions; 4] {
    [(false, false), (true, false), (false, true), (true, true)].map(|(graphs, deferred)| {
        CudaOptions {
            deferred_layer_norm: deferred,
            ..options(graphs)
        }
    })
}

fn texts(fx: &Fixture) -> Vec<&str> {
    fx.sentences.iter().map(|s| s.text.as_str()).collect()
}

fn run<B: Backend>(b: &mut B, m: &Model, texts: &[&str], batch: usize) -> Embeddings {
    embed(b, &m.tokenizer, texts, batch, |_, _| {}, None).expect("embed on the GPU")
}

/// Per-sentence cosines against the fixture; asserts ≥ `min` and returns the smallest.
fn check_fixture(label: &str, fx: &Fixture, emb: &Embeddings, min: f64) -> f64 {
    let mut worst = f64::INFINITY;
    for (i, s) in fx.sentences.iter().enumerate() {
        let c = cosine(emb.row(i), &s.embedding);
        worst = worst.min(c);
        assert!(
            c >= min,
            "{label}: cosine {c} < {min} for sentence {i} ({} tokens) {:?}",
            s.ids.len(),
            s.text.chars().take(60).collect::<String>()
        );
    }
    worst
}

fn fixtures_for<T: GpuElement>(gpu: &Gpu, dir: &Path, min: f64) -> f64 {
    let mut worst = f64::INFINITY;
    for fx in fixtures() {
        let m = Model::load(dir, fx.max_seq_length).unwrap();
        for s in &fx.sentences {
            assert_eq!(m.tokenizer.encode(&s.text).unwrap(), s.ids, "{:?}", s.text);
        }
        let texts = texts(&fx);
        for opts in all_options() {
            let mut b = CudaBackend::<T>::new(gpu, &m.weights, opts).unwrap();
            // One batch size under compute-sanitizer, whose runs are slow: 16 reruns the
            // model on four times the rows.
            let batches: &[usize] = if sanitizing() { &[4] } else { &[4, 16] };
            for &batch in batches {
                let label = format!(
                    "{} max_seq_len {} batch {batch} graphs {} deferred LayerNorm {}",
                    T::CLI_DTYPE,
                    fx.max_seq_length,
                    opts.graphs,
                    opts.deferred_layer_norm,
                );
                let emb = run(&mut b, &m, &texts, batch);
                let w = check_fixture(&label, &fx, &emb, min);
                println!("{label}: min cosine {w:.6}");
                worst = worst.min(w);
            }
        }
    }
    worst
}

#[test]
fn embeddings_match_sentence_transformers_f16() {
    let Some((gpu, dir)) = setup("embeddings_f16") else {
        return;
    };
    let w = fixtures_for::<half::f16>(&gpu, &dir, 0.999);
    println!("f16: minimum cosine over all fixture sentences {w:.6} (threshold 0.999)");
}

#[test]
fn embeddings_match_sentence_transformers_bf16() {
    let Some((gpu, dir)) = setup("embeddings_bf16") else {
        return;
    };
    let w = fixtures_for::<half::bf16>(&gpu, &dir, 0.995);
    println!("bf16: minimum cosine over all fixture sentences {w:.6} (threshold 0.995)");
}

/// A CPU matrix rounded to `T` and uploaded.
fn up<T: GpuElement>(gpu: &Gpu, t: &CpuTensor) -> DeviceMatrix<T> {
    DeviceMatrix::from_f32(gpu, t.rows, t.cols, &t.data).unwrap()
}

/// The rows of real tokens of a `cols`-wide matrix, widened to f64.
fn real_rows(v: &[f32], cols: usize, real: &[bool]) -> Vec<f64> {
    assert_eq!(v.len(), cols * real.len(), "one flag per row");
    v.chunks(cols)
        .zip(real)
        .filter(|(_, keep)| **keep)
        .flat_map(|(row, _)| row.iter().map(|&x| x as f64))
        .collect()
}

/// Each step of layer 2 on the GPU, fed the CPU backend's f32 input rounded to `T`, against
/// the CPU backend's output. Localizes a wrong step when the end-to-end check fails.
fn steps_for<T: GpuElement>(gpu: &Gpu, m: &Model, tol: f64) {
    let name = T::CLI_DTYPE;
    let fx = &fixtures()[1];
    // Three sentences of different lengths: padding in the batch.
    let seqs: Vec<&[u32]> = [0, 5, 9]
        .iter()
        .map(|&i| fx.sentences[i].ids.as_slice())
        .collect();
    let batch = TokenBatch::pad(&seqs, 0).unwrap();
    let real: Vec<bool> = batch.mask.iter().map(|&v| v == 1).collect();
    let mut cpu = CpuBackend::new(m.weights.clone(), Dtype::F32).unwrap();
    let mut gb = CudaBackend::<T>::new(gpu, &m.weights, options(false)).unwrap();
    let lay = gb.heads();
    let d = lay.hidden();
    assert_eq!(lay.qkv_width(), 3 * d, "{name}: QKV is the model's [M, 3d]");

    let ci = cpu.upload_inputs(&batch).unwrap();
    let gi = gb.upload_inputs(&batch).unwrap();
    let rows = batch.tokens();
    let mut c = cpu.activations(rows).unwrap();
    let mut g = gb.activations(rows).unwrap();
    let mut report = Vec::new();
    // Relative Frobenius error and each element, over the rows of real tokens.
    let mut check = |step: Stage, got: Vec<f32>, want: &CpuTensor| {
        let r = assert_close(
            &real_rows(&got, want.cols, &real),
            &real_rows(&want.data, want.cols, &real),
            tol,
            &format!("{name} {}", step.name()),
        );
        report.push(format!("{:<34} {:.2e}", step.name(), r.frobenius));
    };

    cpu.embeddings(&ci, &mut c.x).unwrap();
    gb.embeddings(&gi, &mut g.x).unwrap();
    check(Stage::Embeddings, g.x.download_f32(gpu).unwrap(), &c.x);
    // Run the CPU to layer 2's input.
    for layer in 0..2 {
        cpu.qkv_projection(layer, &c.x, &mut c.qkv).unwrap();
        cpu.attention(layer, &ci, &c.qkv, &mut c.ctx).unwrap();
        cpu.attn_out_residual_layernorm(layer, &c.ctx, &c.x, &mut c.h)
            .unwrap();
        cpu.ffn_up_gelu(layer, &c.h, &mut c.mid).unwrap();
        cpu.ffn_down_residual_layernorm(layer, &c.mid, &c.h, &mut c.x)
            .unwrap();
    }
    let layer = 2;
    let x = up::<T>(gpu, &c.x);
    cpu.qkv_projection(layer, &c.x, &mut c.qkv).unwrap();
    gb.qkv_projection(layer, &x, &mut g.qkv).unwrap();
    check(
        Stage::QkvProjection,
        g.qkv.download_f32(gpu).unwrap(),
        &c.qkv,
    );

    cpu.attention(layer, &ci, &c.qkv, &mut c.ctx).unwrap();
    let qkv = up::<T>(gpu, &c.qkv);
    gb.attention(layer, &gi, &qkv, &mut g.ctx).unwrap();
    check(Stage::Attention, g.ctx.download_f32(gpu).unwrap(), &c.ctx);

    cpu.attn_out_residual_layernorm(layer, &c.ctx, &c.x, &mut c.h)
        .unwrap();
    let ctx = up::<T>(gpu, &c.ctx);
    gb.attn_out_residual_layernorm(layer, &ctx, &x, &mut g.h)
        .unwrap();
    check(
        Stage::AttnOutResidualLayerNorm,
        g.h.download_f32(gpu).unwrap(),
        &c.h,
    );

    let h = up::<T>(gpu, &c.h);
    cpu.ffn_up_gelu(layer, &c.h, &mut c.mid).unwrap();
    gb.ffn_up_gelu(layer, &h, &mut g.mid).unwrap();
    check(Stage::FfnUpGelu, g.mid.download_f32(gpu).unwrap(), &c.mid);

    let mid = up::<T>(gpu, &c.mid);
    cpu.ffn_down_residual_layernorm(layer, &c.mid, &c.h, &mut c.x)
        .unwrap();
    gb.ffn_down_residual_layernorm(layer, &mid, &h, &mut g.x)
        .unwrap();
    check(
        Stage::FfnDownResidualLayerNorm,
        g.x.download_f32(gpu).unwrap(),
        &c.x,
    );

    let x = up::<T>(gpu, &c.x);
    let want = cpu.mean_pool_normalize(&ci, &c.x).unwrap();
    let got = gb.mean_pool_normalize(&gi, &x).unwrap();
    let all = vec![true; batch.batch];
    let r = assert_close(
        &real_rows(&got, d, &all),
        &real_rows(&want, d, &all),
        tol,
        &format!("{name} {}", Stage::MeanPoolNormalize.name()),
    );
    report.push(format!(
        "{:<34} {:.2e}",
        Stage::MeanPoolNormalize.name(),
        r.frobenius
    ));
    println!(
        "{name}: each step vs the f32 CPU backend (relative error, real tokens):\n  {}",
        report.join("\n  ")
    );
}

#[test]
fn each_step_matches_the_cpu_backend() {
    let Some((gpu, dir)) = setup("each_step") else {
        return;
    };
    let m = Model::load(&dir, 128).unwrap();
    steps_for::<half::f16>(&gpu, &m, 1e-2);
    steps_for::<half::bf16>(&gpu, &m, 4e-2);
}

#[test]
fn a_sentence_alone_equals_it_in_a_padded_batch() {
    let Some((gpu, dir)) = setup("batching") else {
        return;
    };
    let fx = &fixtures()[1];
    let m = Model::load(&dir, fx.max_seq_length).unwrap();
    // Short, blank, non-ASCII and the 256-token input, so short ones get padded to 256.
    let texts: Vec<&str> = fx
        .sentences
        .iter()
        .filter(|s| s.ids.len() <= 20 || s.ids.len() == 256)
        .map(|s| s.text.as_str())
        .take(12)
        .collect();
    assert!(texts.len() >= 8);
    for deferred in [false, true] {
        let opts = CudaOptions {
            deferred_layer_norm: deferred,
            ..options(true)
        };
        let mut b = CudaBackend::<half::f16>::new(&gpu, &m.weights, opts).unwrap();
        let alone: Vec<Embeddings> = texts.iter().map(|t| run(&mut b, &m, &[t], 1)).collect();
        let mut worst = 1.0f64;
        for batch in [3, texts.len()] {
            let together = run(&mut b, &m, &texts, batch);
            for (i, a) in alone.iter().enumerate() {
                let c = cosine(together.row(i), a.row(0));
                worst = worst.min(c);
                assert!(
                    c >= 0.9999,
                    "deferred LayerNorm {deferred}, sentence {i} {:?}: batch {batch} vs alone \
                     cosine {c}",
                    texts[i]
                );
            }
        }
        println!(
            "f16 batching invariance, deferred LayerNorm {deferred}: min cosine alone vs \
             batched {worst:.7}"
        );
    }
}

#[test]
fn graph_replay_equals_the_eager_pass() {
    let Some((gpu, dir)) = setup("graphs") else {
        return;
    };
    let fx = &fixtures()[0];
    let m = Model::load(&dir, fx.max_seq_length).unwrap();
    let texts = texts(fx);
    let mut eager = CudaBackend::<half::f16>::new(&gpu, &m.weights, options(false)).unwrap();
    let want = run(&mut eager, &m, &texts, 8);
    drop(eager);

    let mut b = CudaBackend::<half::f16>::new(&gpu, &m.weights, options(true)).unwrap();
    let after = b.options().graph_after_runs;
    let mut d1 = 0.0f64;
    for _ in 0..after {
        assert_eq!(b.graphs_live(), 0, "captured before {after} eager runs");
        let e = run(&mut b, &m, &texts, 8);
        d1 = d1.max(max_abs_diff(&e.data, &want.data));
    }
    assert_eq!(b.graph_error(), None, "graph capture failed");
    assert!(b.graphs_live() > 0, "no graph captured");
    // Replays must write everything: start them from NaN.
    b.poison_buckets().unwrap();
    let replayed = run(&mut b, &m, &texts, 8);
    let d2 = max_abs_diff(&replayed.data, &want.data);
    println!(
        "graphs: {} live; eager backend vs bucketed eager runs {d1:e}, vs replay {d2:e}",
        b.graphs_live()
    );
    assert!(replayed.data.iter().all(|v| v.is_finite()));
    assert!(
        d1 <= 1e-6 && d2 <= 1e-6,
        "graph replay differs from the eager pass: {d1}, {d2}"
    );
    check_fixture("f16 replayed", fx, &replayed, 0.999);
}

#[test]
fn timings_report_every_kernel_with_cuda_events() {
    let Some((gpu, dir)) = setup("timings") else {
        return;
    };
    let m = Model::load(&dir, 128).unwrap();
    let mut b = CudaBackend::<half::f16>::new(&gpu, &m.weights, options(true)).unwrap();
    let mut t = Timings::default();
    let texts = ["A man is eating food.", "GPUs multiply matrices.", ""];
    let emb = embed(&mut b, &m.tokenizer, &texts, 2, |_, _| {}, Some(&mut t)).unwrap();
    assert!(emb.data.iter().all(|v| v.is_finite()));
    println!("{t}");
    assert!(t.clock().unwrap().contains("CUDA events"));
    for s in [
        Stage::Embeddings,
        Stage::QkvProjection,
        Stage::Attention,
        Stage::AttnOutResidualLayerNorm,
        Stage::FfnUpGelu,
        Stage::FfnDownResidualLayerNorm,
        Stage::MeanPoolNormalize,
    ] {
        assert!(
            t.total(s) > std::time::Duration::ZERO,
            "{} not timed",
            s.name()
        );
    }
    assert_eq!(
        t.calls(Stage::QkvProjection),
        2 * 6,
        "two batches × six layers"
    );
}

#[test]
fn f32_on_the_gpu_is_a_clear_error() {
    let Some((gpu, dir)) = setup("f32") else {
        return;
    };
    let m = Model::load(&dir, 128).unwrap();
    let e = AnyCudaBackend::new(&gpu, &m.weights, Dtype::F32, CudaOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("f32 on the GPU") && e.contains("f16 or bf16"),
        "{e}"
    );
}

#[test]
fn benchmark_runs_on_small_shapes() {
    let Some((gpu, dir)) = setup("bench") else {
        return;
    };
    let m = Model::load(&dir, 128).unwrap();
    let mut b = CudaBackend::<half::f16>::new(&gpu, &m.weights, CudaOptions::default()).unwrap();
    let cfg = BenchConfig {
        batch_sizes: vec![1, 3],
        seq_len: 40,
        target_ms: 5.0,
        seed: 1,
    };
    let r = bench::run(&mut b, &cfg, |p| eprintln!("{p}")).unwrap();
    print!("{r}");
    assert_eq!(r.rows.len(), 2);
    for row in &r.rows {
        assert!(row.eager_ms > 0.0 && row.end_to_end_ms > 0.0, "{row:?}");
        assert!(row.graph_ms.is_some_and(|g| g > 0.0), "{row:?}");
        assert_eq!(row.layer.len(), 7);
        assert!(row.layer.iter().all(|s| s.ms > 0.0));
        assert!(
            row.layer.iter().filter(|s| s.plan.is_some()).count() == 4,
            "four GEMMs per layer: {row:?}"
        );
    }
    assert!(r.graph_error.is_none());
}

/// A batch of `lengths.len()` sequences with these lengths and ids from `seed`.
fn batch_of(lengths: &[usize], seed: u64) -> TokenBatch {
    let longest = *lengths.iter().max().unwrap();
    let full = bench::random_batch(lengths.len(), longest, seed).unwrap();
    let seqs: Vec<Vec<u32>> = lengths
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            let mut s = full.ids[i * longest..i * longest + l].to_vec();
            *s.last_mut().unwrap() = 102;
            s
        })
        .collect();
    TokenBatch::pad(&seqs, 0).unwrap()
}

/// A replayed graph runs on the new batch's tokens and lengths (same shape, other contents).
#[test]
fn graph_replay_reads_each_new_batch() {
    let Some((gpu, dir)) = setup("graph_refill") else {
        return;
    };
    let m = Model::load(&dir, 128).unwrap();
    let a = batch_of(&[32, 20, 5, 32], 1);
    let b = batch_of(&[32, 32, 9, 17], 2);
    // Same lengths as b, other ids: only the ids are copied.
    let c = batch_of(&[32, 32, 9, 17], 3);
    let mut eager = CudaBackend::<half::f16>::new(&gpu, &m.weights, options(false)).unwrap();
    let (want_a, want_b, want_c) = (
        eager.run_batch(&a, None).unwrap(),
        eager.run_batch(&b, None).unwrap(),
        eager.run_batch(&c, None).unwrap(),
    );
    drop(eager);
    for (w, name) in [(&want_a, "a"), (&want_b, "b"), (&want_c, "c")] {
        assert!(
            w.iter().all(|v| v.is_finite()),
            "eager batch {name}: non-finite embeddings"
        );
    }
    assert!(
        max_abs_diff(&want_b, &want_c) > 1e-2,
        "different ids, same embeddings"
    );
    assert!(
        max_abs_diff(&want_a, &want_b) > 1e-2,
        "different batches, same embeddings"
    );

    let mut g = CudaBackend::<half::f16>::new(&gpu, &m.weights, options(true)).unwrap();
    for _ in 0..g.options().graph_after_runs {
        g.run_batch(&a, None).unwrap();
    }
    assert_eq!(g.graphs_live(), 1, "{:?}", g.graph_error());
    for (batch, want, name) in [
        (&b, &want_b, "b"),
        (&a, &want_a, "a"),
        (&b, &want_b, "b"),
        (&c, &want_c, "c"),
    ] {
        g.poison_buckets().unwrap();
        let got = g.run_batch(batch, None).unwrap();
        let d = max_abs_diff(&got, want);
        println!("replay of batch {name}: max |difference| to eager {d:e}");
        assert!(
            d <= 1e-6,
            "replay of batch {name} differs from eager by {d}"
        );
    }
}
