//! The native backend's thread pool. Kernels run inline on the calling
//! thread unless the work is large enough to pay for waking the pool, so a
//! small op costs no cross-thread handoff.

use std::sync::{Arc, RwLock};

/// Elements (or multiply-adds) below which a kernel stays on the caller's thread.
pub const GRAIN: usize = 32 * 1024;

static POOL: RwLock<Option<Arc<rayon::ThreadPool>>> = RwLock::new(None);

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn build(n: usize) -> Option<Arc<rayon::ThreadPool>> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("enkai-cpu-{i}"))
        .build()
        .ok()
        .map(Arc::new)
}

fn pool() -> Option<Arc<rayon::ThreadPool>> {
    if let Some(p) = POOL.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return Some(p.clone());
    }
    let mut w = POOL.write().unwrap_or_else(|e| e.into_inner());
    if w.is_none() {
        *w = build(default_threads());
    }
    w.clone()
}

/// Replaces the pool; work already running keeps the old one until it ends.
pub fn set_threads(n: usize) {
    let p = build(n.max(1));
    if p.is_some() {
        *POOL.write().unwrap_or_else(|e| e.into_inner()) = p;
    }
}

pub fn threads() -> usize {
    pool().map_or(1, |p| p.current_num_threads())
}

/// Runs `f` inside the pool when `work` is worth splitting (rayon's parallel
/// iterators inside `f` then use it), else on this thread.
pub fn run<R: Send>(work: usize, f: impl FnOnce() -> R + Send) -> R {
    if work < GRAIN || rayon::current_thread_index().is_some() {
        return f();
    }
    match pool() {
        Some(p) if p.current_num_threads() > 1 => p.install(f),
        _ => f(),
    }
}

/// Whether a kernel of this much work should split itself.
pub fn parallel(work: usize) -> bool {
    work >= GRAIN && threads() > 1
}
