//! Host launchers for the hand-written built-in kernels.

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use fused_gemm_device::kernel::elementwise::AxpyArgs;
use fused_gemm_device::kernel::naive_gemm::GemmNaiveArgs;
use fused_gemm_host::launch::LaunchShape;
use fused_gemm_host::{Error, Gpu, Result};

use crate::kernels::basic;
use crate::ptx::BUILTIN;

use fused_gemm_host::cudarc;

/// `y ← alpha·x + y` on f32 vectors of equal length.
///
/// # Errors
/// [`Error::InvalidArgument`] if `x` and `y` differ in length; launch and driver errors.
pub fn axpy(gpu: &Gpu, alpha: f32, x: &CudaSlice<f32>, y: &mut CudaSlice<f32>) -> Result<()> {
    if x.len() != y.len() {
        return Err(Error::invalid(
            "x",
            format!("length {} (as y)", y.len()),
            x.len(),
        ));
    }
    if x.is_empty() {
        return Ok(());
    }
    let n = x.len() as u64;
    // Enough CTAs to fill every SM several times; the kernel grid-strides over the rest.
    let shape = LaunchShape::linear(n, 256, gpu.props().sm_count * 32)?;
    let kernel = gpu.kernel(&BUILTIN, basic::fg_axpy_f32)?;
    let cfg = shape.prepare(&kernel, gpu.props())?;
    // Device addresses, with guards that order this launch after other streams' writes and
    // record its reads and writes for cudarc, as its launch builder does for buffer arguments.
    let (x, _read) = x.device_ptr(gpu.stream());
    let (y, _written) = y.device_ptr_mut(gpu.stream());
    let args = AxpyArgs {
        n,
        alpha,
        x: x as *const f32,
        y: y as *mut f32,
    };
    // SAFETY: both buffers hold n elements.
    unsafe { kernel.launch(gpu, cfg, &args) }?;
    Ok(())
}

/// `C ← A·B` with the naive (one thread per element, no tensor cores) f32 kernel.
/// A is M×K, B is K×N, C is M×N, all row-major and contiguous.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the buffer whose length does not match its shape, or a
/// zero or too-large dimension; [`Error::LaunchLimit`] if M needs more than 65535·16 rows.
pub fn gemm_naive_f32(
    gpu: &Gpu,
    m: usize,
    n: usize,
    k: usize,
    a: &CudaSlice<f32>,
    b: &CudaSlice<f32>,
    c: &mut CudaSlice<f32>,
) -> Result<()> {
    for (name, v) in [("m", m), ("n", n), ("k", k)] {
        if v == 0 || v > i32::MAX as usize {
            return Err(Error::invalid(name, "1..=2^31-1", v));
        }
    }
    for (name, len, want) in [
        ("a", a.len(), m * k),
        ("b", b.len(), k * n),
        ("c", c.len(), m * n),
    ] {
        if len != want {
            return Err(Error::invalid(name, format!("{want} elements"), len));
        }
    }
    let shape = LaunchShape {
        grid: (n.div_ceil(16) as u32, m.div_ceil(16) as u32, 1),
        block: (16, 16, 1),
        smem_bytes: 0,
    };
    let kernel = gpu.kernel(&BUILTIN, basic::fg_gemm_naive_f32)?;
    let cfg = shape.prepare(&kernel, gpu.props())?;
    let (m, n, k) = (m as u32, n as u32, k as u32);
    let (a, _read_a) = a.device_ptr(gpu.stream());
    let (b, _read_b) = b.device_ptr(gpu.stream());
    let (c, _written) = c.device_ptr_mut(gpu.stream());
    let args = GemmNaiveArgs {
        m,
        n,
        k,
        a: a as *const f32,
        lda: k,
        b: b as *const f32,
        ldb: n,
        c: c as *mut f32,
        ldc: n,
    };
    // SAFETY: lengths checked above.
    unsafe { kernel.launch(gpu, cfg, &args) }?;
    Ok(())
}
