//! Reading tensors back: metadata, single values, raw bytes.

use super::{device_of, dtype_of, torch_err, Raw, Torch};
use crate::backend::contract::Data;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;

impl Data for Torch {
    fn shape(t: &Raw) -> Vec<i64> {
        t.0.size()
    }

    fn dims(t: &Raw) -> smallvec::SmallVec<[i64; 8]> {
        t.0.size().into()
    }

    fn layout(t: &Raw) -> (smallvec::SmallVec<[i64; 8]>, i64) {
        (t.0.stride().into(), t.0.storage_offset())
    }

    fn dtype(t: &Raw) -> Result<DType> {
        dtype_of(t.0.f_kind().map_err(torch_err)?)
    }

    fn device(t: &Raw) -> Device {
        device_of(t.0.device())
    }

    fn item(t: &Raw) -> Result<f64> {
        t.0.f_double_value(&[]).map_err(torch_err)
    }

    fn scalar_value(t: &Raw) -> Result<f64> {
        t.0.f_double_value(&[]).map_err(torch_err)
    }

    fn copy_to(t: &Raw, dst: &mut [u8]) -> Result<()> {
        let numel = t.0.numel();
        if numel == 0 {
            return Ok(());
        }
        t.0.f_copy_data_u8(dst, numel).map_err(torch_err)
    }

    /// Borrowed straight from the storage when the tensor is a contiguous
    /// CPU one, else from a contiguous CPU copy that lives for the call.
    fn with_bytes<R>(t: &Raw, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
        let c = t.0.f_to_device(tch::Device::Cpu).and_then(|c| c.f_contiguous()).map_err(torch_err)?;
        let n = c.numel() * c.f_kind().map_err(torch_err)?.elt_size_in_bytes();
        if n == 0 {
            return f(&[]);
        }
        // SAFETY: `c` is a contiguous CPU tensor of `n` bytes, kept alive (and not
        // resized: it is not exposed to anyone else) until `f` returns.
        let bytes = unsafe { std::slice::from_raw_parts(c.data_ptr() as *const u8, n) };
        f(bytes)
    }

    fn export_view(t: &Raw) -> Result<crate::backend::ExportView<Raw>> {
        if t.0.requires_grad() {
            crate::bail!(E_AUTOGRAD, "cannot export a tensor that requires grad; export its detach() (as torch.to_dlpack)");
        }
        if let tch::Device::Cuda(n) = t.0.device() {
            // The consumer may read on another stream: finish pending writes first.
            tch::Cuda::synchronize(n as i64);
        }
        Ok(crate::backend::ExportView {
            data: t.0.data_ptr(),
            shape: t.0.size(),
            strides: t.0.stride(),
            device: Self::device(t),
            keep: Raw(t.0.shallow_clone()),
        })
    }
}
