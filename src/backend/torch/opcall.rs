//! libtorch's side of the op table: every row runs as the ATen operator of
//! its schema line, through c10's boxed dispatcher (`op_shim.cpp`), so no
//! op needs code here. Operators are looked up once per overload.

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use torch_sys::C_tensor;

use super::{shim_result, Raw};
use crate::error::{Code, Result};
use crate::vocab::{self, Call, Scalar, Value};
use smallvec::SmallVec;

#[repr(C)]
struct EnkaiArg {
    tag: i32,
    i: i64,
    f: f64,
    p: *const c_void,
    n: usize,
}

const ARG_NONE: i32 = 0;
const ARG_TENSOR: i32 = 1;
const ARG_INT: i32 = 2;
const ARG_FLOAT: i32 = 3;
const ARG_BOOL: i32 = 4;
const ARG_INTS: i32 = 5;
const ARG_STR: i32 = 6;
const ARG_DTYPE: i32 = 7;
const ARG_TENSORS: i32 = 8;
const ARG_OPT_TENSORS: i32 = 9;
/// A parameter the ABI hides (Layout, Device, MemoryFormat...): the operator's default.
const ARG_DEFAULT: i32 = 10;

extern "C" {
    fn enkai_shim_op_find(name: *const c_char, overload: *const c_char, err: *mut *mut c_char) -> *mut c_void;
    fn enkai_shim_op_call(op: *mut c_void, args: *const EnkaiArg, n: usize, outs: *mut *mut C_tensor, cap: usize, n_out: *mut usize) -> *mut c_char;
}

fn handles() -> &'static Vec<Vec<AtomicPtr<c_void>>> {
    static H: OnceLock<Vec<Vec<AtomicPtr<c_void>>>> = OnceLock::new();
    H.get_or_init(|| vocab::ops().iter().map(|o| o.sigs.iter().map(|_| AtomicPtr::new(std::ptr::null_mut())).collect()).collect())
}

/// The ATen operator of overload `sig` of table op `op`.
fn operator(op: usize, sig: usize) -> Result<*mut c_void> {
    let slot = &handles()[op][sig];
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return Ok(p);
    }
    let s = &vocab::ops()[op].sigs[sig];
    // A functional signature runs its ATen operator.
    let s = s.lower.as_ref().map_or(s, |l| &l.sig);
    let name = CString::new(s.name.as_str()).map_err(|_| crate::err!(E_INTERNAL, "op name with NUL"))?;
    let overload = CString::new(s.overload.as_str()).map_err(|_| crate::err!(E_INTERNAL, "op name with NUL"))?;
    let mut err = std::ptr::null_mut();
    // SAFETY: two C strings and an out-pointer for the call.
    let p = unsafe { enkai_shim_op_find(name.as_ptr(), overload.as_ptr(), &mut err) };
    shim_result(err, Code::E_INTERNAL)?;
    // A race stores an equal handle twice; the loser's copy is kept alive for the process.
    slot.store(p, Ordering::Release);
    Ok(p)
}

/// Runs the call; its results, each passed through `wrap` (the caller's
/// tensor type), kept off the heap for the usual one or two. (Core sends
/// the plain binary ops to libtorch's direct entry instead: `opcall.rs`.)
pub fn run<O>(call: &Call, inputs: &[Option<&Raw>], wrap: impl Fn(Raw) -> O) -> Result<SmallVec<[O; 2]>> {
    let h = operator(call.op.index, call.sig)?;
    let lowered;
    let (params, values) = match &call.sig().lower {
        Some(l) => {
            lowered = l.args(&call.args);
            (l.sig.params.as_slice(), lowered.as_slice())
        }
        None => (call.sig().params.as_slice(), call.args),
    };
    // The regression losses' input and target, broadcast together first (`Lower::broadcast`).
    let expanded: SmallVec<[tch::Tensor; 2]> = match (&call.sig().lower, inputs) {
        (Some(l), [Some(a), Some(b), ..]) if l.broadcast && a.0.size() != b.0.size() => {
            tch::Tensor::f_broadcast_tensors(&[&a.0, &b.0]).map_err(|e| crate::err!(E_SHAPE, "{}: {e}", call.op.name()))?.into_iter().collect()
        }
        _ => SmallVec::new(),
    };
    let ptr = |i: usize| match expanded.get(i) {
        Some(t) => t.as_ptr() as *const c_void,
        None => inputs[i].map_or(std::ptr::null(), |t| t.0.as_ptr() as *const c_void),
    };
    // Tensor lists as arrays of at::Tensor*, alive across the call (built before
    // `args` points into them).
    let lists: SmallVec<[Vec<*const c_void>; 1]> = values
        .iter()
        .filter_map(|v| match v {
            Value::Tensors(items) => Some(items.iter().map(|i| i.map_or(std::ptr::null(), ptr)).collect()),
            _ => None,
        })
        .collect();
    let mut next_list = lists.iter();
    let args: SmallVec<[EnkaiArg; 8]> = values
        .iter()
        .zip(params.iter())
        .map(|(v, p)| {
            let a = |tag, i, f, p: *const c_void, n| EnkaiArg { tag, i, f, p, n };
            match v {
                _ if p.ty == crate::vocab::Ty::Hidden => a(ARG_DEFAULT, 0, 0.0, std::ptr::null(), 0),
                Value::None => a(ARG_NONE, 0, 0.0, std::ptr::null(), 0),
                Value::Tensor(i) => a(ARG_TENSOR, 0, 0.0, ptr(*i), 0),
                Value::Tensors(_) => {
                    let list = next_list.next().expect("one list per Tensors value");
                    a(if p.optional_items { ARG_OPT_TENSORS } else { ARG_TENSORS }, 0, 0.0, list.as_ptr().cast(), list.len())
                }
                Value::Int(i) | Value::Scalar(Scalar::Int(i)) => a(ARG_INT, *i, 0.0, std::ptr::null(), 0),
                Value::Float(f) | Value::Scalar(Scalar::Float(f)) => a(ARG_FLOAT, 0, *f, std::ptr::null(), 0),
                Value::Bool(b) | Value::Scalar(Scalar::Bool(b)) => a(ARG_BOOL, i64::from(*b), 0.0, std::ptr::null(), 0),
                Value::Ints(v) => a(ARG_INTS, 0, 0.0, v.as_ptr().cast(), v.len()),
                Value::Str(s) => a(ARG_STR, 0, 0.0, s.as_ptr().cast(), s.len()),
                Value::DType(d) => a(ARG_DTYPE, i64::from(super::create::scalar_type(*d)), 0.0, std::ptr::null(), 0),
            }
        })
        .collect();
    let cap = if call.sig().returns.contains(&vocab::Ret::TensorList) { 1 << 16 } else { call.sig().returns.len() };
    let mut outs: SmallVec<[*mut C_tensor; 4]> = smallvec::smallvec![std::ptr::null_mut(); cap];
    let mut n = 0usize;
    // SAFETY: `args` and everything they point to live across the call; `outs` has `cap` slots.
    let err = unsafe { enkai_shim_op_call(h, args.as_ptr(), args.len(), outs.as_mut_ptr(), cap, &mut n) };
    shim_result(err, Code::E_TORCH)?;
    // SAFETY: on success the first `n` slots hold new at::Tensor* nobody else owns.
    let mut outs: SmallVec<[tch::Tensor; 2]> = outs[..n].iter().map(|&p| unsafe { tch::Tensor::from_ptr(p) }).collect();
    // Results with libtorch's lazy conjugate or negative bit (ifft of a real
    // input, views of conjugated tensors): their bytes are not their values,
    // and the ABI reads bytes. Materialized, as `conj` is.
    for t in outs.iter_mut().filter(|t| t.defined()) {
        if t.is_conj() || t.is_neg() {
            *t = t.f_resolve_conj().and_then(|r| r.f_resolve_neg()).map_err(|e| crate::err!(E_TORCH, "{}: {e}", call.op.name()))?;
        }
        // A result of a dtype the ABI has no name for (complex32 from half inputs) is refused, not handed out.
        super::dtype_of(t.kind()).map_err(|e| crate::err!(E_DTYPE, "{}: {}", call.op.name(), e.detail))?;
    }
    if let (Some(l), Some(x), [out]) = (&call.sig().lower, inputs.first().copied().flatten(), outs.as_mut_slice()) {
        if l.batchmean(&call.args) {
            if let Some(&b) = x.0.size().first() {
                *out = out.f_div_scalar(b).map_err(|e| crate::err!(E_TORCH, "{e}"))?;
            }
        }
    }
    Ok(outs.into_iter().map(|t| wrap(Raw(t))).collect())
}
