//! Weight-only int8 quantization (the header's "Quantized tensors"):
//! symmetric per-channel `qint8` (zero point 0, one fp32 scale per slice
//! along an axis, as `torch.quantize_per_channel` with `torch.qint8`) and
//! ggml's block-wise `q8_0` (blocks of 32 along the last dim, one fp16 scale
//! per block).
//!
//! A quantized tensor is a handle of its own kind in the tensor namespace:
//! the functions that only read a tensor (shape, dtype, numel, copy_to,
//! free, retain) take it; every op refuses it with `E_DTYPE` (the registry
//! says so), except `dequantize`, `linear` and `matmul`, which route here.
//! Its values are host memory whichever backend quantized it: the products
//! run on the CPU kernels of `imp::qkernel`, and a float result is made on
//! the activation's backend. Quantized tensors never carry a gradient.

use std::sync::{Arc, OnceLock};

use crate::backend::{imp, BackendId, Tensor};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::handles::{kind_of, HandleKind};
use crate::json::write_int_list as fmt;
use crate::registry::{QUANTIZED, TENSORS};
use crate::tensor::{self, numel_of, register};
use crate::vocab::kinds::Binary;

/// ggml's `QK8_0`.
pub const BLOCK: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// One scale per index of `axis`.
    PerChannel { axis: usize },
    /// One scale per block of 32 along the last dim.
    Q8_0,
}

impl Scheme {
    pub fn name(self) -> &'static str {
        match self {
            Scheme::PerChannel { .. } => "qint8",
            Scheme::Q8_0 => "q8_0",
        }
    }
}

/// The int8 values (row-major over the logical shape) and their scales
/// (per-channel: `[shape[axis]]`; q8_0: one per block, in block order, each
/// an fp16 value held exactly in fp32). Shared with backward closures.
pub struct QData {
    pub q: Vec<i8>,
    pub scales: Vec<f32>,
}

pub struct QTensor {
    pub scheme: Scheme,
    pub shape: Vec<i64>,
    /// The backend `dequantize` makes its result on.
    pub backend: BackendId,
    pub data: Arc<QData>,
    /// The weight packed for the products, made at first use. One layout
    /// per tensor: a qint8 weight's axis admits only the layout whose output
    /// dim it is, and q8_0 only `[out, in]` (`linear` refuses the rest).
    packed: OnceLock<Arc<imp::qkernel::Packed>>,
}

impl QTensor {
    pub fn new(scheme: Scheme, shape: Vec<i64>, backend: BackendId, q: Vec<i8>, scales: Vec<f32>) -> QTensor {
        QTensor { scheme, shape, backend, data: Arc::new(QData { q, scales }), packed: Default::default() }
    }

    /// The bytes `copy_to` gives: the int8 values (qint8), or ggml's
    /// `block_q8_0` array (per block: fp16 `d` little-endian, then 32 int8).
    pub fn bytes(&self) -> Vec<u8> {
        let d = &self.data;
        match self.scheme {
            Scheme::PerChannel { .. } => d.q.iter().map(|&v| v as u8).collect(),
            Scheme::Q8_0 => {
                let mut out = Vec::with_capacity(d.q.len() / BLOCK * (BLOCK + 2));
                for (blk, s) in d.q.chunks_exact(BLOCK).zip(&d.scales) {
                    out.extend_from_slice(&half::f16::from_f32(*s).to_le_bytes());
                    out.extend(blk.iter().map(|&v| v as u8));
                }
                out
            }
        }
    }

    /// The inverse of `bytes`, checked against `shape`: `E_SHAPE` when the
    /// length does not fit, `E_INVALID_ARG` for a non-finite q8_0 scale.
    pub fn from_bytes(scheme: Scheme, shape: Vec<i64>, backend: BackendId, bytes: &[u8], scales: Option<&[f32]>) -> Result<QTensor> {
        let n = numel_of(&shape)?;
        check_shape(scheme, &shape, "load")?;
        match scheme {
            Scheme::PerChannel { axis } => {
                let scales = scales.ok_or_else(|| crate::err!(E_INVALID_ARG, "a qint8 tensor needs its scales"))?;
                if bytes.len() != n || scales.len() as i64 != shape[axis] {
                    crate::bail!(E_SHAPE, "qint8 {}: {} bytes and {} scales given, {n} and {} needed", fmt(&shape), bytes.len(), scales.len(), shape[axis]);
                }
                if let Some(s) = scales.iter().find(|s| !(s.is_finite() && **s >= 0.0)) {
                    crate::bail!(E_INVALID_ARG, "qint8 scale {s} is not a finite non-negative number");
                }
                Ok(QTensor::new(scheme, shape, backend, bytes.iter().map(|&b| b as i8).collect(), scales.to_vec()))
            }
            Scheme::Q8_0 => {
                let blocks = n / BLOCK;
                if bytes.len() != blocks * (BLOCK + 2) {
                    crate::bail!(E_SHAPE, "q8_0 {}: {} bytes given, {blocks} blocks of 34 needed", fmt(&shape), bytes.len());
                }
                let (mut q, mut s) = (Vec::with_capacity(n), Vec::with_capacity(blocks));
                for blk in bytes.chunks_exact(BLOCK + 2) {
                    let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                    if !d.is_finite() {
                        crate::bail!(E_INVALID_ARG, "q8_0 block scale {d} is not finite");
                    }
                    s.push(d);
                    q.extend(blk[2..].iter().map(|&b| b as i8));
                }
                Ok(QTensor::new(scheme, shape, backend, q, s))
            }
        }
    }

    /// The scales' shape: `[shape[axis]]`, or the shape with its last dim in blocks.
    pub fn scales_shape(&self) -> Vec<i64> {
        match self.scheme {
            Scheme::PerChannel { axis } => vec![self.shape[axis]],
            Scheme::Q8_0 => {
                let mut s = self.shape.clone();
                if let Some(l) = s.last_mut() {
                    *l /= BLOCK as i64;
                }
                s
            }
        }
    }

    /// The float32 values, row-major: `q * scale`, as PyTorch's and ggml's dequantize compute them.
    fn dequantized(&self) -> Vec<f32> {
        let d = &self.data;
        match self.scheme {
            Scheme::PerChannel { axis } => {
                let (size, inner) = (self.shape[axis] as usize, self.shape[axis + 1..].iter().product::<i64>() as usize);
                d.q.iter().enumerate().map(|(i, &v)| d.scales[(i / inner.max(1)) % size.max(1)] * f32::from(v)).collect()
            }
            Scheme::Q8_0 => d.q.chunks_exact(BLOCK).zip(&d.scales).flat_map(|(b, &s)| b.iter().map(move |&v| s * f32::from(v))).collect(),
        }
    }
}

/// Whether `h` names a quantized tensor (live or not): a tag check, no lock.
#[inline]
pub fn is_quantized(h: i64) -> bool {
    kind_of(h) == Some(HandleKind::Quantized)
}

fn check_shape(scheme: Scheme, shape: &[i64], what: &str) -> Result<()> {
    match scheme {
        Scheme::PerChannel { axis } if axis >= shape.len() => {
            crate::bail!(E_SHAPE, "{what}: axis {axis} is out of range for a tensor of shape {}", fmt(shape))
        }
        Scheme::Q8_0 if shape.last().is_none_or(|&l| l as usize % BLOCK != 0) => crate::bail!(
            E_SHAPE,
            "{what}: q8_0 needs a last dim that is a multiple of 32 (ggml's block_q8_0), got shape {}",
            fmt(shape)
        ),
        _ => Ok(()),
    }
}

/// A float tensor's values as fp32, row-major, read from any device.
fn host_f32(t: &Tensor, what: &str) -> Result<Vec<f32>> {
    let dt = imp::dtype(&t.raw)?;
    if !dt.is_float() {
        crate::bail!(E_DTYPE, "{what}: needs a floating tensor, got {}", dt.name());
    }
    let raw = if dt == DType::F32 { imp::shallow(&t.raw) } else { imp::to_dtype(&t.raw, DType::F32)? };
    let mut v = vec![0f32; numel_of(&imp::shape(&raw))?];
    // SAFETY: any byte pattern is an f32; the slice covers exactly `v`.
    let bytes = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 4) };
    imp::copy_to(&raw, bytes)?;
    Ok(v)
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: an f32 slice is readable as its bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

fn finite(x: &[f32], what: &str) -> Result<()> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(i) => crate::bail!(E_INVALID_ARG, "{what}: element {i} is {}; only finite values quantize", x[i]),
        None => Ok(()),
    }
}

/// Symmetric int8 with zero point 0: `scale = max|slice| / 127` per slice
/// along `axis` (0 for an all-zero slice, whose values are all 0), `q =
/// nearbyint(x * (1/scale))` as fbgemm's `Quantize` rounds. Errors:
/// `E_DTYPE` (not floating), `E_SHAPE` (axis, 0-dim), `E_INVALID_ARG` (non-finite values).
pub fn quantize_per_channel(h: i64, axis: i64) -> Result<i64> {
    let t = tensor::get(h)?;
    let shape = imp::shape(&t.raw);
    let nd = shape.len() as i64;
    if nd == 0 || axis < -nd || axis >= nd {
        crate::bail!(E_SHAPE, "quantize_per_channel: axis {axis} is out of range for a tensor of shape {}", fmt(&shape));
    }
    let axis = axis.rem_euclid(nd) as usize;
    let x = host_f32(&t, "quantize_per_channel")?;
    finite(&x, "quantize_per_channel")?;
    let (size, inner) = (shape[axis] as usize, shape[axis + 1..].iter().product::<i64>() as usize);
    let channel = |i: usize| (i / inner.max(1)) % size.max(1);
    let mut amax = vec![0f32; size];
    for (i, v) in x.iter().enumerate() {
        let c = &mut amax[channel(i)];
        *c = c.max(v.abs());
    }
    let scales: Vec<f32> = amax.iter().map(|a| a / 127.0).collect();
    let inv: Vec<f32> = scales.iter().map(|&s| if s > 0.0 { 1.0 / s } else { 0.0 }).collect();
    let q = x.iter().enumerate().map(|(i, v)| (v * inv[channel(i)]).round_ties_even().clamp(-128.0, 127.0) as i8).collect();
    QUANTIZED.insert(QTensor::new(Scheme::PerChannel { axis }, shape, t.backend, q, scales))
}

/// ggml's `quantize_row_q8_0_ref` along the last dim: per block of 32, `d =
/// max|block| / 127` stored as fp16, `q = roundf(x * (1/d))` with the fp32
/// `d` (0 for an all-zero block). Errors: `E_DTYPE`, `E_SHAPE` (the last dim
/// not a multiple of 32, 0-dim), `E_INVALID_ARG` (non-finite values).
pub fn quantize_q8_0(h: i64) -> Result<i64> {
    let t = tensor::get(h)?;
    let shape = imp::shape(&t.raw);
    check_shape(Scheme::Q8_0, &shape, "quantize_q8_0")?;
    let x = host_f32(&t, "quantize_q8_0")?;
    finite(&x, "quantize_q8_0")?;
    let mut q = vec![0i8; x.len()];
    let mut scales = Vec::with_capacity(x.len() / BLOCK);
    for (xb, qb) in x.chunks_exact(BLOCK).zip(q.chunks_exact_mut(BLOCK)) {
        let d = xb.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (o, v) in qb.iter_mut().zip(xb) {
            *o = (v * id).round() as i8;
        }
        let d16 = half::f16::from_f32(d);
        if !d16.is_finite() {
            crate::bail!(E_INVALID_ARG, "quantize_q8_0: a block's scale {d} overflows fp16 (values up to 65504 * 127 quantize)");
        }
        scales.push(d16.to_f32());
    }
    QUANTIZED.insert(QTensor::new(Scheme::Q8_0, shape, t.backend, q, scales))
}

/// A float32 tensor of `q`'s values on the CPU, made by the backend that quantized it.
pub fn dequantize(h: i64) -> Result<i64> {
    let q = QUANTIZED.get(h)?;
    let v = q.dequantized();
    register(q.backend, imp::from_bytes(q.backend, f32_bytes(&v), &q.shape, DType::F32, Device::Cpu)?)
}

/// The scales as a float32 tensor (`QTensor::scales_shape`).
pub fn scales(h: i64) -> Result<i64> {
    let q = QUANTIZED.get(h)?;
    register(q.backend, imp::from_bytes(q.backend, f32_bytes(&q.data.scales), &q.scales_shape(), DType::F32, Device::Cpu)?)
}

pub fn shape(h: i64) -> Result<Vec<i64>> {
    QUANTIZED.read(h, |q| q.shape.clone())
}

pub fn dtype_name(h: i64) -> Result<&'static str> {
    QUANTIZED.read(h, |q| q.scheme.name())
}

pub fn bytes(h: i64) -> Result<Vec<u8>> {
    Ok(QUANTIZED.get(h)?.bytes())
}

/// How a quantized weight meets the activation: `OutIn` is `F.linear`'s
/// `[out, in]` weight, `InOut` is `x @ W` (`matmul`, `enkai_tensor_linear`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    OutIn,
    InOut,
}

/// `x @ dequantize(w)ᵀ + b` (`OutIn`) or `x @ dequantize(w) + b` (`InOut`),
/// computed as int8 products of `w` with `x` quantized per row (or per block
/// of 32 for q8_0): a float32 result on `x`'s backend. The gradient to `x`
/// (and `b`) is the float linear's of the dequantized weight, straight
/// through the activation's quantization; `w` gets none.
pub fn linear(op: &str, x: i64, w: i64, b: i64, layout: Layout) -> Result<i64> {
    // An ONNX export refuses it by name (the weight is not a float tensor).
    crate::trace::opaque_result("linear with a quantized weight", &[x], product(op, x, w, b, layout))
}

fn product(op: &str, x: i64, w: i64, b: i64, layout: Layout) -> Result<i64> {
    let (xt, q) = (tensor::get(x)?, QUANTIZED.get(w)?);
    if q.shape.len() != 2 {
        crate::bail!(E_SHAPE, "{op}: a quantized weight must be 2-D, got {}", fmt(&q.shape));
    }
    let (out_dim, in_dim) = if layout == Layout::OutIn { (0, 1) } else { (1, 0) };
    let (n, k) = (q.shape[out_dim] as usize, q.shape[in_dim] as usize);
    match q.scheme {
        Scheme::PerChannel { axis } if axis != out_dim => crate::bail!(
            E_UNSUPPORTED,
            "{op}: the qint8 weight {} has its scales along dim {axis}, the input dim; an int8 product needs them along the output dim {out_dim}",
            fmt(&q.shape)
        ),
        Scheme::Q8_0 if layout == Layout::InOut => crate::bail!(
            E_UNSUPPORTED,
            "{op}: the q8_0 weight {} has its blocks along the output dim; quantize it as [out, in] and call linear",
            fmt(&q.shape)
        ),
        _ => {}
    }
    // The int32 sums are exact while |Σ qx·qw| <= 127·128·k < 2^31.
    if matches!(q.scheme, Scheme::PerChannel { .. }) && k > 132_104 {
        crate::bail!(E_UNSUPPORTED, "{op}: a qint8 weight with {k} inputs could overflow the int32 sums (at most 132104)");
    }
    if imp::device(&xt.raw) != Device::Cpu {
        crate::bail!(E_DEVICE, "{op}: quantized weights run on the CPU; the input is on {}", imp::device(&xt.raw));
    }
    let xs = imp::shape(&xt.raw);
    if xs.last().copied() != Some(k as i64) {
        crate::bail!(E_SHAPE, "{op}: input {} does not fit the quantized weight {} ({k} inputs)", fmt(&xs), fmt(&q.shape));
    }
    let bt = if b != 0 { Some(tensor::get(b)?) } else { None };
    if let Some(bt) = &bt {
        let bs = imp::shape(&bt.raw);
        if bs.as_slice() != [n as i64] {
            crate::bail!(E_SHAPE, "{op}: bias {} does not fit {n} outputs", fmt(&bs));
        }
        if !imp::dtype(&bt.raw)?.is_float() || bt.backend != xt.backend {
            crate::bail!(E_DTYPE, "{op}: the bias must be a floating tensor of the input's backend");
        }
    }
    let be = xt.backend;
    let x32 = if imp::dtype(&xt.raw)? == DType::F32 { imp::shallow(&xt.raw) } else { imp::to_dtype(&xt.raw, DType::F32)? };
    let xv = host_f32(&Tensor { backend: be, raw: imp::shallow(&x32) }, op)?;
    let m = xv.len() / k.max(1);
    let packed = q.packed.get_or_init(|| {
        let d = &q.data;
        Arc::new(match q.scheme {
            Scheme::PerChannel { .. } => imp::qkernel::Packed::per_channel(&d.q, n, k, layout == Layout::InOut, &d.scales),
            Scheme::Q8_0 => imp::qkernel::Packed::q8_0(&d.q, &d.scales, n, k),
        })
    });
    let mut y = vec![0f32; m * n];
    imp::qkernel::linear(&xv, m, packed, &mut y);
    let mut ys = xs.clone();
    *ys.last_mut().expect("x has a last dim") = n as i64;
    let yraw = imp::from_bytes(be, f32_bytes(&y), &ys, DType::F32, Device::Cpu)?;
    // The straight-through gradient: g @ Wd, with Wd `[n, k]` made when the backward runs.
    let (data, scheme, wshape) = (Arc::clone(&q.data), q.scheme, q.shape.clone());
    let backward: crate::backend::contract::CustomBackward<imp::Raw> = Box::new(move |g| {
        let Some(g) = g.into_iter().next().flatten() else { return Ok(vec![None]) };
        let tmp = QTensor { scheme, shape: wshape, backend: be, data, packed: Default::default() };
        let mut wd = tmp.dequantized();
        if layout == Layout::InOut {
            wd = transpose(&wd, k, n);
        }
        let wd = imp::from_bytes(be, f32_bytes(&wd), &[n as i64, k as i64], DType::F32, Device::Cpu)?;
        Ok(vec![Some(imp::linear(&g, &wd, None)?)])
    });
    let mut y = imp::custom_node("QuantizedLinearBackward", &[&x32], vec![yraw], backward)?.pop().expect("one output");
    if let Some(bt) = bt {
        let b32 = if imp::dtype(&bt.raw)? == DType::F32 { imp::shallow(&bt.raw) } else { imp::to_dtype(&bt.raw, DType::F32)? };
        y = imp::binary(Binary::Add, &y, &b32)?;
    }
    drop((xt, q));
    register(be, y)
}

fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = v[r * cols + c];
        }
    }
    t
}

/// `enkai_op`'s route for a call a quantized handle made fail (`linear`'s
/// weight, `matmul`'s second operand); `None` leaves the registry's error.
pub fn route(op: &str, inputs: &[i64]) -> Option<Result<i64>> {
    match (op, inputs) {
        ("linear", [x, w, rest @ ..]) if is_quantized(*w) && !is_quantized(*x) && rest.len() <= 1 => {
            Some(linear(op, *x, *w, rest.first().copied().unwrap_or(0), Layout::OutIn))
        }
        ("matmul", [x, w]) if is_quantized(*w) && !is_quantized(*x) => Some(linear(op, *x, *w, 0, Layout::InOut)),
        _ => None,
    }
}

/// `enkai_tensor_free`: drops a reference in the registry the handle's kind names.
pub fn release(h: i64) -> Result<()> {
    if is_quantized(h) {
        QUANTIZED.release(h)
    } else {
        TENSORS.release(h)
    }
}

/// `enkai_tensor_retain`, as `release`.
pub fn retain(h: i64) -> Result<()> {
    if is_quantized(h) {
        QUANTIZED.retain(h)
    } else {
        TENSORS.retain(h)
    }
}

/// Metadata key under which files (safetensors, checkpoints) list their
/// quantized tensors: a JSON object `{name: {"dtype", "shape", "axis"}}`.
pub const META_KEY: &str = "enkai.quantized";
/// A qint8 tensor's scales are stored next to it under its name and this suffix.
pub const SCALE_SUFFIX: &str = ".scale";

/// A quantized tensor as a file stores it: its `bytes` as one plain tensor
/// (`int8` in the logical shape for qint8; `uint8` `[.., blocks * 34]`, ggml's
/// bytes, for q8_0), qint8's fp32 scales as a second, and `meta` to read them back.
pub struct Parts {
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub bytes: Vec<u8>,
    pub scales: Option<Vec<f32>>,
    pub meta: serde_json::Value,
}

pub fn parts(h: i64) -> Result<Parts> {
    let q = QUANTIZED.get(h)?;
    let mut meta = serde_json::json!({"dtype": q.scheme.name(), "shape": q.shape});
    Ok(match q.scheme {
        Scheme::PerChannel { axis } => {
            meta["axis"] = axis.into();
            Parts { dtype: DType::I8, shape: q.shape.clone(), bytes: q.bytes(), scales: Some(q.data.scales.clone()), meta }
        }
        Scheme::Q8_0 => {
            let mut shape = q.shape.clone();
            *shape.last_mut().expect("q8_0 has a last dim") = shape[shape.len() - 1] / BLOCK as i64 * (BLOCK as i64 + 2);
            Parts { dtype: DType::U8, shape, bytes: q.bytes(), scales: None, meta }
        }
    })
}

/// A quantized tensor from what `parts` wrote (`what` names the file for
/// errors): `E_CKPT_FORMAT` when `meta` or the sizes disagree.
pub fn from_parts(meta: &serde_json::Value, bytes: &[u8], scales: Option<&[f32]>, backend: BackendId, what: &str) -> Result<i64> {
    let bad = |why: String| crate::err!(E_CKPT_FORMAT, "{what}: {why}");
    let shape: Vec<i64> = meta
        .get("shape")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .filter(|s: &Vec<i64>| s.iter().all(|&d| d >= 0))
        .ok_or_else(|| bad(format!("quantized entry {meta} has no valid shape")))?;
    let scheme = match meta.get("dtype").and_then(|d| d.as_str()) {
        Some("qint8") => Scheme::PerChannel {
            axis: meta.get("axis").and_then(|a| a.as_u64()).ok_or_else(|| bad(format!("qint8 entry {meta} has no axis")))? as usize,
        },
        Some("q8_0") => Scheme::Q8_0,
        _ => return Err(bad(format!("quantized entry {meta} names no known dtype (qint8, q8_0)"))),
    };
    let q = QTensor::from_bytes(scheme, shape, backend, bytes, scales).map_err(|e| bad(e.detail))?;
    QUANTIZED.insert(q)
}
