//! ONNX export of a traced forward pass (see `crate::onnx`, `crate::trace`).

use std::ffi::{c_char, c_int};

use super::{status, str_arg};

/// Starts recording, on this thread, every op it runs (`enkai_op`, the typed
/// op functions and the seed's `enkai_tensor_linear`, `layernorm`, ...):
/// the trace that `enkai_onnx_export` writes. Discards this thread's earlier
/// trace. While recording, the trace keeps a reference to each tensor from
/// outside it that an op reads (weights, constants), so that it can be
/// exported after the caller frees the handle; `enkai_onnx_trace_clear`
/// drops them. Returns 0.
#[no_mangle]
pub extern "C" fn enkai_onnx_trace_begin() -> c_int {
    status(|| {
        crate::trace::begin();
        Ok(())
    })
}

/// Stops recording on this thread; the trace stays for `enkai_onnx_export`
/// until the next `enkai_onnx_trace_begin` or `enkai_onnx_trace_clear`. Returns 0.
#[no_mangle]
pub extern "C" fn enkai_onnx_trace_end() -> c_int {
    status(|| {
        crate::trace::end();
        Ok(())
    })
}

/// Stops recording and drops this thread's trace and the tensor references
/// it holds. Returns 0.
#[no_mangle]
pub extern "C" fn enkai_onnx_trace_clear() -> c_int {
    status(|| {
        crate::trace::clear();
        Ok(())
    })
}

/// Writes to `path` an ONNX model (IR 8 to 11, the `opset`'s, 17 to 23)
/// of the graph that made `outputs_json` from `inputs_json`, as this
/// thread's trace recorded it (`enkai_onnx_trace_begin`).
/// - `inputs_json`, `outputs_json`: JSON arrays of tensor handles (the graph
///   inputs and outputs, in order, named `input0`..., `output0`...); an item
///   may instead be `{"handle": h, "name": "ids", "batch_dim": 0}`, naming
///   it, and for an input making that dim a dynamic batch (`batch`), which
///   the export follows through the ops. The trace must have a batch of at
///   least 2 for that.
/// - `names_json`: `{"name": handle}`: the parameters, written as
///   initializers under those names with their values now. Other tensors
///   from outside the trace that the graph reads are written as constants.
///
/// The file is written to a temporary name beside `path`, fsynced and
/// renamed, so a failed export leaves no file and an earlier one intact.
/// Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG` (malformed JSON,
/// an opset outside 17..=23, no trace, an output the trace did not see, a
/// name given twice), `E_HANDLE_*` (a parameter not live), `E_UNSUPPORTED`
/// (an op on the way with no ONNX form, named; dropout or batch norm in
/// training mode; a shape that fixes the dynamic batch), `E_CKPT_IO` (the
/// file could not be written).
///
/// # Safety
/// Each pointer is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_onnx_export(path: *const c_char, inputs_json: *const c_char, outputs_json: *const c_char, names_json: *const c_char, opset: i64) -> c_int {
    status(|| {
        let (path, ins, outs, names) = unsafe { (str_arg(path, "path")?, str_arg(inputs_json, "inputs")?, str_arg(outputs_json, "outputs")?, str_arg(names_json, "names")?) };
        crate::onnx::export(path, ins, outs, names, opset)
    })
}
