//! The native backend's thread pool, shaped like OpenMP's parallel for: a
//! loop of `tasks` runs on the calling thread together with `threads - 1`
//! workers that spin for a while between loops before they sleep. A
//! training step is hundreds of short parallel loops in a row; a pool whose
//! caller hands the loop off and sleeps until it is done (rayon's `install`)
//! pays two context switches per loop, which measured as 15% of a 2-thread
//! step. Small loops never leave the calling thread.

use std::cell::{Cell, UnsafeCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Elements (or multiply-adds) below which a kernel stays on the caller's thread.
pub const GRAIN: usize = 32 * 1024;

/// How long an idle worker keeps spinning for the next loop before it
/// sleeps: far longer than the gap between two ops of a step, far shorter
/// than a pause a caller would notice as a busy core.
const SPIN: Duration = Duration::from_micros(300);

type Body<'a> = dyn Fn(usize) + Sync + 'a;

thread_local! {
    /// Set while this thread runs a pool loop (as caller or worker): a loop
    /// started inside a task runs inline instead of waiting on the pool.
    static IN_LOOP: Cell<bool> = const { Cell::new(false) };
}

/// What the caller and the workers share. `state` is `epoch << 1 | open`:
/// a worker joins a loop only while it is open, and the caller closes it
/// and waits for `active` to drain before the loop's body goes out of scope.
struct Shared {
    state: AtomicU64,
    /// The open loop's body (lifetime erased) and task count; written only
    /// while closed with no worker active.
    job: UnsafeCell<(Option<*const Body<'static>>, usize)>,
    next: AtomicUsize,
    done: AtomicUsize,
    active: AtomicUsize,
    panicked: AtomicBool,
    /// One loop at a time; a second caller runs its loop inline.
    busy: AtomicBool,
    shutdown: AtomicBool,
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written by the one caller holding `busy` while no worker
// can read it (closed, `active` drained), and read by workers only while open.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

struct Pool {
    threads: usize,
    shared: Arc<Shared>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, SeqCst);
        let _g = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.wake.notify_all();
    }
}

static POOL: RwLock<Option<Arc<Pool>>> = RwLock::new(None);

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn build(n: usize) -> Arc<Pool> {
    let shared = Arc::new(Shared {
        state: AtomicU64::new(0),
        job: UnsafeCell::new((None, 0)),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        active: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
        busy: AtomicBool::new(false),
        shutdown: AtomicBool::new(false),
        sleepers: AtomicUsize::new(0),
        sleep: Mutex::new(()),
        wake: Condvar::new(),
    });
    let mut threads = 1;
    for i in 1..n {
        let sh = shared.clone();
        // A worker that cannot be started leaves a smaller pool, not an error.
        if std::thread::Builder::new().name(format!("enkai-cpu-{i}")).spawn(move || work(&sh)).is_err() {
            break;
        }
        threads += 1;
    }
    Arc::new(Pool { threads, shared })
}

fn pool() -> Arc<Pool> {
    if let Some(p) = POOL.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return p.clone();
    }
    let mut w = POOL.write().unwrap_or_else(|e| e.into_inner());
    w.get_or_insert_with(|| build(default_threads())).clone()
}

/// Replaces the pool; a loop already running finishes on the old one,
/// whose workers then exit.
pub fn set_threads(n: usize) {
    let p = build(n.max(1));
    *POOL.write().unwrap_or_else(|e| e.into_inner()) = Some(p);
}

pub fn threads() -> usize {
    pool().threads
}

/// Whether a kernel of this much work should split itself.
pub fn parallel(work: usize) -> bool {
    work >= GRAIN && threads() > 1
}

/// Runs `f(0) .. f(tasks - 1)`, on the pool's threads and this one, and
/// returns when all have. Inside another loop's task, or while another
/// thread's loop holds the pool, they run here in order.
pub fn for_each(tasks: usize, f: &Body<'_>) {
    if tasks <= 1 || IN_LOOP.get() {
        return (0..tasks).for_each(f);
    }
    let p = pool();
    let sh = &*p.shared;
    if p.threads == 1 || sh.busy.swap(true, Acquire) {
        return (0..tasks).for_each(f);
    }
    struct Leave<'a>(&'a Shared);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            IN_LOOP.set(false);
            self.0.busy.store(false, Release);
        }
    }
    IN_LOOP.set(true);
    let _leave = Leave(sh);
    // SAFETY: `busy` is ours, the loop is closed and no worker is active
    // (the previous caller drained them), so nobody reads `job`. The
    // body's lifetime is erased; it outlives the loop, which is closed and
    // drained below before this returns.
    unsafe { *sh.job.get() = (Some(std::mem::transmute::<&Body<'_>, &'static Body<'static>>(f) as *const Body<'static>), tasks) };
    sh.next.store(0, Relaxed);
    sh.done.store(0, Relaxed);
    sh.panicked.store(false, Relaxed);
    let open = ((sh.state.load(Relaxed) >> 1) + 1) << 1 | 1;
    sh.state.store(open, SeqCst);
    if sh.sleepers.load(SeqCst) > 0 {
        let _g = sh.sleep.lock().unwrap_or_else(|e| e.into_inner());
        sh.wake.notify_all();
    }
    run_tasks(sh, f, tasks);
    let mut spins = 0u32;
    while sh.done.load(Acquire) < tasks {
        backoff(&mut spins);
    }
    sh.state.store(open & !1, SeqCst);
    while sh.active.load(SeqCst) > 0 {
        backoff(&mut spins);
    }
    if sh.panicked.load(Relaxed) {
        panic!("a native kernel panicked on a pool thread");
    }
}

/// `for_each` over owned items: task `i` gets `items[i]`.
pub fn for_each_owned<T: Send>(items: Vec<T>, f: impl Fn(usize, T) + Sync) {
    let cells: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    for_each(cells.len(), &|i| {
        let item = cells[i].lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(item) = item {
            f(i, item);
        }
    });
}

fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 4096 {
        std::hint::spin_loop();
    } else {
        // The other thread may have been preempted: let it run.
        std::thread::yield_now();
    }
}

/// Takes tasks of the open loop until none are left.
fn run_tasks(sh: &Shared, f: &Body<'_>, tasks: usize) {
    loop {
        let i = sh.next.fetch_add(1, Relaxed);
        if i >= tasks {
            return;
        }
        // A panicking task must still count as done, or the caller would wait forever.
        if catch_unwind(AssertUnwindSafe(|| f(i))).is_err() {
            sh.panicked.store(true, Relaxed);
        }
        sh.done.fetch_add(1, Release);
    }
}

/// A worker's life: wait for an open loop it has not seen, join it, repeat.
fn work(sh: &Shared) {
    IN_LOOP.set(true);
    let mut seen = sh.state.load(Acquire) >> 1;
    while let Some(s) = wait_open(sh, seen) {
        seen = s >> 1;
        sh.active.fetch_add(1, SeqCst);
        // Still the same open loop after announcing ourselves: the caller
        // cannot close it and return before we leave.
        if sh.state.load(SeqCst) == s {
            // SAFETY: the loop is open, so `job` holds its live body.
            let (f, tasks) = unsafe { *sh.job.get() };
            if let Some(f) = f {
                run_tasks(sh, unsafe { &*f }, tasks);
            }
        }
        sh.active.fetch_sub(1, Release);
    }
}

/// The state of the next open loop after epoch `seen`, or `None` at shutdown.
fn wait_open(sh: &Shared, seen: u64) -> Option<u64> {
    let fresh = |s: u64| s & 1 == 1 && s >> 1 != seen;
    let start = Instant::now();
    let mut n = 0u32;
    loop {
        let s = sh.state.load(Acquire);
        if fresh(s) {
            return Some(s);
        }
        if sh.shutdown.load(Relaxed) {
            return None;
        }
        std::hint::spin_loop();
        n += 1;
        if n % 256 == 0 && start.elapsed() > SPIN {
            break;
        }
    }
    let mut g = sh.sleep.lock().unwrap_or_else(|e| e.into_inner());
    sh.sleepers.fetch_add(1, SeqCst);
    let got = loop {
        let s = sh.state.load(SeqCst);
        if fresh(s) {
            break Some(s);
        }
        if sh.shutdown.load(SeqCst) {
            break None;
        }
        g = sh.wake.wait(g).unwrap_or_else(|e| e.into_inner());
    };
    sh.sleepers.fetch_sub(1, SeqCst);
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every task runs exactly once, wherever it runs.
    fn counts(tasks: usize) -> Vec<usize> {
        let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
        for_each(tasks, &|i| {
            hits[i].fetch_add(1, Relaxed);
        });
        hits.iter().map(|h| h.load(Relaxed)).collect()
    }

    #[test]
    fn loops_run_every_task_once_nested_and_concurrently() {
        for tasks in [0, 1, 2, 3, 17, 1000] {
            assert!(counts(tasks).iter().all(|&c| c == 1), "{tasks} tasks");
        }
        // A loop inside a task runs inline, on whichever thread has the task.
        let total = AtomicUsize::new(0);
        for_each(8, &|_| {
            for_each(8, &|_| {
                total.fetch_add(1, Relaxed);
            })
        });
        assert_eq!(total.load(Relaxed), 64);
        // Callers on several threads share the pool or run inline; none waits on another's loop.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        assert!(counts(37).iter().all(|&c| c == 1));
                    }
                });
            }
        });
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_pool_lives_on() {
        let r = catch_unwind(|| for_each(64, &|i| assert!(i != 40, "task 40")));
        assert!(r.is_err());
        assert!(!IN_LOOP.get(), "the caller's loop flag is restored");
        assert!(counts(64).iter().all(|&c| c == 1));
    }
}
