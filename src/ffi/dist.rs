//! Multi-rank training: c10d process groups (Gloo) created from torchrun's
//! environment, collectives on tensor handles, and DDP's gradient averaging.
//! See `crate::dist` for the rules every rank follows.
//!
//! Collectives must be called in the same order with matching arguments on
//! every rank. When one rank rejects its arguments, or the ranks disagree,
//! every rank fails (the one at fault with its own code, the others with
//! `E_DIST_MISMATCH`) and the group stays usable. When a peer dies
//! (`E_DIST_PEER_LOST`) or hangs past the timeout (`E_DIST_TIMEOUT`), the
//! group is broken: every later dist call fails at once with the same code
//! until `enkai_dist_shutdown`.

use std::ffi::{c_char, c_int};

use super::{guard, guard_or, status, str_arg};
use crate::dist::{self, ReduceOp};

/// Checks `rank` of `world` (and that torchrun's `RANK` / `WORLD_SIZE`, when
/// set, agree), picks this rank's device and seeds the RNG with `seed`, as
/// every rank must before creating a model. `device` is a device handle, or
/// −1 for `cuda:LOCAL_RANK` when CUDA is usable and the CPU otherwise;
/// `enkai_dist_device` hands it out. Returns 0, or 1 with `E_INVALID_ARG`,
/// `E_DIST_ENV_MISMATCH`, `E_HANDLE_*`, `E_BACKEND_UNAVAILABLE`.
#[no_mangle]
pub extern "C" fn enkai_dist_config(world: i64, rank: i64, device: i64, seed: i64) -> c_int {
    status(|| dist::config(world, rank, device, seed))
}

/// A new device handle (owned by the caller) on the device `enkai_dist_config`
/// chose, or without it `cuda:LOCAL_RANK` when CUDA is usable, else the CPU.
/// Returns 0 with `E_INVALID_ARG` (a malformed `LOCAL_RANK`) or `E_RESOURCE`.
#[no_mangle]
pub extern "C" fn enkai_dist_device() -> i64 {
    guard(dist::device_handle)
}

/// Creates the process group for `rank` of `world` from the environment
/// torchrun sets (`MASTER_ADDR`, `MASTER_PORT`, `TORCHELASTIC_USE_AGENT_STORE`,
/// `TORCHELASTIC_RESTART_COUNT`, `GLOO_SOCKET_IFNAME`), or from
/// `ENKAI_DIST_INIT_METHOD` (`env://`, `tcp://host:port`, `file:///path`).
/// The timeout of every collective is `ENKAI_DIST_TIMEOUT_S` seconds (default
/// 1800, PyTorch's). A world of 1 needs no environment. `ENKAI_ENABLE_DIST`
/// is accepted and not needed. Returns 0, or 1 with `E_INVALID_ARG`,
/// `E_DIST_ENV_MISMATCH` (`RANK` / `WORLD_SIZE` disagree with the
/// arguments), `E_DIST` (already initialised, no `MASTER_ADDR`, rendezvous
/// failed), `E_DIST_TIMEOUT` (a peer did not join in time), `E_DIST_PEER_LOST`.
#[no_mangle]
pub extern "C" fn enkai_dist_init(world: i32, rank: i32) -> c_int {
    status(|| dist::init("", world.into(), rank.into(), 0.0))
}

/// `enkai_dist_init` with an explicit init method (`""` = as `enkai_dist_init`,
/// `env://`, `tcp://host:port` hosted by rank 0, or `file:///path`, a FileStore
/// for ranks on one host) and timeout in seconds (<= 0: `ENKAI_DIST_TIMEOUT_S`,
/// else 1800). Returns 0, or 1 with the codes of `enkai_dist_init` and
/// `E_NULL_POINTER`.
///
/// # Safety
/// `init_method` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_dist_init_method(init_method: *const c_char, world: i64, rank: i64, timeout_s: f64) -> c_int {
    status(|| dist::init(unsafe { str_arg(init_method, "init_method")? }, world, rank, timeout_s))
}

/// This process's rank in the group, or −1 with `E_DIST` (no group) or the
/// code of the failure that broke it.
#[no_mangle]
pub extern "C" fn enkai_dist_rank() -> i64 {
    guard_or(-1, || dist::rank_and_world().map(|(r, _)| r))
}

/// The number of ranks in the group, or −1 as `enkai_dist_rank`.
#[no_mangle]
pub extern "C" fn enkai_dist_world_size() -> i64 {
    guard_or(-1, || dist::rank_and_world().map(|(_, w)| w))
}

/// Returns once every rank has called it. Returns 0, or 1 with `E_DIST`,
/// `E_DIST_PEER_LOST`, `E_DIST_TIMEOUT`.
#[no_mangle]
pub extern "C" fn enkai_dist_barrier() -> c_int {
    status(dist::barrier)
}

/// Sums the listed tensors (JSON handle list, 0 entries skipped) over all
/// ranks, in place. Tensors of either backend: native (CPU) ones are reduced
/// by the Gloo group in their own memory. Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG`,
/// `E_HANDLE_*`, `E_DTYPE` (bool), `E_DIST`, `E_DIST_MISMATCH`,
/// `E_DIST_PEER_LOST`, `E_DIST_TIMEOUT`.
///
/// # Safety
/// `handles` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_dist_allreduce_sum(handles: *const c_char) -> c_int {
    status(|| dist::allreduce(unsafe { str_arg(handles, "handles")? }, ReduceOp::Sum))
}

/// Averages the listed tensors (0 entries skipped) over all ranks, in place,
/// as DDP averages gradients (each multiplied by 1/world, then summed).
/// Errors as `enkai_dist_allreduce_sum`, plus `E_DTYPE` for non-floating tensors.
///
/// # Safety
/// `handles` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_dist_allreduce_sum_multi(handles: *const c_char) -> c_int {
    status(|| dist::allreduce(unsafe { str_arg(handles, "handles")? }, ReduceOp::Mean))
}

/// All-reduces the listed tensors in place with `op`: `"sum"`, `"mean"`
/// (floating tensors only), `"max"` or `"min"`. Tensors of one dtype travel
/// together in flat buckets. Errors as `enkai_dist_allreduce_sum_multi`.
///
/// # Safety
/// `handles` and `op` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn enkai_dist_allreduce(handles: *const c_char, op: *const c_char) -> c_int {
    status(|| {
        let op = ReduceOp::parse(unsafe { str_arg(op, "op")? })?;
        dist::allreduce(unsafe { str_arg(handles, "handles")? }, op)
    })
}

/// Data-parallel gradient averaging, as DDP: each listed parameter's `.grad`
/// becomes its mean over the ranks, in place. Gradients of one dtype are
/// coalesced into flat buckets of about `bucket_mb` MiB (<= 0: 25, DDP's
/// `bucket_cap_mb`), so hundreds of small parameters cost a few collectives.
/// Parameters without a grad take no part (every rank must agree on which).
/// Errors as `enkai_dist_allreduce_sum_multi`, plus `E_INVALID_ARG` for a
/// `bucket_mb` over 1e6.
///
/// # Safety
/// `params` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_dist_allreduce_grads(params: *const c_char, bucket_mb: f64) -> c_int {
    status(|| dist::allreduce_grads(unsafe { str_arg(params, "params")? }, bucket_mb))
}

/// Overwrites the listed tensors with rank `root`'s, in place (every rank
/// starts from rank 0's weights with root 0). Errors as
/// `enkai_dist_allreduce_sum`, plus `E_INVALID_ARG` for a root outside the world.
///
/// # Safety
/// `handles` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_dist_broadcast(handles: *const c_char, root: i64) -> c_int {
    status(|| dist::broadcast(unsafe { str_arg(handles, "handles")? }, root))
}

/// A new tensor (owned by the caller) of shape `[world, *shape]` whose row r
/// is rank r's `t`. Returns 0 with `E_HANDLE_*`, `E_DIST`, `E_DIST_MISMATCH`,
/// `E_DIST_PEER_LOST`, `E_DIST_TIMEOUT`.
#[no_mangle]
pub extern "C" fn enkai_dist_all_gather(t: i64) -> i64 {
    guard(|| dist::all_gather(t))
}

/// Ends the process group. Idempotent, and safe after a failure. Returns 0.
#[no_mangle]
pub extern "C" fn enkai_dist_shutdown() -> c_int {
    status(dist::shutdown)
}
