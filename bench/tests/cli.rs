//! The binary's behaviour that needs no GPU: listing, option errors, and a clean exit (status 2,
//! a message, no panic) when there is no CUDA driver.

use std::process::Command;

/// Runs the binary cargo built beside this test (or `FUSED_GEMM_BENCH_BIN`); `None`, with a
/// message, where it is not there (a test binary copied to another machine by the GPU bundle).
fn bench(args: &[&str]) -> Option<std::process::Output> {
    let bin = std::env::var_os("FUSED_GEMM_BENCH_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_fused-gemm-bench").into());
    if !bin.exists() {
        eprintln!("skipping: {} not found", bin.display());
        return None;
    }
    Some(
        Command::new(bin)
            .args(args)
            .output()
            .expect("the benchmark binary starts"),
    )
}

#[test]
fn list_needs_no_gpu() {
    let Some(out) = bench(&["list"]) else {
        return;
    };
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("llama3-8b.gate-up.m16384") && text.contains("swiglu"));
    assert!(text.contains("anchor.bert-ffn-up"));
}

#[test]
fn bad_options_exit_2_with_a_message() {
    let Some(out) = bench(&["--shapes", "no-such-model"]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("no-such-model") && !err.contains("panicked"),
        "{err}"
    );
    let out = bench(&["--epilogues", "softmax"]).expect("present a moment ago");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn without_a_driver_the_run_stops_cleanly() {
    if fused_gemm::host::gpu::driver_present() {
        println!("a CUDA driver is present; the no-GPU exit is not observable here");
        return;
    }
    for args in [&["--quick"][..], &["timing"][..]] {
        let Some(out) = bench(args) else {
            return;
        };
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("no CUDA driver found"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
