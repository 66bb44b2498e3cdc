//! GPU tests of the unfused row kernels (`fused_gemm::rowwise`) against f64 references on
//! fresh random inputs, for f32, bf16 and f16 storage. Outputs are poisoned (NaN) before each
//! launch, padding columns between N and the leading dimension must stay poisoned, and sizes
//! are awkward (M = 1, N = 1, 3, 17, 384, 4097, leading dimensions > N, operands one element
//! into their buffers). Every comparison checks the relative Frobenius error and each element
//! (`assert_close`). The fault cases of `docs/fault-cases.md` that reach these kernels
//! (misaligned operands, constant and extreme rows, rows narrower than the block, f16 squares
//! beyond f16's range, SwiGLU at odd widths in the interleaved form) have tests of their own.
//! Without a GPU every test prints why it is skipped and passes (fails with
//! `FUSED_GEMM_REQUIRE_GPU=1`).

use cudarc::driver::{CudaSlice, DevicePtr};
use fused_gemm::device::math::GELU_ERF_MAX_ERROR;
use fused_gemm::host::cudarc;
use fused_gemm::host::testing::{Tolerance, assert_close, gpu_or_skip, rng, uniform};
use fused_gemm::host::{Error, Gpu};
use fused_gemm::rowwise::{self, Activation, RowElement};
use half::{bf16, f16};
use rand::rngs::StdRng;

// ---- f64 references ---------------------------------------------------------------------------

fn act_ref(act: Activation, x: f64) -> f64 {
    match act {
        Activation::None => x,
        Activation::Relu => x.max(0.0),
        Activation::Gelu => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        Activation::GeluTanh => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
        }
        Activation::Silu => x / (1.0 + (-x).exp()),
    }
}

/// LayerNorm of one row (biased variance, two-pass in f64).
fn layer_norm_ref(s: &[f64], gamma: &[f64], beta: &[f64], eps: f64) -> Vec<f64> {
    let n = s.len() as f64;
    let mean = s.iter().sum::<f64>() / n;
    let var = s.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let rstd = 1.0 / (var + eps).sqrt();
    s.iter()
        .enumerate()
        .map(|(c, v)| (v - mean) * rstd * gamma[c] + beta[c])
        .collect()
}

fn rms_rstd_ref(x: &[f64], eps: f64) -> f64 {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    1.0 / (ms + eps).sqrt()
}

// ---- helpers ----------------------------------------------------------------------------------

/// The tolerance each storage type must meet against the f64 reference (relative Frobenius
/// error, and each element within `tol·(rms + |ref|)`).
fn tol<T: RowElement>() -> f64 {
    match T::DTYPE.name() {
        "f32" => 1e-5,
        "bf16" => 1e-2,
        _ => 2e-3,
    }
}

/// [`tol`] for `act`'s output, which for erf-GELU also carries that function's own absolute
/// error.
fn act_tol<T: RowElement>(act: Activation) -> Tolerance {
    let t = Tolerance::rel(tol::<T>());
    match act {
        Activation::Gelu => t.plus_absolute_error(GELU_ERF_MAX_ERROR as f64),
        _ => t,
    }
}

/// Rounds `v` to `T`, uploads it, and returns the buffer with the exact f64 values it holds.
fn upload<T: RowElement>(gpu: &Gpu, v: &[f32]) -> (CudaSlice<T>, Vec<f64>) {
    let t: Vec<T> = v.iter().map(|&x| T::from_f32(x)).collect();
    let exact = t.iter().map(|x| x.to_f32() as f64).collect();
    (gpu.upload(&t).unwrap(), exact)
}

fn poisoned<T: RowElement>(gpu: &Gpu, len: usize) -> CudaSlice<T> {
    gpu.upload(&vec![T::from_f32(f32::NAN); len]).unwrap()
}

fn download<T: RowElement>(gpu: &Gpu, b: &CudaSlice<T>) -> Vec<f64> {
    gpu.download(b)
        .unwrap()
        .iter()
        .map(|x| x.to_f32() as f64)
        .collect()
}

/// Splits an M×ld buffer into the M×N values (row-major, packed) and asserts the padding
/// columns N..ld are still poisoned (nothing was written outside the matrix).
fn unpad(buf: &[f64], m: usize, n: usize, ld: usize, what: &str) -> Vec<f64> {
    let mut out = Vec::with_capacity(m * n);
    for r in 0..m {
        out.extend_from_slice(&buf[r * ld..r * ld + n]);
        if r + 1 < m {
            assert!(
                buf[r * ld + n..(r + 1) * ld].iter().all(|v| v.is_nan()),
                "{what}: row {r} wrote past column N = {n}"
            );
        }
    }
    assert!(
        buf[(m - 1) * ld + n..].iter().all(|v| v.is_nan()),
        "{what}: wrote past the last row"
    );
    out
}

fn random<T: RowElement>(gpu: &Gpu, r: &mut StdRng, len: usize) -> (CudaSlice<T>, Vec<f64>) {
    upload::<T>(gpu, &uniform(r, len))
}

/// (M, N, leading dimension) shapes with awkward sizes.
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 3, 3),
    (7, 17, 17),
    (5, 17, 24),
    (33, 384, 384),
    (3, 768, 776),
    (2, 4097, 4097),
    (4, 4097, 4104),
];

// ---- bias + activation --------------------------------------------------------------------------

fn bias_act_case<T: RowElement>(gpu: &Gpu, r: &mut StdRng) {
    let dt = T::DTYPE.name();
    for &(m, n, ld) in SHAPES {
        for act in Activation::ALL {
            for with_bias in [true, false] {
                let (x, x64) = random::<T>(gpu, r, (m - 1) * ld + n);
                let (b, b64) = upload::<T>(gpu, &uniform(r, n));
                let mut y = poisoned::<T>(gpu, (m - 1) * ld + n);
                let bias = with_bias.then_some(&b as &dyn DevicePtr<T>);
                rowwise::bias_act(gpu, m, n, &x, ld, bias, act, &mut y, ld).unwrap();
                let what = format!(
                    "bias_act {dt} {} {m}×{n} ld {ld} bias {with_bias}",
                    act.name()
                );
                let got = unpad(&download(gpu, &y), m, n, ld, &what);
                let want: Vec<f64> = (0..m * n)
                    .map(|i| {
                        let (row, c) = (i / n, i % n);
                        let bias = if with_bias { b64[c] } else { 0.0 };
                        act_ref(act, x64[row * ld + c] + bias)
                    })
                    .collect();
                assert_close(&got, &want, act_tol::<T>(act), &what);
            }
        }
        // In place, GELU (erf) with a bias.
        let (mut x, x64) = random::<T>(gpu, r, (m - 1) * ld + n);
        let (b, b64) = upload::<T>(gpu, &uniform(r, n));
        rowwise::bias_act_in_place(gpu, m, n, &mut x, ld, Some(&b), Activation::Gelu).unwrap();
        let got = download(gpu, &x);
        let mut want = x64.clone();
        for row in 0..m {
            for c in 0..n {
                want[row * ld + c] = act_ref(Activation::Gelu, x64[row * ld + c] + b64[c]);
            }
        }
        assert_close(
            &got,
            &want,
            act_tol::<T>(Activation::Gelu),
            &format!("bias_act in place {dt} {m}×{n} ld {ld}"),
        );
    }
}

#[test]
fn bias_act_matches_f64_for_every_activation_dtype_and_awkward_shape() {
    let Some(gpu) = gpu_or_skip("bias_act") else {
        return;
    };
    let mut r = rng("bias_act");
    bias_act_case::<f32>(&gpu, &mut r);
    bias_act_case::<bf16>(&gpu, &mut r);
    bias_act_case::<f16>(&gpu, &mut r);
}

// Misaligned operands: f16, M = 1, N = 3073, bias and x one element into their buffers (2-byte
// aligned): correct results through the scalar path, never a fault. Also rows misaligned by an
// odd leading dimension.
#[test]
fn bias_act_with_misaligned_operands_is_correct() {
    let Some(gpu) = gpu_or_skip("bias_act_misaligned") else {
        return;
    };
    let mut r = rng("bias_act_misaligned");
    for (m, n) in [(1usize, 3073usize), (3, 3073)] {
        let (xbuf, x64) = random::<f16>(&gpu, &mut r, m * n + 1);
        let (bbuf, b64) = random::<f16>(&gpu, &mut r, n + 1);
        let mut ybuf = poisoned::<f16>(&gpu, m * n + 1);
        let x = xbuf.slice(1..);
        let b = bbuf.slice(1..);
        let mut y = ybuf.slice_mut(1..);
        rowwise::bias_act(&gpu, m, n, &x, n, Some(&b), Activation::Relu, &mut y, n).unwrap();
        let got = download(&gpu, &ybuf);
        assert!(got[0].is_nan(), "wrote before the output view");
        let want: Vec<f64> = (0..m * n)
            .map(|i| act_ref(Activation::Relu, x64[1 + i] + b64[1 + i % n]))
            .collect();
        assert_close(
            &got[1..],
            &want,
            tol::<f16>(),
            &format!("misaligned f16 bias_act {m}×{n}"),
        );
    }
}

// ---- SwiGLU -----------------------------------------------------------------------------------

fn swiglu_case<T: RowElement>(gpu: &Gpu, r: &mut StdRng) {
    let dt = T::DTYPE.name();
    for &(m, n_in, ldx, y_offset) in &[
        (1usize, 2usize, 2usize, 0usize),
        (1, 6, 6, 1),
        (5, 34, 40, 0),
        (64, 768, 768, 0),
        (3, 3074, 3074, 1),
        (2, 8194, 8200, 0),
    ] {
        let n_out = n_in / 2;
        let ldy = n_out;
        let (x, x64) = random::<T>(gpu, r, (m - 1) * ldx + n_in);
        let mut ybuf = poisoned::<T>(gpu, y_offset + (m - 1) * ldy + n_out);
        let mut y = ybuf.slice_mut(y_offset..);
        rowwise::swiglu(gpu, m, n_in, &x, ldx, &mut y, ldy).unwrap();
        let what = format!("swiglu {dt} {m}×{n_in} ldx {ldx} y+{y_offset}");
        let got = download(gpu, &ybuf);
        assert!(
            got[..y_offset].iter().all(|v| v.is_nan()),
            "{what}: wrote before y"
        );
        let got = unpad(&got[y_offset..], m, n_out, ldy, &what);
        let want: Vec<f64> = (0..m * n_out)
            .map(|i| {
                let (row, j) = (i / n_out, i % n_out);
                let g = x64[row * ldx + 2 * j];
                let u = x64[row * ldx + 2 * j + 1];
                act_ref(Activation::Silu, g) * u
            })
            .collect();
        assert_close(&got, &want, tol::<T>(), &what);
    }
}

#[test]
fn swiglu_matches_f64_on_interleaved_columns() {
    let Some(gpu) = gpu_or_skip("swiglu") else {
        return;
    };
    let mut r = rng("swiglu");
    swiglu_case::<f32>(&gpu, &mut r);
    swiglu_case::<bf16>(&gpu, &mut r);
    swiglu_case::<f16>(&gpu, &mut r);
}

// SwiGLU at odd widths, in the interleaved layout: gate = [0, 1, −1], up = [2, 2, 2] →
// [0, 1.4621172, −0.5378828]; widths d = 3, 1537, 3420 put output rows at r·d, misaligned for
// vector stores.
#[test]
fn swiglu_odd_widths_give_known_values() {
    let Some(gpu) = gpu_or_skip("swiglu_odd_widths") else {
        return;
    };
    let want = [0.0, 1.462_117_2, -0.537_882_8];
    for d in [3usize, 1537, 3420] {
        let m = 3;
        let mut x = Vec::with_capacity(m * 2 * d);
        for _ in 0..m {
            for j in 0..d {
                x.push([0.0f32, 1.0, -1.0][j % 3]);
                x.push(2.0);
            }
        }
        let (xd, _) = upload::<f16>(&gpu, &x);
        let mut y = poisoned::<f16>(&gpu, m * d);
        rowwise::swiglu(&gpu, m, 2 * d, &xd, 2 * d, &mut y, d).unwrap();
        let got = download(&gpu, &y);
        for (i, g) in got.iter().enumerate() {
            let w = want[(i % d) % 3];
            assert!(
                (g - w).abs() <= 1e-3 * w.abs().max(1.0),
                "d = {d}, element {i}: {g} vs {w}"
            );
        }
        println!("swiglu f16 d = {d}: known values reproduced");
    }
}

// GELU variant at the given points, in f32: erf-GELU ("gelu") of x = −3, −1.5, 1, 3 is
// −0.0040497, −0.1002108, 0.8413447, 2.9959503, the tanh approximation ("gelu_new",
// "gelu_pytorch_tanh") −0.0036374, −0.1004284, 0.8411920, 2.9963626; erf-GELU to 5e-6 (its
// 4e-6 contract plus the values' rounding), tanh-GELU to 1e-6.
#[test]
fn gelu_variants_at_the_given_points_in_f32() {
    let Some(gpu) = gpu_or_skip("gelu_points") else {
        return;
    };
    const X: [f32; 4] = [-3.0, -1.5, 1.0, 3.0];
    for (act, want, tol) in [
        (
            Activation::Gelu,
            [-0.0040497, -0.1002108, 0.8413447, 2.9959503],
            5e-6,
        ),
        (
            Activation::GeluTanh,
            [-0.0036374, -0.1004284, 0.8411920, 2.9963626],
            1e-6,
        ),
    ] {
        let (x, _) = upload::<f32>(&gpu, &X);
        let mut y = poisoned::<f32>(&gpu, 4);
        rowwise::bias_act(&gpu, 1, 4, &x, 4, None, act, &mut y, 4).unwrap();
        let got = download(&gpu, &y);
        println!("{} at {X:?}: {got:?}", act.name());
        for i in 0..4 {
            assert!(
                (got[i] - want[i]).abs() < tol,
                "{}({}) = {}, want {}",
                act.name(),
                X[i],
                got[i],
                want[i]
            );
        }
    }
}

// ---- LayerNorm ----------------------------------------------------------------------------------

fn layer_norm_case<T: RowElement>(gpu: &Gpu, r: &mut StdRng) {
    let dt = T::DTYPE.name();
    let eps = 1e-5f32;
    for &(m, n, ld) in SHAPES.iter().chain(&[(64, 1025, 1025), (9, 4096, 4096)]) {
        for (with_bias, with_res, in_place) in [
            (true, true, false),
            (false, false, false),
            (true, false, true),
            (false, true, true),
        ] {
            let len = (m - 1) * ld + n;
            let (mut x, x64) = random::<T>(gpu, r, len);
            let (b, b64) = random::<T>(gpu, r, n);
            let (res, res64) = random::<T>(gpu, r, len);
            let gamma: Vec<f32> = uniform(r, n).iter().map(|v| 1.0 + 0.5 * v).collect();
            let (g, g64) = upload::<T>(gpu, &gamma);
            let (be, be64) = random::<T>(gpu, r, n);
            let bias = with_bias.then_some(&b as &dyn DevicePtr<T>);
            let residual = with_res.then_some((&res as &dyn DevicePtr<T>, ld));
            let what = format!(
                "layer_norm {dt} {m}×{n} ld {ld} bias {with_bias} residual {with_res} in place {in_place}"
            );
            let got = if in_place {
                rowwise::layer_norm_in_place(gpu, m, n, &mut x, ld, bias, residual, &g, &be, eps)
                    .unwrap();
                let all = download(gpu, &x);
                (0..m)
                    .flat_map(|row| all[row * ld..row * ld + n].to_vec())
                    .collect()
            } else {
                let mut y = poisoned::<T>(gpu, len);
                rowwise::layer_norm(gpu, m, n, &x, ld, bias, residual, &g, &be, eps, &mut y, ld)
                    .unwrap();
                unpad(&download(gpu, &y), m, n, ld, &what)
            };
            let mut want = Vec::with_capacity(m * n);
            for row in 0..m {
                let s: Vec<f64> = (0..n)
                    .map(|c| {
                        x64[row * ld + c]
                            + if with_bias { b64[c] } else { 0.0 }
                            + if with_res { res64[row * ld + c] } else { 0.0 }
                    })
                    .collect();
                want.extend(layer_norm_ref(&s, &g64, &be64, eps as f64));
            }
            assert_close(&got, &want, tol::<T>(), &what);
        }
    }
}

#[test]
fn layer_norm_matches_f64_with_bias_residual_and_in_place() {
    let Some(gpu) = gpu_or_skip("layer_norm") else {
        return;
    };
    let mut r = rng("layer_norm");
    layer_norm_case::<f32>(&gpu, &mut r);
    layer_norm_case::<bf16>(&gpu, &mut r);
    layer_norm_case::<f16>(&gpu, &mut r);
}

/// Runs LayerNorm (γ random, β random, no bias or residual) over `rows` and returns the output.
fn layer_norm_rows<T: RowElement>(
    gpu: &Gpu,
    r: &mut StdRng,
    rows: &[Vec<f32>],
    eps: f32,
) -> (Vec<f64>, Vec<f64>) {
    let (m, n) = (rows.len(), rows[0].len());
    let flat: Vec<f32> = rows.concat();
    let (x, _) = upload::<T>(gpu, &flat);
    let (g, _) = upload::<T>(
        gpu,
        &uniform(r, n)
            .iter()
            .map(|v| 1.0 + 0.5 * v)
            .collect::<Vec<_>>(),
    );
    let (b, b64) = random::<T>(gpu, r, n);
    let mut y = poisoned::<T>(gpu, m * n);
    rowwise::layer_norm(gpu, m, n, &x, n, None, None, &g, &b, eps, &mut y, n).unwrap();
    (download(gpu, &y), b64)
}

// Constant and extreme rows: 384 × 1234.0 → exactly β; zeros → β; 8.5e37 (a naive f32 sum
// overflows) → β; one NaN in one row → only that row is NaN. N = 384 runs one warp per row,
// N = 4096 (f32) several warps per row, so both merge paths are exercised.
#[test]
fn layer_norm_constant_extreme_and_nan_rows() {
    let Some(gpu) = gpu_or_skip("layer_norm_constant_rows") else {
        return;
    };
    let mut r = rng("layer_norm_constant_rows");
    fn check<T: RowElement>(gpu: &Gpu, r: &mut StdRng, n: usize, big: f32) {
        let mut nan_row = uniform(r, n);
        nan_row[n / 3] = f32::NAN;
        let rows = vec![
            vec![1234.0f32; n],
            vec![0.0; n],
            vec![big; n],
            vec![-big; n],
            nan_row,
            uniform(r, n),
        ];
        let (y, beta) = layer_norm_rows::<T>(gpu, r, &rows, 1e-12);
        let dt = T::DTYPE.name();
        for row in 0..4 {
            for c in 0..n {
                assert_eq!(
                    y[row * n + c],
                    beta[c],
                    "{dt} N = {n}, constant row {row}, column {c}: not exactly beta"
                );
            }
        }
        assert!(
            y[4 * n..5 * n].iter().all(|v| v.is_nan()),
            "{dt}: NaN row not all NaN"
        );
        assert!(
            y[5 * n..].iter().all(|v| v.is_finite()),
            "{dt}: NaN leaked into the next row"
        );
        assert!(
            y[..4 * n].iter().all(|v| v.is_finite()),
            "{dt}: NaN leaked into earlier rows"
        );
        println!("{dt} N = {n}: constant rows give exactly beta, NaN stays in its row");
    }
    for n in [384, 4096] {
        check::<f32>(&gpu, &mut r, n, 8.5e37);
        check::<bf16>(&gpu, &mut r, n, 8.5e37);
        // f16 cannot hold 8.5e37; its largest finite value stands in.
        check::<f16>(&gpu, &mut r, n, 65504.0);
    }
}

// Rows narrower than the block: N = 3, x = [1, 2, 3], γ = 1, β = 0, ε = 1e-5 →
// [−1.2247357, 0, 1.2247357]; padded lanes must not count. Also N = 384 with x_i = i, one row.
#[test]
fn layer_norm_narrow_rows_ignore_padding() {
    let Some(gpu) = gpu_or_skip("layer_norm_narrow_rows") else {
        return;
    };
    let (x, _) = upload::<f32>(&gpu, &[1.0, 2.0, 3.0]);
    let (g, _) = upload::<f32>(&gpu, &[1.0; 3]);
    let (b, _) = upload::<f32>(&gpu, &[0.0; 3]);
    let mut y = poisoned::<f32>(&gpu, 3);
    rowwise::layer_norm(&gpu, 1, 3, &x, 3, None, None, &g, &b, 1e-5, &mut y, 3).unwrap();
    let got = download(&gpu, &y);
    let want = [-1.224_735_7, 0.0, 1.224_735_7];
    for c in 0..3 {
        assert!(
            (got[c] - want[c]).abs() < 1e-6,
            "N = 3: {got:?} vs {want:?}"
        );
    }
    println!("layer_norm N = 3: {got:?}");

    let n = 384;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let (x, x64) = upload::<f32>(&gpu, &xs);
    let (g, g64) = upload::<f32>(&gpu, &vec![1.0; n]);
    let (b, b64) = upload::<f32>(&gpu, &vec![0.0; n]);
    let mut y = poisoned::<f32>(&gpu, n);
    rowwise::layer_norm(&gpu, 1, n, &x, n, None, None, &g, &b, 1e-5, &mut y, n).unwrap();
    assert_close(
        &download(&gpu, &y),
        &layer_norm_ref(&x64, &g64, &b64, 1e-5),
        1e-6,
        "layer_norm N = 384, x_i = i",
    );
}

// f16 squares beyond f16's range, LayerNorm: an f16 row alternating ±300 → ±1.0 (300² = 90000
// overflows f16: the statistics accumulate in f32).
#[test]
fn layer_norm_f16_alternating_300_gives_unit_values() {
    let Some(gpu) = gpu_or_skip("layer_norm_f16_300") else {
        return;
    };
    let n = 384;
    let xs: Vec<f32> = (0..n)
        .map(|i| if i % 2 == 0 { 300.0 } else { -300.0 })
        .collect();
    let (x, _) = upload::<f16>(&gpu, &xs);
    let (g, _) = upload::<f16>(&gpu, &vec![1.0; n]);
    let (b, _) = upload::<f16>(&gpu, &vec![0.0; n]);
    let mut y = poisoned::<f16>(&gpu, n);
    rowwise::layer_norm(&gpu, 1, n, &x, n, None, None, &g, &b, 1e-5, &mut y, n).unwrap();
    let got = download(&gpu, &y);
    for (i, v) in got.iter().enumerate() {
        let want = if i % 2 == 0 { 1.0 } else { -1.0 };
        assert_eq!(*v, want, "element {i}");
    }
}

// Rows of 384 ones (and 4096, several warps per row): sum 384 and sum of squares 384, the
// per-warp partial sums and sums of squares meeting in shared memory. LayerNorm gives exactly
// β; the inverse RMS is 1/√(1 + ε); RMSNorm gives γ/√(1 + ε).
#[test]
fn rows_of_ones_reduce_to_their_exact_statistics() {
    let Some(gpu) = gpu_or_skip("rows_of_ones") else {
        return;
    };
    let mut r = rng("rows_of_ones");
    let eps = 1e-6f32;
    let rstd = 1.0 / (1.0 + eps as f64).sqrt();
    for n in [384usize, 4096] {
        let m = 2;
        let (x, _) = upload::<f32>(&gpu, &vec![1.0; m * n]);
        let (g, g64) = random::<f32>(&gpu, &mut r, n);
        let (b, b64) = random::<f32>(&gpu, &mut r, n);
        let mut y = poisoned::<f32>(&gpu, m * n);
        rowwise::layer_norm(&gpu, m, n, &x, n, None, None, &g, &b, eps, &mut y, n).unwrap();
        let got = download(&gpu, &y);
        for row in 0..m {
            assert_eq!(
                &got[row * n..(row + 1) * n],
                &b64[..],
                "N = {n}: LayerNorm of ones, row {row}, is not exactly beta"
            );
        }
        let mut rs = gpu.upload(&vec![f32::NAN; m]).unwrap();
        rowwise::rms_scale(&gpu, m, n, &x, n, eps, &mut rs).unwrap();
        let got: Vec<f64> = gpu
            .download(&rs)
            .unwrap()
            .iter()
            .map(|&v| v as f64)
            .collect();
        assert_close(
            &got,
            &vec![rstd; m],
            1e-6,
            &format!("rms_scale of ones, N = {n}"),
        );
        let mut y = poisoned::<f32>(&gpu, m * n);
        rowwise::rms_norm(&gpu, m, n, &x, n, &g, eps, &mut y, n).unwrap();
        let want: Vec<f64> = (0..m * n).map(|i| g64[i % n] * rstd).collect();
        assert_close(
            &download(&gpu, &y),
            &want,
            1e-6,
            &format!("rms_norm of ones, N = {n}"),
        );
    }
}

// ---- RMSNorm ----------------------------------------------------------------------------------

fn rms_case<T: RowElement>(gpu: &Gpu, r: &mut StdRng) {
    let dt = T::DTYPE.name();
    let eps = 1e-6f32;
    for &(m, n, ld) in SHAPES.iter().chain(&[(17, 4096, 4096), (2, 8192, 8200)]) {
        let len = (m - 1) * ld + n;
        let (mut x, x64) = random::<T>(gpu, r, len);
        let gamma: Vec<f32> = uniform(r, n).iter().map(|v| 1.0 + 0.5 * v).collect();
        let (g, g64) = upload::<T>(gpu, &gamma);
        let rows: Vec<Vec<f64>> = (0..m)
            .map(|row| x64[row * ld..row * ld + n].to_vec())
            .collect();
        let rstd: Vec<f64> = rows
            .iter()
            .map(|row| rms_rstd_ref(row, eps as f64))
            .collect();
        let mut want = Vec::with_capacity(m * n);
        for (row, r) in rows.iter().zip(&rstd) {
            want.extend(row.iter().zip(&g64).map(|(v, g)| v * r * g));
        }

        let mut y = poisoned::<T>(gpu, len);
        rowwise::rms_norm(gpu, m, n, &x, ld, &g, eps, &mut y, ld).unwrap();
        let what = format!("rms_norm {dt} {m}×{n} ld {ld}");
        assert_close(
            &unpad(&download(gpu, &y), m, n, ld, &what),
            &want,
            tol::<T>(),
            &what,
        );

        let mut rs = gpu.upload(&vec![f32::NAN; m + 1]).unwrap();
        rowwise::rms_scale(gpu, m, n, &x, ld, eps, &mut rs).unwrap();
        let got: Vec<f64> = gpu
            .download(&rs)
            .unwrap()
            .iter()
            .map(|&v| v as f64)
            .collect();
        assert!(got[m].is_nan(), "rms_scale wrote past row M");
        // The inverse RMS is computed in f32 from exact inputs: f32 accuracy whatever T is.
        assert_close(
            &got[..m],
            &rstd,
            1e-5,
            &format!("rms_scale {dt} {m}×{n} ld {ld}"),
        );

        rowwise::rms_norm_in_place(gpu, m, n, &mut x, ld, &g, eps).unwrap();
        let all = download(gpu, &x);
        let got: Vec<f64> = (0..m)
            .flat_map(|row| all[row * ld..row * ld + n].to_vec())
            .collect();
        assert_close(
            &got,
            &want,
            tol::<T>(),
            &format!("rms_norm in place {dt} {m}×{n}"),
        );
    }
}

#[test]
fn rms_norm_and_rms_scale_match_f64() {
    let Some(gpu) = gpu_or_skip("rms_norm") else {
        return;
    };
    let mut r = rng("rms_norm");
    rms_case::<f32>(&gpu, &mut r);
    rms_case::<bf16>(&gpu, &mut r);
    rms_case::<f16>(&gpu, &mut r);
}

// f16 squares beyond f16's range, RMSNorm: f16 row of 384 × 300.0, weight 1, eps 1e-6 → every
// output 1.0 (300² overflows f16: squares accumulate in f32). Also through the multi-warp path
// (N = 4096).
#[test]
fn rms_norm_f16_rows_of_300_do_not_overflow() {
    let Some(gpu) = gpu_or_skip("rms_norm_f16_300") else {
        return;
    };
    for n in [384usize, 4096] {
        let m = 2;
        let (x, _) = upload::<f16>(&gpu, &vec![300.0; m * n]);
        let (g, _) = upload::<f16>(&gpu, &vec![1.0; n]);
        let mut y = poisoned::<f16>(&gpu, m * n);
        rowwise::rms_norm(&gpu, m, n, &x, n, &g, 1e-6, &mut y, n).unwrap();
        let got = download(&gpu, &y);
        assert!(got.iter().all(|&v| v == 1.0), "N = {n}: {:?}", &got[..4]);
        let mut rs = gpu.upload(&vec![f32::NAN; m]).unwrap();
        rowwise::rms_scale(&gpu, m, n, &x, n, 1e-6, &mut rs).unwrap();
        for v in gpu.download(&rs).unwrap() {
            assert!(
                (v as f64 * 300.0 - 1.0).abs() < 1e-6,
                "N = {n}: 1/rms = {v}"
            );
        }
        println!("rms_norm f16 N = {n} of 300.0: all outputs 1.0");
    }
}

// ---- validation -------------------------------------------------------------------------------

fn arg_of(e: Error) -> &'static str {
    match e {
        Error::InvalidArgument { arg, .. } => arg,
        other => panic!("expected InvalidArgument, got {other}"),
    }
}

#[test]
fn bad_launches_are_typed_errors() {
    let Some(gpu) = gpu_or_skip("rowwise_validation") else {
        return;
    };
    let x = gpu.upload(&[0.5f32; 24]).unwrap();
    let v = gpu.upload(&[1.0f32; 6]).unwrap();
    let mut y = gpu.upload(&[0.0f32; 24]).unwrap();
    let mut short = gpu.upload(&[0.0f32; 23]).unwrap();
    let a = Activation::Gelu;
    // 4×6 fits 24 elements; a 23-element output does not.
    rowwise::bias_act(&gpu, 4, 6, &x, 6, Some(&v), a, &mut y, 6).unwrap();
    let e = rowwise::bias_act(&gpu, 4, 6, &x, 6, Some(&v), a, &mut short, 6).unwrap_err();
    assert_eq!(arg_of(e), "y");
    let e = rowwise::bias_act(&gpu, 4, 6, &x, 5, None, a, &mut y, 6).unwrap_err();
    assert_eq!(arg_of(e), "ldx");
    let e = rowwise::bias_act(&gpu, 4, 7, &x, 7, Some(&v), a, &mut y, 7).unwrap_err();
    assert!(matches!(arg_of(e), "x" | "bias" | "y"));
    let e = rowwise::bias_act(&gpu, 1, 0, &x, 1, None, a, &mut y, 1).unwrap_err();
    assert_eq!(arg_of(e), "n");
    let e = rowwise::swiglu(&gpu, 4, 5, &x, 6, &mut y, 3).unwrap_err();
    assert_eq!(arg_of(e), "n_in");
    let e = rowwise::layer_norm(&gpu, 4, 6, &x, 6, None, None, &v, &v, f32::NAN, &mut y, 6)
        .unwrap_err();
    assert_eq!(arg_of(e), "eps");
    let short_gamma = gpu.upload(&[1.0f32; 5]).unwrap();
    let e = rowwise::layer_norm(
        &gpu,
        4,
        6,
        &x,
        6,
        None,
        None,
        &short_gamma,
        &v,
        1e-5,
        &mut y,
        6,
    )
    .unwrap_err();
    assert_eq!(arg_of(e), "gamma");
    let e = rowwise::layer_norm(
        &gpu,
        4,
        6,
        &x,
        6,
        None,
        Some((&short, 6)),
        &v,
        &v,
        1e-5,
        &mut y,
        6,
    )
    .unwrap_err();
    assert_eq!(arg_of(e), "residual");
    let mut rs = gpu.upload(&[0.0f32; 3]).unwrap();
    let e = rowwise::rms_scale(&gpu, 4, 6, &x, 6, 1e-6, &mut rs).unwrap_err();
    assert_eq!(arg_of(e), "rstd");
    // Rows longer than one CTA holds are refused, not mis-computed.
    let wide = gpu.zeros::<f32>(16385).unwrap();
    let g = gpu.zeros::<f32>(16385).unwrap();
    let mut wy = gpu.zeros::<f32>(16385).unwrap();
    let e = rowwise::rms_norm(&gpu, 1, 16385, &wide, 16385, &g, 1e-6, &mut wy, 16385).unwrap_err();
    assert_eq!(arg_of(e), "n");
    // M = 0 is a no-op that leaves the output alone.
    rowwise::bias_act(&gpu, 0, 6, &x, 6, None, a, &mut short, 6).unwrap();
    assert!(gpu.download(&short).unwrap().iter().all(|&v| v == 0.0));
}
