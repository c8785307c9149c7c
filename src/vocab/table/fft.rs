//! The op table's `torch.fft` section: one-dimensional transforms along
//! `dim`, with `n` (trim or zero-pad the input to n points; irfft: the
//! output length) and `norm` ("backward", "forward", "ortho"). Real inputs
//! of `fft`/`ifft` are taken as complex; integer ones as fp32, as PyTorch
//! does. Their oracle is `python/tests/test_complex.py`.

use super::Accept::*;
use super::Domain;
use super::Out::*;
use super::{other, Row};

const fn own(r: Row) -> Row {
    Row { domain: Domain::Own, ..r }.complex()
}

// Cases on real inputs (the generic suites' dtypes): shapes, result dtypes and refusals against PyTorch.
const CASES: &[&str] = &[r#"{"inputs": [[8]]}"#, r#"{"inputs": [[3, 5]], "kwargs": {"dim": 0, "n": 4, "norm": "ortho"}}"#];

pub static ROWS: &[Row] = &[
    own(other("fft.fft", &["fft_fft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor"], All, Kernel, true, CASES)),
    own(other("fft.ifft", &["fft_ifft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor"], All, Kernel, true, CASES)),
    own(other("fft.rfft", &["fft_rfft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor"], All, Kernel, true, CASES)),
    own(other("fft.irfft", &["fft_irfft(Tensor self, SymInt? n=None, int dim=-1, str? norm=None) -> Tensor"], All, Kernel, true, CASES)),
];
