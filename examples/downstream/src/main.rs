//! Runs this crate's two kernels on the first GPU: checks each against an f64 reference on
//! fresh random inputs and prints what ran (`LaunchReport`). With `--features compare` it then
//! times them against the built-in `[bias, gelu]` kernel at 8192³ and at 4096×3072×768
//! (M×N×K): medians of interleaved runs, CUDA events, L2 flushed before each run.

use std::process::ExitCode;

use fused_gemm::device::math::gelu_erf;
use fused_gemm::device::types::DType;
use fused_gemm::host::testing::{compare, rng, uniform};
use fused_gemm::host::{Gpu, LaunchReport, Result, Tensor, reference};
use fused_gemm_downstream::{bias_gelu, bias_squared_relu, squared_relu};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Operands of one problem: A M×K, B N×K, bias N, C M×N, all bf16.
struct Operands {
    a: Tensor,
    b: Tensor,
    bias: Tensor,
    c: Tensor,
}

impl Operands {
    fn new(gpu: &Gpu, (m, n, k): (usize, usize, usize), seed: &str) -> Result<Self> {
        let mut r = rng(seed);
        Ok(Operands {
            a: Tensor::from_f32(gpu, m, k, DType::Bf16, &uniform(&mut r, m * k))?,
            b: Tensor::from_f32(gpu, n, k, DType::Bf16, &uniform(&mut r, n * k))?,
            bias: Tensor::vector_from_f32(gpu, DType::Bf16, &uniform(&mut r, n))?,
            c: Tensor::zeros(gpu, m, n, DType::Bf16)?,
        })
    }
}

/// A kernel of this crate (or the built-in one) as a launch over [`Operands`].
type Launch = fn(&Gpu, &mut Operands) -> Result<LaunchReport>;

const KERNELS: [(&str, Launch, fn(f32) -> f32); 2] = [
    (
        "bias_gelu",
        |g, o| bias_gelu(g, &o.a, &o.b, &mut o.c, &o.bias),
        gelu_erf,
    ),
    (
        "bias_squared_relu",
        |g, o| bias_squared_relu(g, &o.a, &o.b, &mut o.c, &o.bias),
        squared_relu,
    ),
];

fn run() -> Result<bool> {
    let gpu = Gpu::new(0)?;
    println!(
        "{} (compute capability {})",
        gpu.name(),
        gpu.props().compute_capability
    );
    let hopper = gpu.props().compute_capability == 90;
    let mut ok = true;
    // An awkward shape (no dimension a multiple of a tile) and a tile-aligned one.
    for shape in [(17, 4095, 200), (512, 768, 256)] {
        for (name, launch, act) in KERNELS {
            let mut o = Operands::new(&gpu, shape, name)?;
            o.c.poison(&gpu)?;
            let report = launch(&gpu, &mut o)?;
            let want = reference_output(&gpu, &o, shape, act)?;
            let got: Vec<f64> = o.c.download_f32(&gpu)?.into_iter().map(f64::from).collect();
            let close = compare(&got, &want, 1e-2);
            let tma_expected = hopper && shape.2 % 8 == 0;
            let mainloop_ok = !tma_expected || report.on_sm90();
            println!(
                "{name:>18} {:>14}: {} {} tile {:?}, {}",
                format!("{}x{}x{}", shape.0, shape.1, shape.2),
                if close.passed() && mainloop_ok {
                    "ok  "
                } else {
                    "FAIL"
                },
                report.mainloop.map_or("-", |m| m.name()),
                report.tile().map(|t| (t.bm, t.bn, t.bk)),
                close
            );
            if !mainloop_ok {
                println!(
                    "    expected the TMA + wgmma mainloop on this GPU: {}",
                    report.why
                );
            }
            ok &= close.passed() && mainloop_ok;
        }
    }
    #[cfg(feature = "compare")]
    compare_with_builtin(&gpu)?;
    Ok(ok)
}

/// `act(A·B + bias)` in f64 from the bf16 values on the device.
fn reference_output(
    gpu: &Gpu,
    o: &Operands,
    (m, n, k): (usize, usize, usize),
    act: fn(f32) -> f32,
) -> Result<Vec<f64>> {
    let f64s = |t: &Tensor| -> Result<Vec<f64>> {
        Ok(t.download_f32(gpu)?.into_iter().map(f64::from).collect())
    };
    let (a, b, bias) = (f64s(&o.a)?, f64s(&o.b)?, f64s(&o.bias)?);
    let mut c = reference::gemm(m, n, k, &a, &b, true);
    for (i, x) in c.iter_mut().enumerate() {
        *x = f64::from(act((*x + bias[i % n]) as f32));
    }
    Ok(c)
}

#[cfg(feature = "compare")]
fn compare_with_builtin(gpu: &Gpu) -> Result<()> {
    use fused_gemm::host::cudarc::driver::sys::CUevent_flags;

    let builtin: Launch =
        |g, o| fused_gemm::kernels::blocks::ffn_up_bias_gelu(g, &o.a, &o.b, &mut o.c, &o.bias);
    let columns: [(&str, Launch); 3] = [
        ("built-in [bias, gelu]", builtin),
        ("bias_gelu", KERNELS[0].1),
        ("bias_squared_relu", KERNELS[1].1),
    ];
    const ROUNDS: usize = 30;
    // Written before every timed run: more than the L2 of any current GPU, so each run reads
    // its operands from DRAM.
    let mut flush = gpu.zeros::<u8>(256 << 20)?;
    let ctx = gpu.context();
    let event = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
    println!("\nmedian of {ROUNDS} interleaved runs, L2 flushed before each");
    for shape in [(8192, 8192, 8192), (4096, 3072, 768)] {
        let mut o = Operands::new(gpu, shape, "timing")?;
        let mut reports = Vec::new();
        for (_, launch) in &columns {
            // Warm-up: modules loaded, plans and tensor maps cached.
            for _ in 0..3 {
                launch(gpu, &mut o)?;
            }
            reports.push(launch(gpu, &mut o)?);
        }
        let mut ms = vec![Vec::with_capacity(ROUNDS); columns.len()];
        for round in 0..ROUNDS {
            for j in 0..columns.len() {
                let i = (round + j) % columns.len();
                gpu.stream().memset_zeros(&mut flush)?;
                let (start, end) = (event()?, event()?);
                start.record(gpu.stream())?;
                columns[i].1(gpu, &mut o)?;
                end.record(gpu.stream())?;
                end.synchronize()?;
                ms[i].push(start.elapsed_ms(&end)? as f64);
            }
        }
        let medians: Vec<f64> = ms
            .iter_mut()
            .map(|v| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            })
            .collect();
        let (m, n, k) = shape;
        let flops = 2.0 * m as f64 * n as f64 * k as f64;
        println!("{m}x{n}x{k}:");
        for ((name, _), (t, r)) in columns.iter().zip(medians.iter().zip(&reports)) {
            println!(
                "  {name:>22}: {t:8.3} ms  {:6.1} TFLOP/s  {:+6.1} % vs built-in  {} tile {:?}",
                flops / t / 1e9,
                (t / medians[0] - 1.0) * 100.0,
                r.mainloop.map_or("-", |m| m.name()),
                r.tile().map(|t| (t.bm, t.bn, t.bk)),
            );
        }
    }
    Ok(())
}
