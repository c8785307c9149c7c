//! The compute thread count: `enkai_set_num_threads(n)`, or `ENKAI_NUM_THREADS`
//! read once, before the first device is made (every computation needs a
//! device, so that is before any kernel runs). The count goes to every
//! backend: libtorch's intra-op pool (`torch.set_num_threads`) today.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Once;

use crate::backend::imp;
use crate::error::Result;

/// More threads than any machine here has cores: a bound on what one integer
/// may make a pool spawn.
pub const MAX_THREADS: i64 = 1024;

/// 0 until someone sets a count (the backends then keep their own default).
static SET: AtomicI64 = AtomicI64::new(0);
static FROM_ENV: Once = Once::new();

fn check(n: i64, what: &str) -> Result<()> {
    if !(1..=MAX_THREADS).contains(&n) {
        crate::bail!(E_INVALID_ARG, "{what}: thread count {n} is outside 1..={MAX_THREADS}");
    }
    Ok(())
}

/// `torch.set_num_threads(n)` for every backend, process-wide. The caller's
/// count wins over `ENKAI_NUM_THREADS`, which is then never read.
pub fn set(n: i64) -> Result<()> {
    check(n, "set_num_threads")?;
    FROM_ENV.call_once(|| {});
    imp::set_num_threads(n);
    SET.store(n, Ordering::Relaxed);
    Ok(())
}

/// The count the backends compute with (`torch.get_num_threads()`).
pub fn get() -> i64 {
    imp::get_num_threads().unwrap_or_else(|| SET.load(Ordering::Relaxed).max(1))
}

/// Applies `ENKAI_NUM_THREADS` once, unless `set` came first. A value that is
/// not a thread count is an error, naming the variable, until it is fixed or
/// `set` is called.
pub fn apply_env() -> Result<()> {
    if FROM_ENV.is_completed() {
        return Ok(());
    }
    let Ok(text) = std::env::var("ENKAI_NUM_THREADS") else {
        FROM_ENV.call_once(|| {});
        return Ok(());
    };
    let n = text.trim().parse::<i64>().map_err(|_| {
        crate::err!(E_INVALID_ARG, "ENKAI_NUM_THREADS={text:?} is not a thread count (1..={MAX_THREADS})")
    })?;
    check(n, "ENKAI_NUM_THREADS")?;
    FROM_ENV.call_once(|| {
        imp::set_num_threads(n);
        SET.store(n, Ordering::Relaxed);
    });
    Ok(())
}
