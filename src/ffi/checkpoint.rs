//! Checkpoints: atomic, verified snapshots in a directory (see `crate::checkpoint`).

use std::ffi::{c_char, c_int, CStr};

use super::{guard, out_arg, status, str_arg, OutStr};
use crate::error::Result;
use crate::{checkpoint, json};

/// The caller's meta bytes, verbatim (any bytes but NUL).
unsafe fn meta_arg<'a>(p: *const c_char) -> Result<&'a str> {
    if p.is_null() {
        crate::bail!(E_NULL_POINTER, "meta_json is NULL");
    }
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    std::str::from_utf8(bytes).map_err(|e| crate::err!(E_INVALID_ARG, "meta_json is not valid UTF-8 (invalid byte at offset {})", e.valid_up_to()))
}

/// The outputs of a load, checked before anything is read.
struct LoadOut<'a> {
    params: OutStr<'a>,
    opt: &'a mut i64,
    meta: OutStr<'a>,
}

impl<'a> LoadOut<'a> {
    unsafe fn new(p: *mut *mut c_char, pl: *mut usize, o: *mut i64, m: *mut *mut c_char, ml: *mut usize) -> Result<Self> {
        unsafe {
            Ok(LoadOut {
                params: OutStr::new(p, pl)?,
                opt: out_arg(o, "out_opt")?,
                meta: OutStr::new(m, ml)?,
            })
        }
    }

    fn write(self, (params, opt, meta): (Vec<i64>, i64, Vec<u8>)) -> Result<()> {
        let meta = String::from_utf8(meta).map_err(|_| crate::err!(E_CKPT_FORMAT, "meta.json is not UTF-8"))?;
        self.params.write(&json::write_int_list(&params))?;
        self.meta.write(&meta)?;
        *self.opt = opt;
        Ok(())
    }
}

/// Saves the tensors of the JSON handle list `params` (names `param_0…`,
/// dtypes, shapes and devices kept), the AdamW state of `opt` (0 for none;
/// its params must be among `params`) and `meta_json` verbatim as a new
/// snapshot of `dir`, written to a staging directory, fsynced, then made
/// `latest` by an atomic rename. The newest `ENKAI_CKPT_KEEP` snapshots
/// (default 2) are kept: the older ones go before the new one is written (so
/// it reuses their room; with a keep of 1 the previous one goes only after
/// the new one is in), and a failed save leaves at least the newest. Returns 0, or 1 with `E_NULL_POINTER`,
/// `E_INVALID_ARG`, `E_HANDLE_*`, `E_CKPT_IO`.
///
/// # Safety
/// `dir`, `params` and `meta_json` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn enkai_checkpoint_save(dir: *const c_char, params: *const c_char, opt: i64, meta_json: *const c_char) -> c_int {
    status(|| unsafe { checkpoint::save(str_arg(dir, "dir")?, str_arg(params, "params")?, opt, 0, meta_arg(meta_json)?) })
}

/// `enkai_checkpoint_save` that also stores the GradScaler `scaler` (its scale,
/// growth tracker and settings) as `scaler.json`; restore it with
/// `enkai_checkpoint_load_scaler`. Errors as `enkai_checkpoint_save`, and
/// `E_HANDLE_*` for `scaler`.
///
/// # Safety
/// As `enkai_checkpoint_save`.
#[no_mangle]
pub unsafe extern "C" fn enkai_checkpoint_save_amp(
    dir: *const c_char,
    params: *const c_char,
    opt: i64,
    scaler: i64,
    meta_json: *const c_char,
) -> c_int {
    status(|| unsafe { checkpoint::save(str_arg(dir, "dir")?, str_arg(params, "params")?, opt, scaler, meta_arg(meta_json)?) })
}

/// Loads the `latest` snapshot of `dir`. Every file's SHA-256 is checked
/// against integrity.json before any handle is created. Writes a JSON array
/// of new param handles (saved order) to `*out_params`, a new optimizer handle
/// bound to them to `*out_opt` (0 if none was saved), and the saved meta bytes
/// to `*out_meta`; all owned by the caller. On error nothing is created or
/// written: 1 with `E_CKPT_MISSING`, `E_CKPT_HASH_MISMATCH`, `E_CKPT_FORMAT`,
/// `E_CKPT_IO`, `E_NULL_POINTER`, `E_DEVICE`.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string; every out-pointer NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_checkpoint_load(
    dir: *const c_char,
    out_params: *mut *mut c_char,
    params_len: *mut usize,
    out_opt: *mut i64,
    out_meta: *mut *mut c_char,
    meta_len: *mut usize,
) -> c_int {
    status(|| {
        let out = unsafe { LoadOut::new(out_params, params_len, out_opt, out_meta, meta_len)? };
        out.write(checkpoint::load(unsafe { str_arg(dir, "dir")? })?)
    })
}

/// A new GradScaler handle (owned by the caller) with the state saved by
/// `enkai_checkpoint_save_amp` in the latest snapshot of `dir`; 0 with
/// `E_CKPT_MISSING` (no scaler saved) or the errors of `enkai_checkpoint_load`.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_checkpoint_load_scaler(dir: *const c_char) -> i64 {
    guard(|| checkpoint::load_scaler(unsafe { str_arg(dir, "dir")? }))
}

/// Rank `rank`'s part of a checkpoint of a `world`-rank run, a collective
/// call: every rank saves its own params, optimizer and `meta_json` (which may
/// differ between ranks) to `rank{rank}/` of the round, and the round becomes
/// `latest` (with `manifest.json`: world, round, every rank's file hashes) only
/// once every rank's shard is written: once every rank's save returned 0,
/// every rank's load returns this round. With a process group
/// (`enkai_dist_init`, world > 1) the commit goes through it: rank 0 gathers
/// the hashes, commits, and every call returns after the commit with the same
/// result. Without one, ranks on one host meet through the file system: a
/// save returns once its own shard is durable, the save that completes the
/// round commits it, and a rank saving again before its round completes
/// replaces its shard there, so one process may save rank 0, 1, ... in turn.
/// A round that never completes never becomes `latest`. With
/// `ENKAI_CKPT_RANKED_WAIT=1` a save without a group also waits for the
/// commit, and withdraws its shard with `E_CKPT_INCOMPLETE` when the round is
/// not complete within `ENKAI_DIST_TIMEOUT_S` (default 1800 s).
/// Returns 0, or 1 with the errors of
/// `enkai_checkpoint_save`, `E_INVALID_ARG` (rank not in world, or not this
/// process's rank in the group, or a malformed `ENKAI_CKPT_RANKED_WAIT`),
/// `E_CKPT_INCOMPLETE` (another rank failed or, when waiting, never saved:
/// nothing was committed and the previous `latest` stays), and
/// the `E_DIST_*` codes of a failing group.
///
/// # Safety
/// As `enkai_checkpoint_save`.
#[no_mangle]
pub unsafe extern "C" fn enkai_checkpoint_save_ranked(
    dir: *const c_char,
    rank: i64,
    world: i64,
    params: *const c_char,
    opt: i64,
    meta_json: *const c_char,
) -> c_int {
    status(|| unsafe { checkpoint::save_ranked(str_arg(dir, "dir")?, rank, world, str_arg(params, "params")?, opt, 0, meta_arg(meta_json)?) })
}

/// `enkai_checkpoint_save_ranked` that also stores this rank's GradScaler
/// `scaler` in its shard; restore it with `enkai_checkpoint_load_ranked_scaler`.
///
/// # Safety
/// As `enkai_checkpoint_save`.
#[no_mangle]
pub unsafe extern "C" fn enkai_checkpoint_save_ranked_amp(
    dir: *const c_char,
    rank: i64,
    world: i64,
    params: *const c_char,
    opt: i64,
    scaler: i64,
    meta_json: *const c_char,
) -> c_int {
    status(|| unsafe {
        checkpoint::save_ranked(str_arg(dir, "dir")?, rank, world, str_arg(params, "params")?, opt, scaler, meta_arg(meta_json)?)
    })
}

/// A new GradScaler handle (owned by the caller) with the state rank `rank`
/// saved by `enkai_checkpoint_save_ranked_amp` in the latest ranked snapshot
/// of `dir` (verified against the manifest); 0 with `E_CKPT_MISSING` (no
/// scaler saved) or the errors of `enkai_checkpoint_load_ranked`.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_checkpoint_load_ranked_scaler(dir: *const c_char, rank: i64) -> i64 {
    guard(|| checkpoint::load_ranked_scaler(unsafe { str_arg(dir, "dir")? }, rank))
}

/// Loads rank `rank`'s shard of the latest ranked snapshot of `dir`, verified
/// against both `manifest.json` and its own integrity.json; outputs and errors
/// as `enkai_checkpoint_load`, plus `E_CKPT_MISSING` naming a missing rank.
/// Tensors that every rank held alike when the round was saved through a
/// process group were written once, in pieces (`rank{r}/replicated.bin`);
/// they load like the rest. With a process group the call is collective
/// (every rank calls it, as for the save): each rank verifies the SHA-256 of
/// its share of the pieces and checks its bytes of the others against their
/// verifier's; a damaged piece is every rank's `E_CKPT_HASH_MISMATCH`, and a
/// rank that never calls makes the others fail with the group's `E_DIST_*`
/// timeout. Without a group every piece is verified by the caller.
///
/// # Safety
/// As `enkai_checkpoint_load`.
#[no_mangle]
pub unsafe extern "C" fn enkai_checkpoint_load_ranked(
    dir: *const c_char,
    rank: i64,
    out_params: *mut *mut c_char,
    params_len: *mut usize,
    out_opt: *mut i64,
    out_meta: *mut *mut c_char,
    meta_len: *mut usize,
) -> c_int {
    status(|| {
        let out = unsafe { LoadOut::new(out_params, params_len, out_opt, out_meta, meta_len)? };
        out.write(checkpoint::load_ranked(unsafe { str_arg(dir, "dir")? }, rank)?)
    })
}
