//! Typed kernel launches. An [`Entry`] names an entry point together with the type `A` that
//! describes its parameters, a [`Kernel`] is its function loaded on a device ([`Gpu::kernel`]),
//! and `A`'s [`ParamLayout`] says which bytes of an `A` go in which parameter: a [`KernelParam`]
//! passed whole, the fields of a [`param_list!`](fused_gemm_device::param_list) struct, or
//! [`GemmParams`], [`Sm90Params`] and [`NormFinishParams`] for the entry points `#[fused_gemm]`
//! generates. Every launch of this crate and of the built-in kernels goes through
//! [`Kernel::launch_as`], the one place that hands parameter values to the driver.
//!
//! The types settle which value goes in which parameter: [`Entry::new`] (called where the entry
//! point is declared) and [`Kernel::from_function`] are where an entry point and its parameter
//! type are paired, once. What stays with each launch, and keeps [`Kernel::launch`] `unsafe`,
//! is that the device addresses among the values are valid for what the kernel does with them.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::{offset_of, size_of};

use cudarc::driver::{CudaFunction, LaunchConfig};
use fused_gemm_device::gemm::GemmArgs;
use fused_gemm_device::gemm::sm90::Sm90Args;
use fused_gemm_device::kernel::norm_finish::NormFinishArgs;
use fused_gemm_device::params::{KernelParam, ParamLayout};

use crate::module::PtxSet;
use crate::{Error, Gpu, Result};

/// An entry point of a kernel crate: its exported name and the type `A` of its parameters
/// ([`ParamLayout`]). Kernel crates declare one constant per entry point; [`Gpu::kernel`] loads
/// it.
pub struct Entry<A> {
    name: &'static str,
    args: PhantomData<fn(A)>,
}

impl<A> Entry<A> {
    /// The entry point exported as `name`, taking `A`.
    ///
    /// # Safety
    /// Every module of the kernel crate that exports `name` declares it with the parameters
    /// `A`'s [`ParamLayout`] lists, of the same types, in the same order (for a [`KernelParam`]:
    /// that type, by value, as its only parameter).
    pub const unsafe fn new(name: &'static str) -> Self {
        Entry {
            name,
            args: PhantomData,
        }
    }

    /// The exported name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<A> Clone for Entry<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Entry<A> {}

impl<A> PartialEq for Entry<A> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<A> Eq for Entry<A> {}

impl<A> std::fmt::Debug for Entry<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Entry({} <- {})", self.name, std::any::type_name::<A>())
    }
}

/// The function of an entry point on one device, taking `A` ([`Gpu::kernel`]). Dereferences to
/// the cudarc function, for attribute and occupancy queries and
/// [`LaunchShape::prepare`](crate::launch::LaunchShape::prepare).
pub struct Kernel<A> {
    func: CudaFunction,
    args: PhantomData<fn(A)>,
}

impl<A> Clone for Kernel<A> {
    fn clone(&self) -> Self {
        Kernel {
            func: self.func.clone(),
            args: PhantomData,
        }
    }
}

impl<A> std::fmt::Debug for Kernel<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel(<- {})", std::any::type_name::<A>())
    }
}

impl<A> std::ops::Deref for Kernel<A> {
    type Target = CudaFunction;

    fn deref(&self) -> &CudaFunction {
        &self.func
    }
}

impl Gpu {
    /// The function of `entry` in `set`, typed by its parameters, for [`Kernel::launch`]: looked
    /// up as [`Gpu::function`] does (by name, in this device's cache).
    ///
    /// # Errors
    /// As [`Gpu::function`].
    pub fn kernel<A: ParamLayout>(
        &self,
        set: &'static PtxSet,
        entry: Entry<A>,
    ) -> Result<Kernel<A>> {
        let func = self.function(set, entry.name())?;
        // SAFETY: `Entry::new`'s contract: `entry.name()` takes `A`.
        Ok(unsafe { Kernel::from_function(func) })
    }
}

/// How a launch is placed, beyond its grid, block and shared memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LaunchMode {
    /// `cuLaunchKernel`.
    #[default]
    Plain,
    /// `cuLaunchCooperativeKernel`: every CTA of the grid is resident at once, or the launch
    /// fails (for CTAs that wait on each other).
    Cooperative,
    /// Thread-block clusters of this shape (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`, sm_90+);
    /// the grid must be a multiple of it.
    Cluster((u32, u32, u32)),
    /// The programmatic dependent of the kernel launched before it on the stream
    /// ([`crate::driver_ext::launch::programmatic_dependent`], sm_90+).
    ProgrammaticDependent,
}

impl<A: ParamLayout> Kernel<A> {
    /// `func` as the function of an entry point taking `A`.
    ///
    /// # Safety
    /// `func`'s entry point is declared with the parameters `A`'s [`ParamLayout`] lists (as
    /// [`Entry::new`]).
    pub unsafe fn from_function(func: CudaFunction) -> Self {
        Kernel {
            func,
            args: PhantomData,
        }
    }

    /// Launches the kernel on `gpu`'s stream with the shape `cfg` and the parameter values
    /// `args` ([`LaunchMode::Plain`]).
    ///
    /// # Errors
    /// The driver's launch errors.
    ///
    /// # Safety
    /// As [`Kernel::launch_as`].
    pub unsafe fn launch(&self, gpu: &Gpu, cfg: LaunchConfig, args: &A) -> Result<()> {
        // SAFETY: the caller's.
        unsafe { self.launch_as(gpu, cfg, LaunchMode::Plain, args) }
    }

    /// Launches the kernel on `gpu`'s stream with the shape `cfg`, placed as `mode`, with the
    /// parameter values `args` (copied by the driver before this returns).
    ///
    /// # Errors
    /// [`Error::LaunchLimit`] for a [`LaunchMode::Cluster`] the grid is not a multiple of; the
    /// driver's launch errors (e.g. `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`,
    /// `CUDA_ERROR_CLUSTER_OUT_OF_RESOURCES`).
    ///
    /// # Safety
    /// The kernel reads and writes what the device addresses in `args` point to, as its
    /// documentation describes for the shape `cfg`: that memory must be valid for those accesses
    /// until the kernel completes, and memory it writes must not be accessed by anything else
    /// meanwhile. With [`LaunchMode::ProgrammaticDependent`], the kernel must also execute
    /// `griddepcontrol.wait` before it touches memory the previous kernel on the stream writes
    /// (or reads), since nothing else orders the two.
    pub unsafe fn launch_as(
        &self,
        gpu: &Gpu,
        cfg: LaunchConfig,
        mode: LaunchMode,
        args: &A,
    ) -> Result<()> {
        let (grid, block, smem) = (cfg.grid_dim, cfg.block_dim, cfg.shared_mem_bytes);
        if let LaunchMode::Cluster(c) = mode
            && (c.0 == 0
                || c.1 == 0
                || c.2 == 0
                || !grid.0.is_multiple_of(c.0)
                || !grid.1.is_multiple_of(c.1)
                || !grid.2.is_multiple_of(c.2))
        {
            return Err(Error::LaunchLimit(format!(
                "grid {grid:?} is not a multiple of the cluster {c:?}"
            )));
        }
        let (mut params, len) = param_ptrs(args);
        let params = &mut params[..len];
        let (func, stream) = (self.func.cu_function(), gpu.stream().cu_stream());
        gpu.stream().context().bind_to_thread()?;
        // SAFETY: `params` points to the values of the entry point's parameters (`A`'s
        // `ParamLayout`, paired with the entry point by `Entry::new` or `Kernel::from_function`),
        // alive until the call returns; the driver copies them. The function is loaded in the
        // stream's context (a `Kernel` keeps its module alive), a cluster grid was checked
        // above, and the caller vouches for the memory the kernel touches.
        unsafe {
            use crate::driver_ext::launch as ext;
            use cudarc::driver::result;
            match mode {
                LaunchMode::Plain => result::launch_kernel(func, grid, block, smem, stream, params),
                LaunchMode::Cooperative => {
                    result::launch_cooperative_kernel(func, grid, block, smem, stream, params)
                }
                LaunchMode::Cluster(c) => {
                    ext::kernel_with_cluster(func, grid, block, smem, stream, c, params)
                }
                LaunchMode::ProgrammaticDependent => {
                    ext::programmatic_dependent(func, grid, block, smem, stream, params)
                }
            }
        }?;
        Ok(())
    }
}

/// Most parameters an entry point may have (the BERT embedding kernels' 15, and room).
pub const MAX_PARAMS: usize = 24;

/// Pointers to the parameter values in `args`, in order ([`ParamLayout`]), and how many: what
/// `cuLaunchKernel` takes as `kernelParams`. Zero-sized ones are left out, as rustc's PTX kernel
/// ABI leaves them out of the signature (passing one would move every later value one
/// parameter off).
fn param_ptrs<A: ParamLayout>(args: &A) -> ([*mut c_void; MAX_PARAMS], usize) {
    const { assert!(A::PARAMS.len() <= MAX_PARAMS) };
    let base = args as *const A as *const u8;
    let mut ptrs = [std::ptr::null_mut(); MAX_PARAMS];
    let mut len = 0;
    for &(offset, size) in A::PARAMS {
        if size > 0 {
            ptrs[len] = base.wrapping_add(offset) as *mut c_void;
            len += 1;
        }
    }
    (ptrs, len)
}

/// The parameters of a `#[fused_gemm]` entry point on the sm_80 path, and of a persistent
/// family's grid entry points: `(GemmArgs, E::Params)`, each by value (the epilogue's left out
/// when zero-sized).
#[derive(Clone, Copy, Debug)]
pub struct GemmParams<P> {
    /// The problem and operands.
    pub args: GemmArgs,
    /// The epilogue's parameters.
    pub epilogue: P,
}

// SAFETY: the two values in the order `#[fused_gemm]` declares them, both `KernelParam`s.
unsafe impl<P: KernelParam> ParamLayout for GemmParams<P> {
    const PARAMS: &'static [(usize, usize)] = &[
        (offset_of!(Self, args), size_of::<GemmArgs>()),
        (offset_of!(Self, epilogue), size_of::<P>()),
    ];
}

/// The parameters of a `#[fused_gemm]` entry point on the Hopper path:
/// `(GemmArgs, E::Params, Sm90Args)`, each by value (the epilogue's left out when zero-sized).
#[derive(Clone, Copy, Debug)]
pub struct Sm90Params<P> {
    /// The problem and operands.
    pub args: GemmArgs,
    /// The epilogue's parameters.
    pub epilogue: P,
    /// Tensor maps and the Hopper mainloop's options.
    pub sm90: Sm90Args,
}

// SAFETY: as `GemmParams`, with `Sm90Args` last.
unsafe impl<P: KernelParam> ParamLayout for Sm90Params<P> {
    const PARAMS: &'static [(usize, usize)] = &[
        (offset_of!(Self, args), size_of::<GemmArgs>()),
        (offset_of!(Self, epilogue), size_of::<P>()),
        (offset_of!(Self, sm90), size_of::<Sm90Args>()),
    ];
}

/// The parameters of a row norm's finishing entry point:
/// `(NormFinishArgs, K::Params, Post::Params)`, each by value (zero-sized ones left out).
#[derive(Clone, Copy, Debug)]
pub struct NormFinishParams<N, Q> {
    /// C and the statistics' layout.
    pub args: NormFinishArgs,
    /// The norm stage's parameters.
    pub norm: N,
    /// The parameters of the stages after the norm.
    pub post: Q,
}

// SAFETY: the three values in the order `#[fused_gemm]` declares them, all `KernelParam`s.
unsafe impl<N: KernelParam, Q: KernelParam> ParamLayout for NormFinishParams<N, Q> {
    const PARAMS: &'static [(usize, usize)] = &[
        (offset_of!(Self, args), size_of::<NormFinishArgs>()),
        (offset_of!(Self, norm), size_of::<N>()),
        (offset_of!(Self, post), size_of::<Q>()),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Empty;
    // SAFETY: zero-sized.
    unsafe impl KernelParam for Empty {}

    fn addrs<A: ParamLayout>(args: &A) -> Vec<usize> {
        let (ptrs, len) = param_ptrs(args);
        ptrs[..len].iter().map(|&p| p as usize).collect()
    }

    fn at<T>(v: &T) -> usize {
        v as *const T as usize
    }

    #[test]
    fn parameters_point_into_the_value_and_zero_sized_ones_are_left_out() {
        let (args, sm90) = (GemmArgs::default(), Sm90Args::default());
        let full = Sm90Params {
            args,
            epilogue: 7u64,
            sm90,
        };
        assert_eq!(
            addrs(&full),
            [at(&full.args), at(&full.epilogue), at(&full.sm90)]
        );
        let empty = Sm90Params {
            args,
            epilogue: Empty,
            sm90,
        };
        assert_eq!(addrs(&empty), [at(&empty.args), at(&empty.sm90)]);
        let plain = GemmParams {
            args,
            epilogue: Empty,
        };
        assert_eq!(addrs(&plain), [at(&plain.args)]);
        assert!(addrs(&Empty).is_empty());
        let x = 3u32;
        assert_eq!(addrs(&x), [at(&x)]);
        let finish = NormFinishParams {
            args: NormFinishArgs::default(),
            norm: Empty,
            post: 1.5f32,
        };
        assert_eq!(addrs(&finish), [at(&finish.args), at(&finish.post)]);
    }

    fused_gemm_device::param_list! {
        #[derive(Clone, Copy)]
        struct Split {
            a: u32,
            b: u64,
            c: *const f32,
            d: f32,
        }
    }

    #[test]
    fn a_param_list_passes_each_field() {
        let s = Split {
            a: 1,
            b: 2,
            c: std::ptr::null(),
            d: 4.0,
        };
        assert_eq!(addrs(&s), [at(&s.a), at(&s.b), at(&s.c), at(&s.d)]);
        assert_eq!(Split::PARAMS, [(0, 4), (8, 8), (16, 8), (24, 4)]);
    }

    #[test]
    fn entries_compare_and_print_by_name() {
        // SAFETY: never loaded.
        let (a, b) = unsafe { (Entry::<u64>::new("fg_a"), Entry::<u64>::new("fg_b")) };
        assert_eq!(a, a);
        assert_ne!(a, b);
        assert_eq!(a.name(), "fg_a");
        assert_eq!(format!("{a:?}"), "Entry(fg_a <- u64)");
    }
}
