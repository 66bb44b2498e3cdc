//! Kernel parameter types shared by host launchers and device entry points.
//!
//! An entry point's parameters are described on both sides by one type: a [`KernelParam`]
//! struct passed whole, by value, as its only parameter (the GEMM kernels' `GemmArgs`), or a
//! [`param_list!`](crate::param_list) struct whose fields are its parameters, one each, in
//! declaration order. [`ParamLayout`] tells the host launcher which bytes of such a value go in
//! which parameter.
//!
//! Every field is an integer, a float, or a device address (as `u64` or a raw pointer), so host
//! (x86-64) and device (nvptx64) agree on its layout.
//!
//! Most hand-written entry points take a `param_list!` struct's fields, not the struct: rustc
//! passes a by-value struct parameter as an array of 64-bit words, which loses what LLVM knows
//! of separate parameters (a pointer parameter is a global address, so its loads and stores are
//! `ld.global` and `st.global`, not generic; a `u32` needs no unpacking). With their parameters
//! in one struct, the BERT attention kernels used generic loads and stores and compiled to
//! 16-40% more SASS instructions (ptxas, sm_80), the bias + activation kernels to 30% more.

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

/// Where an entry point's parameters are in a value of this type: the byte offset and size of
/// each, in parameter order. A launch passes the driver a pointer to each range; a zero-sized
/// one is skipped, as rustc's PTX kernel ABI leaves zero-sized parameters out of the signature.
///
/// # Safety
/// Every range lies within `Self`, holds a value of the parameter's type, and has the same
/// layout on the host and on nvptx64.
pub unsafe trait ParamLayout {
    /// `(offset, size)` in bytes of each parameter, in order.
    const PARAMS: &'static [(usize, usize)];
}

// SAFETY: the whole value, one parameter (`KernelParam`'s layout guarantee).
unsafe impl<T: KernelParam> ParamLayout for T {
    const PARAMS: &'static [(usize, usize)] = &[(0, core::mem::size_of::<T>())];
}

/// Declares a `#[repr(C)]` struct whose fields are an entry point's parameters, one each, in
/// declaration order, and its [`ParamLayout`]. Field types must be kernel parameter scalars:
/// integers, floats, raw pointers holding device addresses. At most one type parameter.
#[macro_export]
macro_rules! param_list {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident $(<$g:ident>)? {
            $( $(#[$fmeta:meta])* $fvis:vis $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        $vis struct $name $(<$g>)? {
            $( $(#[$fmeta])* $fvis $field: $ty ),*
        }

        // SAFETY: every field, in declaration order, each a parameter of its own type (scalars
        // and raw pointers: the same layout on the host and on nvptx64).
        unsafe impl $(<$g>)? $crate::params::ParamLayout for $name $(<$g>)? {
            const PARAMS: &'static [(usize, usize)] = &[
                $( (::core::mem::offset_of!(Self, $field), ::core::mem::size_of::<$ty>()) ),*
            ];
        }
    };
}
