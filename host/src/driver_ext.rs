//! Driver calls cudarc does not wrap, in cudarc's `result` style: thin, `unsafe` where the
//! driver is, C prefixes dropped, failures as [`DriverError`] (the raw status).

use cudarc::driver::DriverError;
use cudarc::driver::sys;

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
