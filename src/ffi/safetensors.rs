//! Named tensors in and out of safetensors files (see `crate::safetensors`).

use std::ffi::{c_char, c_int};

use super::{guard, guard_or, status, str_arg, OutStr};
use crate::registry::SAFETENSORS;
use crate::safetensors::file;

/// Opens the safetensors file at `path` and validates its whole header as the
/// reference implementation does (length at most 100,000,000 bytes and
/// inside the file; a UTF-8 JSON object; each tensor a known dtype, a shape
/// and `data_offsets` whose size matches; the tensors back to back, covering
/// the data section exactly; no name twice; `__metadata__` an object of
/// strings), so a file it refuses is refused here, never at a `get`. The
/// format's dtypes the library cannot hold (F8_*, F4, F6_*, U16, U32, U64,
/// C64) are accepted here and refused by `enkai_safetensors_get`. The file
/// must not be truncated while tensors got from it live (as with any
/// memory-mapped file). Returns a safetensors handle owned by the caller
/// (free it with `enkai_safetensors_free`; counted by
/// `enkai_tensor_live_safetensors`), or 0 with `E_NULL_POINTER`,
/// `E_INVALID_ARG` (empty path, not UTF-8), `E_CKPT_MISSING` (no such file),
/// `E_CKPT_IO` (unreadable, not a regular file), `E_CKPT_FORMAT` (any fault
/// of the file, the message naming the file, the tensor and the fault).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_safetensors_open(path: *const c_char) -> i64 {
    guard(|| file::open(unsafe { str_arg(path, "path")? }))
}

/// Frees a safetensors handle. Tensors got from it stay valid: each holds
/// the mapping it views. Returns 0, or 1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_safetensors_free(st: i64) -> c_int {
    status(|| SAFETENSORS.release(st))
}

/// Writes the tensor names of `st` as a JSON array, in file (offset) order,
/// to `*out` (`malloc`ed, NUL-terminated, `*out_len` bytes without the NUL;
/// free with `enkai_tensor_string_free`). Returns 0, or 1 with
/// `E_NULL_POINTER`, `E_HANDLE_*`; on error the outs are untouched.
///
/// # Safety
/// `out` and `out_len` are NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_safetensors_names(st: i64, out: *mut *mut c_char, out_len: *mut usize) -> c_int {
    status(|| unsafe { OutStr::new(out, out_len)? }.write(&file::names(st)?))
}

/// Writes `{"dtype":"F32","shape":[2,3]}` for tensor `name` of `st` to `*out`
/// (the format's dtype names: BOOL, U8, I8, I16, I32, I64, F16, BF16, F32,
/// F64, C64, the library's C128 for complex128, and those the library
/// cannot hold); outputs as
/// `enkai_safetensors_names`. Returns 0, or 1 with `E_NULL_POINTER`,
/// `E_INVALID_ARG` (no such name), `E_HANDLE_*`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out` and `out_len` are NULL or
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_safetensors_info(st: i64, name: *const c_char, out: *mut *mut c_char, out_len: *mut usize) -> c_int {
    status(|| unsafe {
        let out = OutStr::new(out, out_len)?;
        out.write(&file::info(st, str_arg(name, "name")?)?)
    })
}

/// Tensor `name` of `st` on device `dev` (a device handle), made by the
/// active backend, with the file's dtype and shape. On the CPU it is
/// zero-copy on both backends: the file's bytes in place, through a private
/// copy-on-write mapping (the file's one shared mapping for the first get of
/// a name, a mapping of its own for a later one), so a write into it (an
/// in-place op, an optimizer step) lands on pages only that tensor and its
/// views see: the file and the other tensors got from it never change. It
/// stays valid after `enkai_safetensors_free`; freeing it gives back the
/// pages wholly its own. A tensor whose bytes are not aligned to
/// its element size (the reference writer always aligns them) and any
/// tensor on CUDA are copies. Returns a tensor handle owned by the caller,
/// or 0 with `E_NULL_POINTER`, `E_INVALID_ARG` (no such name), `E_DTYPE` (a
/// dtype the library cannot hold), `E_HANDLE_*`, `E_DEVICE`,
/// `E_BACKEND_UNAVAILABLE`, `E_CKPT_FORMAT` (a BOOL byte other than 0 or 1,
/// or the file shrank since it was opened), `E_CKPT_IO` (mapping failed).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_safetensors_get(st: i64, name: *const c_char, dev: i64) -> i64 {
    guard(|| file::get(st, unsafe { str_arg(name, "name")? }, dev))
}

/// Every tensor of `st` on device `dev`, in file order, each as
/// `enkai_safetensors_get` makes it, in one call: the tensors
/// `enkai_safetensors_names` lists, less the scales of the file's qint8
/// tensors (`<name>.scale`), which come inside their tensor. Writes the
/// handles (owned by the caller) to `out[0..n]` and their names, a JSON
/// array in the same order, to `*names` (as `enkai_safetensors_names`), and
/// returns `n`. With `out` NULL and `cap` 0 it only returns `n`, makes
/// nothing and leaves `names` untouched (which may then be NULL). Returns
/// -1 with `E_NULL_POINTER`, `E_INVALID_ARG` (more tensors than `cap`) or
/// any error of `enkai_safetensors_get`; on error nothing is made and the
/// outs are untouched.
///
/// # Safety
/// `out` is NULL or valid for `cap` writes; `names` and `names_len` are NULL
/// or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_safetensors_get_all(st: i64, dev: i64, out: *mut i64, cap: usize, names: *mut *mut c_char, names_len: *mut usize) -> i64 {
    guard_or(-1, || unsafe {
        if out.is_null() {
            if cap == 0 {
                return Ok(file::count_all(st)? as i64);
            }
            crate::bail!(E_NULL_POINTER, "out is NULL");
        }
        let names = OutStr::new(names, names_len)?;
        let (list, made) = file::get_all(st, dev, cap)?;
        names.write(&list)?;
        let handles = made.keep();
        std::ptr::copy_nonoverlapping(handles.as_ptr(), out, handles.len());
        Ok(handles.len() as i64)
    })
}

/// Writes the file's `__metadata__` map to `*out` as a JSON object of
/// strings (`{}` when it has none); outputs as `enkai_safetensors_names`.
/// Returns 0, or 1 with `E_NULL_POINTER`, `E_HANDLE_*`.
///
/// # Safety
/// `out` and `out_len` are NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_safetensors_metadata(st: i64, out: *mut *mut c_char, out_len: *mut usize) -> c_int {
    status(|| unsafe { OutStr::new(out, out_len)? }.write(&file::metadata(st)?))
}

/// Writes the tensors of the JSON handle list `handles_json` under the names
/// of the JSON string list `names_json` (same length) to a safetensors file
/// at `path` that the reference `safetensors` package reads, with
/// `metadata_json` (a JSON object of strings; NULL for none) as its
/// `__metadata__`. Tensors of any dtype, layout and device are written as
/// contiguous little-endian bytes; the layout is the reference writer's
/// (tensors sorted by dtype alignment, largest first, then by name; the
/// header padded with spaces to a multiple of 8 bytes), so every tensor can
/// be mapped in place. Atomic: a temporary file in the same directory,
/// fsynced, renamed over `path`, then the directory fsynced; an error leaves
/// neither the file nor a temporary. Returns 0, or 1 with `E_NULL_POINTER`,
/// `E_INVALID_ARG` (bad JSON, lengths differ, a name twice or
/// `__metadata__`, empty path, header over the format's limit),
/// `E_HANDLE_*`, `E_CKPT_IO` (the write failed).
///
/// # Safety
/// `path`, `names_json` and `handles_json` are NULL or NUL-terminated
/// strings; `metadata_json` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_safetensors_save(
    path: *const c_char,
    names_json: *const c_char,
    handles_json: *const c_char,
    metadata_json: *const c_char,
) -> c_int {
    status(|| unsafe {
        let metadata = if metadata_json.is_null() { None } else { Some(str_arg(metadata_json, "metadata_json")?) };
        file::save(str_arg(path, "path")?, str_arg(names_json, "names_json")?, str_arg(handles_json, "handles_json")?, metadata)
    })
}

/// Writes trained parameters `params_json` (a JSON handle list) under the
/// names `names_json` as a safetensors file that
/// `torch.nn.Module.load_state_dict(safetensors.torch.load_file(path))`
/// takes: each parameter's values, dtype and shape under its name (the
/// values only: no gradient, no optimizer state). Arguments, atomicity and
/// errors as `enkai_safetensors_save`.
///
/// # Safety
/// As `enkai_safetensors_save`.
#[no_mangle]
pub unsafe extern "C" fn enkai_state_dict_save(
    path: *const c_char,
    names_json: *const c_char,
    params_json: *const c_char,
    metadata_json: *const c_char,
) -> c_int {
    unsafe { enkai_safetensors_save(path, names_json, params_json, metadata_json) }
}
