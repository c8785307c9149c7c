//! The generic op entry and the table's schema (`crate::opcall`).

use std::ffi::{c_char, c_int};

use super::{guard_or, status, str_arg, EnkaiSlice, OutStr};
use crate::opcall;

/// Runs PyTorch's op `name` ("exp", "sum", "where", "topk", ...: the name of
/// `torch.<name>`, or `torch.nn.functional.<name>` where torch has none).
/// `inputs` are the op's Tensor arguments in PyTorch's order (self first); a
/// 0 handle stands for an optional tensor left out (None); a TensorList
/// argument (cat, stack) takes all of them. Every other argument goes in the
/// JSON object `kwargs` under its PyTorch parameter name (`{"dim": [1],
/// "keepdim": true}`; NULL or `"{}"` = PyTorch's defaults). A number given
/// for a Tensor parameter where PyTorch has a Scalar overload works as in
/// PyTorch (`{"other": 2.5}`). Writes up to `cap` owned result handles to
/// `out` (release each with `enkai_tensor_free`) and returns the number of
/// results (2 for topk, max with dim, sort, ...), or -1 with the last error
/// set. The inputs are left unchanged (in-place ops excepted) and nothing is
/// written to `out` on error.
/// Errors: `E_NULL_POINTER` (`name`, or `inputs`/`out` with a non-zero
/// count), `E_INVALID_ARG` (unknown op, unknown or ill-typed argument, wrong
/// input count, more results than `cap`; the message names the op and the
/// argument), `E_SHAPE`, `E_DTYPE`, `E_UNSUPPORTED` (the op does not run on
/// the inputs' backend), `E_HANDLE_*`, `E_BACKEND_MISMATCH`, `E_TORCH`.
///
/// # Safety
/// `name` and `kwargs` are NULL or NUL-terminated; `inputs` points to
/// `n_inputs` handles and `out` to `cap` writable slots (either may be NULL
/// when its count is 0).
#[no_mangle]
pub unsafe extern "C" fn enkai_op(name: *const c_char, inputs: *const i64, n_inputs: usize, kwargs: *const c_char, out: *mut i64, cap: usize) -> i64 {
    guard_or(-1, || {
        // A call this thread has made before (same name, kwargs and input
        // pattern), with valid pointers: its memoised resolution, without
        // validating or looking up the strings again. Anything else takes
        // the checked path, which reports argument errors in order.
        if !name.is_null() && (n_inputs == 0 || !inputs.is_null()) && !(out.is_null() && cap > 0) {
            // SAFETY: `inputs` has `n_inputs` handles (non-NULL when n_inputs > 0).
            let ins = if n_inputs == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(inputs, n_inputs) } };
            // SAFETY: `out` has `cap` slots (non-NULL when cap > 0).
            let mut slots = unsafe { opcall::ResultSlots::new(out, cap) };
            if let Some(r) = unsafe { opcall::Key::new(name, ins, kwargs) }.and_then(|k| opcall::run_memoized(&k, ins, &mut slots)) {
                return r.map(|n| n as i64);
            }
        }
        unsafe { checked(name, inputs, n_inputs, kwargs, out, cap) }
    })
}

/// `enkai_op`'s first call of a kind on a thread (or one with a NULL
/// pointer): every argument checked in order, the call resolved and
/// memoised. Out of line, so the memoised path stays small.
#[cold]
#[inline(never)]
unsafe fn checked(name: *const c_char, inputs: *const i64, n_inputs: usize, kwargs: *const c_char, out: *mut i64, cap: usize) -> crate::error::Result<i64> {
    let name = unsafe { str_arg(name, "name")? };
    let inputs = unsafe { super::bytes_arg(inputs, n_inputs, "inputs")? };
    let kwargs = if kwargs.is_null() { None } else { Some(unsafe { str_arg(kwargs, "kwargs")? }) };
    if out.is_null() && cap > 0 {
        crate::bail!(E_NULL_POINTER, "out is NULL");
    }
    // SAFETY: `out` has `cap` slots (non-NULL when cap > 0, checked above).
    let mut slots = unsafe { opcall::ResultSlots::new(out, cap) };
    opcall::run(name, inputs, kwargs, &mut slots).map(|n| n as i64)
}

/// Every op of `enkai_op` as JSON: an array with one entry per overload,
/// `{"name", "overload", "signature", "params": [{"name", "type",
/// "optional", "kw_only", "default"?, "aten"?}], "returns", "differentiable",
/// "accepts", "complex" (takes complex tensors too), "pointwise", "domain",
/// "backends", "cases", "python"?,
/// "lowers_to"?, "lowered_signature"?}`; `backends` lists only the
/// backends of this build that run it; `aten` is ATen's name of a
/// parameter whose Python name differs; `cases` are the op's oracle
/// cases (`{"inputs", "kwargs"?}`, the test suite's input); a layer or loss
/// with `torch.nn.functional`'s signature names that function (`python`)
/// and the ATen operator libtorch runs for it (`lowers_to`, with its
/// `lowered_signature`; none for a function that picks among operators,
/// as `interpolate`). Owned: release with `enkai_free`.
/// Errors: `E_RESOURCE` (out of memory), and then `{NULL, 0}`.
#[no_mangle]
pub extern "C" fn enkai_op_schema() -> EnkaiSlice {
    super::guard(|| EnkaiSlice::from_bytes(opcall::schema_json().as_bytes()))
}

/// `torch.einsum`'s contraction order for operands of the shapes in
/// `shapes_json` (a JSON list, one shape per operand): writes
/// `{"path": [[0, 1], ...], "flops": N}` to `*out` (malloc'ed; free with
/// `enkai_tensor_string_free`). The path is the one `enkai_op("einsum")`
/// runs, in `opt_einsum`'s positional form (each step names two places in
/// the current list of terms, whose result goes to its end); `flops` is
/// its cost by `opt_einsum`'s count. With up to 12 operands the order is
/// the one of least FLOPs; beyond, a greedy choice.
/// Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG` (the equation,
/// the operand count, malformed JSON), `E_SHAPE` (a shape that does not fit
/// the equation); nothing is written on error.
///
/// # Safety
/// `equation` and `shapes_json` are NULL or NUL-terminated; `out`, `out_len` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_einsum_path(equation: *const c_char, shapes_json: *const c_char, out: *mut *mut c_char, out_len: *mut usize) -> c_int {
    status(|| {
        let out = unsafe { OutStr::new(out, out_len)? };
        let text = crate::vocab::einsum::path_json(unsafe { str_arg(equation, "equation")? }, unsafe { str_arg(shapes_json, "shapes_json")? })?;
        out.write(&text)
    })
}
