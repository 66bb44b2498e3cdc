//! Embedding on several devices at once (data parallelism): the batches of one run are handed
//! out to a thread per device, and the rows land at their input indices whatever the order in
//! which the devices finish.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::embed::{Embeddings, check_request, plan_batches, token_counts};
use crate::error::{Error, Result};
use crate::tokenize::{Encoded, MiniLmTokenizer, TokenBatch};

/// What one worker of [`run_sharded`] (one device of [`embed_on_devices`]) did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceShare {
    /// Jobs it ran (batches).
    pub jobs: usize,
    /// Items of those jobs (sentences).
    pub items: usize,
    /// Time inside its jobs, on the host clock (uploads and downloads included).
    pub busy: Duration,
    /// Time building the worker (for a GPU: its backend, weights uploaded and kernels loaded).
    pub setup: Duration,
    /// Time releasing the worker after its last job (for a GPU: freeing its buffers and
    /// graphs); the run waits for it.
    pub teardown: Duration,
}

/// Sets the run's stop flag when dropped during a panic, so the other threads end at their next
/// job rather than running every remaining one before the panic reaches the caller.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// What a worker thread sends: a job's result, the worker's set-up or teardown time, or its
/// error.
enum Event<T> {
    Ready(Duration),
    Done(usize, T, usize, Duration),
    Released(Duration),
    Failed(Error),
}

impl DeviceShare {
    /// Items per second of busy time; 0 for a worker that ran nothing.
    pub fn items_per_second(&self) -> f64 {
        let s = self.busy.as_secs_f64();
        if s > 0.0 { self.items as f64 / s } else { 0.0 }
    }
}

/// Runs jobs `0..jobs` on `devices` workers, a scoped thread each. Each thread first builds its
/// worker with `make(device)`, in the thread, since a worker need not be `Send` (the CUDA
/// backend's captured graphs are not). A thread then takes the next job index as soon as its
/// last job is done, so a faster worker takes more of them (a shared work queue).
/// `run(worker, job)` returns the job's result and its item count; `done(job, result)` gets each
/// result on the calling thread, in finishing order.
///
/// Returns each worker's [`DeviceShare`], by device.
///
/// # Errors
/// [`Error::InvalidArgument`] for jobs and no devices; the first error of a `make` or a `run`,
/// as [`Error::OnDevice`] with that device. Every thread stops before its next job; results
/// that arrive after the error are dropped, and `done` is not called again. A panic in a
/// worker or in `done` also stops every thread at its next job, then reaches the caller.
pub fn run_sharded<W, T: Send>(
    devices: usize,
    make: impl Fn(usize) -> Result<W> + Sync,
    jobs: usize,
    run: impl Fn(&mut W, usize) -> Result<(T, usize)> + Sync,
    mut done: impl FnMut(usize, T),
) -> Result<Vec<DeviceShare>> {
    if devices == 0 && jobs > 0 {
        return Err(Error::invalid(
            "devices",
            "at least one device for the jobs",
            0,
        ));
    }
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut shares = vec![DeviceShare::default(); devices];
    let mut first_error = None;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        for device in 0..devices {
            let (tx, next, stop, make, run) = (tx.clone(), &next, &stop, &make, &run);
            s.spawn(move || {
                let _guard = StopOnPanic(stop);
                // A send fails only when the receiving loop ended in a panic, which stopped
                // the run.
                let send = |e| tx.send((device, e)).is_ok();
                let fail = |e| {
                    stop.store(true, Ordering::Release);
                    send(Event::Failed(e));
                };
                let t = Instant::now();
                let mut worker = match make(device) {
                    Ok(w) => w,
                    Err(e) => return fail(e),
                };
                send(Event::Ready(t.elapsed()));
                while !stop.load(Ordering::Acquire) {
                    let job = next.fetch_add(1, Ordering::Relaxed);
                    if job >= jobs {
                        break;
                    }
                    let t = Instant::now();
                    match run(&mut worker, job) {
                        Ok((value, items)) => {
                            if !send(Event::Done(job, value, items, t.elapsed())) {
                                break;
                            }
                        }
                        Err(e) => return fail(e),
                    }
                }
                let t = Instant::now();
                drop(worker);
                send(Event::Released(t.elapsed()));
            });
        }
        drop(tx);
        let _guard = StopOnPanic(&stop);
        for (device, event) in rx {
            let share = &mut shares[device];
            match event {
                Event::Ready(setup) => share.setup = setup,
                Event::Released(teardown) => share.teardown = teardown,
                Event::Done(job, value, items, busy) if first_error.is_none() => {
                    share.jobs += 1;
                    share.items += items;
                    share.busy += busy;
                    done(job, value);
                }
                Event::Done(..) => {}
                Event::Failed(e) => {
                    first_error.get_or_insert(Error::OnDevice {
                        device,
                        source: Box::new(e),
                    });
                }
            }
        }
    });
    match first_error {
        Some(e) => Err(e),
        None => Ok(shares),
    }
}

/// Embeds `sentences` on `devices` backends at once: tokenizes once, plans the batches as
/// [`crate::embed`] does (by length, at most `batch_size` each), and runs them with
/// [`run_sharded`], a thread per device whose backend `make(device)` builds in that thread. The
/// result equals [`crate::embed`]'s on one of the backends up to the backends' own differences
/// (each row comes from one batch on one backend). `dim` is the model's hidden size.
/// `on_batch(done, total)` is called on the calling thread after each batch with the number of
/// sentences done.
///
/// Returns the embeddings in input order, each device's share and the tokenizing time.
///
/// # Errors
/// [`Error::EmptyInput`] for no sentences; [`Error::InvalidArgument`] for `batch_size == 0` or
/// no devices; tokenizer errors; a backend's error, in `make` or in a batch, as
/// [`Error::OnDevice`] (the run stops and nothing is returned); [`Error::InvalidArgument`] (in
/// [`Error::OnDevice`]) when a backend's hidden size is not `dim`.
pub fn embed_on_devices<B: Backend, S: AsRef<str> + Sync>(
    devices: usize,
    make: impl Fn(usize) -> Result<B> + Sync,
    dim: usize,
    tokenizer: &MiniLmTokenizer,
    sentences: &[S],
    batch_size: usize,
    mut on_batch: impl FnMut(usize, usize),
) -> Result<ShardedEmbeddings> {
    check_request(sentences.len(), batch_size)?;
    if devices == 0 {
        return Err(Error::invalid("--devices", "at least one device", 0));
    }
    let t0 = Instant::now();
    let Encoded { ids, truncated } = tokenizer.encode_all(sentences)?;
    let tokenize = t0.elapsed();
    let batches = plan_batches(&token_counts(&ids), batch_size);
    let pad_id = tokenizer.pad_id();
    let mut data = vec![0.0f32; sentences.len() * dim];
    let mut count = 0;
    let shares = run_sharded(
        devices,
        |device| {
            let b = make(device)?;
            if b.config().hidden_size != dim {
                return Err(Error::invalid(
                    "backend",
                    format!("the model's hidden size {dim}"),
                    b.config().hidden_size,
                ));
            }
            Ok(b)
        },
        batches.len(),
        |backend, job| {
            let seqs: Vec<&[u32]> = batches[job].iter().map(|&i| ids[i].as_slice()).collect();
            let batch = TokenBatch::pad(&seqs, pad_id)?;
            let out = backend.run_batch(&batch, None)?;
            Ok((out, seqs.len()))
        },
        |job, out| {
            for (k, &i) in batches[job].iter().enumerate() {
                data[i * dim..(i + 1) * dim].copy_from_slice(&out[k * dim..(k + 1) * dim]);
            }
            count += batches[job].len();
            on_batch(count, sentences.len());
        },
    )?;
    Ok(ShardedEmbeddings {
        embeddings: Embeddings {
            count: sentences.len(),
            dim,
            data,
            truncated,
        },
        shares,
        tokenize,
    })
}

/// What [`embed_on_devices`] returns.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardedEmbeddings {
    /// The embeddings, in input order.
    pub embeddings: Embeddings,
    /// Each device's share, by device.
    pub shares: Vec<DeviceShare>,
    /// Time tokenizing the sentences, once, on the calling thread's pool before the devices
    /// start.
    pub tokenize: Duration,
}
