//! The native kernels of the op table (`crate::vocab::table`), keyed by
//! overload name (`pow.Tensor_Scalar`). Core has checked the arguments:
//! dims are in `[0, rank)`, dtypes are accepted, elementwise inputs
//! broadcast, and `call.out_dtype` is the result dtype of elementwise ops.
//! Each family file lists its kernels in a `KERNELS` table.

mod binary;
mod complex;
mod conv;
mod create;
mod dense;
mod eig;
mod fft;
mod index;
mod inplace;
mod linalg;
mod loss;
mod nn;
mod norm;
mod pointwise;
mod reduce;
mod rnn;
mod sample;
mod shape;
mod sort;
mod spectral;

use std::sync::OnceLock;

use super::tensor::Raw;
use crate::error::Result;
use crate::vocab::{self, Call};

pub use complex::conj_plain;

pub type Kernel = fn(&Call, &[Option<&Raw>]) -> Result<Vec<Raw>>;

fn registry() -> &'static Vec<Vec<Option<Kernel>>> {
    static R: OnceLock<Vec<Vec<Option<Kernel>>>> = OnceLock::new();
    R.get_or_init(|| {
        let families = [complex::KERNELS, fft::KERNELS, eig::KERNELS, pointwise::KERNELS, binary::KERNELS, reduce::KERNELS, linalg::KERNELS, dense::KERNELS, spectral::KERNELS, nn::KERNELS, norm::KERNELS, loss::KERNELS, rnn::KERNELS, sample::KERNELS, shape::KERNELS, index::KERNELS, sort::KERNELS, conv::KERNELS, create::KERNELS, inplace::KERNELS];
        let all: std::collections::HashMap<&str, Kernel> = families.iter().flat_map(|f| f.iter().copied()).collect();
        let mut r: Vec<Vec<Option<Kernel>>> =
            vocab::ops().iter().map(|o| o.sigs.iter().map(|s| all.get(s.text.split('(').next().unwrap_or("")).copied()).collect()).collect();
        // A derived in-place form runs its twin's kernel of the same overload, written into self.
        for o in vocab::ops() {
            for sig in 0..o.sigs.len() {
                if o.twin.is_some_and(|t| r[t][sig].is_some()) && r[o.index][sig].is_none() {
                    r[o.index][sig] = Some(inplace::via);
                }
            }
        }
        r
    })
}

/// Whether the native backend has a kernel for overload `sig` of op `op` (the table's self-check).
pub fn has_kernel(op: usize, sig: usize) -> bool {
    registry()[op][sig].is_some()
}

pub fn run(call: &Call, inputs: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    if complex::any_complex(inputs) {
        if let Some((_, k)) = complex::OVERRIDES.iter().find(|(name, _)| *name == call.overload()) {
            return k(call, inputs);
        }
    }
    match registry()[call.op.index][call.sig] {
        Some(k) => k(call, inputs),
        None => crate::bail!(E_UNSUPPORTED, "{}: the overload {} is not supported on the cpu backend", call.op.name(), call.overload()),
    }
}

/// Input `i`, which core guarantees is present (a required Tensor parameter).
fn input<'a>(ins: &[Option<&'a Raw>], i: usize) -> &'a Raw {
    ins[i].expect("core checked that required inputs are present")
}

/// `t` as a contiguous tensor of the computing type `R`: itself when it
/// already is, else a converted copy.
fn real<R: super::elem::Elem>(t: &Raw) -> Result<Raw> {
    if t.dtype() == R::DT && t.is_contiguous() {
        return Ok(t.detached());
    }
    super::elem::with_elem!(t.dtype(), S => super::kernels::cast_to::<S, R>(t))
}
