//! The rules of the resampling layers, `interpolate`, `unfold` and `fold`
//! (`table/sample.rs`), with PyTorch's messages: core checks every call
//! with them before either backend runs (libtorch would word its refusals
//! as its own `E_TORCH`, or, for `interpolate`, `F.interpolate` checks them
//! in Python), and the kernels of both backends read the plan they compute,
//! so the two agree on every size and scale.

use super::{Call, In};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;

/// How `interpolate` reads its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `nearest`: PyTorch's (OpenCV's) `floor(dst · scale)`.
    Nearest,
    /// `nearest-exact`: `floor((dst + 0.5) · scale)`, as Pillow and scikit-image.
    NearestExact,
    /// `linear`, `bilinear`, `trilinear`: one mode per spatial rank.
    Linear,
}

/// One `interpolate` call, resolved: the result's spatial sizes and the
/// scales the kernels use (a given `scale_factor`, unless recomputed).
#[derive(Debug, Clone, PartialEq)]
pub struct Interp {
    pub mode: Mode,
    pub align_corners: bool,
    /// The input's spatial sizes and the result's.
    pub input: Vec<i64>,
    pub output: Vec<i64>,
    /// Per spatial dim, the scale factor passed on to the kernel (None: from the sizes).
    pub scales: Vec<Option<f64>>,
}

/// `F.interpolate`'s checks and sizes, for an input of shape `xs`: modes
/// nearest, nearest-exact (3-D to 5-D inputs), linear (3-D), bilinear (4-D)
/// and trilinear (5-D); one of `size` (one value per spatial dim, or one for
/// all) and `scale_factor` (one number for all); `recompute_scale_factor`.
pub fn interp_plan(call: &Call, xs: &[i64]) -> Result<Interp> {
    let op = "interpolate";
    let mode_name = call.str("mode").unwrap_or("nearest");
    let align = call.bool("align_corners");
    let (mode, rank) = match mode_name {
        "nearest" => (Mode::Nearest, None),
        "nearest-exact" => (Mode::NearestExact, None),
        "linear" => (Mode::Linear, Some(3)),
        "bilinear" => (Mode::Linear, Some(4)),
        "trilinear" => (Mode::Linear, Some(5)),
        "bicubic" | "area" => crate::bail!(E_UNSUPPORTED, "{op}: mode {mode_name} is not supported (nearest, nearest-exact, linear, bilinear and trilinear are)"),
        m => crate::bail!(E_INVALID_ARG, "{op}: Input Error: unknown mode {m} (nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact)"),
    };
    if mode != Mode::Linear && align.is_some() {
        crate::bail!(E_INVALID_ARG, "{op}: align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | trilinear");
    }
    if call.bool("antialias") == Some(true) {
        crate::bail!(E_UNSUPPORTED, "{op}: antialias is not supported");
    }
    if !(3..=5).contains(&xs.len()) || rank.is_some_and(|r| r != xs.len()) {
        crate::bail!(
            E_SHAPE,
            "{op}: Input Error: Only 3D, 4D and 5D input Tensors supported (got {}D) for the modes: nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact (got {mode_name})",
            xs.len()
        );
    }
    let input = xs[2..].to_vec();
    let dim = input.len();
    let (size, scale) = (call.ints("size"), call.float("scale_factor"));
    let recompute = call.bool("recompute_scale_factor");
    let (output, scales) = match (size, scale) {
        (Some(_), Some(_)) => crate::bail!(E_INVALID_ARG, "{op}: only one of size or scale_factor should be defined"),
        (None, None) => crate::bail!(E_INVALID_ARG, "{op}: either size or scale_factor should be defined"),
        (Some(s), None) => {
            if recompute == Some(true) {
                crate::bail!(E_INVALID_ARG, "{op}: recompute_scale_factor is not meaningful with an explicit size.");
            }
            let out = match s.len() {
                1 => vec![s[0]; dim],
                n if n == dim => s.to_vec(),
                _ => crate::bail!(
                    E_SHAPE,
                    "{op}: Input and output must have the same number of spatial dimensions, but got input with spatial dimensions of {} and output size of {}. Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) format.",
                    fmt(&input),
                    fmt(s)
                ),
            };
            (out, vec![None; dim])
        }
        (None, Some(f)) => {
            if !f.is_finite() || f <= 0.0 {
                crate::bail!(E_INVALID_ARG, "{op}: scale_factor must be a positive finite number, got {f}");
            }
            // As `compute_output_size` (and F's recompute path): floor(size · scale) in double.
            let out: Vec<i64> = input.iter().map(|&n| (n as f64 * f).floor().min(i64::MAX as f64) as i64).collect();
            let scales = if recompute == Some(true) { vec![None; dim] } else { vec![Some(f); dim] };
            (out, scales)
        }
    };
    if input.iter().chain(&output).any(|&n| n <= 0) {
        crate::bail!(E_SHAPE, "{op}: Input and output sizes should be greater than 0, but got input {} output {}", fmt(&input), fmt(&output));
    }
    let total = xs[..2].iter().chain(&output).try_fold(1i64, |a, &b| a.checked_mul(b));
    if total.is_none_or(|t| t > (isize::MAX as i64) / 16) {
        crate::bail!(E_RESOURCE, "{op}: a result of {} spatial elements per channel is too large", fmt(&output));
    }
    Ok(Interp { mode, align_corners: align.unwrap_or(false), input, output, scales })
}

impl Interp {
    /// For each result position along spatial dim `d`: the two input
    /// positions it reads and their weights (nearest modes: one position,
    /// weight 1), computed as PyTorch's CPU kernels do, in `f32` unless
    /// `double` (the kernels' `opmath_t`).
    pub fn axis(&self, d: usize, double: bool) -> Vec<(usize, usize, f64, f64)> {
        let (n_in, n_out, scale) = (self.input[d], self.output[d], self.scales[d]);
        // `compute_scales_value`: 1 / scale when given, else in / out.
        let ratio = |dbl: bool| -> f64 {
            match scale {
                Some(s) if s > 0.0 => if dbl { 1.0 / s } else { (1.0 / s) as f32 as f64 },
                _ => if dbl { n_in as f64 / n_out as f64 } else { (n_in as f32 / n_out as f32) as f64 },
            }
        };
        let last = n_in as usize - 1;
        (0..n_out as usize)
            .map(|o| match self.mode {
                Mode::Nearest | Mode::NearestExact => {
                    // `nearest_idx` special-cases equal and doubled sizes; both index in f32.
                    let i = if self.mode == Mode::Nearest && n_out == n_in {
                        o
                    } else if self.mode == Mode::Nearest && n_out == 2 * n_in {
                        o >> 1
                    } else {
                        let s = ratio(false) as f32;
                        // (`nearest-exact` multiplies in double, then `floorf` rounds to float.)
                        let at = if self.mode == Mode::Nearest { o as f32 * s } else { ((o as f64 + 0.5) * f64::from(s)) as f32 };
                        (at.floor() as usize).min(last)
                    };
                    (i, i, 1.0, 0.0)
                }
                Mode::Linear if n_out == n_in => (o, o, 1.0, 0.0),
                Mode::Linear => {
                    let (i0, l1) = if double {
                        let r = if self.align_corners { if n_out > 1 { (n_in - 1) as f64 / (n_out - 1) as f64 } else { 0.0 } } else { ratio(true) };
                        let src = if self.align_corners { r * o as f64 } else { (r * (o as f64 + 0.5) - 0.5).max(0.0) };
                        let i0 = (src.floor() as usize).min(last);
                        (i0, (src - i0 as f64).clamp(0.0, 1.0))
                    } else {
                        let r = if self.align_corners { if n_out > 1 { (n_in - 1) as f32 / (n_out - 1) as f32 } else { 0.0 } } else { ratio(false) as f32 };
                        let src = if self.align_corners { r * o as f32 } else { (r * (o as f32 + 0.5) - 0.5).max(0.0) };
                        let i0 = (src.floor() as usize).min(last);
                        (i0, (src - i0 as f32).clamp(0.0, 1.0) as f64)
                    };
                    let i1 = if i0 < last { i0 + 1 } else { i0 };
                    let l0 = if double { 1.0 - l1 } else { (1.0 - l1 as f32) as f64 };
                    (i0, i1, l0, l1)
                }
            })
            .collect()
    }
}

/// `unfold`'s and `fold`'s sliding blocks: an image `[N, C, H, W]` (N = 1
/// for an unbatched input) and its columns `[N, C·kh·kw, oh·ow]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocks {
    pub n: i64,
    pub c: i64,
    pub size: [i64; 2],
    pub kernel: [i64; 2],
    pub dilation: [i64; 2],
    pub padding: [i64; 2],
    pub stride: [i64; 2],
    /// The count of blocks along each spatial dim.
    pub blocks: [i64; 2],
    pub batched: bool,
}

/// An `int[2]` argument: one value repeats.
fn pair(call: &Call, name: &str, default: i64) -> Result<[i64; 2]> {
    match call.ints(name) {
        None => Ok([default; 2]),
        Some(&[v]) => Ok([v; 2]),
        Some(&[a, b]) => Ok([a, b]),
        Some(v) => crate::bail!(E_INVALID_ARG, "{}: {name} must be one integer or two, got {}", call.op.name(), fmt(v)),
    }
}

/// `sliding_window_count`: floor division, as `div_rtn`.
fn windows(size: i64, pad: i64, dil: i64, k: i64, stride: i64) -> i64 {
    (size + 2 * pad - (dil * (k - 1) + 1)).div_euclid(stride) + 1
}

fn sliding(call: &Call) -> Result<([i64; 2], [i64; 2], [i64; 2], [i64; 2])> {
    let op = call.op.name();
    let (k, d, p, s) = (pair(call, "kernel_size", 1)?, pair(call, "dilation", 1)?, pair(call, "padding", 0)?, pair(call, "stride", 1)?);
    if k[0] <= 0 || k[1] <= 0 {
        crate::bail!(E_INVALID_ARG, "{op}: kernel size should be greater than zero, but got kernel_height: {} kernel_width: {}", k[0], k[1]);
    }
    if s[0] <= 0 || s[1] <= 0 {
        crate::bail!(E_INVALID_ARG, "{op}: stride should be greater than zero, but got stride_height: {} stride_width: {}", s[0], s[1]);
    }
    if d[0] <= 0 || d[1] <= 0 {
        crate::bail!(E_INVALID_ARG, "{op}: dilation should be greater than zero, but got dilation_height: {} dilation_width: {}", d[0], d[1]);
    }
    if p[0] < 0 || p[1] < 0 {
        crate::bail!(E_INVALID_ARG, "{op}: padding should be non-negative, but got pad_height: {} pad_width: {}", p[0], p[1]);
    }
    // Sizes past these bounds overflow the window arithmetic; no real image has them.
    if k.iter().chain(&d).chain(&p).chain(&s).any(|&v| v > 1 << 24) {
        crate::bail!(E_INVALID_ARG, "{op}: kernel_size, dilation, padding and stride must be at most 2^24");
    }
    Ok((k, d, p, s))
}

/// `F.unfold(input, kernel_size, dilation, padding, stride)` on `xs`
/// (`[N, C, H, W]` or unbatched `[C, H, W]`), as `im2col_shape_check`.
pub fn unfold_blocks(call: &Call, xs: &[i64]) -> Result<Blocks> {
    let (kernel, dilation, padding, stride) = sliding(call)?;
    let ok = match xs.len() {
        3 => xs.iter().all(|&v| v != 0),
        4 => xs[1..].iter().all(|&v| v != 0),
        _ => false,
    };
    if !ok {
        crate::bail!(E_SHAPE, "unfold: Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: {}", fmt(xs));
    }
    let batched = xs.len() == 4;
    let (n, c, h, w) = if batched { (xs[0], xs[1], xs[2], xs[3]) } else { (1, xs[0], xs[1], xs[2]) };
    let blocks = [windows(h, padding[0], dilation[0], kernel[0], stride[0]), windows(w, padding[1], dilation[1], kernel[1], stride[1])];
    if blocks[0] < 1 || blocks[1] < 1 {
        crate::bail!(
            E_SHAPE,
            "unfold: Given input with spatial size ({h}, {w}), kernel_size=({}, {}), dilation=({}, {}), padding=({}, {}), calculated shape of the array of sliding blocks as ({}, {}), but its components must be at least one.",
            kernel[0], kernel[1], dilation[0], dilation[1], padding[0], padding[1], blocks[0], blocks[1]
        );
    }
    let b = Blocks { n, c, size: [h, w], kernel, dilation, padding, stride, blocks, batched };
    b.check_size()?;
    Ok(b)
}

/// `F.fold(input, output_size, kernel_size, dilation, padding, stride)` on
/// `xs` (`[N, C·kh·kw, L]` or unbatched `[C·kh·kw, L]`), as `col2im_shape_check`.
pub fn fold_blocks(call: &Call, xs: &[i64]) -> Result<Blocks> {
    let (kernel, dilation, padding, stride) = sliding(call)?;
    let size = pair(call, "output_size", 0)?;
    let ok = match xs.len() {
        2 => xs.iter().all(|&v| v != 0),
        3 => xs[1..].iter().all(|&v| v != 0),
        _ => false,
    };
    if !ok {
        crate::bail!(E_SHAPE, "fold: Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions for input, but got: {}", fmt(xs));
    }
    let batched = xs.len() == 3;
    let (n, planes, len) = if batched { (xs[0], xs[1], xs[2]) } else { (1, xs[0], xs[1]) };
    let kk = kernel[0].checked_mul(kernel[1]).ok_or_else(|| crate::err!(E_INVALID_ARG, "fold: Given kernel_width = {} and kernel_height = {} the product of kernel_width and kernel_height overflowed.", kernel[1], kernel[0]))?;
    if planes % kk != 0 {
        crate::bail!(E_SHAPE, "fold: Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got input.size(1)={planes} and kernel_size=({}, {}).", kernel[0], kernel[1]);
    }
    let blocks = [windows(size[0], padding[0], dilation[0], kernel[0], stride[0]), windows(size[1], padding[1], dilation[1], kernel[1], stride[1])];
    let given = format!(
        "Given output_size=({}, {}), kernel_size=({}, {}), dilation=({}, {}), padding=({}, {}), stride=({}, {})",
        size[0], size[1], kernel[0], kernel[1], dilation[0], dilation[1], padding[0], padding[1], stride[0], stride[1]
    );
    if len != blocks[0] * blocks[1] {
        crate::bail!(
            E_SHAPE,
            "fold: {given}, expected size of input's dimension 2 to match the calculated number of sliding blocks {} * {} = {}, but got input.size(2)={len}.",
            blocks[0], blocks[1], blocks[0] * blocks[1]
        );
    }
    if blocks[0] < 1 || blocks[1] < 1 {
        crate::bail!(E_SHAPE, "fold: {given}, calculated shape of the array of sliding blocks as ({}, {}), which is too small (non-positive)", blocks[0], blocks[1]);
    }
    if size[0] < 1 || size[1] < 1 {
        crate::bail!(E_SHAPE, "fold: Expected output spatial size to be positive, but got: output_size=({}, {}).", size[0], size[1]);
    }
    let b = Blocks { n, c: planes / kk, size, kernel, dilation, padding, stride, blocks, batched };
    b.check_size()?;
    Ok(b)
}

impl Blocks {
    /// The columns' shape as the caller sees it.
    pub fn cols_shape(&self) -> Vec<i64> {
        let v = [self.n, self.c * self.kernel[0] * self.kernel[1], self.blocks[0] * self.blocks[1]];
        if self.batched { v.to_vec() } else { v[1..].to_vec() }
    }

    /// The image's shape as the caller sees it.
    pub fn image_shape(&self) -> Vec<i64> {
        let v = [self.n, self.c, self.size[0], self.size[1]];
        if self.batched { v.to_vec() } else { v[1..].to_vec() }
    }

    fn check_size(&self) -> Result<()> {
        let cols = [self.n, self.c, self.kernel[0], self.kernel[1], self.blocks[0], self.blocks[1]].iter().try_fold(1i64, |a, &b| a.checked_mul(b));
        if cols.is_none_or(|t| t > (isize::MAX as i64) / 16) {
            crate::bail!(E_RESOURCE, "unfold: the columns of {} blocks of kernel {} would be too large", fmt(&self.blocks), fmt(&self.kernel));
        }
        Ok(())
    }
}

/// Core's check of a call of `interpolate`, `unfold` or `fold` (`ins` in
/// the call's input order), and their dtypes as PyTorch's CPU kernels take
/// them: `interpolate` floating dtypes and uint8, `unfold`/`fold` floating
/// dtypes and bool.
pub fn check(call: &Call, ins: &[In]) -> Result<()> {
    let Some(Some((xs, dt))) = ins.first() else { return Ok(()) };
    let op = call.op.name();
    let other = if op == "interpolate" { DType::U8 } else { DType::Bool };
    if !(dt.is_float() || *dt == other) {
        crate::bail!(E_DTYPE, "{op}: not implemented for {} (it takes floating dtypes and {})", dt.name(), other.name());
    }
    match op {
        "interpolate" => {
            let plan = interp_plan(call, xs)?;
            // libtorch's uint8 kernels: the nearest modes and bilinear; linear and trilinear are not built for it.
            if *dt == DType::U8 && plan.mode == Mode::Linear && plan.output.len() != 2 {
                crate::bail!(E_DTYPE, "{op}: mode {} is not implemented for uint8", call.str("mode").unwrap_or("nearest"));
            }
            Ok(())
        }
        "unfold" => unfold_blocks(call, xs).map(drop),
        "fold" => fold_blocks(call, xs).map(drop),
        _ => Ok(()),
    }
}
