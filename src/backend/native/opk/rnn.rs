//! Native kernels of the op table's recurrent layers (`table/rnn.rs`):
//! `lstm` and `gru` over a whole sequence (layers, directions,
//! `batch_first`, dropout between layers when training) and their cells,
//! with `torch.lstm`/`torch.gru`'s semantics and `nn.LSTM`/`nn.GRU`'s
//! weight layout: per layer and direction `w_ih [G·H, in]`, `w_hh [G·H,
//! H]`, then `b_ih`, `b_hh` `[G·H]`, gates in PyTorch's order (LSTM i, f, g,
//! o; GRU r, z, n). The input projection of a whole sequence is one GEMM;
//! each step is then a GEMM of the hidden state and elementwise gates, all
//! recorded by autograd, so the gradient is the ops' own. Core has checked
//! every shape and dtype (`crate::vocab::rnn`).

use super::super::nn::dropout;
use super::super::ops::{binary, concat, reshape, slice, transpose, unary};
use super::super::tensor::Raw;
use super::{input, Kernel};
use crate::error::Result;
use crate::vocab::kinds::{Binary, Unary};
use crate::vocab::Call;

pub static KERNELS: &[(&str, Kernel)] = &[
    ("lstm", |c, i| sequence(c, i, Cell::Lstm)),
    ("gru", |c, i| sequence(c, i, Cell::Gru)),
    ("lstm_cell", |_, i| lstm_cell_k(i)),
    ("gru_cell", |_, i| gru_cell_k(i)),
];

#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Lstm,
    Gru,
}

impl Cell {
    /// Gates per hidden unit.
    fn gates(self) -> i64 {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }
}

fn add(a: &Raw, b: &Raw) -> Result<Raw> {
    binary(Binary::Add, a, b)
}

fn mul(a: &Raw, b: &Raw) -> Result<Raw> {
    binary(Binary::Mul, a, b)
}

/// `x @ w.T + b` (`w` `[out, in]`, as nn.Linear's), recorded by autograd.
fn proj(x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<Raw> {
    super::super::linear(x, &transpose(w, 0, 1)?, b)
}

/// Gate `k` of `n` (each `h` wide) along the last dim.
fn gate(x: &Raw, k: i64, h: i64) -> Result<Raw> {
    slice(x, x.dim() as i64 - 1, k * h, (k + 1) * h, 1)
}

/// One LSTM step from the input's projection `xw` (`x @ w_ih.T + b_ih`).
fn lstm_step(xw: &Raw, h: &Raw, c: &Raw, w_hh: &Raw, b_hh: Option<&Raw>) -> Result<(Raw, Raw)> {
    let hs = h.shape()[h.dim() - 1];
    let g = add(xw, &proj(h, w_hh, b_hh)?)?;
    let (i, f) = (unary(Unary::Sigmoid, &gate(&g, 0, hs)?)?, unary(Unary::Sigmoid, &gate(&g, 1, hs)?)?);
    let (gg, o) = (unary(Unary::Tanh, &gate(&g, 2, hs)?)?, unary(Unary::Sigmoid, &gate(&g, 3, hs)?)?);
    let c2 = add(&mul(&f, c)?, &mul(&i, &gg)?)?;
    let h2 = mul(&o, &unary(Unary::Tanh, &c2)?)?;
    Ok((h2, c2))
}

/// One GRU step: `n = tanh(x_n + r ⊙ (W_hn h + b_hn))`, `h' = (1 − z) ⊙ n + z ⊙ h = n + z ⊙ (h − n)`.
fn gru_step(xw: &Raw, h: &Raw, w_hh: &Raw, b_hh: Option<&Raw>) -> Result<Raw> {
    let hs = h.shape()[h.dim() - 1];
    let hw = proj(h, w_hh, b_hh)?;
    let r = unary(Unary::Sigmoid, &add(&gate(xw, 0, hs)?, &gate(&hw, 0, hs)?)?)?;
    let z = unary(Unary::Sigmoid, &add(&gate(xw, 1, hs)?, &gate(&hw, 1, hs)?)?)?;
    let n = unary(Unary::Tanh, &add(&gate(xw, 2, hs)?, &mul(&r, &gate(&hw, 2, hs)?)?)?)?;
    add(&n, &mul(&z, &binary(Binary::Sub, h, &n)?)?)
}

/// `torch.lstm` / `torch.gru` (`input`, `h0` [`c0`], then the flat weights).
fn sequence(call: &Call, ins: &[Option<&Raw>], cell: Cell) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (h0, c0) = (input(ins, 1), if cell == Cell::Lstm { Some(input(ins, 2)) } else { None });
    let params: Vec<&Raw> = ins[if cell == Cell::Lstm { 3 } else { 2 }..].iter().flatten().copied().collect();
    let has_biases = call.bool("has_biases").unwrap_or(true);
    let per: usize = if has_biases { 4 } else { 2 };
    let layers = call.int("num_layers").unwrap_or(1);
    let p = call.float("dropout").unwrap_or(0.0);
    let train = call.bool("train").unwrap_or(false);
    let dirs: i64 = if call.bool("bidirectional").unwrap_or(false) { 2 } else { 1 };
    let batch_first = call.bool("batch_first").unwrap_or(false);
    // Time-major inside: [T, B, in].
    let x = if batch_first { transpose(x, 0, 1)? } else { x.clone() };
    let (steps, batch) = (x.shape()[0], x.shape()[1]);
    let hidden = h0.shape()[2];
    let mut layer_in = x;
    let (mut hn, mut cn) = (Vec::new(), Vec::new());
    for l in 0..layers {
        let mut outs = Vec::with_capacity(dirs as usize);
        for d in 0..dirs {
            let k = (l * dirs + d) as usize;
            let w = &params[k * per..(k + 1) * per];
            let (b_ih, b_hh) = if has_biases { (Some(w[2]), Some(w[3])) } else { (None, None) };
            let xw = proj(&layer_in, w[0], b_ih)?;
            let row = |t: &Raw| -> Result<Raw> { reshape(&slice(t, 0, k as i64, k as i64 + 1, 1)?, &[batch, hidden]) };
            let mut h = row(h0)?;
            let mut c = c0.map(row).transpose()?;
            let mut ys: Vec<Raw> = Vec::with_capacity(steps as usize);
            for s in 0..steps {
                let t = if d == 0 { s } else { steps - 1 - s };
                let xt = reshape(&slice(&xw, 0, t, t + 1, 1)?, &[batch, cell.gates() * hidden])?;
                match &mut c {
                    Some(cc) => {
                        let (h2, c2) = lstm_step(&xt, &h, cc, w[1], b_hh)?;
                        h = h2;
                        *cc = c2;
                    }
                    None => h = gru_step(&xt, &h, w[1], b_hh)?,
                }
                ys.push(reshape(&h, &[1, batch, hidden])?);
            }
            if d == 1 {
                ys.reverse();
            }
            let refs: Vec<&Raw> = ys.iter().collect();
            outs.push(if refs.is_empty() { Raw::zeros(&[0, batch, hidden], layer_in.dtype())? } else { concat(&refs, 0)? });
            hn.push(reshape(&h, &[1, batch, hidden])?);
            if let Some(c) = c {
                cn.push(reshape(&c, &[1, batch, hidden])?);
            }
        }
        let refs: Vec<&Raw> = outs.iter().collect();
        layer_in = concat(&refs, 2)?;
        // Dropout on every layer's output but the last, when training.
        if train && p > 0.0 && l + 1 < layers {
            layer_in = dropout(&layer_in, p, true)?;
        }
    }
    let out = if batch_first { transpose(&layer_in, 0, 1)? } else { layer_in };
    let hn: Vec<&Raw> = hn.iter().collect();
    let mut res = vec![out, concat(&hn, 0)?];
    if cell == Cell::Lstm {
        let cn: Vec<&Raw> = cn.iter().collect();
        res.push(concat(&cn, 0)?);
    }
    Ok(res)
}

/// `torch.lstm_cell(input, (h, c), w_ih, w_hh, b_ih, b_hh)` → `(h', c')`.
fn lstm_cell_k(ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, h, c, w_ih, w_hh) = (input(ins, 0), input(ins, 1), input(ins, 2), input(ins, 3), input(ins, 4));
    let b = [ins.get(5).copied().flatten(), ins.get(6).copied().flatten()];
    let (h2, c2) = lstm_step(&proj(x, w_ih, b[0])?, h, c, w_hh, b[1])?;
    Ok(vec![h2, c2])
}

/// `torch.gru_cell(input, h, w_ih, w_hh, b_ih, b_hh)` → `h'`.
fn gru_cell_k(ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, h, w_ih, w_hh) = (input(ins, 0), input(ins, 1), input(ins, 2), input(ins, 3));
    let b = [ins.get(4).copied().flatten(), ins.get(5).copied().flatten()];
    Ok(vec![gru_step(&proj(x, w_ih, b[0])?, h, w_hh, b[1])?])
}
