//! GPU tests of the first kernels (axpy, naive GEMM) against CPU references, each element and
//! the whole (`assert_close`). Without a GPU each test prints why it is skipped and passes
//! (fails with `FUSED_GEMM_REQUIRE_GPU=1`).

use fused_gemm::host::reference::{gemm, max_rel_error};
use fused_gemm::host::testing::{POISON_F32, assert_close, gpu_or_skip, rng, uniform};
use fused_gemm::ops;

#[test]
fn axpy_matches_cpu_at_awkward_lengths() {
    let Some(gpu) = gpu_or_skip("axpy") else {
        return;
    };
    let mut r = rng("axpy");
    // Launch limits: element counts 1, 1024, 1025 and 2^26+1 need correct grids and launch
    // without error.
    for n in [1usize, 17, 1024, 1025, (1 << 26) + 1] {
        let x = uniform(&mut r, n);
        let y = uniform(&mut r, n);
        let alpha = 0.75f32;
        let dx = gpu.upload(&x).unwrap();
        let mut dy = gpu.upload(&y).unwrap();
        ops::axpy(&gpu, alpha, &dx, &mut dy).unwrap();
        let got = gpu.download(&dy).unwrap();
        let want: Vec<f64> = x
            .iter()
            .zip(&y)
            .map(|(&x, &y)| alpha as f64 * x as f64 + y as f64)
            .collect();
        let got64: Vec<f64> = got.iter().map(|&v| v as f64).collect();
        let err = max_rel_error(&got64, &want, 1e-3);
        println!("axpy n={n}: max rel error {err:.2e}");
        assert!(err < 1e-6, "axpy n={n}: max rel error {err}");
        assert_close(&got64, &want, 1e-6, &format!("axpy n={n}"));
    }
}

#[test]
fn axpy_rejects_mismatched_lengths() {
    let Some(gpu) = gpu_or_skip("axpy_rejects") else {
        return;
    };
    let dx = gpu.upload(&[1.0f32; 4]).unwrap();
    let mut dy = gpu.upload(&[1.0f32; 5]).unwrap();
    let err = ops::axpy(&gpu, 1.0, &dx, &mut dy).unwrap_err();
    assert!(err.to_string().contains("`x`"), "{err}");
}

#[test]
fn naive_gemm_matches_f64_reference() {
    let Some(gpu) = gpu_or_skip("naive_gemm") else {
        return;
    };
    let mut r = rng("naive_gemm");
    for (m, n, k) in [(1, 1, 1), (17, 33, 65), (127, 129, 63), (256, 17, 300)] {
        let a = uniform(&mut r, m * k);
        let b = uniform(&mut r, k * n);
        let da = gpu.upload(&a).unwrap();
        let db = gpu.upload(&b).unwrap();
        let mut dc = gpu.upload(&vec![POISON_F32; m * n]).unwrap();
        ops::gemm_naive_f32(&gpu, m, n, k, &da, &db, &mut dc).unwrap();
        let got: Vec<f64> = gpu
            .download(&dc)
            .unwrap()
            .iter()
            .map(|&v| v as f64)
            .collect();
        let a64: Vec<f64> = a.iter().map(|&v| v as f64).collect();
        let b64: Vec<f64> = b.iter().map(|&v| v as f64).collect();
        let want = gemm(m, n, k, &a64, &b64, false);
        assert_close(&got, &want, 1e-5, &format!("naive gemm {m}x{n}x{k}"));
    }
}

#[test]
fn naive_gemm_rejects_bad_shapes() {
    let Some(gpu) = gpu_or_skip("naive_gemm_rejects") else {
        return;
    };
    let a = gpu.upload(&[0.5f32; 6]).unwrap();
    let b = gpu.upload(&[0.5f32; 6]).unwrap();
    let mut c = gpu.upload(&[0.0f32; 4]).unwrap();
    assert!(ops::gemm_naive_f32(&gpu, 2, 2, 3, &a, &b, &mut c).is_ok());
    let e = ops::gemm_naive_f32(&gpu, 2, 3, 3, &a, &b, &mut c).unwrap_err();
    assert!(
        e.to_string().contains("`b`") || e.to_string().contains("`c`"),
        "{e}"
    );
    let e = ops::gemm_naive_f32(&gpu, 0, 2, 3, &a, &b, &mut c).unwrap_err();
    assert!(e.to_string().contains("`m`"), "{e}");
}
