//! Driver calls cudarc does not wrap, in cudarc's `result` style: thin, `unsafe` where the
//! driver is, C prefixes dropped, failures as [`DriverError`] (the raw status).

/// Whether the CUDA driver library can be loaded on this machine. Never panics.
pub fn driver_present() -> bool {
    // cudarc panics when asked to use a library it cannot load; probe first.
    std::panic::catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false)
}

use cudarc::driver::DriverError;
use cudarc::driver::sys;

/// `cuDriverGetVersion`: the CUDA version the installed driver supports, as major·1000 +
/// minor·10 (13000 for CUDA 13.0).
///
/// # Errors
/// The driver's status when the call fails.
pub fn driver_version() -> Result<u32, DriverError> {
    let mut v = 0;
    // SAFETY: one out-parameter, written by the driver.
    unsafe { sys::cuDriverGetVersion(&mut v) }.result()?;
    Ok(v.max(0) as u32)
}

/// `cuFuncLoad`: finishes loading `function`'s code onto the device, which lazy module loading
/// (`CUDA_MODULE_LOADING=LAZY`, the default) otherwise defers to its first launch; nothing
/// for a function already loaded. Drivers from CUDA 12.4 on only: cudarc panics when the
/// symbol is missing.
///
/// # Errors
/// The driver's status when the call fails.
pub fn func_load(function: &cudarc::driver::CudaFunction) -> Result<(), DriverError> {
    // SAFETY: the handle is live while `function` holds its module.
    unsafe { sys::cuFuncLoad(function.cu_function()) }.result()
}

/// Tensor maps for the tensor memory accelerator (CUDA Driver API, "Tensor Map Object
/// Management").
pub mod tensor_map {
    use super::*;

    pub use sys::{
        CUtensorMap as TensorMap, CUtensorMapDataType as DataType,
        CUtensorMapFloatOOBfill as OobFill, CUtensorMapInterleave as Interleave,
        CUtensorMapL2promotion as L2Promotion, CUtensorMapSwizzle as Swizzle,
    };

    /// `cuTensorMapEncodeTiled`: encodes the 128-byte descriptor of a `rank`-dimensional tiled
    /// view of global memory. Dimension 0 is the contiguous one. `global_dims` and `box_dims`
    /// have `rank` entries (elements); `global_strides` has `rank - 1` entries, the byte
    /// strides of dimensions 1.. (multiples of 16, below 2⁴⁰); `element_strides` has `rank`
    /// entries (1 for dense boxes).
    ///
    /// # Errors
    /// `CUDA_ERROR_INVALID_VALUE` when an argument breaks the driver's rules (address not
    /// 16-byte aligned, a stride not a multiple of 16, a box dimension above 256 or, with
    /// 128-byte swizzle, an inner box over 128 bytes).
    ///
    /// # Safety
    /// The driver must be initialised (a context exists). `global_address` is only recorded,
    /// not dereferenced; the map is valid for as long as that memory is.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn encode_tiled(
        data_type: DataType,
        global_address: u64,
        global_dims: &[u64],
        global_strides: &[u64],
        box_dims: &[u32],
        element_strides: &[u32],
        interleave: Interleave,
        swizzle: Swizzle,
        l2_promotion: L2Promotion,
        oob_fill: OobFill,
    ) -> Result<TensorMap, DriverError> {
        let rank = global_dims.len();
        if rank == 0
            || rank > 5
            || box_dims.len() != rank
            || element_strides.len() != rank
            || global_strides.len() + 1 != rank
        {
            return Err(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        let mut map = std::mem::MaybeUninit::<TensorMap>::uninit();
        unsafe {
            sys::cuTensorMapEncodeTiled(
                map.as_mut_ptr(),
                data_type,
                rank as u32,
                global_address as *mut std::ffi::c_void,
                global_dims.as_ptr(),
                global_strides.as_ptr(),
                box_dims.as_ptr(),
                element_strides.as_ptr(),
                interleave,
                swizzle,
                l2_promotion,
                oob_fill,
            )
            .result()?;
            Ok(map.assume_init())
        }
    }
}

/// Kernel launches with attributes cudarc's launch builder does not set.
pub mod launch {
    use super::*;

    /// The `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION` attribute of a `cluster`-shaped launch.
    fn cluster_attribute(cluster: (u32, u32, u32)) -> sys::CUlaunchAttribute {
        // SAFETY: a C struct of integers and a union of them: all zeros is a valid value.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 {
            x: cluster.0,
            y: cluster.1,
            z: cluster.2,
        };
        attr
    }

    /// A launch configuration with the attributes `attrs` (which must outlive its use).
    fn config(
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        stream: sys::CUstream,
        attrs: &mut [sys::CUlaunchAttribute],
    ) -> sys::CUlaunchConfig {
        sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block.0,
            blockDimY: block.1,
            blockDimZ: block.2,
            sharedMemBytes: shared_mem_bytes,
            hStream: stream,
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as u32,
        }
    }

    /// How many clusters of `cluster` CTAs of `func` (`block` threads, `shared_mem_bytes` of
    /// dynamic shared memory each) the device runs at once (`cuOccupancyMaxActiveClusters`):
    /// a persistent grid of more clusters would leave some waiting for a whole CTA lifetime.
    ///
    /// # Errors
    /// The driver's errors (e.g. `CUDA_ERROR_INVALID_CLUSTER_SIZE`).
    ///
    /// # Safety
    /// `func` is a loaded kernel whose dynamic shared-memory limit allows `shared_mem_bytes`.
    pub unsafe fn max_active_clusters(
        func: sys::CUfunction,
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        cluster: (u32, u32, u32),
    ) -> Result<u32, DriverError> {
        let mut attr = [cluster_attribute(cluster)];
        let config = config(
            cluster,
            block,
            shared_mem_bytes,
            std::ptr::null_mut(),
            &mut attr,
        );
        let mut n: std::ffi::c_int = 0;
        unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, func, &config).result()? };
        Ok(n.max(0) as u32)
    }

    /// `cuLaunchKernelEx` with a thread-block cluster shape (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`,
    /// sm_90+). `params` holds one pointer per kernel parameter, to its value, in order.
    ///
    /// # Errors
    /// The driver's launch errors (e.g. `CUDA_ERROR_CLUSTER_OUT_OF_RESOURCES` when a cluster
    /// cannot be co-scheduled, `CUDA_ERROR_INVALID_CLUSTER_SIZE`).
    ///
    /// # Safety
    /// `func` is a loaded kernel whose parameters are exactly the values `params` points to
    /// (types and order); the grid is a multiple of the cluster shape; the values stay alive
    /// for the call (the driver copies them); whatever the kernel reads and writes is valid
    /// for its whole run on `stream`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn kernel_with_cluster(
        func: sys::CUfunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        stream: sys::CUstream,
        cluster: (u32, u32, u32),
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<(), DriverError> {
        let mut attr = [cluster_attribute(cluster)];
        let config = config(grid, block, shared_mem_bytes, stream, &mut attr);
        unsafe { launch_ex(&config, func, params) }
    }

    /// `cuLaunchKernelEx` as a programmatic dependent of the kernel launched before it on
    /// `stream` (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`, sm_90+): it may start
    /// once every CTA of that kernel has executed `griddepcontrol.launch_dependents` or exited,
    /// before that kernel completes. Source: CUDA Programming Guide, "Programmatic Dependent
    /// Launch and Synchronization"; captured into CUDA graphs as a programmatic edge.
    ///
    /// # Errors
    /// The driver's launch errors.
    ///
    /// # Safety
    /// As [`kernel_with_cluster`], and: `func` executes `griddepcontrol.wait` before it touches
    /// any memory the previous kernel on `stream` writes (or that reads it), since nothing else
    /// orders the two.
    pub unsafe fn programmatic_dependent(
        func: sys::CUfunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        stream: sys::CUstream,
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<(), DriverError> {
        // SAFETY: as `cluster_attribute`.
        let mut attr: [sys::CUlaunchAttribute; 1] = unsafe { std::mem::zeroed() };
        attr[0].id =
            sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr[0].value.programmaticStreamSerializationAllowed = 1;
        let config = config(grid, block, shared_mem_bytes, stream, &mut attr);
        unsafe { launch_ex(&config, func, params) }
    }

    /// `cuLaunchKernelEx` of `func` with `config` and the parameter pointers `params`.
    ///
    /// # Safety
    /// As the public launches above.
    unsafe fn launch_ex(
        config: &sys::CUlaunchConfig,
        func: sys::CUfunction,
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<(), DriverError> {
        unsafe {
            sys::cuLaunchKernelEx(config, func, params.as_mut_ptr(), std::ptr::null_mut()).result()
        }
    }
}
