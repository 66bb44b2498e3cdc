//! GPU tests of the Hopper mainloop (TMA + `wgmma`, warp-specialized, persistent): first its
//! parts on their own (a TMA copy into 128-byte-swizzled shared memory, one `wgmma` tile), then
//! every epilogue stage family on it against the f64 reference, at awkward shapes, with the
//! output poisoned (NaN) before each launch, on each of its tile shapes, and the fallback to the
//! sm_80 mainloop where TMA cannot read the operands, and the measured tile choice
//! (`autotune`).
//!
//! Run them one at a time so the first failure is the informative one (a trapped kernel
//! poisons the CUDA context for the rest of the process):
//! `cargo test --release --test gpu_hopper -- --test-threads=1 --nocapture`.
//! Test names are numbered in that order. Without a GPU every test prints why it is skipped and
//! passes (fails with `FUSED_GEMM_REQUIRE_GPU=1`); on a GPU other than an H100/H200 the
//! Hopper-only checks print why they are skipped.
//!
//! Thresholds vs f64 (`compare`/`assert_close`: the relative Frobenius error, and each element
//! within `tol·(rms(ref) + |ref|)`): bf16 inputs 1e-2, f16 inputs 2e-3.
// `!(diff <= tol)` is true for NaN, so a NaN output counts as a mismatch.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use fused_gemm::device::copy::tma::swizzle_128b_offset;
use fused_gemm::device::gemm::TileShape;
use fused_gemm::device::gemm::sm90::{TILES_SM90, cluster_m};
use fused_gemm::device::target::Mainloop;
use fused_gemm::device::types::DType;
use fused_gemm::host::autotune::{self, Autotuner};
use fused_gemm::host::kernel::RopeArgs;
use fused_gemm::host::launch::{LaunchOptions, LaunchReport, NormExchange};
use fused_gemm::host::module::Arch;
use fused_gemm::host::plan::NormPath;
use fused_gemm::host::reference::epilogue::{
    PairLayout, RefStage, RopeConfig, apply_stages, output_width, round_slice,
};
use fused_gemm::host::testing::{Tolerance, assert_close, compare, gpu_or_skip, rng, sanitizing};
use fused_gemm::host::{Error, Gpu, Result, Tensor};
use fused_gemm::kernels::hopper::{self, probe};
use fused_gemm::kernels::{blocks, gemm};
use rand::RngExt;
use rand::rngs::StdRng;

fn threshold(input: DType) -> f64 {
    match input {
        DType::Bf16 => 1e-2,
        DType::F16 => 2e-3,
        DType::F32 => 1e-5,
    }
}

/// The device, a seeded generator, and whether it runs the sm_90a module.
struct Fx {
    gpu: Gpu,
    rng: StdRng,
    hopper: bool,
    /// The row-statistics exchange [`case`] asks for.
    norm_exchange: NormExchange,
    /// Whether [`case`] asks for a `residual` read from global memory
    /// (`LaunchOptions::global_residual`) and for C stored per thread
    /// (`LaunchOptions::direct_store`).
    global_residual: bool,
    direct_store: bool,
}

/// A device tensor and the f64 values it holds (after rounding to its dtype).
struct Dev {
    t: Tensor,
    v: Vec<f64>,
}

impl Fx {
    fn new(test: &str) -> Option<Fx> {
        let gpu = gpu_or_skip(test)?;
        let arch = gpu.module_arch(&fused_gemm::ptx::BUILTIN).unwrap();
        let hopper = arch == Arch::Sm90a;
        if !hopper {
            eprintln!("{test}: device loads the {arch} module, not sm_90a: Hopper checks skipped");
        }
        Some(Fx {
            gpu,
            rng: rng(test),
            hopper,
            norm_exchange: NormExchange::Auto,
            global_residual: false,
            direct_store: false,
        })
    }

    fn upload(&self, rows: usize, cols: usize, dtype: DType, data: Vec<f64>) -> Dev {
        let v = round_slice(dtype, &data);
        let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        Dev {
            t: Tensor::from_f32(&self.gpu, rows, cols, dtype, &f).unwrap(),
            v,
        }
    }

    fn random(&mut self, rows: usize, cols: usize, dtype: DType, scale: f64) -> Dev {
        let data = (0..rows * cols)
            .map(|_| self.rng.random_range(-1.0..1.0) * scale)
            .collect();
        self.upload(rows, cols, dtype, data)
    }

    fn poisoned(&self, rows: usize, cols: usize, dtype: DType) -> Tensor {
        let mut t = Tensor::zeros(&self.gpu, rows, cols, dtype).unwrap();
        t.poison(&self.gpu).unwrap();
        t
    }

    fn get(&self, t: &Tensor) -> Vec<f64> {
        t.download_f32(&self.gpu)
            .unwrap()
            .iter()
            .map(|&x| x as f64)
            .collect()
    }
}

/// Whether two outputs hold the same values bit for bit (a NaN equals a NaN of the same bits).
fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// A·Bᵀ in f64 (B stored N×K) over the host's threads.
fn gemm64(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    let threads = std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .min(32);
    let rows_per = m.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (ci, chunk) in c.chunks_mut(rows_per * n).enumerate() {
            s.spawn(move || {
                for (r, row) in chunk.chunks_mut(n).enumerate() {
                    let i = ci * rows_per + r;
                    let ar = &a[i * k..(i + 1) * k];
                    for (j, out) in row.iter_mut().enumerate() {
                        let br = &b[j * k..(j + 1) * k];
                        *out = ar.iter().zip(br).map(|(x, y)| x * y).sum();
                    }
                }
            });
        }
    });
    c
}

/// On a mismatch: the first element off by more than the tolerance, NaN count, and the 4×8
/// corner around it, so a failed GPU run shows the pattern (transposed, shifted, zero, NaN).
fn describe_mismatch(got: &[f64], want: &[f64], rows: usize, cols: usize, tol: f64) -> String {
    let nans = got.iter().filter(|x| x.is_nan()).count();
    let first = got
        .iter()
        .zip(want)
        .position(|(g, w)| !((g - w).abs() <= tol * (1.0 + w.abs())));
    let mut s = format!("{nans} NaN of {}", got.len());
    if let Some(i) = first {
        let (r, c) = (i / cols.max(1), i % cols.max(1));
        s += &format!(
            "; first mismatch at row {r}, col {c}: got {:.5}, want {:.5}",
            got[i], want[i]
        );
        let (r0, c0) = (r.saturating_sub(1), c - c % 8);
        s += "\n  got / want:";
        for rr in r0..(r0 + 4).min(rows) {
            s += &format!("\n  row {rr:>5}:");
            for cc in c0..(c0 + 8).min(cols) {
                s += &format!(
                    " {:>8.3}/{:<8.3}",
                    got[rr * cols + cc],
                    want[rr * cols + cc]
                );
            }
        }
    }
    s
}

/// One case: random A (M×K) and B (N×K), C poisoned (or `c_in`), the launcher, the reference
/// stages. `tile`: force that Hopper tile (and require the Hopper path), or `None` to let the
/// launcher decide; `hopper` says whether the Hopper path must (or must not) have run. Returns
/// the launch's report.
#[allow(clippy::too_many_arguments)]
fn case(
    fx: &mut Fx,
    label: &str,
    (m, n, k): (usize, usize, usize),
    input: DType,
    output: DType,
    stages: Vec<RefStage>,
    c_in: Option<&Dev>,
    tile: Option<TileShape>,
    hopper: Option<bool>,
    launch: impl FnOnce(&Gpu, &Tensor, &Tensor, &mut Tensor) -> Result<LaunchReport>,
) -> LaunchReport {
    let a = fx.random(m, k, input, 1.0);
    let b = fx.random(n, k, input, 1.0);
    let width = output_width(n, &stages);
    let mut c = match c_in {
        Some(ci) => {
            let f: Vec<f32> = ci.v.iter().map(|&x| x as f32).collect();
            Tensor::from_f32(&fx.gpu, m, width, output, &f).unwrap()
        }
        None => fx.poisoned(m, width, output),
    };
    let o = LaunchOptions {
        tile,
        norm_exchange: fx.norm_exchange,
        global_residual: fx.global_residual,
        direct_store: fx.direct_store,
        ..Default::default()
    };
    let report = launch(&fx.gpu.with_options(o), &a.t, &b.t, &mut c)
        .unwrap_or_else(|e| panic!("{label} {m}x{n}x{k}: launch failed: {e}"));
    let entry = report.entry.unwrap_or("?");
    // A kernel fault (a trapped barrier wait, an illegal address) surfaces here.
    let got: Vec<f64> = c
        .download_f32(&fx.gpu)
        .unwrap_or_else(|e| panic!("{label} {m}x{n}x{k} on {entry}: kernel failed: {e}"))
        .iter()
        .map(|&x| x as f64)
        .collect();
    let acc = gemm64(m, n, k, &a.v, &b.v);
    let want = apply_stages(m, n, &acc, &stages, c_in.map(|c| c.v.as_slice())).unwrap();
    // A 16-bit output below its smallest normal number holds an absolute precision (one
    // subnormal step) only; a tiny one-element output (K = 1) may land there: judged against
    // f16's smallest normal (6.1e-5) as its magnitude.
    let tiny = match output {
        DType::F16 => 6.103_515_6e-5,
        _ => 0.0,
    };
    let close = compare(
        &got,
        &want,
        Tolerance::rel(threshold(input))
            .with_floor(tiny)
            .for_stages(&stages),
    );
    let err = close.frobenius;
    let p = report
        .plan
        .map(|p| {
            format!(
                "tile {}x{} w{} s{} grid {}",
                p.tile.bm, p.tile.bn, p.tile.warps_m, p.tile.stages, p.grid.0
            )
        })
        .unwrap_or_default();
    let path = report.mainloop.map_or("none", Mainloop::name);
    println!(
        "{label:<28} {m:>5}x{n:>5}x{k:>5} {:>4}->{:<4} {path} rel err {err:.2e} worst element {:.2} of its bound  [{p}]",
        input.name(),
        output.name(),
        close.worst
    );
    assert!(
        close.passed(),
        "{label} {m}x{n}x{k} on {entry}: not close to the reference: {close}; {}",
        describe_mismatch(&got, &want, m, width, 0.05)
    );
    if let Some(h) = hopper {
        assert_eq!(
            report.on_sm90(),
            h,
            "{label} {m}x{n}x{k}: expected the {} path, ran {entry} ({})",
            if h { "Hopper" } else { "sm_80" },
            report.why
        );
    }
    report
}

/// Awkward shapes (one element, sizes one off the tile multiples, BERT-like projections,
/// 4095×4097 with a short K), plus TMA-readable awkward ones (K a multiple of 8); in
/// [`t5_every_stage_family`] the last two put row norms wider than one tile on a 3-CTA row-norm
/// cluster (N = 700 on 128×256) and on nine partials per row with the finishing kernel
/// (N = 1100 on 128×128 ping-pong).
const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (17, 33, 65),
    (127, 3072, 768),
    (4096, 384, 384),
    (4095, 4097, 63),
    (1, 1, 8),
    (17, 33, 72),
    (300, 200, 8),
    (129, 257, 1000),
    (4095, 4097, 64),
    (257, 700, 200),
    (300, 1100, 96),
];

/// [`SHAPES`] under [`sanitizing`], index for index (an index picks the tile): the large ones
/// smaller with the same traits. M one off 128 with N past eight 128-wide tiles (row norms
/// through partials) and 8 k-tiles; 384 columns; 511×513 with K = 63 (not TMA-readable); and
/// 2047×2049 with one k-tile, still more tiles than run at once on every tile shape (the CTAs
/// are persistent: some take two).
const SANITIZER_SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (17, 33, 65),
    (127, 1280, 512),
    (512, 384, 384),
    (511, 513, 63),
    (1, 1, 8),
    (17, 33, 72),
    (300, 200, 8),
    (129, 257, 1000),
    (2047, 2049, 64),
    (257, 700, 200),
    (300, 1100, 96),
];

/// [`SHAPES`], or [`SANITIZER_SHAPES`] under compute-sanitizer.
fn shapes() -> &'static [(usize, usize, usize)] {
    if sanitizing() {
        SANITIZER_SHAPES
    } else {
        SHAPES
    }
}

/// Whether TMA can read contiguous A (M×K) and B (N×K) of 16-bit elements.
fn tma_readable(k: usize) -> bool {
    k.is_multiple_of(8)
}

/// The tile a shape index exercises: every Hopper tile gets several shapes.
fn tile_for(i: usize) -> TileShape {
    TILES_SM90[i % TILES_SM90.len()]
}

/// (forced tile, expected path) for shape `i` with inner dimension `k`.
fn route(fx: &Fx, i: usize, k: usize) -> (Option<TileShape>, Option<bool>) {
    if !fx.hopper {
        (None, Some(false))
    } else if tma_readable(k) {
        (Some(tile_for(i)), Some(true))
    } else {
        (None, Some(false))
    }
}

#[test]
fn t1_probe_tma_writes_the_128b_swizzled_box() {
    let Some(mut fx) = Fx::new("probe_tma") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    // 200 rows × 96 columns of bf16 with distinct values (their index, exact in bf16 up to 256
    // per row block): boxes at (0, 0) and at (64, 128), the second partly outside (zeros).
    let (rows, k) = (200usize, 96usize);
    let vals: Vec<f32> = (0..rows * k)
        .map(|i| ((i % 251) as f32) - 125.0 + fx.rng.random_range(0..2) as f32 * 0.5)
        .collect();
    let bits: Vec<u16> = vals
        .iter()
        .map(|&x| half::bf16::from_f32(x).to_bits())
        .collect();
    let dev = fx.gpu.upload(&bits).unwrap();
    for &(x, y, box_rows) in &[(0i32, 0i32, 64u32), (64, 128, 128)] {
        let words = probe::tma(&fx.gpu, &dev, rows, k, x, y, box_rows)
            .unwrap_or_else(|e| panic!("TMA probe at ({x}, {y}): {e}"));
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut bad = Vec::new();
        for r in 0..box_rows {
            for c in 0..64u32 {
                let (gr, gc) = (y as usize + r as usize, x as usize + c as usize);
                let want = if gr < rows && gc < k {
                    bits[gr * k + gc]
                } else {
                    0
                };
                let o = swizzle_128b_offset(r, c) as usize;
                let got = u16::from_le_bytes([bytes[o], bytes[o + 1]]);
                if got != want {
                    bad.push((r, c, got, want));
                }
            }
        }
        if !bad.is_empty() {
            let (r, c, got, want) = bad[0];
            let row0: Vec<String> = (0..16)
                .map(|i| {
                    format!(
                        "{:04x}",
                        u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])
                    )
                })
                .collect();
            panic!(
                "TMA box at ({x}, {y}), {box_rows} rows: {} of {} elements wrong; first at box row {r}, \
                 col {c}: got {got:#06x}, want {want:#06x}. First 16 shared halves: {}",
                bad.len(),
                box_rows * 64,
                row0.join(" ")
            );
        }
        println!(
            "TMA probe ({x}, {y}) × {box_rows} rows: all {} elements in place",
            box_rows * 64
        );
    }
}

#[test]
fn t2_probe_wgmma_tile_matches_f64() {
    let Some(mut fx) = Fx::new("probe_wgmma") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    for n in [128usize, 256] {
        let a = round_slice(
            DType::Bf16,
            &(0..64 * 64)
                .map(|_| fx.rng.random_range(-1.0..1.0))
                .collect::<Vec<f64>>(),
        );
        let b = round_slice(
            DType::Bf16,
            &(0..n * 64)
                .map(|_| fx.rng.random_range(-1.0..1.0))
                .collect::<Vec<f64>>(),
        );
        let bits = |v: &[f64]| -> Vec<u16> {
            v.iter()
                .map(|&x| half::bf16::from_f64(x).to_bits())
                .collect()
        };
        let (da, db) = (
            fx.gpu.upload(&bits(&a)).unwrap(),
            fx.gpu.upload(&bits(&b)).unwrap(),
        );
        let got: Vec<f64> = probe::wgmma(&fx.gpu, &da, &db, n)
            .unwrap_or_else(|e| panic!("wgmma probe n={n}: {e}"))
            .iter()
            .map(|&x| x as f64)
            .collect();
        let want = gemm64(64, n, 64, &a, &b);
        let close = compare(&got, &want, 1e-5);
        println!("wgmma probe m64n{n}k64: {close}");
        assert!(
            close.passed(),
            "wgmma probe m64n{n}k64: not close to the reference: {close}; {}\n{}",
            describe_mismatch(&got, &want, 64, n, 1e-3),
            provenance(&got, &want, n)
        );
    }
}

/// For a few output positions, the reference position whose value the kernel wrote there
/// (values are random, so a close match identifies it): shows a fragment-layout or
/// descriptor permutation at a glance.
fn provenance(got: &[f64], want: &[f64], n: usize) -> String {
    let mut s = String::from("  got(row, col) ≈ want(row', col'):");
    for &(r, c) in &[
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 8),
        (1, 0),
        (8, 0),
        (16, 0),
        (0, 64),
        (63, 127),
    ] {
        let i = r * n + c;
        let (j, d) = want
            .iter()
            .enumerate()
            .map(|(j, w)| (j, (w - got[i]).abs()))
            .min_by(|x, y| x.1.total_cmp(&y.1))
            .unwrap_or((0, f64::NAN));
        s += &format!(
            "\n    ({r:>2}, {c:>3}) = {:>9.4} ≈ ({:>2}, {:>3}) off by {d:.1e}",
            got[i],
            j / n,
            j % n
        );
    }
    s
}

#[test]
fn t3_plain_gemm_on_every_tile_and_dtype() {
    let Some(mut fx) = Fx::new("plain_gemm") else {
        return;
    };
    for (i, &s) in shapes().iter().enumerate() {
        let (tile, path) = route(&fx, i, s.2);
        case(
            &mut fx,
            "gemm_bf16",
            s,
            DType::Bf16,
            DType::Bf16,
            vec![],
            None,
            tile,
            path,
            gemm::gemm_bf16,
        );
        let (tile, path) = route(&fx, i + 1, s.2);
        case(
            &mut fx,
            "gemm_f16",
            s,
            DType::F16,
            DType::F16,
            vec![],
            None,
            tile,
            path,
            gemm::gemm_f16,
        );
        let (tile, path) = route(&fx, i + 2, s.2);
        case(
            &mut fx,
            "gemm_bf16_f32",
            s,
            DType::Bf16,
            DType::F32,
            vec![],
            None,
            tile,
            path,
            gemm::gemm_bf16_f32,
        );
    }
}

#[test]
fn t4_persistent_ring_wraps_over_many_tiles_per_cta() {
    let Some(mut fx) = Fx::new("persistent") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    // Several tiles per CTA (and both ping-pong warpgroups busy), k-tile counts that are and
    // are not multiples of the ring depth.
    let sms = fx.gpu.props().sm_count as usize;
    let mut run = |s, t| {
        case(
            &mut fx,
            "gemm_bf16 forced tile",
            s,
            DType::Bf16,
            DType::Bf16,
            vec![],
            None,
            Some(t),
            Some(true),
            gemm::gemm_bf16,
        );
    };
    if sanitizing() {
        // Per tile, two whole rounds of work units (a 256×256 cluster tile is one unit of two
        // CTAs) and three more, edges partly past M and N: every CTA takes two tiles or three.
        // K: 5 k-tiles, the last partial, and 4.
        for &t in TILES_SM90 {
            let units = 2 * (sms / cluster_m(&t) as usize) + 3;
            let (m, n) = (
                units.div_ceil(8) * t.bm as usize - 5,
                8 * t.bn as usize - 24,
            );
            for k in [264, 256] {
                run((m, n, k), t);
            }
        }
        return;
    }
    for &s in &[(2048, 4096, 320), (1500, 2100, 776), (4096, 4096, 256)] {
        for &t in TILES_SM90 {
            run(s, t);
        }
    }
}

#[test]
fn t5_every_stage_family() {
    let Some(mut fx) = Fx::new("stages") else {
        return;
    };
    let bf = DType::Bf16;
    // The `hopper::h_*` kernels are compiled for Hopper only (`arch = sm_90`): elsewhere they
    // do not exist, and only the built-in kernels (every GPU) run here.
    if !fx.hopper {
        let (a, b) = (fx.random(8, 64, bf, 1.0), fx.random(8, 64, bf, 1.0));
        let mut c = fx.poisoned(8, 8, bf);
        let e = hopper::h_sigmoid_accumulate(&fx.gpu, &a.t, &b.t, &mut c)
            .expect_err("a Hopper-only kernel on another GPU");
        assert!(matches!(e, Error::KernelNotFound { .. }), "{e}");
    }
    for (i, &(m, n, k)) in shapes().iter().enumerate() {
        let s = (m, n, k);
        let (tile, path) = route(&fx, i, k);
        let bias = fx.random(1, n, bf, 1.0);
        if fx.hopper {
            case(
                &mut fx,
                "scale(alpha)+bias+relu",
                s,
                bf,
                bf,
                vec![
                    RefStage::Scale(-0.75),
                    RefStage::BiasCol(bias.v.clone()),
                    RefStage::Relu,
                ],
                None,
                tile,
                path,
                |g, a, b, c| hopper::h_scale_bias_relu(g, a, b, c, -0.75, &bias.t),
            );
        }
        let (rs, rb) = (fx.random(1, m, DType::F32, 1.0), fx.random(1, m, bf, 1.0));
        if fx.hopper {
            case(
                &mut fx,
                "scale(row)+bias(row)+gelu",
                s,
                bf,
                bf,
                vec![
                    RefStage::ScaleRow(rs.v.clone()),
                    RefStage::BiasRow(rb.v.clone()),
                    RefStage::Gelu,
                ],
                None,
                tile,
                path,
                |g, a, b, c| hopper::h_rowscale_rowbias_gelu(g, a, b, c, &rs.t, &rb.t),
            );
        }
        let cs = fx.random(1, n, DType::F32, 1.0);
        if fx.hopper {
            case(
                &mut fx,
                "scale(col)+gelu_tanh",
                s,
                bf,
                bf,
                vec![RefStage::ScaleCol(cs.v.clone()), RefStage::GeluTanh],
                None,
                tile,
                path,
                |g, a, b, c| hopper::h_colscale_gelu_tanh(g, a, b, c, &cs.t),
            );
        }
        let r = fx.random(m, n, bf, 1.0);
        if fx.hopper {
            case(
                &mut fx,
                "residual+silu",
                s,
                bf,
                bf,
                vec![RefStage::Residual(r.v.clone()), RefStage::Silu],
                None,
                tile,
                path,
                |g, a, b, c| hopper::h_residual_silu(g, a, b, c, &r.t),
            );
        }
        let c0 = fx.random(m, n, bf, 1.0);
        if fx.hopper {
            case(
                &mut fx,
                "sigmoid+accumulate",
                s,
                bf,
                bf,
                vec![RefStage::Sigmoid, RefStage::Accumulate],
                Some(&c0),
                tile,
                path,
                hopper::h_sigmoid_accumulate,
            );
        }
        let gamma = fx.random(1, n, bf, 1.0);
        if fx.hopper {
            case(
                &mut fx,
                "rms_norm",
                s,
                bf,
                bf,
                vec![RefStage::RmsNorm {
                    gamma: gamma.v.clone(),
                    eps: 1e-6,
                }],
                None,
                tile,
                path,
                |g, a, b, c| hopper::h_rms_norm(g, a, b, c, &gamma.t),
            );
        }
        let (r, beta) = (fx.random(m, n, bf, 1.0), fx.random(1, n, bf, 1.0));
        case(
            &mut fx,
            "bias+residual+layer_norm",
            s,
            bf,
            bf,
            vec![
                RefStage::BiasCol(bias.v.clone()),
                RefStage::Residual(r.v.clone()),
                RefStage::LayerNorm {
                    gamma: gamma.v.clone(),
                    beta: beta.v.clone(),
                    eps: 1e-12,
                },
            ],
            None,
            tile,
            path,
            |g, a, b, c| {
                blocks::proj_bias_residual_layer_norm(g, a, b, c, &bias.t, &r.t, &gamma.t, &beta.t)
            },
        );
        let ne = n + n % 2;
        case(
            &mut fx,
            "swiglu",
            (m, ne, k),
            bf,
            bf,
            vec![RefStage::SwiGlu(PairLayout::Interleaved)],
            None,
            tile,
            path,
            blocks::mlp_up_swiglu,
        );
        if fx.hopper {
            case(
                &mut fx,
                "geglu f16",
                (m, ne, k),
                DType::F16,
                DType::F16,
                vec![RefStage::GeGlu(PairLayout::Interleaved)],
                None,
                tile,
                path,
                hopper::h_geglu_f16,
            );
        }
        let head_dim = if n % 64 == 0 { 64 } else { ne };
        let seq_len = m.clamp(1, 128);
        let rope = RopeArgs {
            head_dim: head_dim as u32,
            rotary_dim: head_dim as u32,
            seq_len: seq_len as u32,
            pos_offset: 3,
        };
        let cfg = RopeConfig {
            theta: 500000.0,
            head_dim,
            rotary_dim: head_dim,
            seq_len,
            pos_offset: 3,
            layout: PairLayout::Interleaved,
        };
        case(
            &mut fx,
            "rope",
            (m, ne, k),
            bf,
            bf,
            vec![RefStage::Rope(cfg)],
            None,
            tile,
            path,
            |g, a, b, c| blocks::qk_proj_rope(g, a, b, c, rope),
        );
        if fx.hopper {
            case(
                &mut fx,
                "user fn+cast(f16)",
                s,
                bf,
                DType::F32,
                vec![RefStage::User(|x| x * x + 1.0), RefStage::Cast(DType::F16)],
                None,
                tile,
                path,
                hopper::h_user_cast,
            );
        }
    }
}

#[test]
fn t6_row_norms_in_the_epilogue_and_through_partials() {
    let Some(mut fx) = Fx::new("norms") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    // N ≤ 64 finishes in the epilogue on any tile; cooperative 128-row tiles finish rows up to
    // eight tiles wide in a row-norm cluster (t8); the other tiles send wider rows (BERT-large
    // 1024, MiniLM 384, an odd 1000) through partial statistics (one per tile and row, merged
    // over the tile's 64-column chunks, the last chunk partly past N at 1000) and the
    // finishing kernel. Under the sanitizer the 1024-wide rows are fewer.
    let rows = if sanitizing() { 300 } else { 1000 };
    for (i, &(m, n, k)) in [
        (200, 64, 128),
        (257, 384, 384),
        (rows, 1024, 512),
        (33, 1000, 64),
    ]
    .iter()
    .enumerate()
    {
        bias_residual_layer_norm_case(&mut fx, "bias+residual+layer_norm", (m, n, k), tile_for(i));
    }
}

/// `layer_norm(A·B + bias + R)` (bf16, R ×4) with `tile` forced and the Hopper path required,
/// against f64 ([`case`]); returns the launch's report.
fn bias_residual_layer_norm_case(
    fx: &mut Fx,
    label: &str,
    (m, n, k): (usize, usize, usize),
    tile: TileShape,
) -> LaunchReport {
    let bf = DType::Bf16;
    let (bias, gamma, beta, r) = (
        fx.random(1, n, bf, 1.0),
        fx.random(1, n, bf, 1.0),
        fx.random(1, n, bf, 1.0),
        fx.random(m, n, bf, 4.0),
    );
    case(
        fx,
        label,
        (m, n, k),
        bf,
        bf,
        vec![
            RefStage::BiasCol(bias.v.clone()),
            RefStage::Residual(r.v.clone()),
            RefStage::LayerNorm {
                gamma: gamma.v.clone(),
                beta: beta.v.clone(),
                eps: 1e-12,
            },
        ],
        None,
        Some(tile),
        Some(true),
        |g, a, b, c| {
            blocks::proj_bias_residual_layer_norm(g, a, b, c, &bias.t, &r.t, &gamma.t, &beta.t)
        },
    )
}

#[test]
fn t7_launcher_choice_and_fallback() {
    let Some(mut fx) = Fx::new("choice") else {
        return;
    };
    let bf = DType::Bf16;
    // Left to the launcher: a large aligned GEMM takes the Hopper path on an H100/H200 (under
    // the sanitizer a smaller one the model still gives it).
    let hopper_path = fx.hopper;
    let s = if sanitizing() {
        (512, 1024, 512)
    } else {
        (2048, 2048, 2048)
    };
    case(
        &mut fx,
        "gemm_bf16 (launcher's choice)",
        s,
        bf,
        bf,
        vec![],
        None,
        None,
        Some(hopper_path),
        gemm::gemm_bf16,
    );
    // A misaligned operand (A one element into each row of a wider buffer: 2-byte aligned,
    // odd leading dimension) falls back to the sm_80 path and is still right.
    let (m, n, k) = (100usize, 130usize, 64usize);
    let wide = fx.random(m, k + 1, bf, 1.0);
    let a = wide.t.slice(.., 1..k + 1).unwrap();
    let av: Vec<f64> = (0..m)
        .flat_map(|r| wide.v[r * (k + 1) + 1..(r + 1) * (k + 1)].to_vec())
        .collect();
    let b = fx.random(n, k, bf, 1.0);
    let mut c = fx.poisoned(m, n, bf);
    let report = gemm::gemm_bf16(&fx.gpu, &a, &b.t, &mut c).unwrap();
    let entry = report.entry.unwrap_or("?");
    let got = fx.get(&c);
    let want = gemm64(m, n, k, &av, &b.v);
    let close = compare(&got, &want, threshold(bf));
    println!(
        "misaligned A {m}x{n}x{k}: {entry} ({}), {close}",
        report.why
    );
    assert_eq!(
        report.mainloop,
        Some(Mainloop::Sm80),
        "TMA cannot read A; ran {entry}"
    );
    assert!(
        close.passed(),
        "misaligned A: not close to the reference: {close}; {}",
        describe_mismatch(&got, &want, m, n, 0.05)
    );
}

#[test]
fn t8_row_norm_clusters_finish_the_norm_in_the_epilogue() {
    let Some(mut fx) = Fx::new("norm_clusters") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    // Cooperative 128-row tiles: groups of ⌈N/BN⌉ ≤ 8 CTAs along N swap row statistics, as a
    // cluster through distributed shared memory or, in a cooperative launch, through global
    // memory. Shapes: one column; an edge tile of a group of one; a last CTA partly (1000) and
    // wholly (1100 on 128×128: 9 tiles, partials) past N; BERT's widths with several tiles
    // per group (both exchange buffers, both barrier phases; more row blocks than groups that
    // fit at once, so CTAs take several). The global exchange's self-resetting counters are
    // reused across these launches with 1, 3, 4 and 8 CTAs per row block. Each CTA's last tile
    // reads its residual from the ring and stores C from there (TMA), earlier ones read global
    // memory and store per thread; the global exchange runs once more with every tile doing so.
    let bf = DType::Bf16;
    // Under the sanitizer only BERT-base's K shrinks: fewer row blocks would stop CTAs of
    // the narrowest groups from taking a third tile (the second exchange barrier phase).
    let (large, base) = if sanitizing() {
        ((8191, 1024, 64), (9000, 768, 64))
    } else {
        ((8191, 1024, 64), (9000, 768, 128))
    };
    let shapes: &[(usize, usize, usize)] = &[
        (1, 1, 64),
        (130, 17, 72),
        (257, 1000, 128),
        (300, 1100, 64),
        (64, 2048, 64),
        large,
        base,
    ];
    for (exchange, per_thread) in [
        (NormExchange::Cluster, false),
        (NormExchange::Global, false),
        (NormExchange::Global, true),
    ] {
        fx.norm_exchange = exchange;
        fx.global_residual = per_thread;
        fx.direct_store = per_thread;
        for tile in [TILES_SM90[0], TILES_SM90[2]] {
            for &(m, n, k) in shapes {
                let ctas = n.div_ceil(tile.bn as usize) as u32;
                let want = match (ctas <= 8, exchange) {
                    (true, NormExchange::Global) => NormPath::GlobalExchange { ctas },
                    (true, _) => NormPath::Cluster { ctas },
                    (false, _) => NormPath::Partials {
                        tiles_n: ctas,
                        stats_bytes: (m * ctas as usize * 16) as u64,
                    },
                };
                let label = format!(
                    "norm {exchange:?} (residual and C per thread: {per_thread}): b+res+LN"
                );
                let report = bias_residual_layer_norm_case(&mut fx, &label, (m, n, k), tile);
                let plan = report.plan.expect("a non-empty problem has a plan");
                assert_eq!(plan.norm, want, "{m}x{n}x{k} on {tile:?}");
                // TMA moves C only in whole 16-byte pieces: N a multiple of 8 (a TMA store of
                // a row ending inside a piece writes past N), which also makes the row stride
                // (N here) a multiple of 16 bytes.
                if ctas <= 8 {
                    let tma = !per_thread && n % 8 == 0;
                    assert_eq!(
                        (report.tma_residual, report.tma_store),
                        (tma, tma),
                        "{label} {m}x{n}x{k} on {tile:?}: residual's and C's tensor maps"
                    );
                }
                if m * n <= 300 * 1100 {
                    let gamma = fx.random(1, n, bf, 1.0);
                    case(
                        &mut fx,
                        &format!(
                            "norm {exchange:?} (residual and C per thread: {per_thread}): rms_norm"
                        ),
                        (m, n, k),
                        bf,
                        bf,
                        vec![RefStage::RmsNorm {
                            gamma: gamma.v.clone(),
                            eps: 1e-6,
                        }],
                        None,
                        Some(tile),
                        Some(true),
                        |g, a, b, c| hopper::h_rms_norm(g, a, b, c, &gamma.t),
                    );
                }
            }
        }
    }
    constant_rows_give_beta(&mut fx);
}

/// LayerNorm of constant rows across CTAs: constant rows (1234, zeros, and 8.5e37, whose f32
/// sum overflows) give exactly β in every CTA of a row-norm group, with both exchanges on both
/// 128-row cooperative tiles; a NaN stays in its row.
fn constant_rows_give_beta(fx: &mut Fx) {
    let bf = DType::Bf16;
    let (m, n, k) = (200usize, 1024usize, 64usize);
    let b = fx.random(n, k, bf, 1.0);
    let a = fx.upload(m, k, bf, vec![0.0; m * k]);
    let zero_bias = fx.upload(1, n, bf, vec![0.0; n]);
    let (gamma, beta) = (fx.random(1, n, bf, 1.0), fx.random(1, n, bf, 1.0));
    for exchange in [NormExchange::Cluster, NormExchange::Global] {
        for tile in [TILES_SM90[0], TILES_SM90[2]] {
            for (what, v) in [("1234.0", 1234.0), ("zeros", 0.0), ("8.5e37", 8.5e37)] {
                let mut res = vec![v; m * n];
                res[130 * n + 1000] = f64::NAN;
                let r = fx.upload(m, n, bf, res);
                let mut c = fx.poisoned(m, n, bf);
                let o = LaunchOptions {
                    tile: Some(tile),
                    norm_exchange: exchange,
                    ..Default::default()
                };
                let report = blocks::proj_bias_residual_layer_norm(
                    &fx.gpu.with_options(o),
                    &a.t,
                    &b.t,
                    &mut c,
                    &zero_bias.t,
                    &r.t,
                    &gamma.t,
                    &beta.t,
                )
                .unwrap();
                assert!(report.on_sm90(), "Hopper path: {report:?}");
                let plan = report.plan.expect("Hopper path");
                let ctas = (n as u32).div_ceil(tile.bn);
                let want = match exchange {
                    NormExchange::Global => NormPath::GlobalExchange { ctas },
                    _ => NormPath::Cluster { ctas },
                };
                assert_eq!(plan.norm, want);
                let got = fx.get(&c);
                for i in 0..m {
                    let row = &got[i * n..(i + 1) * n];
                    if i == 130 {
                        assert!(row.iter().all(|x| x.is_nan()), "{what}: NaN row");
                    } else {
                        assert_eq!(row, &beta.v[..], "{what} on {tile:?}: row {i} must be β");
                    }
                }
            }
            println!(
                "norm {exchange:?} {}x{}: constant rows give β exactly, NaN stays in its row",
                tile.bm, tile.bn
            );
        }
    }
}

/// A launcher of [`t9_tma_store_epilogue_matches_direct_stores`] and
/// [`t10_split_tail_matches_the_whole_last_round`]: runs one kernel into C.
type Launch<'a> = Box<dyn Fn(&Gpu, &Tensor, &Tensor, &mut Tensor) -> Result<LaunchReport> + 'a>;

/// Random bf16 epilogue operands of an M×N output: column bias, LayerNorm γ and β, and an
/// M×N residual (×2).
struct EpilogueOperands {
    bias: Dev,
    gamma: Dev,
    beta: Dev,
    r: Dev,
}

impl EpilogueOperands {
    fn random(fx: &mut Fx, m: usize, n: usize) -> Self {
        let bf = DType::Bf16;
        EpilogueOperands {
            bias: fx.random(1, n, bf, 1.0),
            gamma: fx.random(1, n, bf, 1.0),
            beta: fx.random(1, n, bf, 1.0),
            r: fx.random(m, n, bf, 2.0),
        }
    }

    /// The stage families whose C the Hopper mainloop can stage for TMA stores: plain,
    /// residual + SiLU, bias + tanh GELU, (with `erf`) bias + erf GELU, and bias + residual +
    /// LayerNorm; each with its reference stages and its launcher.
    fn kernels(&self, erf: bool) -> Vec<(&'static str, Vec<RefStage>, Launch<'_>)> {
        let EpilogueOperands {
            bias,
            gamma,
            beta,
            r,
        } = self;
        let mut k: Vec<(&'static str, Vec<RefStage>, Launch<'_>)> = vec![
            ("gemm", vec![], Box::new(gemm::gemm_bf16)),
            (
                "residual+silu",
                vec![RefStage::Residual(r.v.clone()), RefStage::Silu],
                Box::new(|g, a, b, c| hopper::h_residual_silu(g, a, b, c, &r.t)),
            ),
            (
                "bias+gelu_tanh",
                vec![RefStage::BiasCol(bias.v.clone()), RefStage::GeluTanh],
                Box::new(|g, a, b, c| blocks::ffn_up_bias_gelu_tanh(g, a, b, c, &bias.t)),
            ),
        ];
        if erf {
            k.push((
                "bias+gelu (erf)",
                vec![RefStage::BiasCol(bias.v.clone()), RefStage::Gelu],
                Box::new(|g, a, b, c| blocks::ffn_up_bias_gelu(g, a, b, c, &bias.t)),
            ));
        }
        k.push((
            "bias+residual+layer_norm",
            vec![
                RefStage::BiasCol(bias.v.clone()),
                RefStage::Residual(r.v.clone()),
                RefStage::LayerNorm {
                    gamma: gamma.v.clone(),
                    beta: beta.v.clone(),
                    eps: 1e-12,
                },
            ],
            Box::new(|g, a, b, c| {
                blocks::proj_bias_residual_layer_norm(g, a, b, c, &bias.t, &r.t, &gamma.t, &beta.t)
            }),
        ));
        k
    }
}

#[test]
fn t9_tma_store_epilogue_matches_direct_stores() {
    let Some(mut fx) = Fx::new("tma_store") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    // C staged in shared memory and stored with TMA (the default where C's row stride is a
    // multiple of 16 bytes; row-norm groups stage their CTAs' last tiles) against per-thread
    // stores, on every tile: bitwise the same output, and both within the f64 reference's
    // tolerance. A row norm stages its pre-norm C for the finishing kernel (partials) or its
    // normalized C (N ≤ 64).
    // With C staged, a `residual` is copied into the staging buffers with TMA too (zeros past
    // M and N), against the same kernel reading it from global memory.
    // Widths: one 8-column box, chunks partly past N (72, 1000, 3000), past M (1, 130, 4095),
    // and a stride TMA cannot take (N = 33). Under the sanitizer the large one is 2047×2200,
    // still more tiles than SMs on the tiles that run it.
    let bf = DType::Bf16;
    let large = if sanitizing() {
        (2047, 2200, 72)
    } else {
        (4095, 3000, 72)
    };
    let shapes: &[(usize, usize, usize)] = &[
        (1, 8, 64),
        (130, 72, 128),
        (257, 1000, 64),
        large,
        (64, 33, 64),
    ];
    for (ti, &tile) in TILES_SM90.iter().enumerate() {
        for (si, &(m, n, k)) in shapes.iter().enumerate() {
            // Every tile sees the small shapes; the large one runs on two tiles.
            if m > 1000 && ti % 2 == 1 {
                continue;
            }
            let a = fx.random(m, k, bf, 1.0);
            let b = fx.random(n, k, bf, 1.0);
            let ops = EpilogueOperands::random(&mut fx, m, n);
            let acc = gemm64(m, n, k, &a.v, &b.v);
            let kernels = ops.kernels(true);
            for (label, stages, launch) in kernels {
                let what = format!(
                    "{label} {m}x{n}x{k} on {}x{} w{}",
                    tile.bm, tile.bn, tile.warps_m
                );
                let want = apply_stages(m, n, &acc, &stages, None).unwrap();
                let has_residual = stages.iter().any(|s| matches!(s, RefStage::Residual(_)));
                let mut outs = Vec::new();
                for (direct, global_residual) in [(false, false), (false, true), (true, false)] {
                    if global_residual && !has_residual {
                        continue;
                    }
                    let mut c = fx.poisoned(m, n, bf);
                    let o = LaunchOptions {
                        tile: Some(tile),
                        direct_store: direct,
                        global_residual,
                        ..Default::default()
                    };
                    let report = launch(&fx.gpu.with_options(o), &a.t, &b.t, &mut c)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(report.on_sm90(), "{what}: Hopper path: {report:?}");
                    let plan = report.plan.expect("Hopper path");
                    let staged = report.tma_store;
                    // TMA stores need a 16-byte row stride. Row-norm groups stage C in their
                    // ring and take the residual by TMA there even when C is stored per thread.
                    let aligned = (2 * n) % 16 == 0;
                    let group = matches!(
                        plan.norm,
                        NormPath::Cluster { .. } | NormPath::GlobalExchange { .. }
                    );
                    assert_eq!(
                        staged,
                        !direct && aligned,
                        "{what} (direct override {direct}): {plan:?}"
                    );
                    assert_eq!(
                        report.tma_residual,
                        (staged || (group && aligned)) && has_residual && !global_residual,
                        "{what} (direct {direct}, global residual {global_residual}): {plan:?}"
                    );
                    let got = fx.get(&c);
                    let close = compare(&got, &want, threshold(bf));
                    assert!(
                        close.passed(),
                        "{what} (TMA store {staged}): not close to the reference: {close}; {}",
                        describe_mismatch(&got, &want, m, n, 0.05)
                    );
                    outs.push(got);
                }
                assert!(
                    outs.iter().all(|o| same_bits(o, &outs[0])),
                    "{what}: C differs between the TMA store, the TMA residual copy and direct stores"
                );
                if si == 0 || m > 1000 {
                    println!(
                        "{what}: TMA store, TMA residual copy and direct stores agree bitwise"
                    );
                }
            }
        }
    }
}

#[test]
fn t10_split_tail_matches_the_whole_last_round() {
    let Some(mut fx) = Fx::new("split_tail") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    // The last, partial round of 128×128 ping-pong tiles in K pieces (`Sm90Args::tail_splits`)
    // against the same kernel with that round whole and against f64, on every stage family
    // that stages C (the LayerNorm through partial statistics and the finishing kernel). Shapes
    // put a few tiles past a whole round of this device's SMs, with the last tile row and
    // column partly past M and N, and K not a multiple of 64. Each split launch runs twice:
    // the per-tile counters must come back to 0, and the fixed summation order gives the same
    // bits. Pieces: 2, 3, and the most the shape allows (requested 64, capped).
    let bf = DType::Bf16;
    let tile = *TILES_SM90
        .iter()
        .find(|t| t.warps_m == 4)
        .expect("a ping-pong tile");
    let sms = fx.gpu.props().sm_count as usize;
    let tiles_n = 8;
    let tiles_m = (sms + 3).div_ceil(tiles_n);
    // Under the sanitizer K is one k-tile over twice the ring's depth (the last partial), so 2
    // and 3 pieces still split it unevenly.
    let k = if sanitizing() {
        (2 * tile.stages as usize + 1) * 64 - 24
    } else {
        1000
    };
    let shapes = [
        (tiles_m * 128 - 70, tiles_n * 128 - 24, k),
        // Two k-tiles: at most two pieces.
        (tiles_m * 128 - 1, tiles_n * 128 - 24, 72),
    ];
    for &(m, n, k) in &shapes {
        let a = fx.random(m, k, bf, 1.0);
        let b = fx.random(n, k, bf, 1.0);
        let ops = EpilogueOperands::random(&mut fx, m, n);
        let acc = gemm64(m, n, k, &a.v, &b.v);
        for (label, stages, launch) in ops.kernels(false) {
            let want = apply_stages(m, n, &acc, &stages, None).unwrap();
            let run = |pieces: u32| {
                let mut c = fx.poisoned(m, n, bf);
                let o = LaunchOptions {
                    tile: Some(tile),
                    tail_splits: Some(pieces),
                    ..Default::default()
                };
                let report = launch(&fx.gpu.with_options(o), &a.t, &b.t, &mut c)
                    .unwrap_or_else(|e| panic!("{label} {m}x{n}x{k}, {pieces} pieces: {e}"));
                assert!(report.on_sm90(), "{label}: Hopper path: {report:?}");
                let plan = report.plan.expect("Hopper path");
                assert_eq!(report.tail_splits(), plan.tail_splits, "{label}");
                (plan, fx.get(&c))
            };
            let (whole_plan, whole) = run(1);
            assert_eq!(whole_plan.tail_splits, 1, "{label}: {whole_plan:?}");
            for pieces in [2, 3, 64] {
                let (plan, got) = run(pieces);
                let what = format!(
                    "{label} {m}x{n}x{k}, {} pieces (asked {pieces})",
                    plan.tail_splits
                );
                let left = (tiles_m * tiles_n) % sms;
                let cap = (k.div_ceil(64) as u32).min((sms / left) as u32);
                assert_eq!(plan.tail_splits, pieces.min(cap), "{what}: {plan:?}");
                let close = compare(&got, &want, threshold(bf));
                let err = close.frobenius;
                assert!(
                    close.passed(),
                    "{what}: not close to the reference: {close}; {}",
                    describe_mismatch(&got, &want, m, n, 0.05)
                );
                // Element by element against the whole round: within two bf16 steps. The
                // LayerNorm stores its pre-norm values y in bf16 (the finishing kernel reads
                // them back), and the summation order differs, so y may round one step apart:
                // 2⁻⁷·|y| at most, which reaches the output times |γ|/σ of its row (|γ| ≤ 1;
                // the rows' means are near 0 and |y|/σ below 4), on top of the output's own
                // step. A broken fixup is off by O(1).
                let tol = |w: f64| {
                    if label.contains("layer_norm") {
                        2f64.powi(-7) * (w.abs() + 4.0)
                    } else {
                        2.0 * 2f64.powi(-8) * w.abs().max(0.1)
                    }
                };
                let off = got
                    .iter()
                    .zip(&whole)
                    .position(|(g, w)| !((g - w).abs() <= tol(*w)));
                assert!(
                    off.is_none(),
                    "{what}: element {:?} differs from the whole round's",
                    off.map(|i| (i / n, i % n, got[i], whole[i]))
                );
                let (_, again) = run(pieces);
                assert!(
                    same_bits(&again, &got),
                    "{what}: a second launch gave different bits"
                );
                println!(
                    "{what}: rel err {err:.2e}, within the tolerance of the whole round, repeatable"
                );
            }
        }
    }
}

#[test]
fn t11_dependent_finishing_kernel_waits_for_its_gemm() {
    let Some(mut fx) = Fx::new("dependent_finish") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    // Launched as the GEMM's programmatic dependent (`LaunchOptions::dependent_finish`, sm_90), the
    // norm's finishing kernel's CTAs may start while the GEMM still writes C (poisoned with NaN
    // before each launch) and the row statistics, and must wait for it. The serial launch
    // against f64 at an awkward shape; then, also on a GEMM long enough for the finishing CTAs
    // to be resident well before it ends, the dependent launch bit for bit against the serial
    // one, eagerly and replayed from a CUDA graph (where the launch becomes a programmatic edge).
    let bf = DType::Bf16;
    // A Hopper tile narrower than N, so the norm goes through partials and the finishing kernel
    // (the planner picks a row-complete sm80 tile at the small shape).
    let tile = *TILES_SM90
        .iter()
        .find(|t| t.warps_m == 4)
        .expect("a ping-pong tile");
    // Under the sanitizer the long GEMM has two rounds of tiles and 8 k-tiles: instrumented, it
    // still runs long after the finishing CTAs are resident.
    let long = if sanitizing() {
        (2048, 2048, 512, false)
    } else {
        (4096, 2048, 4096, false)
    };
    for &(m, n, k, f64_check) in &[(300, 1000, 1000, true), long] {
        let a = fx.random(m, k, bf, 1.0);
        let b = fx.random(n, k, bf, 1.0);
        let ops = EpilogueOperands::random(&mut fx, m, n);
        let (_, stages, ln) = ops
            .kernels(false)
            .into_iter()
            .find(|k| k.0.contains("layer_norm"))
            .expect("the LayerNorm kernel");
        let launch = |g: &Gpu, c: &mut Tensor| {
            ln(g, &a.t, &b.t, c).inspect(|r| assert!(r.on_sm90(), "Hopper path: {r:?}"))
        };
        let run = |dependent: bool| {
            let mut c = fx.poisoned(m, n, bf);
            let o = LaunchOptions {
                tile: Some(tile),
                dependent_finish: dependent,
                ..Default::default()
            };
            let report = launch(&fx.gpu.with_options(o), &mut c).unwrap();
            let plan = report.plan.expect("Hopper path");
            assert!(
                matches!(plan.norm, NormPath::Partials { .. }),
                "{m}x{n}x{k}: no finishing kernel: {plan:?}"
            );
            assert_eq!(report.finish_dependent, dependent, "{m}x{n}x{k}");
            fx.get(&c)
        };
        let serial = run(false);
        if f64_check {
            let acc = gemm64(m, n, k, &a.v, &b.v);
            let want = apply_stages(m, n, &acc, &stages, None).unwrap();
            assert_close(
                &serial,
                &want,
                threshold(bf),
                &format!("{m}x{n}x{k} serial"),
            );
        }
        let same = |got: &[f64], what: &str| {
            let off = got
                .iter()
                .zip(&serial)
                .position(|(x, y)| x.to_bits() != y.to_bits());
            assert!(
                off.is_none(),
                "{m}x{n}x{k} {what}: element {:?} differs from the serial launch's",
                off.map(|i| (i / n, i % n, got[i], serial[i]))
            );
        };
        for i in 0..3 {
            same(&run(true), &format!("dependent launch {i}"));
        }
        let mut c = fx.poisoned(m, n, bf);
        let o = LaunchOptions {
            tile: Some(tile),
            dependent_finish: true,
            ..Default::default()
        };
        let mut captured = None;
        let graph = fx
            .gpu
            .with_options(o)
            .capture(|g| {
                captured = Some(launch(g, &mut c)?);
                Ok(())
            })
            .unwrap();
        assert!(
            captured.is_some_and(|r| r.finish_dependent),
            "{m}x{n}x{k}: the captured finish is not dependent"
        );
        for i in 0..3 {
            c.poison(&fx.gpu).unwrap();
            graph.replay().unwrap();
            same(&fx.get(&c), &format!("graph replay {i}"));
        }
        println!(
            "{m}x{n}x{k}: dependent finishing kernel matches the serial one, eager and in a graph"
        );
    }
}

#[test]
fn t12_bias_from_the_tiles_shared_memory_copy() {
    let Some(mut fx) = Fx::new("staged_bias") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    // The first column `bias` of a list reads a copy of the tile's bias that the consumer
    // warpgroup stored in shared memory after the mainloop. Against f64 on every tile, C staged
    // and stored directly: a bias one element into its buffer (2-byte aligned), tiles partly
    // past N (72, 1000, 3000, 33), one row, bias after `scale`, and f16 (whose bias has the
    // other 16-bit layout). Under the sanitizer the widest is 1800 (also partly past N).
    let wide = if sanitizing() { 1800 } else { 3000 };
    let shapes: &[(usize, usize, usize)] = &[
        (1, 8, 64),
        (130, 72, 128),
        (257, 1000, 64),
        (64, 33, 64),
        (513, wide, 192),
    ];
    for &tile in TILES_SM90 {
        for &(m, n, k) in shapes {
            for dt in [DType::Bf16, DType::F16] {
                let a = fx.random(m, k, dt, 1.0);
                let b = fx.random(n, k, dt, 1.0);
                let buf = fx.random(1, n + 1, dt, 1.0);
                let bias = buf.t.slice(0..1, 1..n + 1).unwrap();
                let bv = buf.v[1..].to_vec();
                let acc = gemm64(m, n, k, &a.v, &b.v);
                let kernels: Vec<(&str, Vec<RefStage>, Launch<'_>)> = if dt == DType::Bf16 {
                    vec![
                        (
                            "bias+gelu_tanh",
                            vec![RefStage::BiasCol(bv.clone()), RefStage::GeluTanh],
                            Box::new(|g, a, b, c| blocks::ffn_up_bias_gelu_tanh(g, a, b, c, &bias)),
                        ),
                        (
                            "scale(alpha)+bias+relu",
                            vec![
                                RefStage::Scale(-0.75),
                                RefStage::BiasCol(bv.clone()),
                                RefStage::Relu,
                            ],
                            Box::new(|g, a, b, c| {
                                hopper::h_scale_bias_relu(g, a, b, c, -0.75, &bias)
                            }),
                        ),
                    ]
                } else {
                    vec![
                        (
                            "bias (f16)",
                            vec![RefStage::BiasCol(bv.clone())],
                            Box::new(|g, a, b, c| blocks::bias_f16(g, a, b, c, &bias)),
                        ),
                        (
                            "bias+gelu (f16)",
                            vec![RefStage::BiasCol(bv.clone()), RefStage::Gelu],
                            Box::new(|g, a, b, c| blocks::ffn_up_bias_gelu_f16(g, a, b, c, &bias)),
                        ),
                    ]
                };
                for (label, stages, launch) in kernels {
                    let want = apply_stages(m, n, &acc, &stages, None).unwrap();
                    for direct in [false, true] {
                        let what = format!(
                            "{label} {m}x{n}x{k}, bias one element in, on {}x{} w{} (direct C {direct})",
                            tile.bm, tile.bn, tile.warps_m
                        );
                        let mut c = fx.poisoned(m, n, dt);
                        let o = LaunchOptions {
                            tile: Some(tile),
                            direct_store: direct,
                            ..Default::default()
                        };
                        let report = launch(&fx.gpu.with_options(o), &a.t, &b.t, &mut c)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert!(report.on_sm90(), "{what}: ran {:?}", report.entry);
                        assert_eq!(report.tma_store, !direct && (2 * n) % 16 == 0, "{what}");
                        let got = fx.get(&c);
                        let close = compare(&got, &want, threshold(dt));
                        assert!(
                            close.passed(),
                            "{what}: not close to the reference: {close}; {}",
                            describe_mismatch(&got, &want, m, n, 0.05)
                        );
                        if m > 500 && !direct {
                            println!("{what}: {close}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn t13_staged_c_copied_out_by_threads_into_a_strided_view() {
    let Some(mut fx) = Fx::new("staged_copy_out") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    // C inside a larger poisoned buffer: its first element 2-byte aligned, its row stride
    // N + 3 elements. TMA cannot store it, so kernels without a row norm copy their staged
    // chunks out thread by thread (element stores where a 16-byte piece is misaligned or
    // crosses N). Against f64 on every tile; every element outside C must keep its poison.
    let bf = DType::Bf16;
    let shapes: &[(usize, usize, usize)] = &[
        (1, 8, 64),
        (130, 72, 128),
        (257, 1000, 64),
        (64, 33, 64),
        (300, 200, 96),
    ];
    for &tile in TILES_SM90 {
        for &(m, n, k) in shapes {
            let a = fx.random(m, k, bf, 1.0);
            let b = fx.random(n, k, bf, 1.0);
            let ops = EpilogueOperands::random(&mut fx, m, n);
            let acc = gemm64(m, n, k, &a.v, &b.v);
            let kernels: Vec<(&str, Vec<RefStage>, Launch<'_>)> = ops
                .kernels(false)
                .into_iter()
                .filter(|(label, _, _)| !label.contains("layer_norm"))
                .collect();
            for (label, stages, _) in kernels {
                let what = format!(
                    "{label} {m}x{n}x{k} into a view (ld {}), on {}x{} w{}",
                    n + 3,
                    tile.bm,
                    tile.bn,
                    tile.warps_m
                );
                let want = apply_stages(m, n, &acc, &stages, None).unwrap();
                let (rows, ld) = (m + 2, n + 3);
                let mut buf = fx.poisoned(rows, ld, bf);
                let o = LaunchOptions {
                    tile: Some(tile),
                    ..Default::default()
                };
                let report = {
                    let mut c = buf.slice_mut(1..m + 1, 1..n + 1).unwrap();
                    let g = &fx.gpu.with_options(o);
                    match label {
                        "gemm" => gemm::gemm_bf16(g, &a.t, &b.t, &mut c),
                        "residual+silu" => hopper::h_residual_silu(g, &a.t, &b.t, &mut c, &ops.r.t),
                        _ => blocks::ffn_up_bias_gelu_tanh(g, &a.t, &b.t, &mut c, &ops.bias.t),
                    }
                    .unwrap_or_else(|e| panic!("{what}: {e}"))
                };
                assert!(report.on_sm90(), "{what}: ran {:?}", report.entry);
                assert!(!report.tma_store, "{what}: TMA cannot store this view");
                let all = fx.get(&buf);
                let mut got = Vec::with_capacity(m * n);
                for r in 0..rows {
                    for col in 0..ld {
                        let x = all[r * ld + col];
                        if (1..=m).contains(&r) && (1..=n).contains(&col) {
                            got.push(x);
                        } else {
                            assert!(x.is_nan(), "{what}: wrote {x} at ({r}, {col}) outside C");
                        }
                    }
                }
                let close = compare(&got, &want, threshold(bf));
                assert!(
                    close.passed(),
                    "{what}: not close to the reference: {close}; {}",
                    describe_mismatch(&got, &want, m, n, 0.05)
                );
            }
        }
    }
}

/// With an autotuner, the launcher times the Hopper candidates on a scratch C, caches the
/// fastest per key (in memory and on disk) and launches it; C ends as after one launch (an
/// `accumulate` epilogue adds its product once, though every candidate ran many times). A tuner
/// reading the same cache (another process) reuses the choice without timing; inside a graph
/// capture nothing is timed or recorded and the model's choice is captured. A device opened
/// with `Gpu::new` has an autotuner by default.
#[test]
fn t14_autotuner_times_candidates_on_scratch_and_caches_the_winner() {
    let Some(mut fx) = Fx::new("autotune") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    // A device opened as a user opens it has an autotuner unless it is switched off.
    let opened = Gpu::new(0).unwrap();
    assert_eq!(
        opened.set_autotuner(None).is_some(),
        autotune::autotune_from_env(),
        "a freshly opened device has an autotuner unless FUSED_GEMM_AUTOTUNE=0"
    );
    drop(opened);
    let dir = std::env::temp_dir().join(format!("fused-gemm-t14-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let before = fx.gpu.set_autotuner(Some(Autotuner::new(&dir)));
    let bf = DType::Bf16;
    // Under the sanitizer a smaller GEMM whose predicted time still calls for tuning
    // (`autotune::TUNE_MIN_US`) on the Hopper path; the capture below uses it too.
    let (m, n, k) = if sanitizing() {
        (1024, 1024, 3072)
    } else {
        (2048, 2048, 2048)
    };
    let accumulate = |fx: &mut Fx, label: &str| {
        let c0 = fx.random(m, n, bf, 1.0);
        case(
            fx,
            label,
            (m, n, k),
            bf,
            bf,
            vec![RefStage::Sigmoid, RefStage::Accumulate],
            Some(&c0),
            None,
            Some(true),
            hopper::h_sigmoid_accumulate,
        )
    };
    let first = accumulate(&mut fx, "sigmoid+accumulate (tuning)");
    let tuner = fx.gpu.set_autotuner(None).expect("set above");
    assert!(tuner.warnings().is_empty(), "{:?}", tuner.warnings());
    let entries: Vec<_> = tuner.entries().cloned().collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let e = &entries[0];
    println!("tuned: {} -> {:?} {:.4} ms", e.key, e.tile, e.measured_ms);
    assert_eq!(
        (e.key.mainloop, e.key.kernel.as_str(), e.tuned_on),
        (
            autotune::Mainloop::Sm90,
            "h_sigmoid_accumulate",
            (m as u32, n as u32, k as u32)
        )
    );
    assert!(e.measured_ms > 0.0 && e.measured_ms < 10.0, "{e:?}");
    assert!(
        e.key.driver >= 12000 && e.key.build != 0,
        "keyed by driver and build: {e:?}"
    );
    assert!(e.timed.len() >= 2, "{e:?}");
    assert!(e.timed.iter().any(|(t, _)| *t == e.tile), "{e:?}");
    println!("timed: {:?}", e.timed);
    let (bm, bn, bk, wm, wn, st) = e.tile;
    let cached = TileShape::new(bm, bn, bk, wm, wn, st);
    assert!(TILES_SM90.contains(&cached));
    assert_eq!(
        first.tile(),
        Some(cached),
        "launched {:?}, cached {cached:?}",
        first.entry
    );

    fx.gpu.set_autotuner(Some(Autotuner::new(&dir)));
    let again = accumulate(&mut fx, "sigmoid+accumulate (cached)");
    assert_eq!(
        again.tile(),
        Some(cached),
        "launched {:?}, cached {cached:?}",
        again.entry
    );

    // Another kernel, captured: the model's tile, nothing timed or recorded.
    let a = fx.random(m, k, bf, 1.0);
    let b = fx.random(n, k, bf, 1.0);
    let mut c = fx.poisoned(m, n, bf);
    let mut captured = None;
    let graph = fx
        .gpu
        .capture(|g| {
            captured = Some(gemm::gemm_bf16(g, &a.t, &b.t, &mut c)?);
            Ok(())
        })
        .expect("capture with an autotuner and nothing cached");
    let captured = captured.expect("the capture launched");
    assert!(captured.on_sm90(), "captured {:?}", captured.entry);
    graph.replay().unwrap();
    assert_close(
        &fx.get(&c),
        &gemm64(m, n, k, &a.v, &b.v),
        threshold(bf),
        "captured GEMM",
    );
    let tuner = fx.gpu.set_autotuner(before).expect("set above");
    let after: Vec<_> = tuner.entries().cloned().collect();
    assert_eq!(
        after, entries,
        "the cached launch and the capture recorded nothing"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A built-in kernel declared without `arch` (`blocks::ffn_up_bias_gelu`, bf16, B stored N×K)
/// has TMA + `wgmma` variants in the sm_90a module, and on an H100/H200 the launcher takes them
/// by itself for an aligned 512×768×256 problem; the output matches the f64 reference.
#[test]
fn t15_built_in_kernels_without_arch_run_the_hopper_mainloop() {
    let Some(mut fx) = Fx::new("built_in_kernels_without_arch_run_the_hopper_mainloop") else {
        return;
    };
    if !fx.hopper {
        return;
    }
    assert_eq!(fx.gpu.props().compute_capability, 90);
    let bf = DType::Bf16;
    let (m, n, k) = (512, 768, 256);
    let bias = fx.random(1, n, bf, 1.0);
    let report = case(
        &mut fx,
        "ffn_up_bias_gelu (no arch)",
        (m, n, k),
        bf,
        bf,
        vec![RefStage::BiasCol(bias.v.clone()), RefStage::Gelu],
        None,
        None,
        Some(true),
        |g, a, b, c| blocks::ffn_up_bias_gelu(g, a, b, c, &bias.t),
    );
    assert!(report.on_sm90(), "{report:?}");
    assert!(
        matches!(report.mainloop, Some(Mainloop::Sm90Tma { .. })),
        "ran {:?}: {}",
        report.mainloop,
        report.why
    );
    let tile = report.tile().expect("a plan");
    assert!(TILES_SM90.contains(&tile), "{tile:?} is not a Hopper tile");
    println!(
        "ffn_up_bias_gelu {m}x{n}x{k}: {} ({})",
        report.entry.unwrap_or("?"),
        report.why
    );
}
