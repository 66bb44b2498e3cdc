//! What happens on a machine without a CUDA driver: a typed error, never a panic.

use fused_gemm::host::{Error, Gpu};

#[test]
fn opening_a_gpu_without_a_driver_is_a_typed_error() {
    match Gpu::new(0) {
        Ok(g) => println!("a GPU is present ({}); nothing to check here", g.name()),
        Err(Error::NoDriver) => {
            assert!(Error::NoDriver.to_string().contains("no CUDA driver found"));
        }
        Err(Error::NoDevice { .. }) => {}
        Err(e) => panic!("unexpected error kind: {e}"),
    }
}

#[test]
fn a_missing_device_ordinal_is_reported() {
    match Gpu::new(4096) {
        Err(Error::NoDriver) | Err(Error::NoDevice { ordinal: 4096, .. }) => {}
        other => panic!("expected NoDriver or NoDevice, got {other:?}"),
    }
}
