//! Op signatures in PyTorch's schema language, as `native_functions.yaml`
//! writes them (`sum.dim_IntList(Tensor self, int[1]? dim, bool
//! keepdim=False, *, ScalarType? dtype=None) -> Tensor`): the table's rows
//! are such strings, parsed once, so the generic entry, the schema JSON, the
//! Python methods and libtorch's boxed call all read one declaration.
//!
//! A layer or loss takes `torch.nn.functional`'s signature where it differs
//! from its ATen operator's (`cross_entropy(input, target, ..., str
//! reduction)` runs `aten::cross_entropy_loss(self, target, ..., int
//! reduction)`): its line is `<functional signature> => <ATen signature>`,
//! and the ATen arguments are taken from the functional ones by name
//! (`Lower`), so the table still declares the op once.

use crate::dtype::DType;
use crate::error::Result;

/// An argument type of the schema language that the ABI accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Tensor,
    /// `Tensor[]` (cat, stack); `Tensor?[]` (index_put) when `optional_items`.
    TensorList,
    Int,
    /// `int[]`/`SymInt[]`; `int[1]` (`Some(1)`) also takes a single int.
    IntList(Option<u8>),
    Float,
    Bool,
    /// A number: int, float or bool, as PyTorch's `Scalar`.
    Scalar,
    Str,
    ScalarType,
    /// `Layout`, `Device`, `Generator`, `MemoryFormat`: always left to PyTorch's default (None).
    Hidden,
}

impl Ty {
    pub fn name(self) -> &'static str {
        match self {
            Ty::Tensor => "Tensor",
            Ty::TensorList => "Tensor[]",
            Ty::Int => "int",
            Ty::IntList(Some(1)) => "int[1]",
            Ty::IntList(Some(_)) => "int[N]",
            Ty::IntList(None) => "int[]",
            Ty::Float => "float",
            Ty::Bool => "bool",
            Ty::Scalar => "Scalar",
            Ty::Str => "str",
            Ty::ScalarType => "ScalarType",
            Ty::Hidden => "hidden",
        }
    }

    pub fn is_tensor(self) -> bool {
        matches!(self, Ty::Tensor | Ty::TensorList)
    }
}

/// A number as PyTorch's `Scalar` holds it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Int(v) => v as f64,
            Scalar::Float(v) => v,
            Scalar::Bool(b) => f64::from(u8::from(b)),
        }
    }

    /// The dtype a Python number of this kind wraps into (`torch.tensor(v)`).
    pub fn dtype(self) -> DType {
        match self {
            Scalar::Int(_) => DType::I64,
            Scalar::Float(_) => DType::F64,
            Scalar::Bool(_) => DType::Bool,
        }
    }
}

/// An argument's value after parsing: tensors are indices into the call's inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Tensor(usize),
    Tensors(Vec<Option<usize>>),
    Int(i64),
    Ints(Vec<i64>),
    Float(f64),
    Bool(bool),
    Scalar(Scalar),
    Str(String),
    DType(DType),
}

#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub ty: Ty,
    /// `T?`: None is a value.
    pub optional: bool,
    /// `Tensor?[]`: a list whose items may be None.
    pub optional_items: bool,
    pub default: Option<Value>,
    pub kw_only: bool,
}

impl Param {
    /// Whether a call may leave it out.
    pub fn has_default(&self) -> bool {
        self.default.is_some() || self.ty == Ty::Hidden
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ret {
    Tensor,
    TensorList,
    Bool,
}

/// One overload: `aten::<name>.<overload>`, or a `torch.nn.functional`
/// signature lowered onto an ATen operator (`lower`).
#[derive(Debug, Clone)]
pub struct Sig {
    pub name: String,
    pub overload: String,
    pub params: Vec<Param>,
    pub returns: Vec<Ret>,
    /// The text it was parsed from (the functional part of a lowered line).
    pub text: &'static str,
    pub lower: Option<Box<Lower>>,
}

/// Where an argument of the ATen operator comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Src {
    /// The functional parameter of that index, as is (None there takes the
    /// operator's default when the operator's parameter is not optional:
    /// `embedding`'s `padding_idx=None` is ATen's -1).
    Param(usize),
    /// A `str reduction` as ATen's `int reduction` (`at::Reduction`: none 0, mean 1, sum 2).
    Reduction(usize),
    /// The operator's default (given in the lowered line).
    Default,
    /// A TensorList of two functional tensors (`lstm`'s `hx` of `h0`, `c0`).
    Pair(usize, usize),
}

/// The ATen operator a functional signature runs on libtorch, and each of
/// its arguments' source.
#[derive(Debug, Clone)]
pub struct Lower {
    pub sig: Sig,
    pub args: Vec<Src>,
    /// The first two tensors are broadcast together before the operator
    /// runs, as the regression losses' functions do (`torch.broadcast_tensors`):
    /// ATen's operators broadcast the values but not their gradients.
    pub broadcast: bool,
}

/// The functions that broadcast `input` and `target` before their operator.
const BROADCASTING: &[&str] = &["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"];

/// ATen parameter names that take a functional parameter of another name, as
/// (ATen, functional), tried after an exact match: `self` is `input` (or
/// `one_hot`'s `tensor`), `embedding`'s `indices` its `input`, `feature_dropout`'s
/// `train` the functional `training`.
const LOWER_ALIASES: &[(&str, &str)] = &[("self", "input"), ("self", "tensor"), ("indices", "input"), ("train", "training")];

/// ATen TensorList parameters made of two functional tensors: `lstm`'s and
/// `lstm_cell`'s `hx` is `[h0, c0]` (the ABI flattens it into the inputs).
const LOWER_PAIRS: &[(&str, [&str; 2])] = &[("hx", ["h0", "c0"])];

/// `at::Reduction`'s value of a `reduction` string (core has checked it);
/// `kl_div`'s `batchmean` runs as the sum, divided by the batch size after
/// (`Lower::batchmean`).
pub fn reduction_code(s: &str) -> i64 {
    match s {
        "none" => 0,
        "sum" | "batchmean" => 2,
        _ => 1,
    }
}

impl Lower {
    /// Maps every ATen parameter to its source; every functional parameter
    /// must be used, so no argument a caller passes is silently dropped.
    fn new(from: &Sig, to: Sig, text: &str) -> Result<Lower> {
        let mut used = vec![false; from.params.len()];
        let mut args = Vec::with_capacity(to.params.len());
        for p in &to.params {
            let exact = from.param(&p.name);
            let alias = || LOWER_ALIASES.iter().filter(|a| a.0 == p.name).find_map(|a| from.param(a.1));
            let src = match exact.or_else(alias) {
                Some(i) if used[i] => return Err(bad(text, &format!("{} is taken twice", from.params[i].name))),
                Some(i) => {
                    used[i] = true;
                    match (from.params[i].ty, p.ty) {
                        (Ty::Str, Ty::Int) if p.name == "reduction" => Src::Reduction(i),
                        (a, b) if a == b => Src::Param(i),
                        (a, b) => return Err(bad(text, &format!("{} is {} here and {} in ATen", p.name, a.name(), b.name()))),
                    }
                }
                None if p.ty == Ty::TensorList && LOWER_PAIRS.iter().any(|l| l.0 == p.name) => {
                    let names = LOWER_PAIRS.iter().find(|l| l.0 == p.name).map(|l| l.1).unwrap_or_default();
                    let [a, b] = names.map(|n| from.param(n).filter(|&i| from.params[i].ty == Ty::Tensor && !used[i]));
                    let (Some(a), Some(b)) = (a, b) else { return Err(bad(text, &format!("no tensors {names:?} for ATen's {}", p.name))) };
                    used[a] = true;
                    used[b] = true;
                    Src::Pair(a, b)
                }
                None if p.has_default() => Src::Default,
                None => return Err(bad(text, &format!("no source for ATen's {}", p.name))),
            };
            args.push(src);
        }
        if let Some(i) = used.iter().position(|u| !u) {
            return Err(bad(text, &format!("{} reaches no ATen parameter", from.params[i].name)));
        }
        Ok(Lower { sig: to, args, broadcast: BROADCASTING.contains(&from.name.as_str()) })
    }

    /// Whether the call asks for `reduction="batchmean"`: the operator's sum
    /// is then divided by the input's first dim, as `F.kl_div` does.
    pub fn batchmean(&self, args: &[Value]) -> bool {
        self.args.iter().any(|s| matches!(s, Src::Reduction(i) if matches!(&args[*i], Value::Str(r) if r == "batchmean")))
    }

    /// The ATen operator's arguments from the functional call's `args`. One
    /// value for an `int[N]` stands for N of them, as Python's `_pair` makes
    /// it (`F.unfold(x, 3)`), since an operator such as `im2col` takes N only.
    pub fn args(&self, args: &[Value]) -> Vec<Value> {
        self.sig
            .params
            .iter()
            .zip(&self.args)
            .map(|(p, src)| match *src {
                Src::Param(i) if args[i] == Value::None && !p.optional => p.default.clone().unwrap_or(Value::None),
                Src::Param(i) => match (&args[i], p.ty) {
                    (Value::Ints(v), Ty::IntList(Some(n))) if v.len() == 1 && n > 1 => Value::Ints(vec![v[0]; usize::from(n)]),
                    (v, _) => v.clone(),
                },
                Src::Reduction(i) => match &args[i] {
                    Value::Str(s) => Value::Int(reduction_code(s)),
                    v => v.clone(),
                },
                Src::Default => p.default.clone().unwrap_or(Value::None),
                Src::Pair(a, b) => Value::Tensors([a, b].iter().map(|&i| if let Value::Tensor(t) = args[i] { Some(t) } else { None }).collect()),
            })
            .collect()
    }
}

impl Sig {
    /// `name.overload`, or `name` for the default overload.
    pub fn full_name(&self) -> String {
        if self.overload.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.name, self.overload)
        }
    }

    pub fn param(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }
}

/// Splits at commas outside brackets and quotes.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut quote, mut start) = (Vec::new(), 0i32, false, 0);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quote = !quote,
            '(' | '[' if !quote => depth += 1,
            ')' | ']' if !quote => depth -= 1,
            ',' if depth == 0 && !quote => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = s[start..].trim();
    if !last.is_empty() {
        out.push(last);
    }
    out
}

/// Removes alias annotations: `Tensor(a!)` -> `Tensor`, `int[](a!)` -> `int[]`.
fn strip_alias(t: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in t.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

fn bad(text: &str, why: &str) -> crate::error::Error {
    crate::err!(E_INTERNAL, "op table: cannot parse {text:?}: {why}")
}

fn parse_ty(t: &str, text: &str) -> Result<(Ty, bool, bool)> {
    let t = strip_alias(t);
    let (t, optional) = match t.strip_suffix('?') {
        Some(b) => (b.to_string(), true),
        None => (t, false),
    };
    let (ty, optional_items) = if let Some(base) = t.strip_suffix("[]") {
        match base {
            "Tensor" => (Ty::TensorList, false),
            "Tensor?" => (Ty::TensorList, true),
            "int" | "SymInt" => (Ty::IntList(None), false),
            _ => return Err(bad(text, &format!("list type {t}"))),
        }
    } else if let Some(rest) = t.strip_prefix("int[").or_else(|| t.strip_prefix("SymInt[")) {
        let n: u8 = rest.trim_end_matches(']').parse().map_err(|_| bad(text, &t))?;
        (Ty::IntList(Some(n)), false)
    } else {
        let ty = match t.as_str() {
            "Tensor" => Ty::Tensor,
            "int" | "SymInt" => Ty::Int,
            "float" => Ty::Float,
            "bool" => Ty::Bool,
            "Scalar" => Ty::Scalar,
            "str" => Ty::Str,
            "ScalarType" => Ty::ScalarType,
            "Layout" | "Device" | "Generator" | "MemoryFormat" => Ty::Hidden,
            _ => return Err(bad(text, &format!("type {t}"))),
        };
        (ty, false)
    };
    Ok((ty, optional, optional_items))
}

/// c10's ScalarType codes, as schemas write dtype defaults (`dtype=4`).
fn dtype_code(c: i64) -> Option<DType> {
    Some(match c {
        0 => DType::U8,
        1 => DType::I8,
        2 => DType::I16,
        3 => DType::I32,
        4 => DType::I64,
        5 => DType::F16,
        6 => DType::F32,
        7 => DType::F64,
        9 => DType::C64,
        10 => DType::C128,
        11 => DType::Bool,
        15 => DType::BF16,
        _ => return None,
    })
}

fn parse_default(d: &str, ty: Ty, text: &str) -> Result<Value> {
    let e = || bad(text, &format!("default {d}"));
    Ok(match (d, ty) {
        ("None", _) => Value::None,
        ("True", _) => Value::Bool(true),
        ("False", _) => Value::Bool(false),
        (_, Ty::IntList(_)) => {
            let inner = d.trim_start_matches('[').trim_end_matches(']');
            Value::Ints(inner.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse().map_err(|_| e())).collect::<Result<_>>()?)
        }
        (_, Ty::Int) => Value::Int(d.parse().map_err(|_| e())?),
        (_, Ty::Float) => Value::Float(d.parse().map_err(|_| e())?),
        (_, Ty::Scalar) => match d.parse::<i64>() {
            Ok(v) => Value::Scalar(Scalar::Int(v)),
            Err(_) => Value::Scalar(Scalar::Float(d.parse().map_err(|_| e())?)),
        },
        (_, Ty::Str) => Value::Str(d.trim_matches('"').to_string()),
        (_, Ty::ScalarType) => Value::DType(dtype_code(d.parse().map_err(|_| e())?).ok_or_else(e)?),
        (_, Ty::Hidden) => Value::None,
        _ => return Err(e()),
    })
}

/// Parses one schema line (`aten::` prefix optional), or a functional
/// signature and its ATen operator's, `<functional> => <ATen>`.
pub fn parse(text: &'static str) -> Result<Sig> {
    if let Some((from, to)) = text.split_once("=>") {
        let mut sig = parse(from.trim())?;
        let to = parse(to.trim())?;
        if sig.returns != to.returns {
            return Err(bad(text, "the two signatures return different things"));
        }
        sig.lower = Some(Box::new(Lower::new(&sig, to, text)?));
        return Ok(sig);
    }
    let s = text.trim().trim_start_matches("aten::");
    let open = s.find('(').ok_or_else(|| bad(text, "no '('"))?;
    let arrow = s.rfind("->").ok_or_else(|| bad(text, "no '->'"))?;
    let close = s[..arrow].rfind(')').ok_or_else(|| bad(text, "no ')'"))?;
    let (name, overload) = match s[..open].split_once('.') {
        Some((n, o)) => (n.to_string(), o.to_string()),
        None => (s[..open].to_string(), String::new()),
    };
    let mut params = Vec::new();
    let mut kw_only = false;
    for p in split_top(&s[open + 1..close]) {
        if p == "*" {
            kw_only = true;
            continue;
        }
        let (decl, default) = match p.split_once('=') {
            Some((a, b)) => (a.trim(), Some(b.trim())),
            None => (p, None),
        };
        let sp = decl.rfind(' ').ok_or_else(|| bad(text, p))?;
        let (ty, optional, optional_items) = parse_ty(decl[..sp].trim(), text)?;
        let default = default.map(|d| parse_default(d, ty, text)).transpose()?;
        params.push(Param { name: decl[sp + 1..].to_string(), ty, optional, optional_items, default, kw_only });
    }
    let rets = s[arrow + 2..].trim();
    let rets = rets.strip_prefix('(').and_then(|r| r.strip_suffix(')')).unwrap_or(rets);
    let returns = split_top(rets)
        .into_iter()
        .map(|r| {
            let t = strip_alias(r.split_whitespace().next().unwrap_or(""));
            match t.as_str() {
                "Tensor" => Ok(Ret::Tensor),
                "Tensor[]" => Ok(Ret::TensorList),
                "bool" => Ok(Ret::Bool),
                _ => Err(bad(text, &format!("return {r}"))),
            }
        })
        .collect::<Result<_>>()?;
    Ok(Sig { name, overload, params, returns, text, lower: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_shapes_the_table_uses() {
        let s = parse("sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor").unwrap();
        assert_eq!((s.name.as_str(), s.overload.as_str()), ("sum", "dim_IntList"));
        assert_eq!(s.params.len(), 4);
        assert_eq!(s.params[1].ty, Ty::IntList(Some(1)));
        assert!(s.params[1].optional && s.params[1].default.is_none());
        assert_eq!(s.params[2].default, Some(Value::Bool(false)));
        assert!(s.params[3].kw_only);
        let t = parse("topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)").unwrap();
        assert_eq!(t.returns, vec![Ret::Tensor, Ret::Tensor]);
        assert_eq!(t.params[2].default, Some(Value::Int(-1)));
        let c = parse("allclose(Tensor self, Tensor other, float rtol=1.0000000000000001e-05, float atol=1e-08, bool equal_nan=False) -> bool").unwrap();
        assert_eq!(c.params[2].default, Some(Value::Float(1e-5)));
        let v = parse("split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]").unwrap();
        assert_eq!(v.returns, vec![Ret::TensorList]);
        let g = parse("gelu(Tensor self, *, str approximate=\"none\") -> Tensor").unwrap();
        assert_eq!(g.params[1].default, Some(Value::Str("none".into())));
        let i = parse("index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor").unwrap();
        assert!(i.params[1].optional_items);
        let r = parse("randint(SymInt high, SymInt[] size, *, ScalarType? dtype=4, Layout? layout=None) -> Tensor").unwrap();
        assert_eq!(r.params[2].default, Some(Value::DType(DType::I64)));
    }

    #[test]
    fn a_functional_line_maps_its_arguments_onto_aten_by_name() {
        let s = parse(
            "cross_entropy(Tensor input, Tensor target, Tensor? weight=None, int ignore_index=-100, str reduction=\"mean\", float label_smoothing=0.0) -> Tensor \
             => cross_entropy_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, SymInt ignore_index=-100, float label_smoothing=0.0) -> Tensor",
        )
        .unwrap();
        assert_eq!(s.name, "cross_entropy");
        let l = s.lower.as_ref().unwrap();
        assert_eq!(l.sig.name, "cross_entropy_loss");
        assert_eq!(l.args, vec![Src::Param(0), Src::Param(1), Src::Param(2), Src::Reduction(4), Src::Param(3), Src::Param(5)]);
        let args = [Value::Tensor(0), Value::Tensor(1), Value::None, Value::Int(-100), Value::Str("sum".into()), Value::Float(0.0)];
        assert_eq!(l.args(&args)[3], Value::Int(2));
        // A None for a non-optional ATen int is ATen's default.
        let e = parse("embedding(Tensor input, Tensor weight, int? padding_idx=None) -> Tensor => embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False) -> Tensor").unwrap();
        let l = e.lower.unwrap();
        assert_eq!(l.args, vec![Src::Param(1), Src::Param(0), Src::Param(2), Src::Default]);
        assert_eq!(l.args(&[Value::Tensor(0), Value::Tensor(1), Value::None]), vec![Value::Tensor(1), Value::Tensor(0), Value::Int(-1), Value::Bool(false)]);
        // A functional parameter that reaches no ATen one is a table error.
        assert!(parse("dropout2d(Tensor input, float p=0.5, bool training=True, bool inplace=False) -> Tensor => feature_dropout(Tensor input, float p, bool train) -> Tensor").is_err());
    }
}
