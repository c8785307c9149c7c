//! Distributed training entry points. A world of one rank works fully; larger
//! worlds need `ENKAI_ENABLE_DIST=1` and are not available in this build
//! (`E_DIST`), see `crate::dist`.

use std::ffi::{c_char, c_int};

use super::{status, str_arg};
use crate::dist;

/// Validates and records a world (`world` ranks, this one `rank`, on device
/// handle `device`) and seeds the RNG with `seed`. Returns 0, or 1 with
/// `E_INVALID_ARG`, `E_DIST_ENV_GATE`, `E_DIST`, `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_dist_config(world: i64, rank: i64, device: i64, seed: i64) -> c_int {
    status(|| dist::config(world, rank, device, seed))
}

/// Starts the process group. Returns 0, or 1 with `E_INVALID_ARG`,
/// `E_DIST_ENV_GATE` (world > 1 without `ENKAI_ENABLE_DIST=1`), `E_DIST`
/// (already initialised, or a multi-rank world, which this build cannot start).
#[no_mangle]
pub extern "C" fn enkai_dist_init(world: i32, rank: i32) -> c_int {
    status(|| dist::init(world.into(), rank.into()))
}

/// Sums the listed tensors over all ranks, in place. Returns 0, or 1 with
/// `E_DIST` (not initialised), `E_INVALID_ARG`, `E_NULL_POINTER`, `E_HANDLE_*`.
///
/// # Safety
/// `handles` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_dist_allreduce_sum(handles: *const c_char) -> c_int {
    status(|| dist::allreduce(unsafe { str_arg(handles, "handles")? }))
}

/// Averages the listed tensors (0 entries skipped) over all ranks, in place —
/// what data-parallel training does to gradients. Errors as `enkai_dist_allreduce_sum`.
///
/// # Safety
/// `handles` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_dist_allreduce_sum_multi(handles: *const c_char) -> c_int {
    status(|| dist::allreduce(unsafe { str_arg(handles, "handles")? }))
}

/// Ends the process group (a no-op when none is running). Returns 0.
#[no_mangle]
pub extern "C" fn enkai_dist_shutdown() -> c_int {
    status(dist::shutdown)
}
