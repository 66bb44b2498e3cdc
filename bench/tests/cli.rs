//! The binary's behaviour that needs no GPU: listing, option errors, the merged report from
//! recorded results, and a clean exit (status 2, a message, no panic) without a CUDA driver.

use std::process::{Command, Output};

/// Runs the binary cargo built beside this test (or `FUSED_GEMM_BENCH_BIN`).
fn bench(args: &[&str]) -> Output {
    let bin = std::env::var_os("FUSED_GEMM_BENCH_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_fused-gemm-bench").into());
    assert!(bin.exists(), "{} not found", bin.display());
    Command::new(bin)
        .args(args)
        .output()
        .expect("the benchmark binary starts")
}

#[test]
fn list_needs_no_gpu_and_gives_the_rows_as_json() {
    let out = bench(&["list"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("llama3-8b.gate-up.swiglu") && text.contains("minilm.b256.ffn-up"));
    let out = bench(&["list", "--json", "--rows", "bert-base.ffn-up,64x17x4095"]);
    assert!(out.status.success());
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "bert-base.ffn-up.gemm",
            "bert-base.ffn-up.bias-gelu",
            "bert-base.ffn-up.bias-gelu-tanh",
            "64x17x4095.gemm"
        ]
    );
    assert_eq!(rows[1]["epilogue"], "bias-gelu");
    assert_eq!(
        (rows[3]["m"].as_u64(), rows[3]["k"].as_u64()),
        (Some(64), Some(4095))
    );
}

#[test]
fn bad_options_exit_2_with_a_message() {
    let out = bench(&["list", "--rows", "no-such-model"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("no-such-model") && !err.contains("panicked"),
        "{err}"
    );
    let out = bench(&[
        "run",
        "--json",
        "x.json",
        "--rows",
        "64x64x64",
        "--epilogues",
        "softmax",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn without_a_driver_the_run_stops_cleanly() {
    if fused_gemm::host::gpu::driver_present() {
        println!("a CUDA driver is present; the no-GPU exit is not observable here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ours.json");
    let json = json.to_str().unwrap();
    for args in [&["run", "--quick", "--json", json][..], &["timing"][..]] {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("no CUDA driver found"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn report_without_our_results_writes_nothing_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "report",
        "--ours",
        "/no/such/ours.json",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("/no/such/ours.json") && err.contains("no table written"),
        "{err}"
    );
    assert!(!dir.path().join("compare.md").exists());
}
