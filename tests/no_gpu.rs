//! `Gpu::new` on any machine: a GPU or a typed error, never a panic. Without a CUDA driver the
//! error is `Error::NoDriver`; with one, an ordinal past the last device is `Error::NoDevice`.
//! Each test checks the case of the machine it runs on (CI has no GPU; a GPU host has one).

use fused_gemm::host::gpu::driver_present;
use fused_gemm::host::{Error, Gpu};

#[test]
fn opening_gpu_0_gives_a_gpu_or_a_typed_error() {
    assert!(Error::NoDriver.to_string().contains("no CUDA driver found"));
    let driver = driver_present();
    match Gpu::new(0) {
        Ok(g) => {
            assert!(driver, "a GPU opened, but no driver was detected");
            assert!(!g.name().is_empty());
            println!("GPU 0 opens: {}", g.name());
        }
        Err(Error::NoDriver) => assert!(!driver, "driver detected, yet NoDriver"),
        Err(Error::NoDevice { ordinal: 0, count }) => {
            assert!(driver, "NoDevice without a driver");
            assert_eq!(count, 0);
        }
        Err(e) => panic!("unexpected error kind: {e}"),
    }
}

#[test]
fn a_missing_device_ordinal_is_reported() {
    match Gpu::new(4096) {
        Err(Error::NoDriver) => assert!(!driver_present()),
        Err(Error::NoDevice {
            ordinal: 4096,
            count,
        }) => {
            assert!(driver_present(), "NoDevice without a driver");
            assert!(count < 4096);
        }
        other => panic!("expected NoDriver or NoDevice, got {other:?}"),
    }
}
