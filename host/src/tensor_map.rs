//! TMA descriptors of the Hopper mainloop's operands, in device memory.
//!
//! The descriptors live in device memory written by the host ([`TensorMapCache`]), not in the
//! kernel parameters: rustc's PTX kernel ABI cannot give a by-value parameter the 64-byte
//! alignment a `CUtensorMap` needs (it rejects alignments above 16), and taking the address of
//! a parameter (`__grid_constant__`) has no Rust spelling. A map is uploaded once per distinct
//! (address, shape, stride, box) and never rewritten, so a kernel in flight or a CUDA graph can
//! keep using its address; each CTA fences it once (`fence.proxy.tensormap::generic.acquire`).
//! Uploads go through a private stream and are waited for on the host, so they also work while
//! another stream is being captured into a graph.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use fused_gemm_device::types::DType;

use crate::driver_ext::tensor_map::{self, DataType, Interleave, L2Promotion, OobFill, Swizzle};
use crate::tensor::MatrixDesc;
use crate::validate::{Checked, GemmCall, Operand};
use crate::{Error, Gpu, Result};

/// The key of an M×N matrix of `dtype` shaped like the output (C or `residual`), moved in boxes
/// of 64 × 64 ([`sm90::EPI_COLS`] columns, a consumer warpgroup's 64 rows), or `None` where TMA
/// cannot take it: not 16-bit, address or row stride not 16-byte aligned (a single row's stride
/// is never used), a row not a whole number of 16-byte pieces, or M or N zero.
///
/// A TMA store writes whole 16-byte pieces: where a row ends inside one, it also writes the
/// columns after N up to the piece's end (measured on an H100: zeros in the 1-7 columns past an
/// odd N of 16-bit C), so such a C is stored by the threads instead.
pub(crate) fn output_map_key(mat: &MatrixDesc, dtype: DType, checked: &Checked) -> Option<MapKey> {
    let stride = mat.ld as u64 * dtype.size() as u64;
    let ok = dtype.size() == 2
        && mat.ptr.is_multiple_of(16)
        && (stride.is_multiple_of(16) || checked.m <= 1)
        && (checked.n as u64 * dtype.size() as u64).is_multiple_of(16)
        && checked.m > 0
        && checked.n > 0;
    ok.then(|| {
        MapKey::new(
            mat.ptr,
            dtype,
            checked.n as u64,
            checked.m as u64,
            mat.ld as u64,
            64,
        )
    })
}

/// Whether C and the epilogue's `residual` operands (none, or one) can each be moved with TMA (as
/// for [`c_map_key`](crate::launch::sm90::c_map_key) and [`residual_map_key`]): what a row-norm
/// group needs to take its last tile's epilogue through the ring. `false` for two residuals, which
/// are read per thread.
pub fn epilogue_tma(call: &GemmCall<'_>, checked: &Checked) -> bool {
    let residual = call
        .epilogue
        .iter()
        .any(|e| matches!(e.operand, Operand::Residual(_)));
    output_map_key(&call.c, call.out_dtype, checked).is_some()
        && (!residual || residual_map_key(call, checked).is_some())
}

/// The tensor map key of the `residual` matrix for
/// [`Sm90Args::tmap_r`](fused_gemm_device::gemm::sm90::Sm90Args::tmap_r) (used only with C's map),
/// or `None`: exactly one `residual` operand, no row norm before it (that stage would run in the
/// finishing kernel), and a matrix TMA can move as it moves C
/// ([`c_map_key`](crate::launch::sm90::c_map_key)).
pub fn residual_map_key(call: &GemmCall<'_>, checked: &Checked) -> Option<MapKey> {
    let mut residuals = call.epilogue.iter().filter_map(|e| match e.operand {
        Operand::Residual(r) => Some((e.stage, r)),
        _ => None,
    });
    let (stage, r) = residuals.next()?;
    if residuals.next().is_some() || call.row_norm_stage.is_some_and(|s| s < stage) {
        return None;
    }
    output_map_key(&r, r.dtype, checked)
}

/// What identifies a tensor map of a K-major operand: a `rows × k` matrix of `dtype` at `ptr`
/// with leading dimension `ld` elements, read in boxes of `box_rows` rows × 64 columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MapKey {
    ptr: u64,
    dtype: DType,
    k: u64,
    rows: u64,
    stride_bytes: u64,
    box_rows: u32,
}

impl MapKey {
    /// The key of a `rows × k` operand (leading dimension `ld` elements). A single row may have
    /// any leading dimension: its stride is never used, so it is rounded up to 16 bytes.
    pub fn new(ptr: u64, dtype: DType, k: u64, rows: u64, ld: u64, box_rows: u32) -> Self {
        let stride = ld * dtype.size() as u64;
        MapKey {
            ptr,
            dtype,
            k,
            rows,
            stride_bytes: if rows <= 1 {
                stride.next_multiple_of(16).max(16)
            } else {
                stride
            },
            box_rows,
        }
    }

    /// Checks the rules of `cuTensorMapEncodeTiled` (CUDA Driver API, "Tensor Map Object
    /// Management") that [`MapKey::encode`] relies on, so that a map TMA cannot describe is a
    /// typed error naming the rule rather than the driver's `CUDA_ERROR_INVALID_VALUE`: a
    /// 16-byte aligned base, dimensions in 1..=2³², a row stride that is a multiple of 16
    /// bytes below 2⁴⁰, box rows in 1..=256, and an inner box (64 elements) of at most the
    /// 128 bytes of the 128-byte swizzle.
    ///
    /// # Errors
    /// [`Error::Misaligned`] for the base or the stride; [`Error::TooLarge`] for the
    /// dimensions, the stride and the box; [`Error::InvalidArgument`] for an empty dimension or
    /// box.
    pub fn check(&self) -> Result<()> {
        const ARG: &str = "tensor map";
        let misaligned = |what, actual| Error::Misaligned {
            arg: ARG,
            what,
            align: 16,
            actual,
        };
        let too_large = |max: u64, actual: u64| Error::TooLarge {
            arg: ARG,
            max,
            actual,
        };
        if !self.ptr.is_multiple_of(16) {
            return Err(misaligned("address", self.ptr));
        }
        if !self.stride_bytes.is_multiple_of(16) {
            return Err(misaligned("row stride (bytes)", self.stride_bytes));
        }
        if self.stride_bytes >= 1 << 40 {
            return Err(too_large((1 << 40) - 16, self.stride_bytes));
        }
        for dim in [self.k, self.rows] {
            if dim == 0 {
                return Err(Error::invalid(ARG, "dimensions of at least 1", dim));
            }
            if dim > 1 << 32 {
                return Err(too_large(1 << 32, dim));
            }
        }
        if self.box_rows == 0 {
            return Err(Error::invalid(ARG, "box rows in 1..=256", self.box_rows));
        }
        if self.box_rows > 256 {
            return Err(too_large(256, self.box_rows as u64));
        }
        let inner_bytes = fused_gemm_device::gemm::sm90::BK as u64 * self.dtype.size() as u64;
        if inner_bytes > 128 {
            return Err(too_large(128, inner_bytes));
        }
        Ok(())
    }

    /// Encodes the map: dimensions (K, rows), 128-byte swizzle, boxes of 64 × `box_rows`,
    /// zeros outside the matrix, 256-byte L2 promotion.
    ///
    /// # Errors
    /// [`MapKey::check`]'s errors; the driver's error for anything else it refuses.
    pub fn encode(&self) -> Result<tensor_map::TensorMap> {
        self.check()?;
        let data_type = match self.dtype {
            DType::Bf16 => DataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            DType::F16 => DataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            DType::F32 => DataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        };
        // SAFETY: the address is only recorded; Gpu::new initialised the driver.
        let map = unsafe {
            tensor_map::encode_tiled(
                data_type,
                self.ptr,
                &[self.k, self.rows],
                &[self.stride_bytes],
                &[fused_gemm_device::gemm::sm90::BK, self.box_rows],
                &[1, 1],
                Interleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                Swizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                L2Promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                OobFill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        }?;
        Ok(map)
    }
}

/// Tensor maps in device memory, one 128-byte slot per distinct [`MapKey`], uploaded on first
/// use and never rewritten or freed before the [`Gpu`]'s workspace is (see the [module
/// docs](self)). Grows by 128 bytes per distinct operand.
#[derive(Default)]
pub struct TensorMapCache {
    slots: HashMap<MapKey, u64>,
    chunks: Vec<CudaSlice<u8>>,
    used_in_last: usize,
    stream: Option<Arc<CudaStream>>,
}

impl std::fmt::Debug for TensorMapCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorMapCache")
            .field("maps", &self.slots.len())
            .finish()
    }
}

/// Slots per device allocation.
const SLOTS_PER_CHUNK: usize = 64;

/// Bytes per slot (a `CUtensorMap`; slots stay 128-byte aligned).
const SLOT_BYTES: usize = 128;

impl TensorMapCache {
    /// Maps in the cache.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the cache holds no map.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The device address of `key`'s map, encoding and uploading it on first use.
    ///
    /// # Errors
    /// Encoding errors; allocation and copy errors of the upload.
    pub fn get(&mut self, gpu: &Gpu, key: MapKey) -> Result<u64> {
        if let Some(&addr) = self.slots.get(&key) {
            return Ok(addr);
        }
        let map = key.encode()?;
        let bytes: Vec<u8> = map.opaque.iter().flat_map(|w| w.to_le_bytes()).collect();
        let stream = match &self.stream {
            Some(s) => s.clone(),
            None => {
                let s = gpu.new_stream()?.inner;
                self.stream = Some(s.clone());
                s
            }
        };
        if self.chunks.is_empty() || self.used_in_last == SLOTS_PER_CHUNK {
            self.chunks
                .push(stream.alloc_zeros::<u8>(SLOTS_PER_CHUNK * SLOT_BYTES)?);
            self.used_in_last = 0;
        }
        let chunk = self.chunks.last_mut().expect("pushed above");
        let off = self.used_in_last * SLOT_BYTES;
        stream.memcpy_htod(&bytes, &mut chunk.slice_mut(off..off + SLOT_BYTES))?;
        stream.synchronize()?;
        let (base, _record) = chunk.device_ptr(&stream);
        let addr = base + off as u64;
        self.used_in_last += 1;
        self.slots.insert(key, addr);
        Ok(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Problem;
    use crate::validate::BLayout;

    #[test]
    fn the_residual_gets_a_tensor_map_when_one_aligned_residual_runs_in_the_gemm() {
        use crate::tensor::{MatrixDesc, VectorDesc};
        use crate::validate::{EpilogueArg, check_gemm};
        let (m, n, k) = (300, 200, 64);
        let bf = DType::Bf16;
        let mat = |ptr, rows, cols| MatrixDesc::new(ptr, rows, cols, cols, bf);
        let arg = |name, stage, operand| EpilogueArg {
            name,
            stage,
            operand,
        };
        let residual = |ptr| Operand::Residual(MatrixDesc::new(ptr, m, n, n + 8, bf));
        let gamma = Operand::Gamma(VectorDesc::new(0x9000_0000, n, bf));
        // The residual's map key, and whether C and the residual both take maps.
        let keys_at = |c: u64, epilogue: &[EpilogueArg], norm: Option<usize>| {
            let call = GemmCall {
                a: mat(0x1000_0000, m, k),
                b: mat(0x2000_0000, n, k),
                b_layout: BLayout::NxK,
                c: mat(c, m, n),
                in_dtype: bf,
                out_dtype: bf,
                epilogue,
                pair_stage: None,
                row_norm_stage: norm,
            };
            let checked = check_gemm(&call).expect("a valid call");
            let tma = epilogue_tma(&call, &checked);
            assert_eq!(tma, Problem::from_call(&call, &checked, false).epilogue_tma);
            (residual_map_key(&call, &checked), tma)
        };
        let key = |epilogue: &[EpilogueArg], norm| keys_at(0x3000_0000, epilogue, norm);
        let want = MapKey::new(0x4000_0000, bf, n as u64, m as u64, (n + 8) as u64, 64);
        let one = [arg("residual", 0, residual(0x4000_0000))];
        assert_eq!(key(&one, None), (Some(want), true));
        // After the norm, the residual runs in the finishing kernel; before it, here.
        let norm_first = [
            arg("gamma", 0, gamma),
            arg("residual", 1, residual(0x4000_0000)),
        ];
        assert_eq!(key(&norm_first, Some(0)), (None, false));
        let norm_last = [
            arg("residual", 0, residual(0x4000_0000)),
            arg("gamma", 1, gamma),
        ];
        assert_eq!(key(&norm_last, Some(1)), (Some(want), true));
        // Not 16-byte aligned, or two residuals: loaded per thread.
        assert_eq!(
            key(&[arg("residual", 0, residual(0x4000_0008))], None),
            (None, false)
        );
        let two = [
            arg("residual", 0, residual(0x4000_0000)),
            arg("residual", 1, residual(0x5000_0000)),
        ];
        assert_eq!(key(&two, None), (None, false));
        assert_eq!(key(&[], None), (None, true));
        // C 8 bytes off 16: no map for C, so the ring is off whatever the residual.
        assert_eq!(keys_at(0x3000_0008, &one, None), (Some(want), false));
        assert_eq!(keys_at(0x3000_0008, &[], None), (None, false));
    }

    #[test]
    fn outputs_whose_rows_end_inside_a_16_byte_piece_take_no_map() {
        use crate::tensor::MatrixDesc;
        use crate::validate::check_gemm;
        // C is a view N columns wide into rows of 64 elements: aligned base and stride.
        for (dtype, n, map) in [
            (DType::Bf16, 8, true),
            (DType::Bf16, 64, true),
            (DType::F16, 24, true),
            (DType::Bf16, 1, false),
            (DType::Bf16, 7, false),
            (DType::F16, 25, false),
            (DType::Bf16, 63, false),
        ] {
            let (m, k) = (300, 64);
            let call = GemmCall {
                a: MatrixDesc::new(0x1000_0000, m, k, k, dtype),
                b: MatrixDesc::new(0x2000_0000, n, k, k, dtype),
                b_layout: BLayout::NxK,
                c: MatrixDesc::new(0x3000_0000, m, n, 64, dtype),
                in_dtype: dtype,
                out_dtype: dtype,
                epilogue: &[],
                pair_stage: None,
                row_norm_stage: None,
            };
            let checked = check_gemm(&call).expect("a valid call");
            let key = output_map_key(&call.c, dtype, &checked);
            assert_eq!(key.is_some(), map, "{} N = {n}", dtype.name());
            assert_eq!(
                epilogue_tma(&call, &checked),
                map,
                "{} N = {n}",
                dtype.name()
            );
        }
    }

    #[test]
    fn maps_tma_cannot_describe_are_refused_before_the_driver() {
        let ok = MapKey::new(0x1000, DType::Bf16, 768, 4096, 768, 128);
        assert!(ok.check().is_ok());
        let cases = [
            (
                MapKey::new(0x1008, DType::Bf16, 768, 4096, 768, 128),
                "Misaligned",
            ),
            (
                MapKey::new(0x1000, DType::Bf16, 767, 4096, 767, 128),
                "Misaligned",
            ),
            (
                MapKey::new(0x1000, DType::Bf16, 768, 4096, 1 << 40, 128),
                "TooLarge",
            ),
            (
                MapKey::new(0x1000, DType::Bf16, 0, 4096, 768, 128),
                "InvalidArgument",
            ),
            (
                MapKey::new(0x1000, DType::Bf16, 768, (1 << 32) + 1, 768, 128),
                "TooLarge",
            ),
            (
                MapKey::new(0x1000, DType::Bf16, 768, 4096, 768, 0),
                "InvalidArgument",
            ),
            (
                MapKey::new(0x1000, DType::Bf16, 768, 4096, 768, 257),
                "TooLarge",
            ),
            // 64 f32 columns are 256 bytes, wider than the 128-byte swizzle.
            (
                MapKey::new(0x1000, DType::F32, 768, 4096, 768, 128),
                "TooLarge",
            ),
        ];
        for (key, want) in cases {
            let e = key.check().unwrap_err();
            let got = match e {
                Error::Misaligned { .. } => "Misaligned",
                Error::TooLarge { .. } => "TooLarge",
                Error::InvalidArgument { .. } => "InvalidArgument",
                _ => "other",
            };
            assert_eq!(got, want, "{key:?}: {e}");
            // Refused before any driver call: no GPU is needed to get here.
            assert!(matches!(key.encode(), Err(ref e2) if e2.to_string() == e.to_string()));
        }
    }

    #[test]
    fn single_rows_get_a_legal_stride() {
        let k = MapKey::new(0x1000, DType::Bf16, 3, 1, 3, 128);
        assert_eq!(k.stride_bytes, 16);
        let k = MapKey::new(0x1000, DType::Bf16, 64, 5, 72, 128);
        assert_eq!(k.stride_bytes, 144);
    }
}
