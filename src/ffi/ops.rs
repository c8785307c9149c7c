//! Tensor operations: each returns a new tensor handle and leaves its inputs unchanged.

use crate::ops;

use super::guard;

/// `torch.matmul(a, b)`: matrix product with 1-D promotion and broadcast batch
/// dims. Returns a new handle owned by the caller, or 0 with `E_SHAPE`
/// (`matmul [2,3] x [4,5]`), `E_DTYPE`, `E_DEVICE`, `E_BACKEND_MISMATCH`,
/// `E_HANDLE_*`, `E_TORCH`.
#[no_mangle]
pub extern "C" fn enkai_tensor_matmul(a: i64, b: i64) -> i64 {
    guard(|| ops::matmul(a, b))
}
