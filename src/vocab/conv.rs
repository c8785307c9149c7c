//! The shape rules of the convolutions and pools (`table/conv.rs`), with
//! PyTorch's messages: the native kernels check their calls with them, and
//! core explains libtorch's refusals with them, so both backends refuse the
//! same calls with the same codes (`E_SHAPE` for shapes, `E_INVALID_ARG`
//! for strides, paddings and the like, `E_DTYPE` for dtypes).

use super::Call;
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;

/// A convolution as 2-D (a 1-D one has height 1) with a batch dim.
#[derive(Debug, Clone)]
pub struct ConvShape {
    pub n: i64,
    pub groups: i64,
    /// The input's channels and the output's.
    pub c_in: i64,
    pub c_out: i64,
    /// The input's and the output's height and width.
    pub size: [i64; 2],
    pub out: [i64; 2],
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    /// Before the first row and column ("same" puts an odd total's extra one after the last).
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
    /// The result's shape, as the caller sees it (unbatched, 1-D).
    pub shape: Vec<i64>,
}

/// An `int[N]` argument of `n` values: one value repeats, as PyTorch's parser expands it.
fn ints(call: &Call, name: &str, n: usize, op: &str) -> Result<Vec<i64>> {
    let v = call.ints(name).unwrap_or(&[]);
    match v.len() {
        1 => Ok(vec![v[0]; n]),
        len if len == n => Ok(v.to_vec()),
        _ => crate::bail!(
            E_INVALID_ARG,
            "{op}: expected {name} to be a single integer value or a list of {n} values to match the convolution dimensions, but got {name}={}",
            fmt(v)
        ),
    }
}

/// c10's names of the dtypes, as its messages write them.
fn c10_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::F16 => "c10::Half",
        DType::BF16 => "c10::BFloat16",
        DType::I64 => "long",
        DType::I32 => "int",
        DType::I16 => "short",
        DType::I8 => "signed char",
        DType::U8 => "unsigned char",
        DType::C64 => "c10::complex<float>",
        DType::C128 => "c10::complex<double>",
        _ => d.name(),
    }
}

/// As 2-D: a 1-D convolution's value `v` with `one` for the height.
fn lift(v: &[i64], one: i64) -> [i64; 2] {
    if v.len() == 1 {
        [one, v[0]]
    } else {
        [v[0], v[1]]
    }
}

/// Checks conv1d (`dims` 1), conv2d and conv_transpose2d (`transposed`)
/// on inputs of these shapes and dtypes; their geometry.
pub fn conv_shape(call: &Call, x: (&[i64], DType), w: (&[i64], DType), b: Option<(&[i64], DType)>, dims: usize, transposed: bool) -> Result<ConvShape> {
    let op = call.op.name();
    let ((xs, xd), (ws, wd)) = (x, w);
    let r = xs.len();
    if r != dims + 1 && r != dims + 2 {
        crate::bail!(E_SHAPE, "{op}: expected {}D (unbatched) or {}D (batched) input to {op}, but got input of size: {}", dims + 1, dims + 2, fmt(xs));
    }
    if ws.len() != dims + 2 {
        crate::bail!(E_SHAPE, "{op}: expected {}-dimensional weight for {}-dimensional input, but got weight of size {} instead", dims + 2, dims + 2, fmt(ws));
    }
    for (d, what) in [(Some(wd), "weight"), (b.map(|b| b.1), "bias")] {
        if let Some(d) = d.filter(|&d| d != xd) {
            crate::bail!(E_DTYPE, "{op}: input type ({}) and {what} type ({}) should be the same", c10_name(xd), c10_name(d));
        }
    }
    let batched = r == dims + 2;
    let s4: Vec<i64> = if batched { xs.to_vec() } else { std::iter::once(1).chain(xs.iter().copied()).collect() };
    let stride = ints(call, "stride", dims, op)?;
    let dilation = ints(call, "dilation", dims, op)?;
    let groups = call.int("groups").unwrap_or(1);
    if stride.iter().any(|&v| v <= 0) {
        crate::bail!(E_INVALID_ARG, "{op}: non-positive stride is not supported");
    }
    if dilation.iter().any(|&v| v <= 0) {
        crate::bail!(E_INVALID_ARG, "{op}: dilation should be greater than zero, but got {}", fmt(&dilation));
    }
    if groups <= 0 {
        crate::bail!(E_INVALID_ARG, "{op}: non-positive groups is not supported");
    }
    let ks = &ws[2..];
    let eff: Vec<i64> = (0..dims).map(|i| dilation[i] * (ks[i] - 1) + 1).collect();
    let same = call.str("padding") == Some("same");
    let padding = match call.str("padding") {
        Some("valid") => vec![0; dims],
        Some("same") => {
            if stride.iter().any(|&v| v != 1) {
                crate::bail!(E_INVALID_ARG, "{op}: padding='same' is not supported for strided convolutions");
            }
            (0..dims).map(|i| (eff[i] - 1) / 2).collect()
        }
        Some(other) => crate::bail!(E_INVALID_ARG, "{op}: invalid padding string: '{other}'"),
        None => ints(call, "padding", dims, op)?,
    };
    if padding.iter().any(|&v| v < 0) {
        crate::bail!(E_INVALID_ARG, "{op}: negative padding is not supported");
    }
    let (c_in, w0, w1) = (s4[1], ws[0], ws[1]);
    let spatial = &s4[2..];
    if w0 % groups != 0 {
        crate::bail!(E_SHAPE, "{op}: given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got weight of size {} instead", fmt(ws));
    }
    let (c_out, outs) = if transposed {
        let out_pad = ints(call, "output_padding", dims, op)?;
        if w0 != c_in {
            crate::bail!(E_SHAPE, "{op}: given transposed=1, weight of size {}, expected input{} to have {w0} channels, but got {c_in} channels instead", fmt(ws), fmt(&s4));
        }
        if (0..dims).any(|i| out_pad[i] < 0 || (out_pad[i] >= stride[i] && out_pad[i] >= dilation[i])) {
            crate::bail!(
                E_INVALID_ARG,
                "{op}: output padding must be smaller than either stride or dilation, but got output_padding {}, stride {} and dilation {}",
                fmt(&out_pad),
                fmt(&stride),
                fmt(&dilation)
            );
        }
        let outs: Vec<i64> = (0..dims).map(|i| (spatial[i] - 1) * stride[i] - 2 * padding[i] + eff[i] + out_pad[i]).collect();
        if outs.iter().any(|&o| o <= 0) {
            crate::bail!(E_SHAPE, "{op}: given input size per channel {}, calculated output size {} is too small", fmt(spatial), fmt(&outs));
        }
        (w1 * groups, outs)
    } else {
        if c_in != w1 * groups {
            crate::bail!(
                E_SHAPE,
                "{op}: given groups={groups}, weight of size {}, expected input{} to have {} channels, but got {c_in} channels instead",
                fmt(ws),
                fmt(&s4),
                w1 * groups
            );
        }
        let padded: Vec<i64> = (0..dims).map(|i| spatial[i] + if same { eff[i] - 1 } else { 2 * padding[i] }).collect();
        if (0..dims).any(|i| padded[i] < eff[i]) {
            let x = |v: &[i64]| v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(" x ");
            crate::bail!(E_SHAPE, "{op}: calculated padded input size per channel: ({}). Kernel size: ({}). Kernel size can't be greater than actual input size", x(&padded), x(&eff));
        }
        (w0, (0..dims).map(|i| (padded[i] - eff[i]) / stride[i] + 1).collect())
    };
    if let Some((bs, _)) = b.filter(|b| b.0.len() != 1 || b.0[0] != c_out) {
        crate::bail!(E_SHAPE, "{op}: given weight of size {}, expected bias to be 1-dimensional with {c_out} elements, but got bias of size {} instead", fmt(ws), fmt(bs));
    }
    let mut shape = if batched { vec![s4[0]] } else { vec![] };
    shape.push(c_out);
    shape.extend(&outs);
    Ok(ConvShape {
        n: s4[0],
        groups,
        c_in,
        c_out,
        size: lift(spatial, 1),
        out: lift(&outs, 1),
        kernel: lift(ks, 1),
        stride: lift(&stride, 1),
        padding: lift(&padding, 0),
        dilation: lift(&dilation, 1),
        shape,
    })
}

/// A 2-D pool: `planes` images of `size` pooled into `out`.
#[derive(Debug, Clone, Copy)]
pub struct PoolShape {
    pub planes: i64,
    pub size: [i64; 2],
    pub out: [i64; 2],
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
}

/// PyTorch's `pooling_output_shape`.
fn pooled(size: i64, k: i64, p: i64, s: i64, d: i64, ceil: bool) -> i64 {
    let num = size + 2 * p - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 };
    let mut out = num.div_euclid(s) + 1;
    if ceil && (out - 1) * s >= size + p {
        out -= 1;
    }
    out
}

/// Checks max_pool2d (`dilated`) and avg_pool2d on an input of shape `x`; the
/// geometry and the result's shape.
pub fn pool_shape(call: &Call, x: &[i64], dilated: bool) -> Result<(PoolShape, Vec<i64>)> {
    let op = call.op.name();
    let two = |name: &str, empty: Option<[i64; 2]>| -> Result<[i64; 2]> {
        let v = call.ints(name).unwrap_or(&[]);
        match (v.len(), empty) {
            (0, Some(e)) => Ok(e),
            (1, _) => Ok([v[0]; 2]),
            (2, _) => Ok([v[0], v[1]]),
            _ => crate::bail!(E_INVALID_ARG, "{op}: {name} must either be a single int, or a tuple of two ints"),
        }
    };
    let k = two("kernel_size", None)?;
    let s = two("stride", Some(k))?;
    let p = two("padding", None)?;
    let d = if dilated { two("dilation", None)? } else { [1, 1] };
    if k.iter().any(|&v| v <= 0) {
        crate::bail!(E_INVALID_ARG, "{op}: kernel size should be greater than zero, but got kH: {} kW: {}", k[0], k[1]);
    }
    if s.iter().any(|&v| v <= 0) {
        crate::bail!(E_INVALID_ARG, "{op}: stride should not be zero");
    }
    if d.iter().any(|&v| v <= 0) {
        crate::bail!(E_INVALID_ARG, "{op}: dilation should be greater than zero, but got dilationH: {} dilationW: {}", d[0], d[1]);
    }
    if let Some(i) = (0..2).find(|&i| p[i] < 0 || p[i] > k[i] / 2) {
        crate::bail!(E_INVALID_ARG, "{op}: pad should be at most half of effective kernel size, but got pad={}, kernel_size={} and dilation={}", p[i], k[i], d[i]);
    }
    let r = x.len();
    if !(r == 3 || r == 4) || x[r - 3..].contains(&0) {
        crate::bail!(E_SHAPE, "{op}: expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got: {}", fmt(x));
    }
    let ceil = call.bool("ceil_mode").unwrap_or(false);
    let (ih, iw) = (x[r - 2], x[r - 1]);
    let (oh, ow) = (pooled(ih, k[0], p[0], s[0], d[0], ceil), pooled(iw, k[1], p[1], s[1], d[1], ceil));
    if oh < 1 || ow < 1 {
        crate::bail!(E_SHAPE, "{op}: given input size: ({}x{ih}x{iw}). Calculated output size: ({}x{oh}x{ow}). Output size is too small", x[r - 3], x[r - 3]);
    }
    if !dilated && call.int("divisor_override") == Some(0) {
        crate::bail!(E_INVALID_ARG, "{op}: divisor must be not zero");
    }
    let mut shape = x[..r - 2].to_vec();
    shape.extend([oh, ow]);
    let planes = x[..r - 2].iter().product();
    Ok((PoolShape { planes, size: [ih, iw], out: [oh, ow], kernel: k, stride: s, padding: p, dilation: d }, shape))
}

/// Checks adaptive_avg_pool2d on an input of shape `x`; the output's height and width, and the result's shape.
pub fn adaptive_shape(call: &Call, x: &[i64]) -> Result<([i64; 2], Vec<i64>)> {
    let os = call.ints("output_size").unwrap_or(&[]);
    let os = match os.len() {
        2 => [os[0], os[1]],
        _ => crate::bail!(E_INVALID_ARG, "adaptive_avg_pool2d: output_size must be 2"),
    };
    if os.iter().any(|&v| v < 0) {
        crate::bail!(E_INVALID_ARG, "adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 but received {}", fmt(&os));
    }
    let r = x.len();
    if !(r == 3 || r == 4) || x[r - 2..].contains(&0) {
        crate::bail!(E_SHAPE, "adaptive_avg_pool2d: expected 3D or 4D tensor with non-zero sizes for the last two dims, but got: {}", fmt(x));
    }
    let mut shape = x[..r - 2].to_vec();
    shape.extend(os);
    Ok((os, shape))
}

/// Core's explanation of libtorch's refusal of a call of these ops on
/// inputs of these shapes and dtypes (bias last, absent when left out).
pub fn explain(call: &Call, ins: &[(Vec<i64>, DType)]) -> Option<crate::error::Error> {
    let at = |i: usize| ins.get(i).map(|(s, d)| (&s[..], *d));
    let (x, w) = (at(0)?, at(1));
    let r = match call.op.name() {
        "conv1d" => conv_shape(call, x, w?, at(2), 1, false).map(drop),
        "conv2d" => conv_shape(call, x, w?, at(2), 2, false).map(drop),
        "conv_transpose2d" => conv_shape(call, x, w?, at(2), 2, true).map(drop),
        "max_pool2d" | "max_pool2d_with_indices" => pool_shape(call, x.0, true).map(drop),
        "avg_pool2d" => pool_shape(call, x.0, false).map(drop),
        "adaptive_avg_pool2d" => adaptive_shape(call, x.0).map(drop),
        _ => Ok(()),
    };
    r.err()
}
