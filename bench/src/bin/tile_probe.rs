//! Times the plain bf16 GEMM with every compiled tile shape on a few large shapes, to choose the
//! default tile set and calibrate the planner: prints ms and TFLOP/s per (shape, tile). On an
//! H100/H200 that includes the TMA + `wgmma` tiles of the sm_90a module.
//!
//! ```text
//! cargo run --release -p fused-gemm-bench --bin tile_probe
//! ```

use std::process::ExitCode;

use fused_gemm::device::gemm::TileShape;
use fused_gemm::device::target::Mainloop;
use fused_gemm::device::types::DType;
use fused_gemm::host::kernel::GemmKernelSpec;
use fused_gemm::host::{Gpu, LaunchOptions, LaunchReport, Result, Tensor};
use fused_gemm::kernels::gemm;
use rand::{RngExt, SeedableRng};

type Launch = fn(&Gpu, &Tensor, &Tensor, &mut Tensor) -> Result<LaunchReport>;

fn main() -> ExitCode {
    let gpu = match Gpu::new(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tile_probe: {e}");
            return ExitCode::from(2);
        }
    };
    let shapes: &[(usize, usize, usize)] = &[
        (8192, 8192, 8192),
        (8192, 4096, 4096),
        (4096, 3072, 768),
        (4096, 768, 3072),
        (4096, 4096, 1024),
        (2048, 28672, 4096),
    ];
    let kernels: [(&GemmKernelSpec, Launch); 4] = [
        (&gemm::GEMM_BF16, |g, a, b, c| gemm::gemm_bf16(g, a, b, c)),
        (&gemm::GEMM_BF16_T128X256, |g, a, b, c| {
            gemm::gemm_bf16_t128x256(g, a, b, c)
        }),
        (&gemm::GEMM_BF16_T256X128, |g, a, b, c| {
            gemm::gemm_bf16_t256x128(g, a, b, c)
        }),
        (&gemm::GEMM_BF16_T128X128X64, |g, a, b, c| {
            gemm::gemm_bf16_t128x128x64(g, a, b, c)
        }),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    println!(
        "{:<22} {:<38} {:>9} {:>9}",
        "M×N×K", "tile (BM×BN×BK warps stages mainloop)", "ms", "TFLOP/s"
    );
    for &(m, n, k) in shapes {
        let a_host: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let b_host: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let run = || -> Result<()> {
            let a = Tensor::from_f32(&gpu, m, k, DType::Bf16, &a_host)?;
            let b = Tensor::from_f32(&gpu, n, k, DType::Bf16, &b_host)?;
            let mut c = Tensor::zeros(&gpu, m, n, DType::Bf16)?;
            for (spec, launch) in &kernels {
                // The 16-byte variants of the mainloops in the module this device loads.
                let arch = gpu.module_arch(spec.ptx)?;
                let tiles: Vec<(TileShape, Mainloop)> = spec
                    .variants
                    .iter()
                    .filter(|v| v.vec && arch.has(v.mainloop))
                    .map(|v| (v.tile, v.mainloop))
                    .collect();
                for (t, mainloop) in tiles {
                    let forced = gpu.with_options(LaunchOptions {
                        tile: Some(t),
                        splits: Some(1),
                        ..Default::default()
                    });
                    let ms = forced.time_ms(3, 15, |g| launch(g, &a, &b, &mut c).map(drop));
                    let shape = format!("{m}×{n}×{k}");
                    let tile = format!(
                        "{}×{}×{} {}x{} s{} {mainloop}",
                        t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages
                    );
                    match ms {
                        Ok(ms) => println!(
                            "{shape:<22} {tile:<38} {ms:>9.4} {:>9.1}",
                            2.0 * (m * n * k) as f64 / (ms as f64 * 1e-3) / 1e12
                        ),
                        Err(e) => println!("{shape:<22} {tile:<38} error: {e}"),
                    }
                }
            }
            Ok(())
        };
        if let Err(e) = run() {
            eprintln!("tile_probe: {m}×{n}×{k}: {e}");
        }
    }
    ExitCode::SUCCESS
}
