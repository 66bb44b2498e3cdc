//! GPU tests of the runtime: tensors and views, streams, CUDA graph capture and replay, typed
//! errors that need a device. Without a GPU each test prints why it is skipped and passes
//! (fails with `FUSED_GEMM_REQUIRE_GPU=1`).
//!
//! The kernel is a hand-written PTX axpy ([`AXPY_PTX`], checked with `ptxas -arch=sm_90`), so
//! these tests need nothing but this crate.

use cudarc::driver::{CudaSlice, PushKernelArg};
use fused_gemm_device::types::DType;
use fused_gemm_host::launch::LaunchShape;
use fused_gemm_host::module::{Arch, Image, PtxModule, PtxSet};
use fused_gemm_host::reference::max_rel_error;
use fused_gemm_host::testing::{assert_close, gpu_or_skip, rng, uniform};
use fused_gemm_host::{Error, Gpu, Result, Tensor};

/// `y[i] = alpha·x[i] + y[i]` for `i < n`, one thread per element (no grid-stride loop).
const AXPY_PTX: &str = r#".version 7.8
.target sm_80
.address_size 64

.visible .entry test_axpy_f32(
	.param .u64 p_n,
	.param .f32 p_alpha,
	.param .u64 p_x,
	.param .u64 p_y
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	.reg .f32 	%f<4>;
	.reg .b64 	%rd<10>;

	ld.param.u64 	%rd1, [p_n];
	ld.param.f32 	%f1, [p_alpha];
	ld.param.u64 	%rd2, [p_x];
	ld.param.u64 	%rd3, [p_y];
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mul.wide.u32 	%rd4, %r1, %r2;
	cvt.u64.u32 	%rd5, %r3;
	add.s64 	%rd4, %rd4, %rd5;
	setp.ge.u64 	%p1, %rd4, %rd1;
	@%p1 bra 	DONE;
	cvta.to.global.u64 	%rd2, %rd2;
	cvta.to.global.u64 	%rd3, %rd3;
	shl.b64 	%rd6, %rd4, 2;
	add.s64 	%rd7, %rd2, %rd6;
	add.s64 	%rd8, %rd3, %rd6;
	ld.global.f32 	%f2, [%rd7];
	ld.global.f32 	%f3, [%rd8];
	fma.rn.f32 	%f3, %f1, %f2, %f3;
	st.global.f32 	[%rd8], %f3;
DONE:
	ret;
}
"#;

static TEST_PTX: PtxSet = PtxSet::new(
    "host-tests",
    &[PtxModule {
        arch: Arch::Sm80,
        ptx: Image::Plain(AXPY_PTX.as_bytes()),
        cubin: Image::Plain(&[]),
    }],
);

/// `y ← alpha·x + y` through the test kernel on `gpu`'s stream.
fn axpy(gpu: &Gpu, alpha: f32, x: &CudaSlice<f32>, y: &mut CudaSlice<f32>) -> Result<()> {
    assert_eq!(x.len(), y.len());
    let n = x.len() as u64;
    let f = gpu.function(&TEST_PTX, "test_axpy_f32")?;
    // One thread per element: the kernel has no grid-stride loop.
    let cfg = LaunchShape::linear(n, 256, u32::MAX)?.prepare(&f, gpu.props())?;
    let mut l = gpu.stream().launch_builder(&f);
    l.arg(&n).arg(&alpha).arg(x).arg(y);
    // SAFETY: argument order and types match `test_axpy_f32`; both buffers hold n elements.
    unsafe { l.launch(cfg) }?;
    Ok(())
}

#[test]
fn tensors_round_trip_every_dtype() {
    let Some(gpu) = gpu_or_skip("tensors_round_trip") else {
        return;
    };
    let mut r = rng("tensors_round_trip");
    for dtype in [DType::F32, DType::Bf16, DType::F16] {
        for (rows, cols) in [(1, 1), (17, 33), (4095, 3), (3, 4097)] {
            let data = uniform(&mut r, rows * cols);
            let t = Tensor::from_f32(&gpu, rows, cols, dtype, &data).unwrap();
            assert_eq!((t.shape(), t.ld(), t.dtype()), ((rows, cols), cols, dtype));
            let back = t.download_f32(&gpu).unwrap();
            let want: Vec<f32> = data
                .iter()
                .map(|&x| match dtype {
                    DType::F32 => x,
                    DType::Bf16 => half::bf16::from_f32(x).to_f32(),
                    DType::F16 => half::f16::from_f32(x).to_f32(),
                })
                .collect();
            assert_eq!(back, want, "{dtype:?} {rows}×{cols}");
        }
    }
    // Typed uploads and downloads, and a dtype mismatch.
    let h: Vec<half::bf16> = (0..100)
        .map(|i| half::bf16::from_f32(i as f32 * 0.25))
        .collect();
    let t = Tensor::from_host(&gpu, 10, 10, &h).unwrap();
    assert_eq!(t.download::<half::bf16>(&gpu).unwrap(), h);
    let e = t.download::<f32>(&gpu).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DtypeMismatch {
                expected: DType::Bf16,
                actual: DType::F32,
                ..
            }
        ),
        "{e}"
    );
    // Padded rows keep the padding out of downloads; fill and poison reach every element.
    let mut p = Tensor::zeros_padded(&gpu, 5, 3, 8, DType::F16).unwrap();
    let d: Vec<f32> = (0..15).map(|i| i as f32).collect();
    p.upload_f32(&gpu, &d).unwrap();
    assert_eq!(p.download_f32(&gpu).unwrap(), d);
    p.poison(&gpu).unwrap();
    assert!(p.download_f32(&gpu).unwrap().iter().all(|x| x.is_nan()));
    p.fill(&gpu, 1.5).unwrap();
    assert!(p.download_f32(&gpu).unwrap().iter().all(|&x| x == 1.5));
    // Vectors and empty tensors.
    let v = Tensor::vector(&gpu, &[1.0f32, 2.0, 3.0]).unwrap();
    assert_eq!(v.vector_desc().unwrap().len, 3);
    let empty = Tensor::zeros(&gpu, 0, 7, DType::F32).unwrap();
    assert!(empty.download_f32(&gpu).unwrap().is_empty());
    assert_eq!(empty.desc().ptr % 16, 0);
}

#[test]
fn views_upload_download_and_range_errors() {
    let Some(gpu) = gpu_or_skip("views") else {
        return;
    };
    let data: Vec<f32> = (0..80).map(|i| i as f32).collect();
    let mut t = Tensor::from_f32(&gpu, 8, 10, DType::F16, &data).unwrap();
    let v = t.slice(2..5, 3..7).unwrap();
    assert_eq!((v.rows(), v.cols(), v.ld()), (3, 4, 10));
    assert_eq!(v.desc().ptr, t.desc().ptr + (2 * 10 + 3) * 2);
    let want: Vec<f32> = (2..5)
        .flat_map(|r| (3..7).map(move |c| (r * 10 + c) as f32))
        .collect();
    assert_eq!(v.download_f32(&gpu).unwrap(), want);
    // A view of a view.
    let vv = v.slice(1.., 2..).unwrap();
    assert_eq!(vv.download_f32(&gpu).unwrap(), vec![35.0, 36.0, 45.0, 46.0]);
    let e = v.slice(0..4, ..).unwrap_err();
    assert!(e.to_string().contains("0..3"), "{e}");

    // Writing a view changes only its elements.
    let mut w = t.slice_mut(6..8, 8..10).unwrap();
    w.upload_f32(&gpu, &[-1.0, -2.0, -3.0, -4.0]).unwrap();
    let e = w.upload_f32(&gpu, &[0.0; 3]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::HostLength {
                expected: 4,
                actual: 3,
                ..
            }
        ),
        "{e}"
    );
    let mut expect = data.clone();
    for (i, (r, c)) in [(6, 8), (6, 9), (7, 8), (7, 9)].into_iter().enumerate() {
        expect[r * 10 + c] = -(i as f32) - 1.0;
    }
    assert_eq!(t.download_f32(&gpu).unwrap(), expect);
    t.slice_mut(.., 0..1).unwrap().fill(&gpu, 9.0).unwrap();
    let after = t.download_f32(&gpu).unwrap();
    assert!((0..8).all(|r| after[r * 10] == 9.0 && after[r * 10 + 1] == expect[r * 10 + 1]));

    for (rows, cols) in [(0..9, 0..1), (0..1, 5..11)] {
        let e = t.slice(rows, cols).unwrap_err();
        assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    }
}

#[test]
fn axpy_graph_replays_like_direct_launches() {
    let Some(gpu) = gpu_or_skip("graph_replay") else {
        return;
    };
    let mut r = rng("graph_replay");
    let n = (1 << 20) + 17;
    let x = uniform(&mut r, n);
    let x2 = uniform(&mut r, n);
    let y0 = uniform(&mut r, n);
    let (dx, dx2) = (gpu.upload(&x).unwrap(), gpu.upload(&x2).unwrap());
    let step = |g: &Gpu, y: &mut CudaSlice<f32>| -> Result<()> {
        axpy(g, 2.0, &dx, y)?;
        axpy(g, -0.5, &dx2, y)?;
        axpy(g, 0.25, &dx, y)
    };

    let mut direct = gpu.upload(&y0).unwrap();
    let mut replayed = gpu.upload(&y0).unwrap();
    let graph = gpu.capture(|g| step(g, &mut replayed)).unwrap();
    graph.upload().unwrap();
    // Capturing runs nothing.
    assert_eq!(gpu.download(&replayed).unwrap(), y0);
    let reps = 3;
    for _ in 0..reps {
        step(&gpu, &mut direct).unwrap();
        graph.replay().unwrap();
    }
    let got_direct = gpu.download(&direct).unwrap();
    let got_graph = gpu.download(&replayed).unwrap();
    // Same kernels, same order: bit-identical.
    assert!(
        got_direct
            .iter()
            .zip(&got_graph)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    let want: Vec<f64> = (0..n)
        .map(|i| y0[i] as f64 + reps as f64 * (2.25 * x[i] as f64 - 0.5 * x2[i] as f64))
        .collect();
    let got: Vec<f64> = got_graph.iter().map(|&v| v as f64).collect();
    // Intermediates reach ≈ 10, so errors are absolute at that scale: floor 1.
    let err = max_rel_error(&got, &want, 1.0);
    println!("graph replay ×{reps}, n = {n}: max rel error {err:.2e}");
    assert!(err < 1e-5, "{err}");
    assert_close(&got, &want, 1e-5, &format!("graph replay ×{reps}, n = {n}"));

    // Replays see the buffers' current contents.
    let fresh = vec![0.0f32; n];
    let mut again = gpu.upload(&fresh).unwrap();
    let g2 = gpu.capture(|g| axpy(g, 1.0, &dx, &mut again)).unwrap();
    g2.replay().unwrap();
    g2.replay().unwrap();
    let twice = gpu.download(&again).unwrap();
    assert!(twice.iter().zip(&x).all(|(&t, &xi)| t == 2.0 * xi));
}

/// A capture on one thread survives what other threads do to the same device meanwhile:
/// opening a second `Gpu` (the same primary context), giving it its first extra stream (cudarc
/// synchronizes the context then) and dropping it (which synchronizes the context). The
/// capturing closure pauses between its two launches so that all of this falls inside it.
#[test]
fn a_capture_survives_other_threads_synchronizing_the_device() {
    let Some(gpu) = gpu_or_skip("capture_across_threads") else {
        return;
    };
    let n = 1 << 20;
    let dx = gpu.upload(&vec![1.0f32; n]).unwrap();
    let mut y = gpu.upload(&vec![0.0f32; n]).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || -> Result<()> {
        rx.recv().expect("the capture has begun");
        for _ in 0..3 {
            let g = Gpu::new(0)?;
            let s = g.new_stream()?;
            let buf = g.on(&s).upload(&[1.0f32; 1024])?;
            s.synchronize()?;
            drop((buf, s, g));
        }
        Ok(())
    });
    let graph = gpu
        .capture(|g| {
            axpy(g, 1.0, &dx, &mut y)?;
            tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(300));
            axpy(g, 2.0, &dx, &mut y)
        })
        .unwrap();
    other.join().unwrap().unwrap();
    graph.replay().unwrap();
    let got = gpu.download(&y).unwrap();
    assert!(got.iter().all(|&v| v == 3.0), "{:?}", &got[..4]);
}

/// `Gpu::time_interleaved` replays every graph in each round: a graph of one axpy and one of
/// four, both on the same buffer, give one time per graph and per launch, and the buffer ends
/// with exactly as many axpys as the replays made (warm-up and timed rounds alike).
#[test]
fn interleaved_timing_replays_each_graph_every_round() {
    let Some(gpu) = gpu_or_skip("interleaved_timing") else {
        return;
    };
    let n = 1 << 22;
    let dx = gpu.upload(&vec![1.0f32; n]).unwrap();
    let mut y = gpu.upload(&vec![0.0f32; n]).unwrap();
    let one = gpu.capture(|g| axpy(g, 1.0, &dx, &mut y)).unwrap();
    let four = gpu
        .capture(|g| (0..4).try_for_each(|_| axpy(g, 1.0, &dx, &mut y)))
        .unwrap();
    let ms = gpu
        .time_interleaved(&[(&one, 1), (&four, 4)], 0.0, 5)
        .unwrap();
    println!("per launch: {ms:?} ms");
    assert_eq!(ms.len(), 2);
    assert!(ms.iter().all(|t| t.is_finite() && *t > 0.0), "{ms:?}");
    // One untimed round (no warm-up time asked for) and 5 timed: 6 × (1 + 4) axpys of 1.0.
    let got = gpu.download(&y).unwrap();
    assert!(got.iter().all(|&v| v == 30.0), "{:?}", &got[..4]);
    assert!(gpu.time_interleaved(&[], 10.0, 3).unwrap().is_empty());
    // A warm-up that could never end is refused, not run.
    for bad in [f32::INFINITY, f32::NAN, -1.0] {
        let e = gpu.time_interleaved(&[(&one, 1)], bad, 1).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{bad}: {e}");
    }
}

#[test]
fn failed_capture_leaves_the_gpu_usable() {
    let Some(gpu) = gpu_or_skip("failed_capture") else {
        return;
    };
    let tracking = gpu.context().is_event_tracking();
    // The closure's own error comes back.
    let e = gpu
        .capture(|_| Err(Error::invalid("launch", "ok", "failed")))
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "launch", .. }),
        "{e}"
    );
    // Synchronizing a capturing stream invalidates the capture: a typed Capture error.
    let e = gpu
        .capture(|g| {
            let _ = g.synchronize();
            Ok(())
        })
        .unwrap_err();
    println!("invalidated capture: {e}");
    assert!(matches!(e, Error::Capture(_)), "{e}");
    assert_eq!(gpu.context().is_event_tracking(), tracking);
    // Direct launches still work.
    let x = gpu.upload(&[1.0f32; 1000]).unwrap();
    let mut y = gpu.upload(&[2.0f32; 1000]).unwrap();
    axpy(&gpu, 3.0, &x, &mut y).unwrap();
    assert!(gpu.download(&y).unwrap().iter().all(|&v| v == 5.0));
}

#[test]
fn launches_on_another_stream_are_ordered_by_waits() {
    let Some(gpu) = gpu_or_skip("streams") else {
        return;
    };
    let n = 1 << 22;
    let main = gpu.current_stream();
    let side = gpu.new_stream().unwrap();
    let on_side = gpu.on(&side);
    let x = gpu.upload(&vec![1.0f32; n]).unwrap();
    let mut y = gpu.upload(&vec![0.0f32; n]).unwrap();
    side.wait_for(&main).unwrap();
    for _ in 0..8 {
        axpy(&on_side, 1.0, &x, &mut y).unwrap();
    }
    main.wait_for(&side).unwrap();
    axpy(&gpu, 0.5, &x, &mut y).unwrap();
    assert!(gpu.download(&y).unwrap().iter().all(|&v| v == 8.5));
    let ms = on_side.time_ms(2, 5, |g| axpy(g, 1.0, &x, &mut y)).unwrap();
    println!("axpy of {n} f32 on a side stream: {ms:.4} ms");
    // Events on the side stream bracket real work; no bound on its speed (the sanitizers slow
    // it a hundredfold).
    assert!(ms > 0.0 && ms.is_finite(), "{ms} ms");
}

#[test]
fn missing_kernel_is_named() {
    let Some(gpu) = gpu_or_skip("missing_kernel") else {
        return;
    };
    let e = gpu.function(&TEST_PTX, "no_such_kernel").unwrap_err();
    assert!(
        matches!(e, Error::KernelNotFound { ref name, .. } if name == "no_such_kernel"),
        "{e}"
    );
}

#[test]
fn out_of_memory_is_typed() {
    let Some(gpu) = gpu_or_skip("out_of_memory") else {
        return;
    };
    // 2^40 rows × 1024 f32: 4 PiB.
    let e = Tensor::zeros(&gpu, 1 << 40, 1024, DType::F32).unwrap_err();
    assert!(
        matches!(e, Error::OutOfMemory { bytes } if bytes == 1 << 52),
        "{e}"
    );
    let e = Tensor::zeros(&gpu, usize::MAX, 2, DType::F32).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
}

/// Two threads capture on one device at once, the first ending while the second still records.
/// Event tracking must stay off until the second ends: switched back on mid-capture, cudarc
/// would make the second capture's launch wait on `x`'s write event, recorded outside the
/// capture (on another stream), and the driver would invalidate that capture.
#[test]
fn overlapping_captures_on_two_threads() {
    let Some(gpu) = gpu_or_skip("overlapping_captures") else {
        return;
    };
    let n = 4099;
    let other = gpu.on(&gpu.new_stream().unwrap());
    let dx = other.upload(&vec![1.0f32; n]).unwrap();
    let (mut y1, mut y2) = (
        other.upload(&vec![0.0f32; n]).unwrap(),
        other.upload(&vec![0.0f32; n]).unwrap(),
    );
    other.synchronize().unwrap();
    // The first capture begins before the second: the order that broke.
    let first_began = std::sync::Barrier::new(2);
    let both_recording = std::sync::Barrier::new(2);
    let first_ended = std::sync::Barrier::new(2);
    let both_ended = std::sync::Barrier::new(2);
    // A `Graph` stays on the thread that captured it (cudarc's graph is not `Send`).
    let (r1, r2) = std::thread::scope(|s| {
        let first = s.spawn(|| {
            let g = gpu.capture(|g| {
                first_began.wait();
                axpy(g, 1.0, &dx, &mut y1)?;
                both_recording.wait();
                Ok(())
            });
            first_ended.wait();
            both_ended.wait();
            g?.replay()
        });
        let second = s.spawn(|| {
            first_began.wait();
            let g = gpu.capture(|g| {
                both_recording.wait();
                first_ended.wait();
                axpy(g, 2.0, &dx, &mut y2)
            });
            both_ended.wait();
            g?.replay()
        });
        (first.join().unwrap(), second.join().unwrap())
    });
    r1.unwrap();
    r2.expect("the second capture survives the first's end");
    gpu.synchronize().unwrap();
    assert!(gpu.download(&y1).unwrap().iter().all(|&v| v == 1.0));
    assert!(gpu.download(&y2).unwrap().iter().all(|&v| v == 2.0));
    assert!(
        gpu.context().is_event_tracking(),
        "tracking is back on after both"
    );
}
