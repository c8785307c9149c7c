//! The generic op entry (`enkai_op`): a PyTorch op name, tensor inputs and
//! JSON keyword arguments, resolved against the op table (`crate::vocab`)
//! to one overload, checked once here (argument types, dims, dtypes,
//! broadcasting), then run by the inputs' backend. A name and kwargs string
//! is parsed once per thread and cached, as the typed functions parse nothing.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use smallvec::SmallVec;

use crate::backend::{self, imp, imp::Raw, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::Binary;
use crate::handles::Ref;
use crate::json::write_int_list as fmt;
use crate::registry::TENSORS;
use crate::vocab::{self, Call, Kind, OpDef, Scalar, Sig, Ty, Value};

/// A resolved call before the inputs are seen: the overload and its
/// arguments, and whether it is a plain binary op (below).
struct Resolved {
    sig: usize,
    args: Vec<Value>,
    binary: Option<Binary>,
    /// `embedding`'s `padding_idx` (its argument index) and the weight (its
    /// input index): the index is checked against the weight's rows, and a
    /// negative one counted from the end, per call on either backend.
    padding_idx: Option<(usize, usize)>,
    /// The op's core shape rule (`vocab::shape_rule`: the recurrent layers
    /// and the norms), run per call on both backends.
    rule: Option<vocab::ShapeRule>,
    /// The op's argument rule (`vocab::arg_rule`: einsum's path), run per
    /// call on both backends before the shape rule.
    fill: Option<vocab::ArgRule>,
}

/// A call of `add`, `sub`, `mul` or `div` on two tensors with `alpha` 1 (or
/// none) and no other argument: the typed binary op of the same name.
/// libtorch runs it through its direct entry, cheaper than the boxed
/// dispatcher (about 100 ns a call on `add` of [4]), and knowing it here,
/// once per resolution, keeps the per-call path to one branch.
fn plain_binary(sig: &Sig, args: &[Value]) -> Option<Binary> {
    let op = match sig.text.split('(').next()? {
        "add.Tensor" => Binary::Add,
        "sub.Tensor" => Binary::Sub,
        "mul.Tensor" => Binary::Mul,
        "div.Tensor" => Binary::Div,
        _ => return None,
    };
    let alpha_one = match sig.param("alpha").map(|i| &args[i]) {
        Some(Value::Scalar(s)) => *s == Scalar::Int(1),
        _ => true,
    };
    (alpha_one && matches!(args, [Value::Tensor(0), Value::Tensor(1), ..])).then_some(op)
}

/// Why an overload does not fit, most specific last.
#[derive(PartialEq, PartialOrd)]
enum Miss {
    Unknown(String),
    Count(String),
    Missing(String),
    Type(String),
}

impl Miss {
    fn text(&self) -> &str {
        match self {
            Miss::Unknown(s) | Miss::Count(s) | Miss::Missing(s) | Miss::Type(s) => s,
        }
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a bool",
        serde_json::Value::Number(n) if n.is_i64() => "an integer",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A dtype by this library's name or PyTorch's (`"fp32"` or `"float32"`).
fn dtype_name(s: &str) -> Option<DType> {
    DType::from_name(s.trim_start_matches("torch.").as_bytes()).or(match s.trim_start_matches("torch.") {
        "float32" | "float" => Some(DType::F32),
        "float64" | "double" => Some(DType::F64),
        "float16" | "half" => Some(DType::F16),
        "bfloat16" => Some(DType::BF16),
        "long" => Some(DType::I64),
        "int" => Some(DType::I32),
        _ => None,
    })
}

/// A JSON value as an argument of type `p`.
fn convert(op: &str, p: &vocab::Param, v: &serde_json::Value) -> std::result::Result<Value, Miss> {
    use serde_json::Value as J;
    let bad = || {
        let want = match p.ty {
            Ty::IntList(Some(_)) => "an integer or a list of integers",
            Ty::IntList(None) => "a list of integers",
            Ty::Int => "an integer",
            Ty::Float => "a number",
            Ty::Bool => "a bool",
            Ty::Scalar => "a number or a bool",
            Ty::Str => "a string",
            Ty::ScalarType => "a dtype name (\"fp32\", \"int64\", ...)",
            _ => "no value",
        };
        let null = if p.optional { " or null" } else { "" };
        Miss::Type(format!("{op}: argument {:?} must be {want}{null}, got {}", p.name, json_kind(v)))
    };
    if v.is_null() {
        return if p.optional { Ok(Value::None) } else { Err(bad()) };
    }
    let int = |v: &J| v.as_i64().filter(|_| v.is_i64() || v.is_u64());
    Ok(match p.ty {
        Ty::Int => Value::Int(int(v).ok_or_else(bad)?),
        Ty::IntList(one) => match v {
            J::Array(items) => Value::Ints(items.iter().map(|x| int(x).ok_or_else(bad)).collect::<std::result::Result<_, _>>()?),
            _ if one.is_some() => Value::Ints(vec![int(v).ok_or_else(bad)?]),
            _ => return Err(bad()),
        },
        Ty::Float => Value::Float(number(v).ok_or_else(bad)?),
        Ty::Bool => Value::Bool(v.as_bool().ok_or_else(bad)?),
        Ty::Scalar => Value::Scalar(match v {
            J::Bool(b) => Scalar::Bool(*b),
            J::Number(n) if n.is_i64() => Scalar::Int(n.as_i64().ok_or_else(bad)?),
            _ => Scalar::Float(number(v).ok_or_else(bad)?),
        }),
        // A marked non-finite number is a number (`matrix_norm`'s `ord=inf` is not its `str` overload).
        Ty::Str => Value::Str(v.as_str().filter(|s| !s.starts_with(NONFINITE)).ok_or_else(bad)?.to_string()),
        Ty::ScalarType => Value::DType(v.as_str().and_then(dtype_name).ok_or_else(bad)?),
        Ty::Tensor | Ty::TensorList | Ty::Hidden => return Err(bad()),
    })
}

/// Fits the inputs (`present[i]`: not a 0 handle) and kwargs to one overload.
fn fit(op: &OpDef, sig: &Sig, present: &[bool], kwargs: &serde_json::Map<String, serde_json::Value>) -> std::result::Result<Vec<Value>, Miss> {
    let name = op.name();
    let mut args: Vec<Option<Value>> = vec![None; sig.params.len()];
    let tensor_params: Vec<usize> = (0..sig.params.len()).filter(|&i| sig.params[i].ty.is_tensor()).collect();
    let n = present.len();
    let count_miss = || {
        let names: Vec<&str> = tensor_params.iter().map(|&i| sig.params[i].name.as_str()).collect();
        Miss::Count(format!("{name}: takes the tensor inputs ({}), got {n} input(s)", names.join(", ")))
    };
    match tensor_params.iter().position(|&i| sig.params[i].ty == Ty::TensorList) {
        Some(l) => {
            let (before, after) = (l, tensor_params.len() - l - 1);
            if n < before + after {
                return Err(count_miss());
            }
            for (k, &pi) in tensor_params.iter().enumerate() {
                let p = &sig.params[pi];
                if k < l || k > l {
                    let at = if k < l { k } else { n - (tensor_params.len() - k) };
                    if !present[at] && !p.optional {
                        return Err(Miss::Missing(format!("{name}: input {at} ({}) is a 0 handle but is not optional", p.name)));
                    }
                    args[pi] = Some(if present[at] { Value::Tensor(at) } else { Value::None });
                } else {
                    let items: Vec<Option<usize>> = (before..n - after).map(|i| present[i].then_some(i)).collect();
                    if !p.optional_items && items.iter().any(Option::is_none) {
                        return Err(Miss::Missing(format!("{name}: a 0 handle in the tensor list {:?}", p.name)));
                    }
                    args[pi] = Some(Value::Tensors(items));
                }
            }
        }
        None => {
            if n > tensor_params.len() {
                return Err(count_miss());
            }
            for (k, &pi) in tensor_params.iter().enumerate() {
                let p = &sig.params[pi];
                if k < n && present[k] {
                    args[pi] = Some(Value::Tensor(k));
                } else if p.optional {
                    args[pi] = Some(Value::None);
                } else if k < n {
                    return Err(Miss::Missing(format!("{name}: input {k} ({}) is a 0 handle but is not optional", p.name)));
                }
            }
        }
    }
    for (k, v) in kwargs {
        let Some(pi) = sig.param(k) else {
            let known: Vec<&str> = op.sigs.iter().flat_map(|s| &s.params).filter(|p| !p.ty.is_tensor() && p.ty != Ty::Hidden).map(|p| p.name.as_str()).collect();
            let mut known = known;
            known.dedup();
            return Err(Miss::Unknown(format!("{name}: unknown argument {k:?} ({})", if known.is_empty() { "it takes none".to_string() } else { format!("its arguments: {}", known.join(", ")) })));
        };
        let p = &sig.params[pi];
        if p.ty.is_tensor() {
            return Err(Miss::Count(format!("{name}: {k:?} is a tensor input here; pass it in `inputs`")));
        }
        if p.ty == Ty::Hidden {
            return Err(Miss::Unknown(format!("{name}: argument {k:?} is not supported by this library")));
        }
        args[pi] = Some(convert(name, p, v)?);
    }
    sig.params
        .iter()
        .zip(args)
        .map(|(p, a)| match a {
            Some(v) => Ok(v),
            None => match &p.default {
                Some(d) => Ok(d.clone()),
                None if p.ty == Ty::Hidden => Ok(Value::None),
                None if p.ty.is_tensor() => Err(count_miss()),
                None => Err(Miss::Missing(format!("{name}: missing argument {:?} ({})", p.name, p.ty.name()))),
            },
        })
        .collect()
}

/// Marks Python's non-finite numbers (`json.dumps` writes `Infinity`,
/// `-Infinity`, `NaN`, which JSON lacks) as strings that `number` reads back,
/// so a Python host's kwargs pass through unchanged.
const NONFINITE: char = '\u{0}';

fn mark_nonfinite(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("Infinity") && !text.contains("NaN") {
        return text.into();
    }
    let (mut out, mut in_str, mut esc) = (String::with_capacity(text.len() + 16), false, false);
    let mut skip_to = 0;
    for (i, c) in text.char_indices() {
        if i < skip_to {
            continue;
        }
        if in_str {
            in_str = esc || c != '"';
            esc = !esc && c == '\\';
        } else if c == '"' {
            in_str = true;
        } else if let Some(tok) = ["-Infinity", "Infinity", "NaN"].iter().find(|t| text[i..].starts_with(**t)) {
            out.push_str("\"\\u0000");
            out.push_str(tok);
            out.push('"');
            skip_to = i + tok.len();
            continue;
        }
        out.push(c);
    }
    out.into()
}

/// A JSON number, or a marked non-finite one.
fn number(v: &serde_json::Value) -> Option<f64> {
    match v {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => match s.strip_prefix(NONFINITE)? {
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            "NaN" => Some(f64::NAN),
            _ => None,
        },
        _ => None,
    }
}

fn resolve(op: &OpDef, present: &[bool], kwargs: Option<&str>) -> Result<Resolved> {
    let map = match kwargs.map(str::trim) {
        None | Some("") => serde_json::Map::new(),
        Some(text) => match serde_json::from_str::<serde_json::Value>(&mark_nonfinite(text)) {
            Ok(serde_json::Value::Object(m)) => m,
            Ok(v) => crate::bail!(E_INVALID_ARG, "{}: kwargs must be a JSON object, got {}", op.name(), json_kind(&v)),
            Err(e) => crate::bail!(E_INVALID_ARG, "{}: kwargs are not valid JSON: {e}", op.name()),
        },
    };
    let mut best: Option<Miss> = None;
    for (i, sig) in op.sigs.iter().enumerate() {
        match fit(op, sig, present, &map) {
            Ok(args) => {
                validate(op, sig, &args, present)?;
                let padding_idx = sig.param("padding_idx").filter(|&a| matches!(args[a], Value::Int(_))).zip(sig.param("weight").and_then(|w| match args[w] {
                    Value::Tensor(t) => Some(t),
                    _ => None,
                }));
                return Ok(Resolved { sig: i, binary: plain_binary(sig, &args), args, padding_idx, rule: vocab::shape_rule(op.name()), fill: vocab::arg_rule(op.name()) });
            }
            Err(m) => {
                if best.as_ref().is_none_or(|b| m > *b) {
                    best = Some(m);
                }
            }
        }
    }
    let m = best.expect("every op has an overload");
    crate::bail!(E_INVALID_ARG, "{}", m.text())
}

/// The checks of argument values that need no tensor: made once per
/// resolution (the cache keeps only calls that pass them), on both backends
/// alike, before any backend sees the call.
fn validate(op: &OpDef, sig: &Sig, args: &[Value], present: &[bool]) -> Result<()> {
    let name = op.name();
    let given = |p: &str| sig.param(p).map(|i| &args[i]);
    // A probability (attention's and the dropouts'), as PyTorch words it.
    // (`p` is a probability only in the dropouts; `dropout_p` in every op that has one.)
    for (p, applies) in [("dropout_p", true), ("p", name.contains("dropout"))] {
        if let (Some(&Value::Float(v)), true) = (given(p), applies) {
            if !(0.0..=1.0).contains(&v) {
                crate::bail!(E_INVALID_ARG, "{name}: dropout probability has to be between 0 and 1, but got {v}");
            }
        }
    }
    // Attention's causal mask and an explicit one exclude each other, as PyTorch documents.
    if matches!(given("is_causal"), Some(Value::Bool(true))) && matches!(given("attn_mask"), Some(Value::Tensor(i)) if present[*i]) {
        crate::bail!(E_INVALID_ARG, "{name}: explicit attn_mask should not be set when is_causal=True");
    }
    // A loss's reduction, as `torch.nn.functional` checks it (a Str
    // `reduction`: scatter_reduce's is another parameter of the same name).
    if let (Some(Value::Str(r)), true) = (given("reduction"), sig.lower.is_some()) {
        if !(matches!(r.as_str(), "none" | "mean" | "sum") || (name == "kl_div" && r == "batchmean")) {
            crate::bail!(E_INVALID_ARG, "{name}: {r} is not a valid value for reduction (none, mean or sum)");
        }
    }
    Ok(())
}

use crate::vocab::FnvBuild;

/// Parsed calls, per thread: (op, input pattern) -> kwargs text -> resolution.
type Cache = HashMap<(usize, u64, usize), HashMap<Box<str>, Rc<Resolved>, FnvBuild>, FnvBuild>;
const CACHE_CAP: usize = 4096;

thread_local! {
    static CACHE: RefCell<(Cache, usize)> = RefCell::new((HashMap::default(), 0));
}

/// The input pattern as a bit mask, when it tells the pattern apart from
/// every other of its length: `None` for a 0 handle past the 64th input
/// (the resolution records which inputs are present, so such a call is
/// resolved afresh rather than served another pattern's resolution).
fn pattern(present: &[bool]) -> Option<u64> {
    if present.len() > 64 && present[64..].contains(&false) {
        return None;
    }
    Some(mask(present.iter().copied()))
}

/// Bit `i` set for each present input `i` among the first 64.
#[inline]
fn mask(present: impl Iterator<Item = bool>) -> u64 {
    present.take(64).enumerate().fold(0u64, |m, (i, p)| m | (u64::from(p) << i))
}

fn resolve_cached(op: &OpDef, present: &[bool], kwargs: Option<&str>) -> Result<Rc<Resolved>> {
    let Some(mask) = pattern(present) else {
        return resolve(op, present, kwargs).map(Rc::new);
    };
    let key = (op.index, mask, present.len());
    let text = kwargs.unwrap_or("");
    let hit = CACHE.with(|c| c.borrow().0.get(&key).and_then(|m| m.get(text)).cloned());
    if let Some(r) = hit {
        return Ok(r);
    }
    let r = Rc::new(resolve(op, present, kwargs)?);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.1 >= CACHE_CAP {
            *c = (HashMap::default(), 0);
        }
        c.0.entry(key).or_default().insert(text.into(), r.clone());
        c.1 += 1;
    });
    Ok(r)
}

/// Parameters holding dims of the first tensor input, normalised here.
const DIM_PARAMS: [&str; 9] = ["dim", "dims", "dim0", "dim1", "dim2", "start_dim", "end_dim", "source", "destination"];

/// Parameters named as dims that hold something else (tile's `dims` are repeat counts).
fn not_dims(op: &str, param: &str) -> bool {
    op == "tile" && param == "dims"
}

/// Ops whose `dim` may name the new dim of the result (`[-rank-1, rank]`).
fn new_dim(op: &str) -> bool {
    matches!(op, "unsqueeze" | "stack")
}

/// Inputs whose dtype the op's rule does not govern (indices, masks,
/// conditions, class targets; the kernel checks those).
fn exempt(op: &str, p: &str) -> bool {
    matches!(p, "index" | "indices" | "mask" | "attn_mask" | "condition" | "sorter" | "sorted_sequence") || (p == "target" && matches!(op, "nll_loss" | "cross_entropy"))
}

/// Checks and completes a resolved call against the inputs: dims
/// normalised, dtypes accepted, elementwise shapes broadcast. Returns the
/// result dtype for elementwise ops.
fn check(op: &OpDef, sig: &Sig, args: &mut [Value], ts: &[Option<&Tensor>]) -> Result<(Option<DType>, Option<DType>)> {
    let name = op.name();
    let first = sig.params.iter().zip(args.iter()).find_map(|(p, v)| match v {
        Value::Tensor(i) if p.ty == Ty::Tensor => ts[*i],
        // As torch.cat wraps dims: against the first tensor that is not a legacy 1-D empty one.
        Value::Tensors(items) => {
            let live = || items.iter().flatten().filter_map(|&i| ts[i]);
            live().find(|t| imp::dims(&t.raw).as_slice() != [0]).or_else(|| live().next())
        }
        _ => None,
    });
    if let Some(t) = first {
        // The first tensor's shape, read only for a call that has dims to normalise.
        let mut shape: Option<SmallVec<[i64; 8]>> = None;
        for (p, v) in sig.params.iter().zip(args.iter_mut()) {
            if !DIM_PARAMS.contains(&p.name.as_str()) || not_dims(name, &p.name) {
                continue;
            }
            let shape = shape.get_or_insert_with(|| {
                let mut s = imp::dims(&t.raw);
                if new_dim(name) {
                    s.push(1);
                }
                s
            });
            match v {
                Value::Int(d) => *d = vocab::norm_dim(name, *d, shape)?,
                Value::Ints(ds) => {
                    for d in ds.iter_mut() {
                        *d = vocab::norm_dim(name, *d, shape)?;
                    }
                    if name == "roll" {
                        continue; // rolling a dim twice is allowed
                    }
                    let mut sorted = ds.clone();
                    sorted.sort_unstable();
                    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                        crate::bail!(E_SHAPE, "{name}: dim {} appears multiple times in {:?}", w[0], p.name);
                    }
                }
                _ => {}
            }
        }
    }
    let row = op.row;
    // The inputs whose dtype the op's rule governs, in order.
    let mut governed: SmallVec<[usize; 8]> = SmallVec::new();
    for (p, v) in sig.params.iter().zip(args.iter()) {
        if exempt(name, &p.name) {
            continue;
        }
        match v {
            Value::Tensor(i) => governed.push(*i),
            Value::Tensors(items) => governed.extend(items.iter().flatten().copied()),
            _ => {}
        }
    }
    if !row.complex {
        complex_refused(op, ts)?;
    }
    if row.kind != Kind::Pointwise {
        for &i in &governed {
            let Some(t) = ts[i] else { continue };
            let d = imp::dtype(&t.raw)?;
            if !row.accept.allows(d) {
                crate::bail!(E_DTYPE, "{name}: {} is not supported (it takes {})", d.name(), row.accept.describe());
            }
        }
        return Ok((None, None));
    }
    // Elementwise: the promoted dtype of the tensors and the numbers that take part.
    let mut dt: Option<(DType, bool)> = None;
    for &i in &governed {
        let Some(t) = ts[i] else { continue };
        let (d, has_dims) = (imp::dtype(&t.raw)?, !imp::dims(&t.raw).is_empty());
        dt = Some(match dt {
            None => (d, has_dims),
            Some((a, a_dim)) => (vocab::promote(a, a_dim, d, has_dims), a_dim || has_dims),
        });
    }
    let mut shape: SmallVec<[i64; 8]> = SmallVec::new();
    for t in ts.iter().flatten() {
        let s = imp::dims(&t.raw);
        match vocab::broadcast_dims(&shape, &s) {
            Some(b) => shape = b,
            None => crate::bail!(E_SHAPE, "{name}: shapes {} and {} do not broadcast", fmt(&shape), fmt(&s)),
        }
    }
    const PROMOTING: [&str; 5] = ["other", "exponent", "min", "max", "self"];
    for (p, v) in sig.params.iter().zip(args.iter()) {
        if let (Value::Scalar(s), true) = (v, PROMOTING.contains(&p.name.as_str())) {
            dt = Some(match dt {
                None => (s.dtype(), false),
                Some((a, a_dim)) => (vocab::promote_scalar(a, *s), a_dim),
            });
        }
    }
    let Some((promoted, _)) = dt else { return Ok((None, None)) };
    if !row.accept.allows(promoted) {
        crate::bail!(E_DTYPE, "{name}: {} is not supported (it takes {})", promoted.name(), row.accept.describe());
    }
    // div with a rounding mode keeps the promoted dtype (integers stay integers).
    let rounding = sig.param("rounding_mode").is_some_and(|i| matches!(args[i], Value::Str(_)));
    let result = if rounding { Some(promoted) } else { row.out.result(promoted) };
    if op.inplace() {
        if let Some(s) = sig.param("self").and_then(|i| match args[i] {
            Value::Tensor(t) => ts[t],
            _ => None,
        }) {
            let (ss, sd) = (imp::shape(&s.raw), imp::dtype(&s.raw)?);
            if ss[..] != shape[..] {
                crate::bail!(E_SHAPE, "{name}: output with shape {} doesn't match the broadcast shape {}", fmt(&ss), fmt(&shape));
            }
            if let Some(r) = result.filter(|&r| !vocab::can_cast(r, sd)) {
                crate::bail!(E_DTYPE, "{name}: result type {} can't be cast to the desired output type {}", r.name(), sd.name());
            }
        }
    }
    Ok((result, Some(promoted)))
}

/// A complex input to a row that takes none (`Row::complex`): every tensor,
/// governed by the dtype rule or not, since no kernel of such a row reads complex values.
fn complex_refused(op: &OpDef, ts: &[Option<&Tensor>]) -> Result<()> {
    for t in ts.iter().flatten() {
        let d = imp::dtype(&t.raw)?;
        if d.is_complex() {
            crate::bail!(E_DTYPE, "{}: {} is not supported (it takes no complex tensors)", op.name(), d.name());
        }
    }
    Ok(())
}

fn unsupported(op: &OpDef, b: backend::BackendId) -> Error {
    crate::err!(E_UNSUPPORTED, "{}: not supported on the {} backend", op.name(), b.name())
}

/// A call's key in the per-thread memo in front of the cache, for
/// `enkai_op`: its name and kwargs exactly as the C caller passed them
/// (bytes, read in one pass without the UTF-8 check: an entry is made only
/// for strings that passed it) and its input pattern; the memo maps it to
/// the op and its resolution. A hit skips the name's validation and lookup
/// and the cache's hashing of Rust strings; a miss takes the checked path,
/// which fills the slot. Direct-mapped (64 slots): two hot calls that share
/// a slot both go on to the cache.
pub struct Key<'a> {
    name: &'a [u8],
    kwargs: Option<&'a [u8]>,
    mask: u64,
    n: usize,
    hash: u64,
}

struct Memo {
    hash: u64,
    name: Box<[u8]>,
    kwargs: Option<Box<[u8]>>,
    mask: u64,
    n: usize,
    op: &'static OpDef,
    resolved: Rc<Resolved>,
}

const MEMO_SLOTS: usize = 64;
const FNV_PRIME: u64 = 0x100_0000_01b3;
const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

thread_local! {
    static MEMO: RefCell<[Option<Memo>; MEMO_SLOTS]> = const { RefCell::new([const { None }; MEMO_SLOTS]) };
}

/// A NUL-terminated string's bytes and their FNV-1a hash continued from `h`, in one pass.
///
/// # Safety
/// `p` points to a NUL-terminated string that outlives `'a`.
#[inline]
unsafe fn scan<'a>(p: *const std::ffi::c_char, mut h: u64) -> (&'a [u8], u64) {
    let p = p.cast::<u8>();
    let mut i = 0;
    loop {
        // SAFETY: bytes up to and including the NUL are readable.
        let b = unsafe { *p.add(i) };
        if b == 0 {
            break;
        }
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        i += 1;
    }
    // SAFETY: the `i` bytes before the NUL.
    (unsafe { std::slice::from_raw_parts(p, i) }, h)
}

/// The hash of a key: the name's FNV-1a hash `h` continued with the kwargs' and the input pattern.
#[inline]
fn finish(h: u64, kwargs_hash: Option<u64>, mask: u64, n: usize) -> u64 {
    let h = (h ^ kwargs_hash.unwrap_or(0x9e37_79b9_7f4a_7c15)).wrapping_mul(FNV_PRIME);
    let h = (h ^ mask).wrapping_mul(FNV_PRIME);
    (h ^ n as u64).wrapping_mul(FNV_PRIME)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_START, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

impl<'a> Key<'a> {
    /// The key of a call with a non-NULL `name`, or `None` where the memo
    /// does not apply (more than 64 inputs).
    ///
    /// # Safety
    /// `name` and `kwargs` (if not NULL) are NUL-terminated and outlive `'a`.
    #[inline]
    pub unsafe fn new(name: *const std::ffi::c_char, inputs: &[i64], kwargs: *const std::ffi::c_char) -> Option<Key<'a>> {
        if inputs.len() > 64 {
            return None;
        }
        let mask = mask(inputs.iter().map(|&h| h != 0));
        // SAFETY: the caller's promise.
        let (name, h) = unsafe { scan(name, FNV_START) };
        let (kwargs, kh) = if kwargs.is_null() {
            (None, None)
        } else {
            // SAFETY: the caller's promise.
            let (k, kh) = unsafe { scan(kwargs, FNV_START) };
            (Some(k), Some(kh))
        };
        Some(Key { name, kwargs, mask, n: inputs.len(), hash: finish(h, kh, mask, inputs.len()) })
    }

    fn slot(&self) -> usize {
        ((self.hash ^ (self.hash >> 29)) as usize) & (MEMO_SLOTS - 1)
    }
}

/// The op and resolution this thread has memoised for `key`.
#[inline]
fn memo_get(key: &Key) -> Option<(&'static OpDef, Rc<Resolved>)> {
    MEMO.with(|m| {
        let m = m.borrow();
        let e = m[key.slot()].as_ref()?;
        (e.hash == key.hash && e.mask == key.mask && e.n == key.n && *e.name == *key.name && e.kwargs.as_deref() == key.kwargs)
            .then(|| (e.op, e.resolved.clone()))
    })
}

fn memo_put(name: &str, kwargs: Option<&str>, present: &[bool], op: &'static OpDef, resolved: &Rc<Resolved>) {
    if present.len() > 64 {
        return;
    }
    let mask = mask(present.iter().copied());
    let (name, kwargs) = (name.as_bytes(), kwargs.map(str::as_bytes));
    let key = Key { name, kwargs, mask, n: present.len(), hash: finish(fnv(name), kwargs.map(fnv), mask, present.len()) };
    let e = Memo { hash: key.hash, name: name.into(), kwargs: kwargs.map(Into::into), mask, n: key.n, op, resolved: resolved.clone() };
    // The old entry, if any, is dropped after the borrow ends.
    let old = MEMO.with(|m| m.borrow_mut()[key.slot()].replace(e));
    drop(old);
}

/// Where `enkai_op` writes its result handles: `cap` slots at `ptr`.
pub struct ResultSlots {
    ptr: *mut i64,
    cap: usize,
}

impl ResultSlots {
    /// # Safety
    /// `ptr` has `cap` writable slots for the call (NULL only when `cap` is 0).
    pub unsafe fn new(ptr: *mut i64, cap: usize) -> ResultSlots {
        ResultSlots { ptr, cap }
    }

    fn check(&self, op: &OpDef, n: usize) -> Result<()> {
        if n > self.cap {
            crate::bail!(E_INVALID_ARG, "{}: {n} results do not fit in cap {}", op.name(), self.cap);
        }
        Ok(())
    }

    fn write(&mut self, hs: &[i64]) -> usize {
        debug_assert!(hs.len() <= self.cap);
        // SAFETY: `check` passed, so `ptr` has at least `hs.len()` slots.
        unsafe { std::ptr::copy_nonoverlapping(hs.as_ptr(), self.ptr, hs.len()) };
        hs.len()
    }
}

/// `enkai_op`'s fast path: runs the call if this thread has resolved its
/// name, kwargs and input pattern before; `None` (nothing done) otherwise.
#[inline]
pub fn run_memoized(key: &Key, inputs: &[i64], out: &mut ResultSlots) -> Option<Result<usize>> {
    let (op, resolved) = memo_get(key)?;
    Some(run_resolved(op, &resolved, inputs, out))
}

/// Runs op `name` on `inputs` (0 = an optional tensor left out) with JSON
/// `kwargs`; writes the new handles to `out` and returns their number.
pub fn run(name: &str, inputs: &[i64], kwargs: Option<&str>, out: &mut ResultSlots) -> Result<usize> {
    let Some(op) = vocab::find(name) else {
        crate::bail!(E_INVALID_ARG, "unknown op {name:?} (enkai_op_schema lists the ops)");
    };
    let present: SmallVec<[bool; 8]> = inputs.iter().map(|&h| h != 0).collect();
    let resolved = resolve_cached(op, &present, kwargs)?;
    memo_put(name, kwargs, &present, op, &resolved);
    run_resolved(op, &resolved, inputs, out)
}

/// Runs a resolved call of `op` on `inputs` (the pattern it was resolved
/// for). The common shapes (one to three inputs, none left out) borrow
/// their inputs as the typed functions do, in a fixed-size array.
#[inline]
fn run_resolved(op: &'static OpDef, resolved: &Resolved, inputs: &[i64], out: &mut ResultSlots) -> Result<usize> {
    match *inputs {
        [a, b] if a != 0 && b != 0 => run_n(op, resolved, [a, b], out),
        [a] if a != 0 => run_n(op, resolved, [a], out),
        [a, b, c] if a != 0 && b != 0 && c != 0 => run_n(op, resolved, [a, b, c], out),
        _ => run_any(op, resolved, inputs, out),
    }
}

/// The backend of a call's inputs (the active one when there are none).
#[inline]
fn backend_of<'t>(name: &str, ts: impl Iterator<Item = &'t Tensor> + Clone) -> Result<backend::BackendId> {
    let mut it = ts.clone();
    let Some(first) = it.next() else { return backend::active_built() };
    if it.all(|t| t.backend == first.backend) {
        return Ok(first.backend);
    }
    let live: SmallVec<[&Tensor; 8]> = ts.collect();
    backend::same_backend(name, &live)
}

fn run_n<const N: usize>(op: &'static OpDef, resolved: &Resolved, hs: [i64; N], out: &mut ResultSlots) -> Result<usize> {
    let refs = match TENSORS.get_n(hs) {
        Ok(refs) => refs,
        Err(e) => return quantized(op, &hs, out, e),
    };
    let b = backend_of(op.name(), refs.iter().map(|r| &**r))?;
    // The plain binary form on libtorch (`plain_binary`): its direct entry, one result, as the typed function.
    if let (Some(bop), backend::BackendId::Torch, [x, y]) = (resolved.binary, b, refs.as_slice()) {
        let raw = imp::binary(bop, &x.raw, &y.raw).map_err(|e| refused(op, resolved, &[Some(&**x), Some(&**y)], true, e))?;
        out.check(op, 1)?;
        let h = [TENSORS.insert_after(Tensor { backend: b, raw }, refs)?];
        traced(op, resolved, &hs, &h);
        return Ok(out.write(&h));
    }
    let ts: [Option<&Tensor>; N] = refs.each_ref().map(|r| Some(&**r));
    let raws: [Option<&Raw>; N] = refs.each_ref().map(|r| Some(&r.raw));
    let mut outs = exec(op, resolved, b, &ts, &raws)?;
    out.check(op, outs.len())?;
    if outs.len() == 1 {
        let raw = outs.pop().expect("one result");
        // The inputs' borrows end in the same lock that registers the result.
        let h = [TENSORS.insert_after(Tensor { backend: b, raw }, refs)?];
        traced(op, resolved, &hs, &h);
        return Ok(out.write(&h));
    }
    let made = TENSORS.insert_all_after(outs.into_iter().map(|raw| Tensor { backend: b, raw }), refs)?;
    traced(op, resolved, &hs, &made);
    Ok(out.write(&made))
}

/// Records the call when this thread traces (`crate::trace`).
#[inline(always)]
fn traced(op: &'static OpDef, resolved: &Resolved, inputs: &[i64], outs: &[i64]) {
    if crate::trace::on() {
        crate::trace::table(op, resolved.sig, &resolved.args, inputs, outs);
    }
}

fn run_any(op: &'static OpDef, resolved: &Resolved, inputs: &[i64], out: &mut ResultSlots) -> Result<usize> {
    let handles: SmallVec<[i64; 8]> = inputs.iter().copied().filter(|&h| h != 0).collect();
    let refs: SmallVec<[Ref<'static, Tensor>; 4]> = match TENSORS.get_many(&handles) {
        Ok(refs) => refs,
        Err(e) => return quantized(op, inputs, out, e),
    };
    let b = backend_of(op.name(), refs.iter().map(|r| &**r))?;
    let mut it = refs.iter();
    let ts: SmallVec<[Option<&Tensor>; 8]> = inputs.iter().map(|&h| if h != 0 { it.next().map(|r| &**r) } else { None }).collect();
    let raws: SmallVec<[Option<&Raw>; 8]> = ts.iter().map(|t| t.map(|t| &t.raw)).collect();
    let outs = exec(op, resolved, b, &ts, &raws)?;
    drop((raws, ts));
    out.check(op, outs.len())?;
    let hs = TENSORS.insert_all_after(outs.into_iter().map(|raw| Tensor { backend: b, raw }), refs)?;
    traced(op, resolved, inputs, &hs);
    Ok(out.write(&hs))
}

/// A call whose inputs did not all borrow: `linear`/`matmul` with a quantized
/// weight run the int8 product (`quant::route`); anything else keeps `e`.
#[cold]
fn quantized(op: &'static OpDef, inputs: &[i64], out: &mut ResultSlots, e: crate::Error) -> Result<usize> {
    match crate::quant::route(op.name(), inputs) {
        Some(r) => {
            let h = r?;
            let made = crate::tensor::Made(vec![h]);
            out.check(op, 1)?;
            Ok(out.write(&made.keep()))
        }
        None => Err(e),
    }
}

/// Checks (native backend) and runs a resolved call on backend `b`'s
/// tensors `ts` (`None`: an optional input left out), whose values are `raws`.
fn exec(op: &'static OpDef, resolved: &Resolved, b: backend::BackendId, ts: &[Option<&Tensor>], raws: &[Option<&Raw>]) -> Result<imp::Outs> {
    // libtorch checks its own arguments: core's checks run only when it
    // refuses (for the message both backends share), so its success path
    // pays nothing for them. The native backend gets checked arguments.
    let torch = b == backend::BackendId::Torch;
    // The inputs' shapes and dtypes, read only for an op with a rule.
    let shapes: SmallVec<[(SmallVec<[i64; 8]>, DType); 8]> = if resolved.rule.is_some() || resolved.fill.is_some() {
        ts.iter().flatten().map(|t| Ok((imp::dims(&t.raw), imp::dtype(&t.raw)?))).collect::<Result<_>>()?
    } else {
        SmallVec::new()
    };
    let mut it = shapes.iter();
    let ins: SmallVec<[vocab::In; 8]> = if shapes.is_empty() { SmallVec::new() } else { ts.iter().map(|t| t.and_then(|_| it.next()).map(|(s, d)| (&s[..], *d))).collect() };
    let mut checked: SmallVec<[Value; 8]>;
    let (args, out_dtype, promoted) = if torch && resolved.padding_idx.is_none() && resolved.fill.is_none() {
        (&resolved.args[..], None, None)
    } else {
        checked = resolved.args.iter().cloned().collect();
        if let Some((a, w)) = resolved.padding_idx {
            relative_padding_idx(op, &mut checked[a], ts[w])?;
        }
        if let Some(fill) = resolved.fill {
            fill(&op.sigs[resolved.sig], &mut checked, &ins)?;
        }
        let (out_dtype, promoted) = if torch { (None, None) } else { check(op, &op.sigs[resolved.sig], &mut checked, ts)? };
        (&checked[..], out_dtype, promoted)
    };
    if b == backend::BackendId::Cpu && !op.row.native {
        return Err(unsupported(op, b));
    }
    if torch && !op.row.complex {
        // The complex opt-in is the table's, on both backends: libtorch would run more.
        complex_refused(op, ts)?;
    }
    let call = Call { op, sig: resolved.sig, args, out_dtype, promoted };
    if let Some(rule) = resolved.rule {
        rule(&call, &ins)?;
    }
    imp::op(b, &call, raws).map_err(|e| refused(op, resolved, ts, torch, e))
}

/// `F.embedding`'s `padding_idx`: within `[-rows, rows)` of the weight, and
/// counted from the end when negative (ATen's operator reads -1 as none).
fn relative_padding_idx(op: &OpDef, v: &mut Value, w: Option<&Tensor>) -> Result<()> {
    let (Value::Int(i), Some(w)) = (v, w) else { return Ok(()) };
    let rows = imp::dims(&w.raw).first().copied().unwrap_or(0);
    if *i < -rows || *i >= rows {
        crate::bail!(E_INVALID_ARG, "{}: padding_idx {i} must be within num_embeddings {rows}", op.name());
    }
    if *i < 0 {
        *i += rows;
    }
    Ok(())
}

/// The error of a call the backend refused: core's own explanation for
/// libtorch's refusals where it has one, so both backends say the same.
#[cold]
#[inline(never)]
fn refused(op: &OpDef, resolved: &Resolved, ts: &[Option<&Tensor>], torch: bool, e: Error) -> Error {
    let name = op.name();
    if torch {
        if let Err(core) = check(op, &op.sigs[resolved.sig], &mut resolved.args.iter().cloned().collect::<Vec<_>>(), ts) {
            return core;
        }
        let live: SmallVec<[&Tensor; 4]> = ts.iter().flatten().copied().collect();
        if let Some(core) = explain(op, resolved, &live) {
            return core;
        }
    }
    match e.code {
        // ATen's dtype dispatch refuses a dtype in these words ("\"round_cpu\" not
        // implemented for 'Long'"): a dtype error, as the native backend reports it.
        crate::error::Code::E_TORCH if e.detail.contains("not implemented for '") => crate::err!(E_DTYPE, "{name}: {}", e.detail),
        crate::error::Code::E_TORCH => crate::err!(E_TORCH, "{name}: {}", e.detail),
        _ => e,
    }
}

/// Core's words for refusals libtorch words as its own error (`E_TORCH`):
/// inputs on different devices, and the rules of the products and reshapes,
/// which their native kernels check with the same codes.
fn explain(op: &OpDef, resolved: &Resolved, ts: &[&Tensor]) -> Option<Error> {
    let name = op.name();
    if let Some(d) = ts.iter().map(|t| imp::device(&t.raw)).find(|d| *d != imp::device(&ts[0].raw)) {
        return Some(crate::err!(E_DEVICE, "{name}: inputs are on {} and {d}", imp::device(&ts[0].raw)));
    }
    let shapes: SmallVec<[Vec<i64>; 2]> = ts.iter().map(|t| imp::shape(&t.raw)).collect();
    match (name, &shapes[..]) {
        ("matmul" | "mm" | "bmm", [a, b]) => {
            let fits = match name {
                "mm" => a.len() == 2 && b.len() == 2 && a[1] == b[0],
                "bmm" => a.len() == 3 && b.len() == 3 && a[0] == b[0] && a[2] == b[1],
                _ => vocab::matmul_fits(a, b),
            };
            if !fits {
                return Some(crate::err!(E_SHAPE, "{name} {} x {}", fmt(a), fmt(b)));
            }
            let (da, db) = (imp::dtype(&ts[0].raw).ok()?, imp::dtype(&ts[1].raw).ok()?);
            (da != db).then(|| crate::err!(E_DTYPE, "{name}: inputs are {} and {}", da.name(), db.name()))
        }
        ("sub", _) if ts.iter().any(|t| imp::dtype(&t.raw).ok() == Some(DType::Bool)) || matches!(arg(op, resolved, "other"), Some(Value::Scalar(Scalar::Bool(_)))) => {
            Some(crate::err!(E_DTYPE, "sub: subtraction with a bool tensor is not supported (use logical_xor / logical_not)"))
        }
        ("imag" | "view_as_real", [_]) => {
            let d = imp::dtype(&ts[0].raw).ok().filter(|d| !d.is_complex())?;
            Some(crate::err!(E_DTYPE, "{name} is only supported for complex tensors, got {}", d.name()))
        }
        ("view_as_complex", [_]) => {
            // The layout's conditions, as the native kernel words them (core's
            // `complex_parts` rule has checked the dtype and the last dim of 2
            // before libtorch ran): libtorch's refusals of them are generic errors.
            let (st, off) = imp::layout(&ts[0].raw);
            if st.last() != Some(&1) {
                return Some(crate::err!(E_SHAPE, "view_as_complex: the tensor must have a last dimension with stride 1"));
            }
            if st[..st.len() - 1].iter().any(|s| s % 2 != 0) {
                return Some(crate::err!(E_SHAPE, "view_as_complex: the tensor must have a stride divisible by 2 for all but the last dimension"));
            }
            (off % 2 != 0).then(|| crate::err!(E_SHAPE, "view_as_complex: the tensor must have a storage offset divisible by 2"))
        }
        ("mean", [_]) if matches!(arg(op, resolved, "dtype"), Some(Value::None)) => {
            let d = imp::dtype(&ts[0].raw).ok().filter(|d| !d.is_inexact())?;
            Some(crate::err!(E_DTYPE, "mean: could not infer the output dtype: the input must be floating (or pass dtype=), got {}", d.name()))
        }
        ("conv1d" | "conv2d" | "conv_transpose2d" | "max_pool2d" | "max_pool2d_with_indices" | "avg_pool2d" | "adaptive_avg_pool2d", _) => {
            let call = Call { op: &vocab::ops()[op.index], sig: resolved.sig, args: &resolved.args, out_dtype: None, promoted: None };
            let ins: SmallVec<[(Vec<i64>, DType); 3]> = ts.iter().map(|t| Some((imp::shape(&t.raw), imp::dtype(&t.raw).ok()?))).collect::<Option<_>>()?;
            vocab::conv::explain(&call, &ins)
        }
        ("reshape" | "view", [x]) => {
            let Some(Value::Ints(target)) = arg(op, resolved, if name == "view" { "size" } else { "shape" }) else { return None };
            if let Some(why) = crate::json::DimsRule::Target.fault(target) {
                return Some(crate::err!(E_INVALID_ARG, "{name}: shape {}: {why}", fmt(target)));
            }
            Some(crate::err!(E_SHAPE, "{name}: cannot {name} {} into {}", fmt(x), fmt(target)))
        }
        _ => None,
    }
}

/// The value of `op`'s parameter `name` in a resolved call.
fn arg<'r>(op: &OpDef, resolved: &'r Resolved, name: &str) -> Option<&'r Value> {
    op.sigs[resolved.sig].param(name).map(|i| &resolved.args[i])
}

/// The overload that a typed C function runs (`src/ffi/typed.rs`, generated
/// from the table's `c` columns): the same resolution `enkai_op` makes, with
/// the arguments given by the C parameters instead of parsed from JSON.
pub struct Typed {
    overload: &'static str,
    /// The op, and the call with every parameter at its default: found once.
    base: std::sync::OnceLock<Option<(usize, Resolved)>>,
}

impl Typed {
    pub const fn new(overload: &'static str) -> Typed {
        Typed { overload, base: std::sync::OnceLock::new() }
    }

    fn resolve(&self) -> Option<(usize, Resolved)> {
        let (op, sig) = vocab::ops().iter().find_map(|o| Some((o, o.sigs.iter().position(|s| s.text.split('(').next() == Some(self.overload))?)))?;
        let mut next = 0;
        let args: Vec<Value> = op.sigs[sig]
            .params
            .iter()
            .map(|p| {
                if p.ty.is_tensor() {
                    next += 1;
                    return Value::Tensor(next - 1);
                }
                p.default.clone().unwrap_or(Value::None)
            })
            .collect();
        Some((op.index, Resolved { sig, binary: plain_binary(&op.sigs[sig], &args), args, padding_idx: None, rule: None, fill: None }))
    }

    /// Runs the overload on `inputs` (its Tensor parameters in order) with
    /// the other arguments `given` by name and the rest at their defaults;
    /// returns the one result's handle. A call with nothing `given` (add,
    /// relu) runs the resolution made once, as `enkai_op`'s memo does.
    pub fn call(&self, inputs: &[i64], given: &[(&str, Value)]) -> Result<i64> {
        let Some((op, base)) = self.base.get_or_init(|| self.resolve()) else {
            crate::bail!(E_INVALID_ARG, "{}: not an overload of the op table", self.overload)
        };
        if inputs.contains(&0) {
            // The registry's error for the 0 handle (a typed function has no optional tensors).
            TENSORS.get_many(inputs)?;
        }
        let op = &vocab::ops()[*op];
        let mut h = 0;
        // SAFETY: one writable slot, `h`.
        let mut slot = unsafe { ResultSlots::new(&mut h, 1) };
        if given.is_empty() {
            run_resolved(op, base, inputs, &mut slot)?;
        } else {
            let s = &op.sigs[base.sig];
            let mut args = base.args.clone();
            for (name, v) in given {
                if let Some(i) = s.param(name) {
                    args[i] = v.clone();
                }
            }
            run_resolved(op, &Resolved { sig: base.sig, binary: plain_binary(s, &args), args, padding_idx: None, rule: None, fill: None }, inputs, &mut slot)?;
        }
        Ok(h)
    }
}

/// An `int[1]?` dim of the seed's typed reductions: every dim (None) when negative.
pub fn dim_or_all(dim: i64) -> Value {
    if dim < 0 {
        Value::None
    } else {
        Value::Ints(vec![dim])
    }
}

/// The table as JSON: an array with one entry per overload (its op's
/// name, the parameters with types and defaults, the outputs,
/// differentiability, dtype rule and the backends that run it).
pub fn schema_json() -> String {
    use serde_json::json;
    let val = |v: &Value| match v {
        Value::None | Value::Tensor(_) | Value::Tensors(_) => json!(null),
        Value::Int(i) | Value::Scalar(Scalar::Int(i)) => json!(i),
        Value::Ints(v) => json!(v),
        Value::Float(f) | Value::Scalar(Scalar::Float(f)) => json!(f),
        Value::Bool(b) | Value::Scalar(Scalar::Bool(b)) => json!(b),
        Value::Str(s) => json!(s),
        Value::DType(d) => json!(d.name()),
    };
    let mut entries = Vec::new();
    for op in vocab::ops() {
        for (i, s) in op.sigs.iter().enumerate() {
            let params: Vec<serde_json::Value> = s
                .params
                .iter()
                .filter(|p| p.ty != Ty::Hidden)
                .map(|p| {
                    let mut o = json!({"name": p.name, "type": p.ty.name(), "optional": p.optional, "kw_only": p.kw_only});
                    if let Some(d) = &p.default {
                        o["default"] = val(d);
                    }
                    if let Some(a) = vocab::aten_name(&p.name) {
                        o["aten"] = json!(a);
                    }
                    o
                })
                .collect();
            let returns: Vec<&str> = s
                .returns
                .iter()
                .map(|r| match r {
                    vocab::Ret::Tensor => "Tensor",
                    vocab::Ret::TensorList => "Tensor[]",
                    vocab::Ret::Bool => "bool",
                })
                .collect();
            let mut backends = vec![];
            if backend::BackendId::Torch.is_built() {
                backends.push("torch");
            }
            if op.row.native && backend::native::opk::has_kernel(op.index, i) {
                backends.push("cpu");
            }
            entries.push(json!({
                "name": op.name(),
                "overload": s.full_name(),
                "signature": s.text,
                "params": params,
                "returns": returns,
                "differentiable": op.row.grad,
                "accepts": format!("{:?}", op.row.accept).to_lowercase(),
                "complex": op.row.complex,
                "pointwise": op.row.kind == Kind::Pointwise,
                "domain": format!("{:?}", op.row.domain).to_lowercase(),
                "cases": op.row.cases.iter().filter_map(|c| serde_json::from_str::<serde_json::Value>(c).ok()).collect::<Vec<_>>(),
                "backends": backends,
            }));
            // A functional signature: PyTorch's function and the ATen operator libtorch runs.
            if let (Some(l), Some(e)) = (&s.lower, entries.last_mut()) {
                e["python"] = json!(format!("{}.{}", op.row.python, op.name()));
                e["lowers_to"] = json!(l.sig.full_name());
                e["lowered_signature"] = json!(l.sig.text);
            } else if let (false, Some(e)) = (op.row.aten, entries.last_mut()) {
                e["python"] = json!(format!("{}.{}", op.row.python, op.name()));
            }
        }
    }
    serde_json::Value::Array(entries).to_string()
}
