//! Device tensors: row-major matrices (and vectors as 1×len matrices) of f32, bf16 or f16.
//!
//! A [`Tensor`] owns a device buffer of `rows × ld` elements: row `r` starts `r · ld` elements
//! after the first, and `ld ≥ cols` (strides `(ld, 1)`; `ld > cols` leaves padding at the end of
//! each row). Views ([`TensorView`], [`TensorViewMut`]) select a row range and a column range of
//! a tensor: same `ld`, first element moved. They borrow the tensor, so it outlives them, and
//! they can only be made in range ([`Error::OutOfRange`] otherwise).
//!
//! Launchers do not take tensors: they take the raw [`MatrixDesc`] / [`VectorDesc`] of a tensor
//! or view (device address, shape, leading dimension, dtype), which [`crate::validate`] checks
//! before every launch. Work on a tensor is ordered on the stream of the [`Gpu`] handle it is
//! used with; using one tensor from two streams needs [`crate::gpu::Stream::wait_for`].

use std::ops::{Bound, RangeBounds};

use cudarc::driver::{CudaSlice, DevicePtr};
use fused_gemm_device::types::DType;

use crate::{Error, Gpu, Result};

/// The value output buffers are filled with before a kernel runs: any element a kernel fails to
/// write stays NaN and fails every comparison.
pub const POISON_F32: f32 = f32::NAN;

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// A host element type with a device [`DType`]: `f32`, [`half::bf16`], [`half::f16`].
pub trait HostElement: private::Sealed + Copy + Default + Send + Sync + 'static {
    /// The device dtype with the same bits.
    const DTYPE: DType;
    /// Widens to f32 (exact).
    fn to_f32(self) -> f32;
    /// Rounds from f32 (to nearest, ties to even).
    fn from_f32(x: f32) -> Self;
    /// Little-endian bytes of one element.
    fn put(self, out: &mut Vec<u8>);
    /// Reads one element from its little-endian bytes (`DTYPE.size()` of them).
    fn get(bytes: &[u8]) -> Self;
}

impl HostElement for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> Self {
        x
    }
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

impl HostElement for half::bf16 {
    const DTYPE: DType = DType::Bf16;
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        half::bf16::from_f32(x)
    }
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]]))
    }
}

impl HostElement for half::f16 {
    const DTYPE: DType = DType::F16;
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        half::f16::from_f32(x)
    }
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        half::f16::from_bits(u16::from_le_bytes([b[0], b[1]]))
    }
}

/// f32 values as the bytes of `dtype` (rounded to nearest even for bf16/f16).
fn f32_to_bytes(dtype: DType, data: &[f32], out: &mut Vec<u8>) {
    out.reserve(data.len() * dtype.size());
    match dtype {
        DType::F32 => data.iter().for_each(|&x| x.put(out)),
        DType::Bf16 => data.iter().for_each(|&x| half::bf16::from_f32(x).put(out)),
        DType::F16 => data.iter().for_each(|&x| half::f16::from_f32(x).put(out)),
    }
}

/// One element of `dtype` at the start of `b`, widened to f32.
fn bytes_to_f32(dtype: DType, b: &[u8]) -> f32 {
    match dtype {
        DType::F32 => f32::get(b),
        DType::Bf16 => half::bf16::get(b).to_f32(),
        DType::F16 => half::f16::get(b).to_f32(),
    }
}

/// A row-major matrix in device memory, as launchers consume it.
///
/// Element `(r, c)` (`r < rows`, `c < cols`) is at byte address
/// `ptr + (r · ld + c) · dtype.size()`. Nothing here is checked; [`crate::validate`] checks
/// descriptors before a launch. Build one from a [`Tensor`] or view (`desc()`), or from raw
/// parts for tests and foreign buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatrixDesc {
    /// Device address of element (0, 0).
    pub ptr: u64,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Leading dimension: elements from the start of one row to the start of the next.
    pub ld: usize,
    /// Element type.
    pub dtype: DType,
}

impl MatrixDesc {
    /// A descriptor from raw parts.
    pub const fn new(ptr: u64, rows: usize, cols: usize, ld: usize, dtype: DType) -> Self {
        MatrixDesc {
            ptr,
            rows,
            cols,
            ld,
            dtype,
        }
    }

    /// A contiguous (`ld = cols`) descriptor.
    pub const fn contiguous(ptr: u64, rows: usize, cols: usize, dtype: DType) -> Self {
        Self::new(ptr, rows, cols, cols, dtype)
    }

    /// `rows · cols` (saturating).
    pub fn elements(&self) -> u64 {
        (self.rows as u64).saturating_mul(self.cols as u64)
    }

    /// True when the matrix has no elements.
    pub fn is_empty(&self) -> bool {
        self.rows == 0 || self.cols == 0
    }

    /// Bytes from element (0, 0) to one past element (rows−1, cols−1):
    /// `((rows − 1) · ld + cols) · size`, computed in 64 bits; `None` on overflow; 0 when empty.
    pub fn span_bytes(&self) -> Option<u64> {
        if self.is_empty() {
            return Some(0);
        }
        (self.rows as u64 - 1)
            .checked_mul(self.ld as u64)?
            .checked_add(self.cols as u64)?
            .checked_mul(self.dtype.size() as u64)
    }

    /// "rows×cols" for messages.
    pub fn shape_str(&self) -> String {
        format!("{}×{}", self.rows, self.cols)
    }
}

/// A contiguous vector in device memory: element `i < len` is at `ptr + i · dtype.size()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VectorDesc {
    /// Device address of element 0.
    pub ptr: u64,
    /// Elements.
    pub len: usize,
    /// Element type.
    pub dtype: DType,
}

impl VectorDesc {
    /// A descriptor from raw parts.
    pub const fn new(ptr: u64, len: usize, dtype: DType) -> Self {
        VectorDesc { ptr, len, dtype }
    }

    /// The same memory as a 1×len matrix.
    pub const fn as_matrix(&self) -> MatrixDesc {
        MatrixDesc::contiguous(self.ptr, 1, self.len, self.dtype)
    }
}

/// Resolves `range` against `0..len`, or [`Error::OutOfRange`] naming `arg`.
fn resolve(
    arg: &'static str,
    range: impl RangeBounds<usize>,
    len: usize,
) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e)),
        _ => Err(Error::OutOfRange {
            arg,
            bounds: format!("0..{len}"),
            actual: format!("{:?}..{:?}", range.start_bound(), range.end_bound()),
        }),
    }
}

/// Geometry shared by tensors and views: shape, leading dimension, dtype, byte offset of element
/// (0, 0) into the owning buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    offset: usize,
    rows: usize,
    cols: usize,
    ld: usize,
    dtype: DType,
}

impl Layout {
    fn sub(&self, rows: impl RangeBounds<usize>, cols: impl RangeBounds<usize>) -> Result<Self> {
        let (r0, r1) = resolve("rows", rows, self.rows)?;
        let (c0, c1) = resolve("cols", cols, self.cols)?;
        Ok(Layout {
            offset: self.offset + (r0 * self.ld + c0) * self.dtype.size(),
            rows: r1 - r0,
            cols: c1 - c0,
            ..*self
        })
    }

    /// Byte range of the buffer covering every element.
    fn span(&self) -> std::ops::Range<usize> {
        if self.rows == 0 || self.cols == 0 {
            return self.offset..self.offset;
        }
        let len = ((self.rows - 1) * self.ld + self.cols) * self.dtype.size();
        self.offset..self.offset + len
    }

    fn desc(&self, base: u64) -> MatrixDesc {
        MatrixDesc::new(
            base + self.offset as u64,
            self.rows,
            self.cols,
            self.ld,
            self.dtype,
        )
    }

    fn vector_desc(&self, base: u64) -> Result<VectorDesc> {
        let ptr = base + self.offset as u64;
        if self.rows == 1 {
            Ok(VectorDesc::new(ptr, self.cols, self.dtype))
        } else if self.cols == 1 && self.ld == 1 {
            Ok(VectorDesc::new(ptr, self.rows, self.dtype))
        } else {
            Err(Error::shape(
                "tensor",
                "1×len or contiguous len×1 (a vector)",
                format!("{}×{} (ld {})", self.rows, self.cols, self.ld),
            ))
        }
    }

    fn check_len(&self, arg: &'static str, len: usize) -> Result<()> {
        let expected = self.rows * self.cols;
        if len != expected {
            return Err(Error::HostLength {
                arg,
                rows: self.rows,
                cols: self.cols,
                expected,
                actual: len,
            });
        }
        Ok(())
    }

    /// Packed row-major bytes of the elements, from the bytes of `span()`.
    fn gather(&self, span: &[u8]) -> Vec<u8> {
        let row_bytes = self.cols * self.dtype.size();
        if self.ld == self.cols {
            return span.to_vec();
        }
        let mut out = Vec::with_capacity(self.rows * row_bytes);
        for r in 0..self.rows {
            let s = r * self.ld * self.dtype.size();
            out.extend_from_slice(&span[s..s + row_bytes]);
        }
        out
    }

    /// Writes packed row-major `bytes` into the bytes of `span()`.
    fn scatter(&self, bytes: &[u8], span: &mut [u8]) {
        let row_bytes = self.cols * self.dtype.size();
        for r in 0..self.rows {
            let s = r * self.ld * self.dtype.size();
            span[s..s + row_bytes].copy_from_slice(&bytes[r * row_bytes..(r + 1) * row_bytes]);
        }
    }
}

fn read(gpu: &Gpu, buf: &CudaSlice<u8>, l: &Layout) -> Result<Vec<u8>> {
    let span = l.span();
    if span.is_empty() {
        return Ok(Vec::new());
    }
    let mut host = vec![0u8; span.len()];
    gpu.stream().memcpy_dtoh(&buf.slice(span), &mut host)?;
    Ok(l.gather(&host))
}

fn write(gpu: &Gpu, buf: &mut CudaSlice<u8>, l: &Layout, packed: &[u8]) -> Result<()> {
    let span = l.span();
    if span.is_empty() {
        return Ok(());
    }
    let host = if l.ld == l.cols || l.rows == 1 {
        packed.to_vec()
    } else {
        // Keep whatever lies between the rows (padding, other views' columns).
        let mut host = vec![0u8; span.len()];
        gpu.stream()
            .memcpy_dtoh(&buf.slice(span.clone()), &mut host)?;
        l.scatter(packed, &mut host);
        host
    };
    gpu.stream().memcpy_htod(&host, &mut buf.slice_mut(span))?;
    Ok(())
}

fn typed<T: HostElement>(arg: &'static str, l: &Layout) -> Result<()> {
    if T::DTYPE != l.dtype {
        return Err(Error::DtypeMismatch {
            arg,
            expected: l.dtype,
            actual: T::DTYPE,
        });
    }
    Ok(())
}

fn decode_f32(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(dtype.size())
        .map(|b| bytes_to_f32(dtype, b))
        .collect()
}

fn fill_bytes(dtype: DType, value: f32, n: usize) -> Vec<u8> {
    let mut one = Vec::new();
    f32_to_bytes(dtype, &[value], &mut one);
    one.repeat(n)
}

/// A row-major matrix on the device that owns its buffer. See the [module docs](self).
#[derive(Debug)]
pub struct Tensor {
    buf: CudaSlice<u8>,
    base: u64,
    layout: Layout,
}

impl Tensor {
    /// A zero-filled `rows × cols` tensor with `ld = cols`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`]; [`Error::TooLarge`] if the byte size overflows.
    pub fn zeros(gpu: &Gpu, rows: usize, cols: usize, dtype: DType) -> Result<Self> {
        Self::zeros_padded(gpu, rows, cols, cols, dtype)
    }

    /// A zero-filled `rows × cols` tensor whose rows start `ld` elements apart.
    ///
    /// # Errors
    /// [`Error::LeadingDimension`] if `ld < cols`; [`Error::OutOfMemory`];
    /// [`Error::TooLarge`] if `rows · ld · size` overflows.
    pub fn zeros_padded(
        gpu: &Gpu,
        rows: usize,
        cols: usize,
        ld: usize,
        dtype: DType,
    ) -> Result<Self> {
        if ld < cols {
            return Err(Error::LeadingDimension {
                arg: "ld",
                ld: ld as u64,
                cols: cols as u64,
            });
        }
        let bytes = rows
            .checked_mul(ld)
            .and_then(|e| e.checked_mul(dtype.size()))
            .ok_or(Error::TooLarge {
                arg: "rows·ld",
                max: usize::MAX as u64,
                actual: u64::MAX,
            })?;
        // cuMemAlloc rejects 0 bytes; an empty tensor still gets a (valid, aligned) address.
        let buf = gpu.zeros::<u8>(bytes.max(16))?;
        let base = {
            let (ptr, _record) = buf.device_ptr(gpu.stream());
            ptr
        };
        Ok(Tensor {
            buf,
            base,
            layout: Layout {
                offset: 0,
                rows,
                cols,
                ld,
                dtype,
            },
        })
    }

    /// A contiguous `rows × cols` tensor of `T`'s dtype holding `data` (row-major).
    ///
    /// # Errors
    /// [`Error::HostLength`] if `data.len() != rows · cols`; allocation errors.
    pub fn from_host<T: HostElement>(
        gpu: &Gpu,
        rows: usize,
        cols: usize,
        data: &[T],
    ) -> Result<Self> {
        let mut t = Self::zeros(gpu, rows, cols, T::DTYPE)?;
        t.upload(gpu, data)?;
        Ok(t)
    }

    /// A contiguous `rows × cols` tensor of `dtype` holding `data` converted from f32 (rounded
    /// to nearest even for bf16/f16).
    ///
    /// # Errors
    /// As [`Tensor::from_host`].
    pub fn from_f32(
        gpu: &Gpu,
        rows: usize,
        cols: usize,
        dtype: DType,
        data: &[f32],
    ) -> Result<Self> {
        let mut t = Self::zeros(gpu, rows, cols, dtype)?;
        t.upload_f32(gpu, data)?;
        Ok(t)
    }

    /// A 1×len tensor (a vector: bias, gamma, beta, scales) holding `data`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the device lacks the memory; [`Error::Driver`] when the
    /// allocation or the copy fails.
    pub fn vector<T: HostElement>(gpu: &Gpu, data: &[T]) -> Result<Self> {
        Self::from_host(gpu, 1, data.len(), data)
    }

    /// A 1×len tensor of `dtype` holding `data` converted from f32.
    ///
    /// # Errors
    /// As [`Tensor::vector`].
    pub fn vector_from_f32(gpu: &Gpu, dtype: DType, data: &[f32]) -> Result<Self> {
        Self::from_f32(gpu, 1, data.len(), dtype, data)
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.layout.rows
    }
    /// Columns.
    pub fn cols(&self) -> usize {
        self.layout.cols
    }
    /// Leading dimension, elements.
    pub fn ld(&self) -> usize {
        self.layout.ld
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }
    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.layout.rows, self.layout.cols)
    }
    /// The owned device buffer (bytes).
    pub fn buffer(&self) -> &CudaSlice<u8> {
        &self.buf
    }

    /// The raw descriptor launchers consume.
    pub fn desc(&self) -> MatrixDesc {
        self.layout.desc(self.base)
    }

    /// The tensor as a vector descriptor.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] unless it has one row, or one column with `ld = 1`.
    pub fn vector_desc(&self) -> Result<VectorDesc> {
        self.layout.vector_desc(self.base)
    }

    /// The whole tensor as a view.
    pub fn view(&self) -> TensorView<'_> {
        TensorView {
            buf: &self.buf,
            base: self.base,
            layout: self.layout,
        }
    }

    /// The whole tensor as a mutable view.
    pub fn view_mut(&mut self) -> TensorViewMut<'_> {
        TensorViewMut {
            buf: &mut self.buf,
            base: self.base,
            layout: self.layout,
        }
    }

    /// Rows `rows` and columns `cols` of the tensor (e.g. `t.slice(2..5, ..)`).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] naming `rows` or `cols` when a range is not within the tensor.
    pub fn slice(
        &self,
        rows: impl RangeBounds<usize>,
        cols: impl RangeBounds<usize>,
    ) -> Result<TensorView<'_>> {
        self.view().slice(rows, cols)
    }

    /// Mutable [`Tensor::slice`].
    ///
    /// # Errors
    /// [`Error::OutOfRange`] naming `rows` or `cols` when a range is not within the tensor.
    pub fn slice_mut(
        &mut self,
        rows: impl RangeBounds<usize>,
        cols: impl RangeBounds<usize>,
    ) -> Result<TensorViewMut<'_>> {
        self.view_mut().slice(rows, cols)
    }

    /// Copies the tensor to the host as `T` (packed row-major, padding dropped).
    ///
    /// # Errors
    /// [`Error::DtypeMismatch`] unless `T` is the tensor's dtype; driver errors.
    pub fn download<T: HostElement>(&self, gpu: &Gpu) -> Result<Vec<T>> {
        self.view().download(gpu)
    }

    /// Copies the tensor to the host widened to f32, whatever its dtype.
    ///
    /// # Errors
    /// [`Error::Driver`] when the copy fails.
    pub fn download_f32(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        self.view().download_f32(gpu)
    }

    /// Overwrites the tensor with `data` (packed row-major, `rows · cols` values of its dtype).
    ///
    /// # Errors
    /// [`Error::DtypeMismatch`] unless `T` is the tensor's dtype; [`Error::HostLength`] if
    /// `data.len() != rows · cols`; [`Error::Driver`] when a copy fails.
    pub fn upload<T: HostElement>(&mut self, gpu: &Gpu, data: &[T]) -> Result<()> {
        self.view_mut().upload(gpu, data)
    }

    /// Overwrites the tensor with f32 `data` converted to its dtype.
    ///
    /// # Errors
    /// [`Error::HostLength`] if `data.len() != rows · cols`; [`Error::Driver`] when a copy
    /// fails.
    pub fn upload_f32(&mut self, gpu: &Gpu, data: &[f32]) -> Result<()> {
        self.view_mut().upload_f32(gpu, data)
    }

    /// Sets every element (padding included) to `value` converted to the dtype.
    ///
    /// # Errors
    /// [`Error::Driver`] when the copy fails.
    pub fn fill(&mut self, gpu: &Gpu, value: f32) -> Result<()> {
        let n = self.buf.len() / self.layout.dtype.size();
        let bytes = fill_bytes(self.layout.dtype, value, n);
        gpu.stream()
            .memcpy_htod(&bytes, &mut self.buf.slice_mut(0..bytes.len()))?;
        Ok(())
    }

    /// Fills with NaN ([`POISON_F32`]) so that any element a kernel fails to
    /// write is visible.
    ///
    /// # Errors
    /// As [`Tensor::fill`].
    pub fn poison(&mut self, gpu: &Gpu) -> Result<()> {
        self.fill(gpu, POISON_F32)
    }
}

/// A read-only sub-matrix of a [`Tensor`]: same leading dimension, first element moved.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    buf: &'a CudaSlice<u8>,
    base: u64,
    layout: Layout,
}

impl<'a> TensorView<'a> {
    /// Rows `rows` and columns `cols` of this view.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] naming `rows` or `cols`.
    pub fn slice(
        &self,
        rows: impl RangeBounds<usize>,
        cols: impl RangeBounds<usize>,
    ) -> Result<TensorView<'a>> {
        Ok(TensorView {
            layout: self.layout.sub(rows, cols)?,
            ..*self
        })
    }

    /// Rows of the view.
    pub fn rows(&self) -> usize {
        self.layout.rows
    }
    /// Columns of the view.
    pub fn cols(&self) -> usize {
        self.layout.cols
    }
    /// Leading dimension (the parent's).
    pub fn ld(&self) -> usize {
        self.layout.ld
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }

    /// The raw descriptor launchers consume.
    pub fn desc(&self) -> MatrixDesc {
        self.layout.desc(self.base)
    }

    /// The view as a vector descriptor (one row, or one contiguous column).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] unless it has one row, or one column with `ld = 1`.
    pub fn vector_desc(&self) -> Result<VectorDesc> {
        self.layout.vector_desc(self.base)
    }

    /// Copies the view's elements to the host as `T`, packed row-major.
    ///
    /// # Errors
    /// [`Error::DtypeMismatch`] unless `T` is the dtype; driver errors.
    pub fn download<T: HostElement>(&self, gpu: &Gpu) -> Result<Vec<T>> {
        typed::<T>("download", &self.layout)?;
        let bytes = read(gpu, self.buf, &self.layout)?;
        Ok(bytes.chunks_exact(T::DTYPE.size()).map(T::get).collect())
    }

    /// Copies the view's elements to the host widened to f32.
    ///
    /// # Errors
    /// [`Error::Driver`] when the copy fails.
    pub fn download_f32(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        let bytes = read(gpu, self.buf, &self.layout)?;
        Ok(decode_f32(self.layout.dtype, &bytes))
    }
}

/// A writable sub-matrix of a [`Tensor`]; holds the tensor's exclusive borrow.
#[derive(Debug)]
pub struct TensorViewMut<'a> {
    buf: &'a mut CudaSlice<u8>,
    base: u64,
    layout: Layout,
}

impl<'a> TensorViewMut<'a> {
    /// Rows `rows` and columns `cols` of this view (consumes it; see
    /// [`TensorViewMut::reborrow`]).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] naming `rows` or `cols`.
    pub fn slice(
        self,
        rows: impl RangeBounds<usize>,
        cols: impl RangeBounds<usize>,
    ) -> Result<TensorViewMut<'a>> {
        let layout = self.layout.sub(rows, cols)?;
        Ok(TensorViewMut { layout, ..self })
    }

    /// A shorter-lived mutable view of the same elements.
    pub fn reborrow(&mut self) -> TensorViewMut<'_> {
        TensorViewMut {
            buf: self.buf,
            base: self.base,
            layout: self.layout,
        }
    }

    /// A read-only view of the same elements.
    pub fn as_view(&self) -> TensorView<'_> {
        TensorView {
            buf: self.buf,
            base: self.base,
            layout: self.layout,
        }
    }

    /// Rows of the view.
    pub fn rows(&self) -> usize {
        self.layout.rows
    }
    /// Columns of the view.
    pub fn cols(&self) -> usize {
        self.layout.cols
    }
    /// Leading dimension (the parent's).
    pub fn ld(&self) -> usize {
        self.layout.ld
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }

    /// The raw descriptor launchers consume.
    pub fn desc(&self) -> MatrixDesc {
        self.layout.desc(self.base)
    }

    /// The view as a vector descriptor.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] unless it has one row, or one column with `ld = 1`.
    pub fn vector_desc(&self) -> Result<VectorDesc> {
        self.layout.vector_desc(self.base)
    }

    /// Overwrites the view's elements with `data` (packed row-major); elements outside the
    /// view (padding, other columns) keep their values.
    ///
    /// # Errors
    /// [`Error::DtypeMismatch`], [`Error::HostLength`], driver errors.
    pub fn upload<T: HostElement>(&mut self, gpu: &Gpu, data: &[T]) -> Result<()> {
        typed::<T>("data", &self.layout)?;
        self.layout.check_len("data", data.len())?;
        let mut bytes = Vec::with_capacity(data.len() * T::DTYPE.size());
        data.iter().for_each(|&x| x.put(&mut bytes));
        write(gpu, self.buf, &self.layout, &bytes)
    }

    /// Overwrites the view's elements with f32 `data` converted to the dtype.
    ///
    /// # Errors
    /// [`Error::HostLength`], driver errors.
    pub fn upload_f32(&mut self, gpu: &Gpu, data: &[f32]) -> Result<()> {
        self.layout.check_len("data", data.len())?;
        let mut bytes = Vec::new();
        f32_to_bytes(self.layout.dtype, data, &mut bytes);
        write(gpu, self.buf, &self.layout, &bytes)
    }

    /// Sets the view's elements to `value` (converted to the dtype); elements outside the view
    /// keep their values.
    ///
    /// # Errors
    /// [`Error::Driver`] when a copy fails.
    pub fn fill(&mut self, gpu: &Gpu, value: f32) -> Result<()> {
        let n = self.layout.rows * self.layout.cols;
        let bytes = fill_bytes(self.layout.dtype, value, n);
        write(gpu, self.buf, &self.layout, &bytes)
    }

    /// Copies the view's elements to the host widened to f32.
    ///
    /// # Errors
    /// [`Error::Driver`] when the copy fails.
    pub fn download_f32(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        self.as_view().download_f32(gpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(rows: usize, cols: usize, ld: usize, dtype: DType) -> Layout {
        Layout {
            offset: 0,
            rows,
            cols,
            ld,
            dtype,
        }
    }

    #[test]
    fn sub_views_move_the_first_element_and_keep_ld() {
        let l = layout(8, 10, 16, DType::Bf16);
        let s = l.sub(2..5, 3..10).unwrap();
        assert_eq!((s.rows, s.cols, s.ld), (3, 7, 16));
        assert_eq!(s.offset, (2 * 16 + 3) * 2);
        // A view of a view composes offsets.
        let t = s.sub(1.., ..=1).unwrap();
        assert_eq!((t.rows, t.cols), (2, 2));
        assert_eq!(t.offset, (3 * 16 + 3) * 2);
        assert_eq!(t.span(), t.offset..t.offset + (16 + 2) * 2);
        let d = t.desc(0x1000);
        assert_eq!(d.ptr, 0x1000 + t.offset as u64);
        assert_eq!(d.span_bytes(), Some((16 + 2) * 2));
    }

    #[test]
    fn out_of_range_views_are_typed_errors() {
        let l = layout(8, 10, 10, DType::F32);
        #[allow(clippy::reversed_empty_ranges)]
        for (r, c) in [(0..9, 0..1), (0..1, 0..11), (5..4, 0..1)] {
            let e = l.sub(r.clone(), c.clone()).unwrap_err();
            assert!(matches!(e, Error::OutOfRange { .. }), "{r:?} {c:?}: {e}");
        }
        let e = l.sub(0..9, ..).unwrap_err();
        assert!(
            e.to_string().contains("`rows`") && e.to_string().contains("0..8"),
            "{e}"
        );
        let e = l.sub(.., (Bound::Excluded(usize::MAX), Bound::Unbounded));
        assert!(e.is_err());
        // Empty views at the edge are fine.
        assert_eq!(l.sub(8..8, 10..).unwrap().span().len(), 0);
    }

    #[test]
    fn gather_and_scatter_skip_padding() {
        let l = layout(2, 2, 3, DType::Bf16);
        // Row 0 = elements 0,1 (bytes 0..4), padding bytes 4..6, row 1 = bytes 6..10.
        let span: Vec<u8> = (0..10).collect();
        assert_eq!(l.gather(&span), vec![0, 1, 2, 3, 6, 7, 8, 9]);
        let mut back = vec![0xffu8; 10];
        l.scatter(&[0, 1, 2, 3, 6, 7, 8, 9], &mut back);
        assert_eq!(back, vec![0, 1, 2, 3, 0xff, 0xff, 6, 7, 8, 9]);
    }

    #[test]
    fn conversions_round_to_nearest_even() {
        let mut b = Vec::new();
        // 1 + 2^-8 is halfway between two bf16 values: ties to even gives 1.0.
        f32_to_bytes(DType::Bf16, &[1.0 + 1.0 / 256.0, -2.5], &mut b);
        assert_eq!(decode_f32(DType::Bf16, &b), vec![1.0, -2.5]);
        b.clear();
        f32_to_bytes(DType::F16, &[65504.0, 1e-8], &mut b);
        assert_eq!(decode_f32(DType::F16, &b), vec![65504.0, 0.0]);
        assert_eq!(fill_bytes(DType::F32, 1.5, 2).len(), 8);
        assert!(decode_f32(DType::F16, &fill_bytes(DType::F16, f32::NAN, 1))[0].is_nan());
    }

    #[test]
    fn vectors_are_rows_or_contiguous_columns() {
        assert_eq!(
            layout(1, 7, 9, DType::F32).vector_desc(0).unwrap(),
            VectorDesc::new(0, 7, DType::F32)
        );
        assert_eq!(layout(5, 1, 1, DType::F16).vector_desc(8).unwrap().len, 5);
        assert!(matches!(
            layout(5, 1, 4, DType::F16).vector_desc(8),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(layout(2, 3, 3, DType::F16).vector_desc(8).is_err());
    }

    #[test]
    fn host_lengths_are_checked() {
        let e = layout(3, 4, 4, DType::F32)
            .check_len("data", 11)
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::HostLength {
                    expected: 12,
                    actual: 11,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn descriptor_spans() {
        let d = MatrixDesc::new(0, 3, 4, 10, DType::F16);
        assert_eq!(d.span_bytes(), Some((2 * 10 + 4) * 2));
        assert_eq!(
            MatrixDesc::new(0, 0, 4, 4, DType::F16).span_bytes(),
            Some(0)
        );
        assert_eq!(
            MatrixDesc::new(0, usize::MAX, 4, usize::MAX, DType::F16).span_bytes(),
            None
        );
        assert_eq!(VectorDesc::new(4, 3, DType::F32).as_matrix().cols, 3);
    }
}
