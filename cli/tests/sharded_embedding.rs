//! Embedding on several devices: every batch runs once, rows keep their input order whatever
//! the finishing order, a failing device ends the run with its error and nothing else.

mod common;

use std::sync::{Barrier, Mutex};
use std::time::Duration;

use common::{fixture, model};
use fused_gemm_cli::shard::run_sharded;
use fused_gemm_cli::{CpuBackend, Dtype, Error, embed, embed_on_devices};

/// A worker that sleeps a little per job (longer on higher devices) and records what it ran.
struct Worker {
    id: usize,
    ran: Vec<usize>,
}

fn worker(id: usize) -> Worker {
    Worker {
        id,
        ran: Vec::new(),
    }
}

/// Job `j` on worker `w` takes (j·7 mod 5 + w) ms: uneven, so jobs finish out of order.
fn pause(w: &Worker, job: usize) {
    std::thread::sleep(Duration::from_millis((job * 7 % 5 + w.id) as u64));
}

#[test]
fn every_job_runs_once_and_each_result_reaches_its_index() {
    for n in [1, 3, 8] {
        let jobs = 61;
        let ran = Mutex::new(Vec::new());
        let mut got = vec![None; jobs];
        let mut order = Vec::new();
        // Every worker's first job waits for all of them: each takes at least one job, however
        // late its thread starts on a loaded machine.
        let all_started = Barrier::new(n);
        let shares = run_sharded(
            n,
            |id| {
                std::thread::sleep(Duration::from_millis(1));
                Ok(worker(id))
            },
            jobs,
            |w, job| {
                if w.ran.is_empty() {
                    all_started.wait();
                }
                pause(w, job);
                w.ran.push(job);
                ran.lock().unwrap().push((w.id, job));
                Ok((job * job, job % 3 + 1))
            },
            |job, v| {
                assert!(got[job].is_none(), "job {job} reported twice");
                got[job] = Some(v);
                order.push(job);
            },
        )
        .unwrap();
        for (job, v) in got.iter().enumerate() {
            assert_eq!(*v, Some(job * job), "{n} workers: job {job}");
        }
        let ran = ran.into_inner().unwrap();
        let mut jobs_run: Vec<usize> = ran.iter().map(|&(_, j)| j).collect();
        jobs_run.sort_unstable();
        assert_eq!(jobs_run, (0..jobs).collect::<Vec<_>>(), "{n} workers");
        assert_eq!(shares.len(), n);
        for (id, s) in shares.iter().enumerate() {
            let mine: Vec<usize> = ran.iter().filter(|r| r.0 == id).map(|r| r.1).collect();
            assert_eq!(s.jobs, mine.len());
            assert_eq!(s.items, mine.iter().map(|j| j % 3 + 1).sum::<usize>());
            assert!(s.busy >= Duration::from_millis((id * mine.len()) as u64));
            assert!(s.setup >= Duration::from_millis(1), "{s:?}");
        }
        if n > 1 {
            assert!(shares.iter().all(|s| s.jobs > 0), "{n} workers: {shares:?}");
            assert_ne!(
                order,
                (0..jobs).collect::<Vec<_>>(),
                "finishing order was input order"
            );
        }
    }
}

#[test]
fn a_failing_worker_stops_the_run_with_its_error() {
    let jobs = 200;
    let fail_at = 17;
    let started = Mutex::new(Vec::new());
    let mut reported = 0;
    let e = run_sharded(
        4,
        |id| Ok(worker(id)),
        jobs,
        |w, job| {
            started.lock().unwrap().push(Some(job));
            pause(w, job);
            if job == fail_at {
                started.lock().unwrap().push(None);
                Err(Error::invalid("--test", "no failure", job))
            } else {
                Ok(((), 1))
            }
        },
        |_, ()| reported += 1,
    )
    .unwrap_err();
    match &e {
        Error::OnDevice { device, source } => {
            assert!(*device < 4);
            assert!(
                matches!(**source, Error::InvalidArgument { arg: "--test", .. }),
                "{source}"
            );
        }
        other => panic!("expected OnDevice, got {other}"),
    }
    assert!(e.to_string().starts_with("device "), "{e}");
    // Each thread stops before its next job, so the run ends long before its 200 jobs (each
    // takes milliseconds; the failure comes at the 18th).
    let started = started.into_inner().unwrap();
    assert!(started.contains(&None));
    assert!(started.len() < jobs / 2, "{} jobs started", started.len());
    assert!(reported < jobs - 1, "results kept flowing after the error");
}

#[test]
fn a_device_that_does_not_open_ends_the_run() {
    let ran = Mutex::new(0);
    let e = run_sharded(
        3,
        |id| {
            if id == 2 {
                Err(Error::invalid("--devices", "a device that opens", id))
            } else {
                Ok(worker(id))
            }
        },
        1000,
        |w, job| {
            pause(w, job);
            *ran.lock().unwrap() += 1;
            Ok(((), 1))
        },
        |_, ()| {},
    )
    .unwrap_err();
    assert!(matches!(e, Error::OnDevice { device: 2, .. }), "{e}");
    assert!(*ran.lock().unwrap() < 1000);
}

#[test]
fn a_panicking_worker_stops_the_others() {
    let started = Mutex::new(0usize);
    let jobs = 400;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_sharded(
            3,
            |id| Ok(worker(id)),
            jobs,
            |w, job| {
                *started.lock().unwrap() += 1;
                pause(w, job);
                assert!(job != 9, "worker fault at job 9");
                Ok(((), 1))
            },
            |_, ()| {},
        )
    }));
    assert!(r.is_err(), "the panic did not reach the caller");
    let started = *started.lock().unwrap();
    assert!(started < jobs / 2, "{started} jobs started after a panic");
}

#[test]
fn no_workers_and_no_jobs() {
    let none = || -> fused_gemm_cli::Result<()> { unreachable!() };
    let never = |_: &mut (), _| -> fused_gemm_cli::Result<((), usize)> { unreachable!() };
    let e = run_sharded(0, |_| none(), 5, never, |_, ()| {}).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let shares = run_sharded(0, |_| none(), 0, never, |_, ()| {}).unwrap();
    assert!(shares.is_empty());
    let shares = run_sharded(3, |_| Ok(()), 0, |_, _| Ok(((), 1)), |_, ()| {}).unwrap();
    assert!(shares.iter().all(|s| s.jobs == 0 && s.items == 0));
}

fn cpu(m: &fused_gemm_cli::Model) -> fused_gemm_cli::Result<CpuBackend> {
    CpuBackend::new(m.weights.clone(), Dtype::F32)
}

#[test]
fn two_cpu_devices_give_the_one_device_embeddings() {
    let m = model();
    let fx = fixture("embeddings_256.json");
    let texts: Vec<&str> = fx.sentences.iter().map(|s| s.text.as_str()).collect();
    assert!(texts.len() >= 20);
    let want = embed(
        &mut cpu(m).unwrap(),
        &m.tokenizer,
        &texts,
        3,
        |_, _| {},
        None,
    )
    .unwrap();
    let dim = m.config.hidden_size;
    let mut progress = Vec::new();
    let ran = embed_on_devices(
        2,
        |_| cpu(m),
        dim,
        &m.tokenizer,
        &texts,
        3,
        |d, t| progress.push((d, t)),
    )
    .unwrap();
    let (got, shares) = (ran.embeddings, ran.shares);
    assert_eq!(got, want);
    assert!(ran.tokenize > Duration::ZERO);
    assert_eq!(shares.iter().map(|s| s.items).sum::<usize>(), texts.len());
    assert_eq!(
        shares.iter().map(|s| s.jobs).sum::<usize>(),
        texts.len().div_ceil(3)
    );
    assert_eq!(progress.last(), Some(&(texts.len(), texts.len())));
    assert!(progress.windows(2).all(|p| p[0].0 < p[1].0));
}

#[test]
fn embedding_on_no_devices_or_a_mismatched_one_is_refused() {
    let m = model();
    let dim = m.config.hidden_size;
    let run = |devices, dim, texts: &[&str], batch| {
        embed_on_devices(
            devices,
            |_| cpu(m),
            dim,
            &m.tokenizer,
            texts,
            batch,
            |_, _| {},
        )
        .unwrap_err()
    };
    assert!(matches!(
        run(0, dim, &["a"], 1),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        run(1, dim, &["a"], 0),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(run(1, dim, &[], 1), Error::EmptyInput { .. }));
    let e = run(2, dim + 1, &["a", "b"], 1);
    assert!(matches!(e, Error::OnDevice { .. }), "{e}");
}

/// A worker released after its last job reports how long that took, on its own device and
/// apart from its set-up and its jobs.
#[test]
fn releasing_a_worker_is_timed_as_its_teardown() {
    struct SlowToDrop(Duration);
    impl Drop for SlowToDrop {
        fn drop(&mut self) {
            std::thread::sleep(self.0);
        }
    }
    let shares = run_sharded(
        2,
        |id| Ok(SlowToDrop(Duration::from_millis(30 * (id as u64 + 1)))),
        6,
        |_, job| Ok((job, 1)),
        |_, _| {},
    )
    .unwrap();
    for (id, s) in shares.iter().enumerate() {
        assert!(
            s.teardown >= Duration::from_millis(30 * (id as u64 + 1)),
            "{s:?}"
        );
        assert!(s.busy < s.teardown, "{s:?}");
    }
}
