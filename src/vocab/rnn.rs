//! The shape rules of the recurrent ops (`torch.lstm`, `torch.gru` and their
//! cells), checked in core before either backend runs: libtorch's kernels do
//! not check the weights against the input and hidden sizes (a `w_ih` of the
//! wrong width is read out of bounds), so a caller's mistake must stop here.

use super::{Call, In};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;


fn need<'a>(op: &str, ins: &[In<'a>], i: usize, what: &str) -> Result<(&'a [i64], DType)> {
    ins.get(i).copied().flatten().ok_or_else(|| crate::err!(E_INVALID_ARG, "{op}: {what} (input {i}) is missing"))
}

/// Each weight of one layer and direction: `w_ih [G·H, in]`, `w_hh [G·H, H]`,
/// and the biases `[G·H]`, all of the input's floating dtype.
fn weights(op: &str, ws: &[In], dt: DType, g: i64, inp: i64, h: i64, at: &str) -> Result<()> {
    let want: [&[i64]; 4] = [&[g * h, inp], &[g * h, h], &[g * h], &[g * h]];
    let names = ["w_ih", "w_hh", "b_ih", "b_hh"];
    for (k, w) in ws.iter().enumerate() {
        let Some((s, d)) = w else { continue };
        if *s != want[k] {
            crate::bail!(E_SHAPE, "{op}: {}{at} has shape {}, expected {} (input size {inp}, hidden size {h})", names[k], fmt(s), fmt(want[k]));
        }
        if *d != dt {
            crate::bail!(E_DTYPE, "{op}: {}{at} is {}, the input {}", names[k], d.name(), dt.name());
        }
    }
    Ok(())
}

/// Checks a call of `op` (`ins` in the call's input order: `[input, h0, c0,
/// *params]`, `[input, hx, *params]`, or a cell's `[input, h, (c,) w_ih,
/// w_hh, b_ih, b_hh]`) against PyTorch's rules for its shapes and dtypes.
pub fn check(call: &Call, ins: &[In]) -> Result<()> {
    let op = call.op.name();
    let lstm = op.starts_with("lstm");
    let g: i64 = if lstm { 4 } else { 3 };
    let n_state = if lstm { 2 } else { 1 };
    let (xs, dt) = need(op, ins, 0, "input")?;
    if !dt.is_float() {
        crate::bail!(E_DTYPE, "{op}: input must be floating, got {}", dt.name());
    }
    let states: Vec<(&[i64], DType)> = (1..=n_state).map(|i| need(op, ins, i, "a hidden state")).collect::<Result<_>>()?;
    for (s, d) in &states {
        if *d != dt {
            crate::bail!(E_DTYPE, "{op}: the hidden state is {}, the input {}", d.name(), dt.name());
        }
        if *s != states[0].0 {
            crate::bail!(E_SHAPE, "{op}: the cell state {} differs from the hidden state {}", fmt(s), fmt(states[0].0));
        }
    }
    let hs = states[0].0;
    let rest = &ins[1 + n_state..];
    if op.ends_with("_cell") {
        if !(1..=2).contains(&xs.len()) || hs.len() != xs.len() || (xs.len() == 2 && hs[0] != xs[0]) {
            crate::bail!(E_SHAPE, "{op}: input {} and hidden state {} do not fit (expected [B, in] and [B, H], or both 1-D)", fmt(xs), fmt(hs));
        }
        need(op, ins, 1 + n_state, "w_ih")?;
        need(op, ins, 2 + n_state, "w_hh")?;
        return weights(op, rest, dt, g, xs[xs.len() - 1], hs[hs.len() - 1], "");
    }
    let layers = call.int("num_layers").unwrap_or(1);
    let dirs: i64 = if call.bool("bidirectional").unwrap_or(false) { 2 } else { 1 };
    let per: i64 = if call.bool("has_biases").unwrap_or(true) { 4 } else { 2 };
    if xs.len() != 3 {
        crate::bail!(E_SHAPE, "{op}: input must have 3 dimensions, got {}", fmt(xs));
    }
    if layers < 1 {
        crate::bail!(E_INVALID_ARG, "{op}: num_layers must be at least 1, got {layers}");
    }
    if !(0.0..=1.0).contains(&call.float("dropout").unwrap_or(0.0)) {
        crate::bail!(E_INVALID_ARG, "{op}: dropout should be a number in range [0, 1]");
    }
    if layers.checked_mul(dirs * per) != Some(rest.len() as i64) || rest.iter().any(Option::is_none) {
        crate::bail!(E_INVALID_ARG, "{op}: got {} weights, expected {layers} layer(s) x {dirs} direction(s) x {per}", rest.len());
    }
    let batch = if call.bool("batch_first").unwrap_or(false) { xs[0] } else { xs[1] };
    let h = hs.last().copied().unwrap_or(0);
    if hs.len() != 3 || hs[0] != layers * dirs || hs[1] != batch {
        crate::bail!(E_SHAPE, "{op}: Expected hidden size {}, got {}", fmt(&[layers * dirs, batch, h]), fmt(hs));
    }
    for l in 0..layers {
        for d in 0..dirs {
            let k = ((l * dirs + d) * per) as usize;
            let inp = if l == 0 { xs[2] } else { dirs * h };
            weights(op, &rest[k..k + per as usize], dt, g, inp, h, &format!(" of layer {l}{}", if d == 1 { " (reverse)" } else { "" }))?;
        }
    }
    Ok(())
}
