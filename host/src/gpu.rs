//! [`Gpu`]: one device, its primary context, a stream, and the modules loaded on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits,
};

use crate::module::PtxSet;
use crate::{Error, Result};

/// Limits and sizes read off the device with `cuDeviceGetAttribute`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceProps {
    /// Compute capability, major·10 + minor (90 for H100/H200).
    pub compute_capability: u32,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Largest dynamic shared memory one CTA may opt in to, bytes.
    pub smem_per_block_optin: u32,
    /// Shared memory per SM, bytes.
    pub smem_per_sm: u32,
    /// 32-bit registers per SM.
    pub regs_per_sm: u32,
    /// Resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Resident CTAs per SM.
    pub max_blocks_per_sm: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u32,
    /// Largest `gridDim.y` / `gridDim.z`.
    pub max_grid_y: u32,
}

/// A CUDA device ready to launch kernels: primary context, one stream, and a cache of the PTX
/// modules and functions loaded so far (loading is done once per kernel crate and device).
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    props: DeviceProps,
    name: String,
    modules: Mutex<HashMap<usize, (Arc<CudaModule>, &'static str)>>,
    functions: Mutex<HashMap<(usize, String), CudaFunction>>,
    workspace: crate::gemm::WorkspaceCell,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("name", &self.name)
            .field("props", &self.props)
            .finish()
    }
}

/// Whether the CUDA driver library can be loaded on this machine. Never panics.
pub fn driver_present() -> bool {
    // cudarc panics when asked to use a library it cannot load; probe first.
    std::panic::catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false)
}

impl Gpu {
    /// Opens device `ordinal` (0 for the first GPU).
    ///
    /// # Errors
    /// [`Error::NoDriver`] when `libcuda` is absent, [`Error::NoDevice`] when the driver has no
    /// such device, [`Error::Driver`] for other driver failures.
    pub fn new(ordinal: usize) -> Result<Self> {
        if !driver_present() {
            return Err(Error::NoDriver);
        }
        let count = match CudaContext::device_count() {
            Ok(c) => c.max(0) as usize,
            Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => 0,
            Err(e) => return Err(e.into()),
        };
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal)?;
        let stream = ctx.default_stream();
        let a = |attr| ctx.attribute(attr).map(|v| v.max(0) as u32);
        let (major, minor) = ctx.compute_capability()?;
        let props = DeviceProps {
            compute_capability: (major * 10 + minor) as u32,
            sm_count: a(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            smem_per_block_optin: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            smem_per_sm: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
            regs_per_sm: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
            max_threads_per_sm: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
            max_blocks_per_sm: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)?,
            l2_bytes: a(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
            max_grid_y: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
        };
        let name = ctx.name()?;
        Ok(Gpu {
            ctx,
            stream,
            props,
            name,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            workspace: Default::default(),
        })
    }

    /// The device's name as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Limits read off the device.
    pub fn props(&self) -> &DeviceProps {
        &self.props
    }

    /// The cudarc context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream launches go to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Waits for all work on the stream.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    /// The arch of the module that `set` loads on this device (`sm_90`, ...).
    pub fn module_arch(&self, set: &'static PtxSet) -> Result<&'static str> {
        Ok(set.select(self.props.compute_capability)?.arch)
    }

    /// Looks up kernel `name` in `set`, loading the module for this device's arch on first use.
    ///
    /// # Errors
    /// [`Error::PtxNotBuilt`], [`Error::UnsupportedArch`], [`Error::KernelNotFound`], or the
    /// driver's error when the PTX does not load (JIT failure).
    pub fn function(&self, set: &'static PtxSet, name: &str) -> Result<CudaFunction> {
        let key = (set as *const PtxSet as usize, name.to_owned());
        if let Some(f) = self
            .functions
            .lock()
            .expect("function cache poisoned")
            .get(&key)
        {
            return Ok(f.clone());
        }
        let (module, arch) = self.module(set)?;
        let f = module.load_function(name).map_err(|e| {
            if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_FOUND {
                Error::KernelNotFound {
                    name: name.to_owned(),
                    crate_name: set.crate_name,
                    arch,
                }
            } else {
                Error::Driver(e)
            }
        })?;
        self.functions
            .lock()
            .expect("function cache poisoned")
            .insert(key, f.clone());
        Ok(f)
    }

    fn module(&self, set: &'static PtxSet) -> Result<(Arc<CudaModule>, &'static str)> {
        let key = set as *const PtxSet as usize;
        let mut modules = self.modules.lock().expect("module cache poisoned");
        if let Some(m) = modules.get(&key) {
            return Ok(m.clone());
        }
        let chosen = set.select(self.props.compute_capability)?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(chosen.ptx))?;
        modules.insert(key, (module.clone(), chosen.arch));
        Ok((module, chosen.arch))
    }

    /// Scratch buffers reused by GEMM launches on this device (split-K partials, counters, row
    /// statistics).
    pub fn workspace(&self) -> &crate::gemm::WorkspaceCell {
        &self.workspace
    }

    /// Copies `data` to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        self.check_alloc::<T>(data.len())?;
        Ok(self.stream.clone_htod(data)?)
    }

    /// A new zeroed device buffer of `len` elements.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>> {
        self.check_alloc::<T>(len)?;
        Ok(self.stream.alloc_zeros(len)?)
    }

    /// Copies a device buffer back to the host (synchronizes the stream).
    pub fn download<T: DeviceRepr + Default + Clone>(&self, buf: &CudaSlice<T>) -> Result<Vec<T>> {
        Ok(self.stream.clone_dtoh(buf)?)
    }

    fn check_alloc<T>(&self, len: usize) -> Result<()> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::OutOfMemory { bytes: usize::MAX })?;
        let (free, _) = self.ctx.mem_get_info()?;
        if bytes > free {
            return Err(Error::OutOfMemory { bytes });
        }
        Ok(())
    }
}
