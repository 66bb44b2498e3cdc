//! The `fused-gemm` binary end to end: outputs parse back, bad input fails cleanly (non-zero
//! exit, a message naming the problem, no output file, no leftover temporary file).
//!
//! `embed` runs with `--device cpu` here, so the tests check the CPU path on any machine (the
//! default, `auto`, would take the GPU on a GPU host); `auto_device_says_where_it_runs` and the
//! `--device cuda` case of `bad_options_fail_with_clear_messages` check the device choice itself,
//! for whichever case the machine is.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{TINY_CONFIG, fixture, model_dir, safetensors_bytes, tiny_shapes, write_model_dir};
use fused_gemm_cli::embed::cosine;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fused-gemm"));
    c.env("FUSED_GEMM_MODEL_DIR", model_dir());
    c
}

fn run(mut c: Command, stdin: &[u8]) -> Output {
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn fused-gemm");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "status {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Asserts a clean failure whose stderr contains every one of `needles`.
fn assert_fails(out: &Output, needles: &[&str]) {
    assert!(!out.status.success(), "expected failure");
    assert_ne!(out.status.code(), Some(101), "panicked");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
}

/// Asserts that `dir` holds no file at all (no output, no temporary file left behind).
fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

fn parse_jsonl(bytes: &[u8]) -> Vec<(usize, String, Vec<f32>)> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let e = v["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            (
                v["index"].as_u64().unwrap() as usize,
                v["text"].as_str().unwrap().to_owned(),
                e,
            )
        })
        .collect()
}

#[test]
fn jsonl_to_file_matches_reference_and_npy_matches_jsonl() {
    let fx = fixture("embeddings_256.json");
    let texts: Vec<String> = fx.sentences.iter().map(|s| s.text.clone()).collect();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, texts.join("\n") + "\n").unwrap();
    let (jl, np) = (dir.path().join("e.jsonl"), dir.path().join("e.npy"));

    let mut c = bin();
    c.args(["embed", "--device", "cpu", "--batch-size", "5", "--file"])
        .arg(&input)
        .arg("--output")
        .arg(&jl);
    let out = run(c, b"");
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "embeddings went to the file");
    let rows = parse_jsonl(&std::fs::read(&jl).unwrap());
    assert_eq!(rows.len(), texts.len());
    for (i, ((idx, text, e), s)) in rows.iter().zip(&fx.sentences).enumerate() {
        assert_eq!((*idx, text), (i, &s.text));
        assert_eq!(e.len(), 384);
        let c = cosine(e, &s.embedding);
        assert!(c >= 0.9999, "{text:?}: cosine {c}");
    }

    let mut c = bin();
    c.args([
        "embed",
        "--device",
        "cpu",
        "--format",
        "npy",
        "--batch-size",
        "5",
        "-o",
    ])
    .arg(&np)
    .arg("--file")
    .arg(&input);
    assert!(run(c, b"").status.success());
    let npy = npyz::NpyFile::new(std::fs::File::open(&np).unwrap()).unwrap();
    assert_eq!(npy.shape(), [texts.len() as u64, 384]);
    let data: Vec<f32> = npy.into_vec().unwrap();
    for (i, (_, _, e)) in rows.iter().enumerate() {
        // JSON floats are printed to round-trip exactly.
        assert_eq!(&data[i * 384..(i + 1) * 384], &e[..], "row {i}");
    }
}

#[test]
fn stdin_and_arguments_give_the_same_embeddings() {
    let mut c = bin();
    c.args([
        "embed",
        "--device",
        "cpu",
        "A man is eating food.",
        "Ein Mann isst.",
    ]);
    let from_args = run(c, b"");
    assert!(from_args.status.success());
    let mut c = bin();
    c.args(["embed", "--device", "cpu"]);
    let from_stdin = run(c, "A man is eating food.\r\nEin Mann isst.\n".as_bytes());
    assert!(from_stdin.status.success());
    let (a, b) = (
        parse_jsonl(&from_args.stdout),
        parse_jsonl(&from_stdin.stdout),
    );
    assert_eq!(a.len(), 2);
    assert_eq!(a, b);
}

/// `--device auto` (the default) runs on GPU 0 when it opens, else on the CPU, and says which
/// on stderr. Checks the case of the machine it runs on: with a GPU, the f16 GPU embedding is
/// close to the f32 CPU one; without, it is the `--device cpu` embedding exactly.
#[test]
fn auto_device_says_where_it_runs() {
    let text = "A man is eating food.";
    let mut c = bin();
    c.args(["embed", text]);
    let auto = run(c, b"");
    assert!(auto.status.success());
    let mut c = bin();
    c.args(["embed", "--device", "cpu", text]);
    let cpu = run(c, b"");
    assert!(cpu.status.success());
    let (got, want) = (parse_jsonl(&auto.stdout), parse_jsonl(&cpu.stdout));
    assert_eq!((got.len(), want.len()), (1, 1));
    let err = String::from_utf8_lossy(&auto.stderr);
    match fused_gemm::Gpu::new(0) {
        Ok(g) => {
            assert!(err.contains("running on the GPU"), "GPU 0 opens: {err}");
            let cos = cosine(&got[0].2, &want[0].2);
            assert!(cos >= 0.999, "{}: GPU vs CPU cosine {cos}", g.name());
        }
        Err(e) => {
            assert!(
                err.contains("running on the CPU"),
                "GPU 0 does not open ({e}): {err}"
            );
            assert_eq!(got, want, "auto on the CPU is --device cpu");
        }
    }
}

#[test]
fn similarity_prints_the_cosine_matrix() {
    let mut c = bin();
    c.args([
        "embed",
        "--device",
        "cpu",
        "--similarity",
        "--timings",
        "The cat sits on the mat.",
        "A cat is sitting on a mat.",
        "GPUs multiply matrices.",
    ]);
    let out = run(c, b"");
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.starts_with("cosine similarity (3 sentences)"), "{s}");
    let rows: Vec<Vec<f64>> = s
        .lines()
        .skip(2)
        .take(3)
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .map(|v| v.parse().unwrap())
                .collect()
        })
        .collect();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[i], 1.0);
        for (j, v) in row.iter().enumerate() {
            assert_eq!(*v, rows[j][i]);
        }
    }
    assert!(rows[0][1] > 0.8 && rows[0][2] < 0.3, "{rows:?}");
    assert!(s.contains("[2] GPUs multiply matrices."));
    let err = String::from_utf8_lossy(&out.stderr);
    for stage in ["qkv_projection+bias", "attention", "ffn_up+bias+gelu"] {
        assert!(err.contains(stage), "timings lack {stage}: {err}");
    }
}

#[test]
fn empty_input_fails() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.jsonl");
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "-o"]).arg(&out_path);
    assert_fails(&run(c, b""), &["no input sentences"]);
    let empty = tempfile::NamedTempFile::new().unwrap();
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "-o"])
        .arg(&out_path)
        .arg("--file")
        .arg(empty.path());
    assert_fails(
        &run(c, b""),
        &["no input sentences", "--file input has no lines"],
    );
    assert_empty(dir.path());
}

#[test]
fn invalid_utf8_fails_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.npy");
    let bad = b"fine\nalso fine\nbroken \xc3\x28 here\n";
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "--format", "npy", "-o"])
        .arg(&out_path);
    assert_fails(&run(c, bad), &["stdin", "line 3", "not valid UTF-8"]);
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), bad).unwrap();
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "-o"])
        .arg(&out_path)
        .arg("--file")
        .arg(input.path());
    assert_fails(&run(c, b""), &["line 3", "not valid UTF-8"]);
    assert_empty(dir.path());
}

#[test]
fn missing_model_fails_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let (model, outd) = (dir.path().join("model"), dir.path().join("out"));
    std::fs::create_dir_all(&model).unwrap();
    std::fs::create_dir_all(&outd).unwrap();
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "hello", "-o"])
        .arg(outd.join("e.jsonl"))
        .env("FUSED_GEMM_MODEL_DIR", &model);
    assert_fails(
        &run(c, b""),
        &["config.json", "not found", "fetch-model.sh"],
    );
    // The flag wins over the environment.
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "hello", "--model-dir"])
        .arg(model.join("nowhere"))
        .arg("-o")
        .arg(outd.join("e.jsonl"));
    assert_fails(&run(c, b""), &["nowhere", "not found"]);
    // Config present, weights missing.
    std::fs::copy(model_dir().join("config.json"), model.join("config.json")).unwrap();
    std::fs::copy(
        model_dir().join("tokenizer.json"),
        model.join("tokenizer.json"),
    )
    .unwrap();
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "hello", "-o"])
        .arg(outd.join("e.jsonl"))
        .env("FUSED_GEMM_MODEL_DIR", &model);
    assert_fails(&run(c, b""), &["model.safetensors", "not found"]);
    assert_empty(&outd);
}

#[test]
fn truncated_or_corrupt_weights_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let outd = dir.path().join("out");
    std::fs::create_dir_all(&outd).unwrap();
    let real = std::fs::read(model_dir().join("model.safetensors")).unwrap();
    let config = std::fs::read_to_string(model_dir().join("config.json")).unwrap();
    for (name, bytes) in [
        ("truncated", &real[..real.len() / 2]),
        ("header-only", &real[..4096]),
        ("garbage", &b"this is not a safetensors file at all"[..]),
    ] {
        let m = dir.path().join(name);
        write_model_dir(&m, &config, bytes);
        let mut c = bin();
        c.args(["embed", "--device", "cpu", "hello", "-o"])
            .arg(outd.join("e.jsonl"))
            .env("FUSED_GEMM_MODEL_DIR", &m);
        assert_fails(&run(c, b""), &["corrupt or truncated", "model.safetensors"]);
    }
    assert_empty(&outd);
}

#[test]
fn wrong_tensor_shape_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let name = "encoder.layer.0.attention.output.dense.weight";
    let m = dir.path().join("m");
    write_model_dir(
        &m,
        TINY_CONFIG,
        &safetensors_bytes(&tiny_shapes(&[(name, vec![4, 5])])),
    );
    let out_path = dir.path().join("e.jsonl");
    let mut c = bin();
    // The tiny model has 8 positions.
    c.args([
        "embed",
        "--device",
        "cpu",
        "hello",
        "--max-seq-len",
        "8",
        "-o",
    ])
    .arg(&out_path)
    .env("FUSED_GEMM_MODEL_DIR", &m);
    assert_fails(&run(c, b""), &[name, "[4, 5]", "expected [4, 4]"]);
    assert!(!out_path.exists());
}

/// `-o /dev/stdout` and `-o -` write through the tool's own stdout: into a pipe (`-` is not a
/// file name), and into a file opened for appending (`>> log`) without replacing what the file
/// held; with `--similarity` the table follows the embeddings in the same stream.
#[cfg(target_os = "linux")]
#[test]
fn output_to_dev_stdout_goes_through_stdout() {
    for target in ["/dev/stdout", "-"] {
        let cwd = tempfile::tempdir().unwrap();
        let mut c = bin();
        c.current_dir(cwd.path())
            .args(["embed", "--device", "cpu", "a dog runs", "-o", target]);
        let out = run(c, b"");
        assert!(out.status.success(), "-o {target}");
        assert_eq!(parse_jsonl(&out.stdout).len(), 1, "-o {target}");
        assert_empty(cwd.path());
    }

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    std::fs::write(&log, "PREVIOUS\n").unwrap();
    let append = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let mut c = bin();
    c.args([
        "embed",
        "--device",
        "cpu",
        "--similarity",
        "a dog runs",
        "a cat sleeps",
    ])
    .args(["-o", "/dev/stdout"])
    .stdout(append)
    .stderr(Stdio::piped());
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let rest = text
        .strip_prefix("PREVIOUS\n")
        .expect("earlier contents kept");
    let (embeddings, table): (Vec<&str>, Vec<&str>) =
        rest.lines().partition(|l| l.starts_with('{'));
    assert_eq!(embeddings.len(), 2, "{text}");
    assert!(rest.starts_with('{'), "embeddings first: {text}");
    assert!(table.iter().any(|l| l.contains("a cat sleeps")), "{text}");
    assert_eq!(names_in(dir.path()), ["log"]);
}

fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

#[test]
fn unwritable_output_fails_before_work() {
    let dir = tempfile::tempdir().unwrap();
    let missing_dir = dir.path().join("no/such/dir/e.jsonl");
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "hello", "-o"])
        .arg(&missing_dir);
    assert_fails(&run(c, b""), &["no/such/dir", "does not exist"]);
    let is_dir = dir.path().join("adir");
    std::fs::create_dir(&is_dir).unwrap();
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "hello", "--format", "npy", "-o"])
        .arg(&is_dir);
    assert_fails(&run(c, b""), &["adir", "directory"]);
    assert_empty(&is_dir);
}

#[test]
fn bad_options_fail_with_clear_messages() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["--dtype", "f16"], &["f32 only", "f16"]),
        (&["--dtype", "bf16"], &["f32 only", "bf16"]),
        (&["--max-seq-len", "1"], &["--max-seq-len", "got 1"]),
        (&["--max-seq-len", "513"], &["--max-seq-len", "2..=512"]),
        (&["--batch-size", "0"], &["--batch-size"]),
        (&["--format", "csv"], &["csv"]),
        (&["--devices", "0"], &["--devices", "--device cpu"]),
        (&["--devices", "0,0"], &["GPU 0 is listed twice"]),
        (&["--devices", "first"], &["all or GPU ordinals"]),
    ];
    for (args, needles) in cases {
        let mut c = bin();
        c.args(["embed", "--device", "cpu"])
            .args(*args)
            .arg("hello");
        assert_fails(&run(c, b""), needles);
    }
    // --device cuda runs on GPU 0 when it opens, and otherwise fails with the reason.
    let mut c = bin();
    c.args(["embed", "--device", "cuda", "hello"]);
    let out = run(c, b"");
    match fused_gemm::Gpu::new(0) {
        Ok(_) => {
            assert!(
                out.status.success(),
                "GPU 0 opens, yet --device cuda failed"
            );
            assert_eq!(parse_jsonl(&out.stdout).len(), 1);
        }
        Err(e) => assert_fails(&out, &[&e.to_string()]),
    }
    // --dtype f16 with the default --device auto: on the GPU when one opens; otherwise the
    // refusal also says why the CPU was chosen.
    let mut c = bin();
    c.args(["embed", "--dtype", "f16", "hello"]);
    let out = run(c, b"");
    match fused_gemm::Gpu::new(0) {
        Ok(_) => assert!(out.status.success(), "--dtype f16 failed with a GPU"),
        Err(_) => assert_fails(&out, &["running on the CPU", "f32 only"]),
    }
    // --devices lists GPUs: without one it fails and says so; with one, a run over all of
    // them gives the rows of a run on GPU 0 alone, in input order.
    let texts = [
        "a first sentence",
        "the second",
        "and a third one, longer than the rest",
    ];
    let embed_on = |devices: &[&str]| {
        let mut c = bin();
        c.args(["embed", "--batch-size", "1"])
            .args(devices)
            .args(texts);
        run(c, b"")
    };
    let all = embed_on(&["--devices", "all"]);
    match fused_gemm::Gpu::new(0) {
        Ok(_) => {
            assert!(
                all.status.success(),
                "{}",
                String::from_utf8_lossy(&all.stderr)
            );
            let one = embed_on(&[]);
            assert!(
                one.status.success(),
                "{}",
                String::from_utf8_lossy(&one.stderr)
            );
            let (all, one) = (parse_jsonl(&all.stdout), parse_jsonl(&one.stdout));
            assert_eq!((all.len(), one.len()), (texts.len(), texts.len()));
            for (i, (a, b)) in all.iter().zip(&one).enumerate() {
                assert_eq!(a.1, texts[i]);
                assert!(cosine(&a.2, &b.2) >= 0.9999, "sentence {i}");
            }
        }
        Err(e) => assert_fails(&all, &[&e.to_string()]),
    }
}

#[test]
fn max_seq_len_flag_matches_reference_truncation() {
    let fx = fixture("embeddings_128.json");
    let long = fx.sentences.iter().find(|s| s.ids.len() == 128).unwrap();
    let mut c = bin();
    c.args([
        "embed",
        "--device",
        "cpu",
        "--max-seq-len",
        "128",
        &long.text,
    ]);
    let out = run(c, b"");
    assert!(out.status.success());
    let rows = parse_jsonl(&out.stdout);
    let cos = cosine(&rows[0].2, &long.embedding);
    assert!(cos >= 0.9999, "cosine {cos}");
}

#[test]
fn many_batches_work_without_a_terminal() {
    // More than one batch: the progress bar is hidden (stderr is a pipe), output complete.
    let lines: String = (0..7).map(|i| format!("sentence number {i}\n")).collect();
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "--batch-size", "2"]);
    let out = run(c, lines.as_bytes());
    assert!(out.status.success());
    assert_eq!(parse_jsonl(&out.stdout).len(), 7);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("sentences ("),
        "progress bar drawn to a pipe: {err}"
    );
}

#[test]
fn smoke_runs_on_gpu_or_says_it_uses_the_cpu() {
    let out = run(
        {
            let mut c = bin();
            c.arg("smoke");
            c
        },
        b"",
    );
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("axpy") && s.contains("max rel error"), "{s}");
    if !fused_gemm::host::gpu::driver_present() {
        assert!(s.starts_with("smoke on cpu"), "{s}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no CUDA driver"), "{err}");
    } else {
        // With a driver the smoke run uses GPU 0 and names it.
        let g = fused_gemm::Gpu::new(0).expect("the smoke run opened GPU 0");
        assert!(s.starts_with(&format!("smoke on {}:", g.name())), "{s}");
    }
}

/// Sentences longer than --max-seq-len are embedded from their first tokens and counted on
/// stderr (with the limit that keeps more); short ones say nothing; one sentence is singular.
#[test]
fn truncated_sentences_are_reported_on_stderr() {
    let long = "tokens ".repeat(20);
    let mut c = bin();
    c.args([
        "embed",
        "--device",
        "cpu",
        "--similarity",
        "--max-seq-len",
        "8",
        "short",
        &long,
        "also short",
    ]);
    let out = run(c, b"");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cut to the first 8 tokens")
            && err.contains("1 of 3 sentences")
            && err.contains("(index 1)")
            && err.contains("--max-seq-len up to 512"),
        "{err}"
    );
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "--similarity", "short"]);
    let out = run(c, b"");
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("tokens"));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.starts_with("cosine similarity (1 sentence)\n"),
        "{table}"
    );
}

/// A model whose position table is shorter than the default 256 runs without --max-seq-len
/// (the tiny model has 8 positions); a weights file with more layers than the config fails.
#[test]
fn default_max_seq_len_fits_the_model_and_extra_layers_fail() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m");
    let mut shapes = tiny_shapes(&[]);
    shapes.push(("encoder.layer.1.output.dense.bias".into(), vec![4]));
    write_model_dir(&m, TINY_CONFIG, &safetensors_bytes(&shapes));
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "hello"])
        .env("FUSED_GEMM_MODEL_DIR", &m);
    let out = run(c, b"");
    assert_fails(&out, &["2 encoder layers", "num_hidden_layers is 1"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("--max-seq-len"));
}

#[test]
fn config_values_out_of_range_fail_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m");
    let config = TINY_CONFIG.replace(
        "\"num_hidden_layers\": 1",
        "\"num_hidden_layers\": 1000000000000000000",
    );
    write_model_dir(&m, &config, &safetensors_bytes(&tiny_shapes(&[])));
    let mut c = bin();
    c.args(["embed", "--device", "cpu", "hello", "--max-seq-len", "8"])
        .env("FUSED_GEMM_MODEL_DIR", &m);
    assert_fails(&run(c, b""), &["config.json", "num_hidden_layers"]);
}

/// `-o FILE` creates the file as any program does, 0666 minus the umask (not the 0600 of a
/// temporary file).
#[cfg(unix)]
#[test]
fn output_file_mode_follows_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    for (umask, want) in [("022", 0o644), ("027", 0o640)] {
        let out = dir.path().join(format!("e{umask}.jsonl"));
        let mut c = Command::new("sh");
        c.args(["-c", &format!("umask {umask} && exec \"$0\" \"$@\"")])
            .arg(env!("CARGO_BIN_EXE_fused-gemm"))
            .args(["embed", "--device", "cpu", "hello", "-o"])
            .arg(&out)
            .env("FUSED_GEMM_MODEL_DIR", model_dir());
        assert!(run(c, b"").status.success());
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, want, "umask {umask}: mode {mode:o}");
        assert_eq!(parse_jsonl(&std::fs::read(&out).unwrap()).len(), 1);
    }
}
