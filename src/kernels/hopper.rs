//! Hopper-only kernels (`arch = sm_90`) for epilogues no other built-in kernel has, which the
//! Hopper tests run on the TMA + `wgmma` mainloop (`fused_gemm_device::gemm::sm90`), and two
//! probes that check its parts on their own (a TMA copy, one `wgmma` tile) so a failing GPU run
//! says which part is wrong. Every other built-in 16-bit kernel with B stored N×K has TMA +
//! `wgmma` variants too (in the sm_90a module), beside its `mma.sync` ones.
//!
//! Each kernel here also has the `mma.sync` variants: the launcher falls back to them when TMA
//! cannot read the operands (rows not 16-byte aligned). `LaunchReport::mainloop` tells which
//! ran.

use crate::fused_gemm;

/// Scaling and loads: relu(alpha·(A·B) + bias[c]).
#[fused_gemm(epilogue = [scale(alpha), bias, relu], arch = sm_90)]
pub fn h_scale_bias_relu() {}
/// gelu(s[r]·(A·B) + b[r]), erf GELU.
#[fused_gemm(epilogue = [scale(row), bias(row), gelu], arch = sm_90)]
pub fn h_rowscale_rowbias_gelu() {}
/// gelu_tanh(s[c]·(A·B)).
#[fused_gemm(epilogue = [scale(col), gelu_tanh], arch = sm_90)]
pub fn h_colscale_gelu_tanh() {}
/// silu(A·B + R).
#[fused_gemm(epilogue = [residual, silu], arch = sm_90)]
pub fn h_residual_silu() {}
/// C += sigmoid(A·B).
#[fused_gemm(epilogue = [sigmoid, accumulate], arch = sm_90)]
pub fn h_sigmoid_accumulate() {}
/// RMSNorm(A·B).
#[fused_gemm(epilogue = [rms_norm(eps = 1e-6)], arch = sm_90)]
pub fn h_rms_norm() {}
/// gelu(g)·u on interleaved columns, f16.
#[fused_gemm(epilogue = [geglu], dtype = f16, arch = sm_90)]
pub fn h_geglu_f16() {}
/// (A·B)² + 1 through a user function, rounded to f16 precision, stored as f32.
#[fused_gemm(epilogue = [crate::kernels::stages::square_plus_one, cast(f16)], out = f32, arch = sm_90)]
pub fn h_user_cast() {}

/// Probes: hand-written entry points (sm_90a module only) and their host launchers.
pub mod probe {
    /// Exported name of the TMA probe.
    pub const TMA: &str = "fg_hopper_probe_tma";
    /// Exported name of the `wgmma` probe with N = 128.
    pub const WGMMA_N128: &str = "fg_hopper_probe_wgmma_n128";
    /// Exported name of the `wgmma` probe with N = 256.
    pub const WGMMA_N256: &str = "fg_hopper_probe_wgmma_n256";

    crate::device::param_list! {
        /// The parameters of the TMA probe.
        #[derive(Clone, Copy, Debug)]
        pub struct TmaProbeArgs {
            /// Device address of the tensor map (bf16, 128-byte swizzle, 64 × `rows` boxes).
            pub tmap: u64,
            /// The output, `rows · 32` words.
            pub out: *mut u32,
            /// Column of the box.
            pub x: i32,
            /// Row of the box.
            pub y: i32,
            /// Rows of the box.
            pub rows: u32,
        }
    }
    check_params!(TmaProbeArgs { tmap: u64, out: *mut u32, x: i32, y: i32, rows: u32 });

    crate::device::param_list! {
        /// The parameters of the `wgmma` probes.
        #[derive(Clone, Copy, Debug)]
        pub struct WgmmaProbeArgs {
            /// Device address of A's tensor map (64×64 box).
            pub tmap_a: u64,
            /// Device address of B's tensor map (N×64 box).
            pub tmap_b: u64,
            /// D, 64×N f32.
            pub out: *mut f32,
        }
    }
    check_params!(WgmmaProbeArgs { tmap_a: u64, tmap_b: u64, out: *mut f32 });

    #[cfg(all(
        target_arch = "nvptx64",
        feature = "builtin-kernels",
        target_feature = "sm_90a"
    ))]
    mod device {
        use crate::device::arch::global::st_f32;
        use crate::device::arch::mbarrier::{arrive_expect_tx, fence_init, init, wait_parity};
        use crate::device::arch::shared::{dynamic_shared_base, shared_addr};
        use crate::device::arch::sync::sync_threads;
        use crate::device::arch::thread::thread_idx_x;
        use crate::device::copy::tma::{fence_tensormap_acquire, load_2d};
        use crate::device::mma::sm90::{
            WgmmaInput, commit_group, fence, fence_operands, smem_desc_sw128, wait_group,
        };
        use crate::device::types::Bf16;

        /// One CTA of 128 threads: TMA-copies the 64 × `rows` box at (x, y) of the bf16 matrix
        /// `tmap` describes (128-byte swizzle) into shared memory, then writes the shared bytes
        /// as they are, `rows · 32` words, to `out`. Parameters: [`super::TmaProbeArgs`]'s fields.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn fg_hopper_probe_tma(
            tmap: u64,
            out: *mut u32,
            x: i32,
            y: i32,
            rows: u32,
        ) {
            unsafe {
                let smem = dynamic_shared_base();
                let base = shared_addr(smem);
                let bar = base + rows * 128;
                let tid = thread_idx_x();
                if tid == 0 {
                    init(bar, 1);
                    fence_init();
                }
                sync_threads();
                if tid == 0 {
                    fence_tensormap_acquire(tmap);
                    arrive_expect_tx(bar, rows * 128);
                    load_2d(base, tmap, x, y, bar);
                }
                wait_parity(bar, 0);
                let words = smem as *const u32;
                let mut i = tid;
                while i < rows * 32 {
                    crate::device::arch::global::st_u32(
                        out.add(i as usize),
                        *words.add(i as usize),
                    );
                    i += 128;
                }
            }
        }

        /// One warpgroup: TMA-loads A (64×64) and B (N×64, N×K storage) at (0, 0), runs the
        /// four k16 steps of `wgmma.m64nNk16` from shared-memory descriptors, and writes D
        /// (64×N f32, row-major) to `out` through the documented fragment layout.
        unsafe fn wgmma_probe<const NI: usize>(tmap_a: u64, tmap_b: u64, out: *mut f32) {
            unsafe {
                let n = NI as u32 * 8;
                let smem = dynamic_shared_base();
                let base = shared_addr(smem);
                let (sa, sb) = (base, base + 8192);
                let bar = sb + n * 128;
                let tid = thread_idx_x();
                if tid == 0 {
                    init(bar, 1);
                    fence_init();
                }
                sync_threads();
                if tid == 0 {
                    fence_tensormap_acquire(tmap_a);
                    fence_tensormap_acquire(tmap_b);
                    arrive_expect_tx(bar, 8192 + n * 128);
                    load_2d(sa, tmap_a, 0, 0, bar);
                    load_2d(sb, tmap_b, 0, 0, bar);
                }
                wait_parity(bar, 0);
                let mut acc = [[0f32; 4]; NI];
                fence();
                for kk in 0..4 {
                    Bf16::mma::<NI>(
                        &mut acc,
                        smem_desc_sw128(sa + kk * 32),
                        smem_desc_sw128(sb + kk * 32),
                    );
                }
                commit_group();
                wait_group::<0>();
                fence_operands(&mut acc);
                let (w, lane) = (tid / 32, tid % 32);
                let (g, t) = (lane / 4, lane % 4);
                for (i, frag) in acc.iter().enumerate() {
                    for (r, &v) in frag.iter().enumerate() {
                        let row = 16 * w + g + 8 * (r as u32 / 2);
                        let col = 8 * i as u32 + 2 * t + r as u32 % 2;
                        st_f32(out.add((row * n + col) as usize), v);
                    }
                }
            }
        }

        /// Parameters: [`super::WgmmaProbeArgs`]'s fields.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn fg_hopper_probe_wgmma_n128(
            tmap_a: u64,
            tmap_b: u64,
            out: *mut f32,
        ) {
            unsafe { wgmma_probe::<16>(tmap_a, tmap_b, out) }
        }

        /// Parameters: [`super::WgmmaProbeArgs`]'s fields.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn fg_hopper_probe_wgmma_n256(
            tmap_a: u64,
            tmap_b: u64,
            out: *mut f32,
        ) {
            unsafe { wgmma_probe::<32>(tmap_a, tmap_b, out) }
        }
    }

    #[cfg(not(target_arch = "nvptx64"))]
    pub use host::*;

    #[cfg(not(target_arch = "nvptx64"))]
    mod host {
        use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
        use fused_gemm_host::launch::{Entry, LaunchShape};
        use fused_gemm_host::tensor_map::MapKey;
        use fused_gemm_host::{Error, Gpu, Result, cudarc};

        use super::{TmaProbeArgs, WgmmaProbeArgs};
        use crate::device::types::DType;
        use crate::ptx::BUILTIN;

        // SAFETY (all three): the sm_90a module's probes take these structs' fields (as
        // `check_params!` lists them beside the structs).
        const TMA_ENTRY: Entry<TmaProbeArgs> = unsafe { Entry::new(super::TMA) };
        const WGMMA_N128_ENTRY: Entry<WgmmaProbeArgs> = unsafe { Entry::new(super::WGMMA_N128) };
        const WGMMA_N256_ENTRY: Entry<WgmmaProbeArgs> = unsafe { Entry::new(super::WGMMA_N256) };

        fn require_sm90a(gpu: &Gpu) -> Result<()> {
            let arch = gpu.module_arch(&BUILTIN)?;
            if arch != fused_gemm_host::module::Arch::Sm90a {
                return Err(Error::LaunchLimit(format!(
                    "the Hopper probes need the sm_90a module; this device loads {arch}"
                )));
            }
            Ok(())
        }

        fn map_of(
            gpu: &Gpu,
            buf: &CudaSlice<u16>,
            rows: usize,
            k: usize,
            box_rows: u32,
        ) -> Result<u64> {
            let (ptr, _rec) = buf.device_ptr(gpu.stream());
            let key = MapKey::new(ptr, DType::Bf16, k as u64, rows as u64, k as u64, box_rows);
            fused_gemm_host::launch::tensor_map(gpu, key)
        }

        /// Runs the TMA probe on `a` (bf16 bits, `rows × k` row-major, contiguous): the raw
        /// shared-memory words of the 64 × `box_rows` box at column `x`, row `y`.
        ///
        /// # Errors
        /// [`Error::LaunchLimit`] off the sm_90a module; encoding and driver errors.
        pub fn tma(
            gpu: &Gpu,
            a: &CudaSlice<u16>,
            rows: usize,
            k: usize,
            x: i32,
            y: i32,
            box_rows: u32,
        ) -> Result<Vec<u32>> {
            require_sm90a(gpu)?;
            let map = map_of(gpu, a, rows, k, box_rows)?;
            let mut out = gpu.zeros::<u32>(box_rows as usize * 32)?;
            let kernel = gpu.kernel(&BUILTIN, TMA_ENTRY)?;
            let shape = LaunchShape {
                grid: (1, 1, 1),
                block: (128, 1, 1),
                smem_bytes: box_rows * 128 + 1024,
            };
            let cfg = shape.prepare(&kernel, gpu.props())?;
            {
                let (out, _written) = out.device_ptr_mut(gpu.stream());
                let args = TmaProbeArgs {
                    tmap: map,
                    out: out as *mut u32,
                    x,
                    y,
                    rows: box_rows,
                };
                // SAFETY: `out` holds box_rows·32 words; the map describes `a`.
                unsafe { kernel.launch(gpu, cfg, &args) }?;
            }
            gpu.download(&out)
        }

        /// Runs the `wgmma` probe: D = A·Bᵀ for A 64×64 and B `n`×64 (bf16 bits, row-major,
        /// contiguous), `n` ∈ {128, 256}; returns D, 64×`n` f32 row-major.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`] for another `n` or wrong lengths; as [`tma`].
        pub fn wgmma(
            gpu: &Gpu,
            a: &CudaSlice<u16>,
            b: &CudaSlice<u16>,
            n: usize,
        ) -> Result<Vec<f32>> {
            require_sm90a(gpu)?;
            let entry = match n {
                128 => WGMMA_N128_ENTRY,
                256 => WGMMA_N256_ENTRY,
                _ => return Err(Error::invalid("n", "128 or 256", n)),
            };
            if a.len() != 64 * 64 || b.len() != n * 64 {
                return Err(Error::invalid("a, b", "64×64 and n×64 elements", a.len()));
            }
            let ma = map_of(gpu, a, 64, 64, 64)?;
            let mb = map_of(gpu, b, n, 64, n as u32)?;
            let mut out = gpu.zeros::<f32>(64 * n)?;
            let kernel = gpu.kernel(&BUILTIN, entry)?;
            let shape = LaunchShape {
                grid: (1, 1, 1),
                block: (128, 1, 1),
                smem_bytes: (8192 + n * 128 + 1024) as u32,
            };
            let cfg = shape.prepare(&kernel, gpu.props())?;
            {
                let (out, _written) = out.device_ptr_mut(gpu.stream());
                let args = WgmmaProbeArgs {
                    tmap_a: ma,
                    tmap_b: mb,
                    out: out as *mut f32,
                };
                // SAFETY: `out` holds 64·n floats; the maps describe `a` and `b` with the
                // probe's boxes.
                unsafe { kernel.launch(gpu, cfg, &args) }?;
            }
            gpu.download(&out)
        }
    }
}
