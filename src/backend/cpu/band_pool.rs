//! A pool of spinning worker threads for the CPU backend's matrix products.
//!
//! A decode step is about 210 matrix products of a few hundred microseconds each. A pool that
//! puts its threads to sleep between them (rayon's) pays a wake-up per product, and in a
//! browser a Web Worker's wake-up (`Atomics.notify`) costs tens of microseconds: the page's
//! 2-thread engine decoded slower than its 1-thread one. Here the workers spin between jobs
//! and only sleep after about a millisecond with nothing to do, so a job reaches them at once.
//! Between tokens there is nothing for them to do: the engine calls [`BandPool::rest`] after
//! each forward pass, and they go to sleep at once instead of spinning on a core the page
//! needs then (to sample, hand the token over and draw it). The calling thread works too:
//! `threads() = workers + 1`.
//!
//! In wasm the workers are started on rayon's pool, which in the page's threaded engine is
//! wasm-bindgen-rayon's Web Workers sharing the wasm memory (each worker keeps one rayon
//! thread for good); the one-thread wasm engine has no workers and runs every task itself.
//! Natively each worker is a thread of its own.
//!
//! Protocol: a job is a task count and a `Fn(task)`; `claim` packs a generation (high 32 bits)
//! and the next task index (low 32 bits). Each job takes two generations: an odd one while the
//! caller rewrites the job's fields (no task can be claimed), then an even one that publishes
//! the job. A worker reads the fields after loading the claim word and claims with a CAS on
//! that word, so a worker that read a later job's fields (written after the odd generation)
//! finds the word changed and claims nothing: it can only run a task of the job it read. The
//! caller returns only when every claimed task is done, so the job's closure (borrowed from the
//! caller's stack) outlives every call to it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

/// Checks of the job counter before a worker sleeps: about a millisecond of spinning.
const SPIN_CHECKS: u32 = 1 << 20;

/// The job being run: a trampoline that knows the closure's type, and the closure.
struct Job {
    call: AtomicUsize,
    data: AtomicUsize,
    tasks: AtomicUsize,
}

/// The pool's shared state.
struct Shared {
    job: Job,
    /// Generation (high 32 bits) and next unclaimed task (low 32 bits).
    claim: AtomicU64,
    /// Tasks of the current job finished.
    done: AtomicUsize,
    /// Set by [`BandPool::rest`]: spinning workers go to sleep now. Cleared by the next job.
    resting: AtomicBool,
    /// Checks of `claim` a worker makes before it sleeps.
    spin_checks: u32,
    /// Workers asleep (or about to be), and where they sleep.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

/// Spinning workers plus the calling thread; see the module comment.
pub struct BandPool {
    shared: &'static Shared,
    workers: usize,
    /// One job at a time (the engine calls from one thread; this keeps it sound if not).
    calls: Mutex<()>,
}

/// Calls the closure behind `data` (a `&F`) on `task`.
unsafe fn trampoline<F: Fn(usize) + Sync>(data: usize, task: usize) {
    // SAFETY: `data` is the address of an `F` the caller of `run` keeps alive until all its
    // tasks are done.
    let f = unsafe { &*(data as *const F) };
    f(task);
}

impl Shared {
    /// Claims and runs tasks of generation `gen` until none are left.
    fn work(&self, gen: u32) {
        loop {
            let v = self.claim.load(Ordering::Acquire);
            if (v >> 32) as u32 != gen {
                return;
            }
            // Acquire: if these are a later job's fields, that job's odd (closing) generation
            // is visible to the CAS below, which then fails.
            let tasks = self.job.tasks.load(Ordering::Acquire);
            let index = (v & 0xffff_ffff) as usize;
            if index >= tasks {
                return;
            }
            let call = self.job.call.load(Ordering::Acquire);
            let data = self.job.data.load(Ordering::Acquire);
            if self.claim.compare_exchange_weak(v, v + 1, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                continue;
            }
            // SAFETY: `call` was stored from `trampoline::<F>` for the closure at `data`, and
            // the job's caller waits for this task (`done`) before the closure goes away.
            let call: unsafe fn(usize, usize) = unsafe { std::mem::transmute::<usize, unsafe fn(usize, usize)>(call) };
            unsafe { call(data, index) };
            self.done.fetch_add(1, Ordering::Release);
        }
    }

    /// A worker's life: wait for a newly published (even) generation, spinning and then
    /// asleep, and work on it.
    fn worker_loop(&self) {
        let waiting = |seen: u32, gen: u32| gen == seen || gen % 2 == 1;
        let mut seen = (self.claim.load(Ordering::Acquire) >> 32) as u32;
        loop {
            let mut checks = 0;
            let gen = loop {
                let gen = (self.claim.load(Ordering::Acquire) >> 32) as u32;
                if !waiting(seen, gen) {
                    break gen;
                }
                checks += 1;
                if checks < self.spin_checks && !self.resting.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                    continue;
                }
                // Asleep until a job is published; re-checked under the lock so a publish
                // between the check and the wait is not missed.
                let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.sleepers.fetch_add(1, Ordering::SeqCst);
                while waiting(seen, (self.claim.load(Ordering::SeqCst) >> 32) as u32) {
                    guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                checks = 0;
            };
            seen = gen;
            self.work(gen);
        }
    }
}

impl BandPool {
    /// A pool of `workers` spinning threads plus the caller. Its threads live as long as the
    /// process: the engine uses the one [`pool`]; tests make more (to oversubscribe the cores).
    pub fn start(workers: usize) -> BandPool {
        Self::start_spinning(workers, SPIN_CHECKS)
    }

    /// [`BandPool::start`] with workers that check for a job `spin_checks` times before they
    /// sleep (tests use a very long spin to see [`BandPool::rest`] put them to sleep).
    pub fn start_spinning(workers: usize, spin_checks: u32) -> BandPool {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            job: Job { call: AtomicUsize::new(0), data: AtomicUsize::new(0), tasks: AtomicUsize::new(0) },
            claim: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            resting: AtomicBool::new(false),
            spin_checks,
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }));
        for _ in 0..workers {
            spawn_worker(move || shared.worker_loop());
        }
        BandPool { shared, workers, calls: Mutex::new(()) }
    }

    /// Threads that run a job's tasks: the workers and the caller.
    pub fn threads(&self) -> usize {
        self.workers + 1
    }

    /// Tells the workers no job is coming soon: they sleep now rather than spin. The next
    /// job wakes them (the caller starts on its tasks meanwhile).
    pub fn rest(&self) {
        if self.workers > 0 {
            self.shared.resting.store(true, Ordering::Relaxed);
        }
    }

    /// Workers asleep now (or about to be).
    pub fn asleep(&self) -> usize {
        self.shared.sleepers.load(Ordering::SeqCst)
    }

    /// Runs `f(0) .. f(tasks - 1)` across the pool and returns when all are done.
    pub fn run<F: Fn(usize) + Sync>(&self, tasks: usize, f: F) {
        if self.workers == 0 || tasks <= 1 {
            (0..tasks).for_each(f);
            return;
        }
        let _one_job = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        let s = self.shared;
        let published = (s.claim.load(Ordering::Relaxed) >> 32) as u32;
        // Closes the last job: from here no task can be claimed until the new one is published.
        s.claim.store(u64::from(published.wrapping_add(1)) << 32, Ordering::SeqCst);
        let gen = published.wrapping_add(2);
        // Release: a worker that reads any of these also sees the closing store above.
        s.job.call.store(trampoline::<F> as unsafe fn(usize, usize) as usize, Ordering::Release);
        s.job.data.store(&f as *const F as usize, Ordering::Release);
        s.job.tasks.store(tasks, Ordering::Release);
        s.done.store(0, Ordering::Relaxed);
        s.resting.store(false, Ordering::Relaxed);
        // Publishes the job (and everything written before it) to the workers.
        s.claim.store(u64::from(gen) << 32, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        s.work(gen);
        while s.done.load(Ordering::Acquire) < tasks {
            std::hint::spin_loop();
        }
    }
}

/// A slice that a job's tasks write at once, each to its own elements or pieces (the matrix
/// products' bands, attention's tokens, rounded activations' rows).
pub(crate) struct SharedOut<T = f32>(*mut T);
// SAFETY: tasks write disjoint elements (each belongs to one task), and `run` returns only
// when every task is done, while the slice is still borrowed.
unsafe impl<T: Send> Send for SharedOut<T> {}
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T> Clone for SharedOut<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SharedOut<T> {}

impl<T> SharedOut<T> {
    /// The start of `out`, which stays borrowed while the job's tasks write it.
    pub(crate) fn new(out: &mut [T]) -> Self {
        SharedOut(out.as_mut_ptr())
    }

    /// Writes element `i`.
    ///
    /// # Safety
    /// `i` is inside the slice, and no other task touches element `i`.
    pub(crate) unsafe fn write(&self, i: usize, y: T) {
        unsafe { *self.0.add(i) = y };
    }

    /// Piece `i`, `len` long.
    ///
    /// # Safety
    /// The piece lies inside the slice, and no other task touches it while it is borrowed.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn piece(&self, i: usize, len: usize) -> &mut [T] {
        unsafe { std::slice::from_raw_parts_mut(self.0.add(i * len), len) }
    }
}

impl BandPool {
    /// Runs `f(i, piece)` for every `len`-long piece `i` of `out` on `tasks` tasks, piece `i`
    /// on task `i % tasks`: work that grows with `i` (causal attention, token by token) is
    /// shared evenly. With `tasks` 1 the calling thread runs every piece in order.
    pub fn for_each_piece<F: Fn(usize, &mut [f32]) + Sync>(&self, out: &mut [f32], len: usize, tasks: usize, f: F) {
        let pieces = out.len().checked_div(len).unwrap_or(0);
        let tasks = tasks.clamp(1, pieces.max(1));
        let start = SharedOut::new(out);
        self.run(tasks, |task| {
            for i in (task..pieces).step_by(tasks) {
                // SAFETY: piece i lies inside `out` (i < pieces), and only task i % tasks
                // touches it.
                f(i, unsafe { start.piece(i, len) });
            }
        });
    }
}

/// Starts a worker: in wasm on one of rayon's threads (the page's Web Workers), natively on a
/// thread of its own, so it never takes a thread from the rayon pool candle's kernels use.
fn spawn_worker(work: impl FnOnce() + Send + 'static) {
    #[cfg(target_arch = "wasm32")]
    rayon::spawn(work);
    #[cfg(not(target_arch = "wasm32"))]
    {
        // A thread that fails to start leaves a pool that still finishes every job: the
        // caller claims whatever tasks no worker takes.
        let _ = std::thread::Builder::new().name("band-pool".into()).spawn(work);
    }
}

/// The process's pool, started on first use: in wasm after the page's `initThreadPool`.
pub fn pool() -> &'static BandPool {
    static POOL: OnceLock<BandPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let workers = if cfg!(target_arch = "wasm32") {
            // The threaded engine's rayon threads (the page starts one fewer than it wants
            // threads: the engine's own thread is the last); none without atomics.
            if cfg!(target_feature = "atomics") {
                rayon::current_num_threads()
            } else {
                0
            }
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1).max(1)
        };
        BandPool::start(workers)
    })
}
