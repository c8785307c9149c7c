//! Op signatures in PyTorch's schema language, as `native_functions.yaml`
//! writes them (`sum.dim_IntList(Tensor self, int[1]? dim, bool
//! keepdim=False, *, ScalarType? dtype=None) -> Tensor`): the table's rows
//! are such strings, parsed once, so the generic entry, the schema JSON, the
//! Python methods and libtorch's boxed call all read one declaration.

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

/// One overload: `aten::<name>.<overload>`.
#[derive(Debug, Clone)]
pub struct Sig {
    pub name: String,
    pub overload: String,
    pub params: Vec<Param>,
    pub returns: Vec<Ret>,
    /// The text it was parsed from.
    pub text: &'static str,
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

/// Parses one schema line (`aten::` prefix optional).
pub fn parse(text: &'static str) -> Result<Sig> {
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
    Ok(Sig { name, overload, params, returns, text })
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
}
