//! Helpers for GPU tests: skip cleanly without a GPU, fresh seeded random data, poisoning.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::{Error, Gpu};

/// Opens GPU 0, or prints why GPU tests are skipped and returns `None` (no driver, no device).
/// Any other failure to open the device is a test failure.
pub fn gpu_or_skip(test: &str) -> Option<Gpu> {
    match Gpu::new(0) {
        Ok(g) => Some(g),
        Err(e @ (Error::NoDriver | Error::NoDevice { .. })) => {
            eprintln!("skipping GPU test `{test}`: {e}");
            None
        }
        Err(e) => panic!("GPU present but unusable: {e}"),
    }
}

/// A fresh random generator; its seed is printed so a failure can be replayed with
/// `FUSED_GEMM_SEED=<seed>`.
pub fn rng(test: &str) -> StdRng {
    let seed = std::env::var("FUSED_GEMM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("{test}: seed {seed}");
    StdRng::seed_from_u64(seed)
}

/// `len` values uniform in `[-1, 1)`.
pub fn uniform(rng: &mut StdRng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// The value output buffers are filled with before a kernel runs: any element a kernel fails to
/// write stays NaN and fails every comparison.
pub const POISON_F32: f32 = f32::NAN;
