//! DLPack 1.x exchange (`DLManagedTensorVersioned`, as in `dlpack.h`).

use super::{guard, Sentinel};
use crate::dlpack::{self, DLManagedTensorVersioned};

impl Sentinel for *mut DLManagedTensorVersioned {
    fn sentinel() -> Self {
        std::ptr::null_mut()
    }
}

/// Exports tensor `t` as a DLPack 1.x `DLManagedTensorVersioned` that shares
/// its storage (no copy; writes through either side are seen by the other).
/// The caller — the consumer — owns the result and must call its `deleter`
/// exactly once; until then the storage stays alive (even after `t` is freed)
/// and the export counts as a live tensor in `enkai_tensor_live_tensors`.
/// CUDA tensors are synchronized before they are handed out. As
/// `torch.to_dlpack`, a tensor that requires grad is refused: export its
/// `enkai_tensor_detach`. Returns NULL with `E_HANDLE_*`, `E_AUTOGRAD`.
#[no_mangle]
pub extern "C" fn enkai_tensor_to_dlpack(t: i64) -> *mut DLManagedTensorVersioned {
    guard(|| dlpack::to_dlpack(t))
}

/// Wraps a producer's DLPack 1.x tensor as a new tensor handle without
/// copying, on the active backend; the producer's `deleter` runs when the last
/// handle (and view) of it is freed. Ownership of `managed` passes to the
/// library in every case: on failure its `deleter` has already run (a major
/// version other than 1 gets only that, as the DLPack rules ask). A tensor
/// flagged `DLPACK_FLAG_BITMASK_READ_ONLY` is copied (no backend here has
/// read-only tensors) and released at once. CPU, CUDA-host and CUDA memory
/// are accepted. Returns 0 with `E_NULL_POINTER`, `E_INVALID_ARG` (version,
/// ndim, negative strides, misaligned data, extent), `E_DTYPE`, `E_DEVICE`,
/// `E_SHAPE`, `E_BACKEND_*`, `E_TORCH`.
///
/// # Safety
/// `managed` is NULL or a live `DLManagedTensorVersioned` whose deleter has
/// not run, with `ndim` entries in `shape` (and in `strides` unless NULL),
/// and memory valid for that extent until its deleter runs.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_from_dlpack(managed: *mut DLManagedTensorVersioned) -> i64 {
    guard(|| unsafe { dlpack::from_dlpack(managed) })
}
