//! The native tensor: a strided view of shared storage, plus its autograd
//! identity. `Raw` is a reference to it; clones are PyTorch's shallow copies
//! (one tensor, one grad), `detached` makes a new tensor over the same bytes.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use smallvec::SmallVec;
use std::sync::{Arc, Mutex};

use super::autograd::Node;
use super::elem::{with_elem, Elem};
use super::storage::Storage;
use crate::dtype::DType;
use crate::error::Result;
use crate::spinlock::SpinLock;

/// Sizes or strides: inline up to rank 4, so a small op allocates none.
pub type Dims = SmallVec<[i64; 4]>;

pub struct Inner {
    pub storage: Arc<Storage>,
    pub shape: Dims,
    pub strides: Dims,
    /// In elements.
    pub offset: usize,
    pub dtype: DType,
    /// A leaf that records gradients (set by `require_grad`).
    pub requires_grad: AtomicBool,
    /// How this tensor was computed, when it was computed from tensors that
    /// require grad: then it is not a leaf. An in-place op replaces it (as
    /// PyTorch rebases a tensor's history), so every handle on the tensor
    /// sees the new one.
    grad_fn: SpinLock<Option<Arc<Node>>>,
    /// Made over another tensor's bytes (a view, or `detach`).
    pub view: bool,
    /// The tensor a view was made from (the first non-view one), while it
    /// lives: an in-place op on the view rewrites the base's history too
    /// (PyTorch's CopySlices). Weak, so a backward closure that keeps a view
    /// never keeps its base, or a cycle, alive.
    pub base: Option<std::sync::Weak<Inner>>,
    /// The storage's history mark when this tensor's `grad_fn` was set: a
    /// view whose mark is behind its storage's has a stale history.
    history: AtomicU32,
    /// A leaf's accumulated gradient.
    pub grad: Mutex<Option<Raw>>,
}

#[derive(Clone)]
pub struct Raw(pub Arc<Inner>);

impl Inner {
    pub fn grad_fn(&self) -> Option<Arc<Node>> {
        self.grad_fn.lock().clone()
    }

    /// Sets the history (of a fresh tensor, or of one an in-place op rewrote).
    pub fn set_grad_fn(&self, node: Option<Arc<Node>>) {
        let old = std::mem::replace(&mut *self.grad_fn.lock(), node);
        drop(old); // a long graph's teardown runs outside the lock
        self.history.store(self.storage.history(), Ordering::Release);
    }

    /// A view made before an in-place op rewrote the history of its bytes:
    /// its `grad_fn` no longer describes its values.
    pub fn stale(&self) -> bool {
        self.view && self.history.load(Ordering::Acquire) != self.storage.history()
    }
}

pub fn contiguous_strides(shape: &[i64]) -> Dims {
    let mut s: Dims = smallvec::smallvec![0; shape.len()];
    let mut acc = 1i64;
    for i in (0..shape.len()).rev() {
        s[i] = acc;
        acc = acc.saturating_mul(shape[i].max(1));
    }
    s
}

pub fn numel(shape: &[i64]) -> usize {
    shape.iter().map(|&d| d as usize).product()
}

impl Raw {
    pub fn from_parts(storage: Arc<Storage>, shape: impl Into<Dims>, strides: impl Into<Dims>, offset: usize, dtype: DType) -> Raw {
        Raw::make(storage, shape, strides, offset, dtype, false)
    }

    fn make(storage: Arc<Storage>, shape: impl Into<Dims>, strides: impl Into<Dims>, offset: usize, dtype: DType, view: bool) -> Raw {
        Raw::make_based(storage, shape, strides, offset, dtype, view, None)
    }

    #[allow(clippy::too_many_arguments)]
    fn make_based(storage: Arc<Storage>, shape: impl Into<Dims>, strides: impl Into<Dims>, offset: usize, dtype: DType, view: bool, base: Option<std::sync::Weak<Inner>>) -> Raw {
        Raw(Arc::new(Inner {
            history: AtomicU32::new(storage.history()),
            storage,
            shape: shape.into(),
            strides: strides.into(),
            offset,
            dtype,
            requires_grad: AtomicBool::new(false),
            grad_fn: SpinLock::new(None),
            view,
            base,
            grad: Mutex::new(None),
        }))
    }

    /// A contiguous tensor whose elements are unspecified until written.
    pub fn empty(shape: &[i64], dtype: DType) -> Result<Raw> {
        let bytes = numel(shape).checked_mul(dtype.size()).ok_or_else(|| crate::err!(E_RESOURCE, "tensor too large"))?;
        let st = Storage::new(bytes)?;
        Ok(Raw::from_parts(Arc::new(st), Dims::from_slice(shape), contiguous_strides(shape), 0, dtype))
    }

    pub fn zeros(shape: &[i64], dtype: DType) -> Result<Raw> {
        let bytes = numel(shape).checked_mul(dtype.size()).ok_or_else(|| crate::err!(E_RESOURCE, "tensor too large"))?;
        let st = Storage::zeroed(bytes)?;
        Ok(Raw::from_parts(Arc::new(st), Dims::from_slice(shape), contiguous_strides(shape), 0, dtype))
    }

    /// A contiguous tensor of `T` filled from `data`.
    pub fn from_vec<T: Elem>(shape: &[i64], data: &[T]) -> Result<Raw> {
        let t = Raw::empty(shape, T::DT)?;
        t.slice_mut::<T>().copy_from_slice(data);
        Ok(t)
    }

    pub fn shape(&self) -> &[i64] {
        &self.0.shape
    }

    pub fn strides(&self) -> &[i64] {
        &self.0.strides
    }

    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    pub fn numel(&self) -> usize {
        numel(&self.0.shape)
    }

    pub fn dim(&self) -> usize {
        self.0.shape.len()
    }

    pub fn is_contiguous(&self) -> bool {
        let mut want = 1i64;
        for (&d, &s) in self.0.shape.iter().zip(&self.0.strides).rev() {
            if d != 1 && s != want {
                return false;
            }
            want *= d;
        }
        true
    }

    /// The first element's address.
    pub fn data_ptr(&self) -> *mut u8 {
        // SAFETY (of later use): offsets stay inside the storage by construction of views.
        self.0.storage.ptr().wrapping_add(self.0.offset * self.0.dtype.size())
    }

    /// The elements of a contiguous tensor.
    pub fn slice<T: Elem>(&self) -> &[T] {
        debug_assert!(self.is_contiguous() && T::DT == self.dtype());
        // SAFETY: a contiguous view of `numel` elements of T inside live storage.
        unsafe { std::slice::from_raw_parts(self.data_ptr() as *const T, self.numel()) }
    }

    /// The elements of a contiguous tensor, for writing. Only tensors that
    /// this call's kernel just created, or in-place ops the ABI documents,
    /// write through shared storage.
    #[allow(clippy::mut_from_ref)]
    pub fn slice_mut<T: Elem>(&self) -> &mut [T] {
        debug_assert!(self.is_contiguous() && T::DT == self.dtype());
        // SAFETY: as `slice`; writes race only if the caller races them.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr() as *mut T, self.numel()) }
    }

    /// A new tensor over the same bytes with no autograd history.
    pub fn detached(&self) -> Raw {
        let i = &self.0;
        Raw::make(i.storage.clone(), i.shape.clone(), i.strides.clone(), i.offset, i.dtype, true)
    }

    /// Another view of the same storage.
    pub fn view_as(&self, shape: impl Into<Dims>, strides: impl Into<Dims>, offset: usize) -> Raw {
        let base = match &self.0.base {
            Some(b) => b.clone(),
            None => Arc::downgrade(&self.0),
        };
        Raw::make_based(self.0.storage.clone(), shape, strides, offset, self.0.dtype, true, Some(base))
    }

    /// A view of the same bytes as elements of another dtype (a complex
    /// tensor's real view and back): shape, strides and offset in `dtype`'s elements.
    pub fn reinterpret(&self, dtype: DType, shape: impl Into<Dims>, strides: impl Into<Dims>, offset: usize) -> Raw {
        let base = match &self.0.base {
            Some(b) => b.clone(),
            None => Arc::downgrade(&self.0),
        };
        Raw::make_based(self.0.storage.clone(), shape, strides, offset, dtype, true, Some(base))
    }

    /// The live base of a view (see `Inner::base`).
    pub fn base(&self) -> Option<Raw> {
        self.0.base.as_ref().and_then(std::sync::Weak::upgrade).map(Raw)
    }

    pub fn requires_grad(&self) -> bool {
        self.0.grad_fn.lock().is_some() || self.0.requires_grad.load(Ordering::Relaxed)
    }

    /// A leaf that records gradients (in-place ops on it are refused while grad mode is on).
    pub fn is_grad_leaf(&self) -> bool {
        self.0.grad_fn.lock().is_none() && self.0.requires_grad.load(Ordering::Relaxed)
    }

    /// A contiguous copy when not contiguous, else the same tensor (detached).
    pub fn contiguous(&self) -> Result<Raw> {
        if self.is_contiguous() {
            return Ok(self.detached());
        }
        with_elem!(self.dtype(), T => super::kernels::cast_to::<T, T>(self))
    }

    /// The element at a flat index of the logical (row-major) order, as f64.
    pub fn get_f64(&self, flat: usize) -> f64 {
        let mut off = self.0.offset as i64;
        let mut rest = flat as i64;
        for (&d, &s) in self.0.shape.iter().zip(&self.0.strides).rev() {
            off += (rest % d.max(1)) * s;
            rest /= d.max(1);
        }
        let base = self.0.storage.ptr();
        with_elem!(self.dtype(), T => {
            // SAFETY: `flat` < numel, so the offset is inside the view.
            let v: T = unsafe { *(base as *const T).add(off as usize) };
            crate::backend::native::elem::cast::<T, f64>(v)
        })
    }
}

/// Sets a leaf's flag; a computed tensor's can only stay set (its graph decides).
pub fn set_requires_grad(t: &Raw, flag: bool) -> Result<()> {
    if !flag && t.0.grad_fn.lock().is_some() {
        crate::bail!(E_AUTOGRAD, "you can only change requires_grad flags of leaf variables. If you want to use a computed variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach().");
    }
    t.0.requires_grad.store(flag, Ordering::Relaxed);
    Ok(())
}
