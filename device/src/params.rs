//! Kernel parameter structs shared by host launchers and device entry points.
//!
//! Every struct here is `#[repr(C)]` and holds only integers, floats and device addresses as
//! `u64`, so host (x86-64) and device (nvptx64) agree on its layout. Host code passes them by
//! value as kernel parameters.

/// Marker for types that may be passed by value as a kernel parameter.
///
/// # Safety
/// The type must be `#[repr(C)]` (or `#[repr(transparent)]` over such a type), contain no
/// pointers or references other than device addresses stored as `u64`, and have the same layout
/// on the host and on nvptx64.
pub unsafe trait KernelParam: Copy {}

unsafe impl KernelParam for u32 {}
unsafe impl KernelParam for u64 {}
unsafe impl KernelParam for i32 {}
unsafe impl KernelParam for f32 {}
