//! Each recorded op as ONNX operators (opset 17 and later), and where the
//! dynamic batch goes through it (`Bd`). An op without a lowering here is
//! `E_UNSUPPORTED` with its name: the export never drops a node. Values keep
//! their dtypes: PyTorch's type promotion is written as explicit `Cast`s.

use std::collections::HashMap;

use super::{attr_f, attr_i, attr_ints, onnx_dtype, Bd, G};
use crate::dtype::DType;
use crate::error::Result;
use crate::onnx::proto::{AttributeProto, TensorProto};
use crate::trace::{Kind, Meta, Node, Trace};
use crate::vocab::Value;

/// One input of a node: its ONNX name, shape and dtype, and its batch dim.
#[derive(Clone)]
struct In {
    name: String,
    meta: Meta,
    bd: Option<Bd>,
}

impl In {
    fn rank(&self) -> usize {
        self.meta.dims.len()
    }
}

/// A node being lowered.
struct L<'a> {
    g: &'a mut G,
    node: &'a Node,
    op: &'static str,
    ins: Vec<Option<In>>,
    outs: Vec<(String, Meta)>,
    /// The traced batch size when the batch is dynamic.
    batch: Option<i64>,
    /// The outputs' batch dims (the default rule's, until an op sets them).
    out_bd: Vec<Option<Bd>>,
}

fn unsupported<T>(op: &str, why: &str) -> Result<T> {
    crate::bail!(E_UNSUPPORTED, "{op}: {why}")
}

/// A dim as PyTorch wraps it (a 0-d tensor takes dims 0 and -1); core
/// checked the range before the op ran.
fn norm(d: i64, rank: usize) -> usize {
    let r = rank.max(1) as i64;
    (if d < 0 { d + r } else { d }).clamp(0, r - 1) as usize
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
}

impl L<'_> {
    fn arg(&self, name: &str) -> Option<&Value> {
        let Kind::Table { op, sig, args } = &self.node.kind else { return None };
        op.sigs[*sig].param(name).map(|i| &args[i])
    }

    fn int(&self, name: &str) -> i64 {
        match self.arg(name) {
            Some(Value::Int(i)) => *i,
            Some(Value::Scalar(s)) => s.to_f64() as i64,
            Some(Value::Ints(v)) if v.len() == 1 => v[0],
            _ => 0,
        }
    }

    fn float(&self, name: &str) -> Option<f64> {
        match self.arg(name)? {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::Scalar(s) => Some(s.to_f64()),
            _ => None,
        }
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.arg(name), Some(Value::Bool(true)))
    }

    fn ints(&self, name: &str) -> Option<Vec<i64>> {
        match self.arg(name)? {
            Value::Ints(v) => Some(v.clone()),
            Value::Int(i) => Some(vec![*i]),
            _ => None,
        }
    }

    /// A table op's tensor parameter.
    fn t(&self, name: &str) -> Option<In> {
        match self.arg(name)? {
            Value::Tensor(k) => self.ins.get(*k).cloned().flatten(),
            _ => None,
        }
    }

    /// A tensor parameter, or a scalar argument of that name as a constant of `dtype`.
    fn operand(&mut self, name: &str, dtype: DType) -> Result<String> {
        if let Some(t) = self.t(name) {
            return Ok(self.cast(&t, dtype));
        }
        match self.arg(name) {
            Some(Value::Scalar(s)) => {
                let v = s.to_f64();
                Ok(self.g.scalar(v, dtype))
            }
            _ => unsupported(self.op, &format!("argument {name:?} is neither a tensor nor a number")),
        }
    }

    fn input(&self, k: usize) -> Result<In> {
        match self.ins.get(k).cloned().flatten() {
            Some(i) => Ok(i),
            None => unsupported(self.op, &format!("input {k} is missing")),
        }
    }

    fn out(&self) -> &str {
        &self.outs[0].0
    }

    fn out_dtype(&self) -> DType {
        self.outs[0].1.dtype
    }

    fn cast(&mut self, t: &In, to: DType) -> String {
        if t.meta.dtype == to {
            return t.name.clone();
        }
        self.g.node("Cast", &[&t.name], vec![attr_i("to", i64::from(onnx_dtype(to)))])
    }

    /// The op's result: node `op` on `ins`, written to the first output.
    fn emit(&mut self, op: &str, ins: &[&str], attrs: Vec<AttributeProto>) {
        let out = self.out().to_owned();
        self.g.node_to(op, ins, &[&out], attrs);
    }

    /// `op(ins)`, then `then(that, extra)` when there is an `extra` (a bias, a weight).
    fn emit_then(&mut self, op: &str, ins: &[&str], then: &str, extra: Option<&str>) {
        match extra {
            Some(e) => {
                let y = self.g.node(op, ins, vec![]);
                self.emit(then, &[&y, e], vec![]);
            }
            None => self.emit(op, ins, vec![]),
        }
    }

    /// The first output as `src`.
    fn alias(&mut self, src: &str) {
        self.emit("Identity", &[src], vec![]);
    }

    fn dynamic(&self, t: &In) -> bool {
        self.batch.is_some() && t.bd.is_some()
    }

    /// Reduce-style ops whose `axes` became an input in opset 18.
    fn reduce(&mut self, op: &str, x: &str, axes: Option<&[i64]>, keepdims: bool) -> String {
        let mut attrs = vec![attr_i("keepdims", i64::from(keepdims))];
        let Some(axes) = axes else { return self.g.node(op, &[x], attrs) };
        if op == "ReduceSum" || self.g.opset >= 18 {
            let a = self.g.ints(axes);
            self.g.node(op, &[x, &a], attrs)
        } else {
            attrs.push(attr_ints("axes", axes));
            self.g.node(op, &[x], attrs)
        }
    }

    fn unsqueeze(&mut self, x: &str, axes: &[i64]) -> String {
        let a = self.g.ints(axes);
        self.g.node("Unsqueeze", &[x, &a], vec![])
    }

    fn slice(&mut self, x: &str, axis: i64, start: i64, end: i64, step: i64) -> String {
        let (s, e, a, st) = (self.g.ints(&[start]), self.g.ints(&[end]), self.g.ints(&[axis]), self.g.ints(&[step]));
        self.g.node("Slice", &[x, &s, &e, &a, &st], vec![])
    }

    /// `Reshape` to the first output's shape, with the batch dim left for ONNX to infer.
    fn reshape_to_out(&mut self, x: &In) -> Result<()> {
        let target = self.outs[0].1.dims.to_vec();
        let bd = self.reshape_bd(x, &target)?;
        self.out_bd[0] = bd;
        let mut t = target;
        if let Some(b) = bd {
            t[b.dim] = -1;
        }
        let shape = self.g.ints(&t);
        self.emit("Reshape", &[&x.name, &shape], vec![]);
        Ok(())
    }

    /// Where a reshape of `x` into `target` puts the batch: the output dim
    /// that starts at the same flat offset as the input's batch dim and holds
    /// a multiple of it (the batch is the outer factor of its dim).
    fn reshape_bd(&self, x: &In, target: &[i64]) -> Result<Option<Bd>> {
        let (Some(bd), Some(b)) = (x.bd, self.batch) else { return Ok(None) };
        let before: i64 = x.meta.dims[..bd.dim].iter().product();
        let mut prefix = 1i64;
        for (q, &d) in target.iter().enumerate() {
            if prefix == before && d % b == 0 && d >= b {
                return Ok(Some(Bd { dim: q, coeff: d / b }));
            }
            prefix *= d;
        }
        unsupported(self.op, "the reshape splits the dynamic batch dim across dims; export with a static batch")
    }

    fn perm_bd(&mut self, x: &In, perm: &[usize]) {
        self.out_bd[0] = x.bd.and_then(|b| perm.iter().position(|&p| p == b.dim).map(|dim| Bd { dim, ..b }));
    }

    fn no_batch_axis(&self, x: &In, axis: usize, what: &str) -> Result<()> {
        if self.dynamic(x) && x.bd.map(|b| b.dim) == Some(axis) {
            return unsupported(self.op, &format!("{what} along the dynamic batch dim; export with a static batch"));
        }
        Ok(())
    }

    fn pair(&self, name: &str, default: i64) -> Vec<i64> {
        match self.ints(name) {
            Some(v) if v.len() == 1 => vec![v[0], v[0]],
            Some(v) if !v.is_empty() => v,
            _ => vec![default, default],
        }
    }
}

/// The float value of the largest finite epsilon PyTorch's `rms_norm` uses by default.
fn finfo_eps(d: DType) -> f64 {
    match d {
        DType::F64 => f64::EPSILON,
        DType::F16 => 0.000_976_562_5,
        DType::BF16 => 0.007_812_5,
        _ => f64::from(f32::EPSILON),
    }
}

/// A 1-element tensor attribute (`ConstantOfShape`'s `value`).
fn value_attr(v: f64, dtype: DType, g: &mut G) -> AttributeProto {
    let name = g.scalar(v, dtype);
    let t: TensorProto = g.inits.pop().expect("the scalar just added");
    debug_assert_eq!(t.name, name);
    AttributeProto {
        name: "value".into(),
        r#type: crate::onnx::proto::attr_type::TENSOR,
        t: Some(TensorProto { dims: vec![1], name: String::new(), ..t }),
        ..Default::default()
    }
}

pub fn node(g: &mut G, tr: &Trace, node: &Node, vname: &HashMap<usize, String>, bds: &mut HashMap<usize, Bd>, batch: Option<i64>) -> Result<()> {
    let ins: Vec<Option<In>> = node
        .inputs
        .iter()
        .map(|i| i.map(|v| In { name: vname[&v].clone(), meta: tr.values[v].meta.clone(), bd: bds.get(&v).copied() }))
        .collect();
    let outs: Vec<(String, Meta)> = node.outputs.iter().map(|&o| (vname[&o].clone(), tr.values[o].meta.clone())).collect();
    // The default batch rule: the first batched input's dim, right-aligned to the output's rank.
    let default_bd = ins.iter().flatten().find_map(|i| i.bd.map(|b| (b, i.rank())));
    let out_bd = outs
        .iter()
        .map(|(_, m)| {
            let (b, r) = default_bd?;
            let r_out = m.dims.len();
            if r_out == r {
                Some(b)
            } else {
                (b.dim + r_out).checked_sub(r).map(|dim| Bd { dim, ..b })
            }
        })
        .collect();
    let mut l = L { g, node, op: node.name(), ins, outs, batch, out_bd };
    lower(&mut l)?;
    // Keep a batch dim only where the traced shape agrees with it.
    for (k, &o) in node.outputs.iter().enumerate() {
        match (l.out_bd[k], batch) {
            (Some(b), Some(n)) if l.outs[k].1.dims.get(b.dim) == Some(&(b.coeff * n)) => {
                bds.insert(o, b);
            }
            _ => {}
        }
    }
    Ok(())
}

fn lower(l: &mut L) -> Result<()> {
    let op = l.op;
    let dt = l.out_dtype();
    match &l.node.kind {
        Kind::Seed { args, ints, .. } => return seed(l, args.clone(), ints.clone()),
        Kind::Opaque(what) => return unsupported(what, "has no ONNX form"),
        Kind::Lost(why) => crate::bail!(E_INVALID_ARG, "the trace is incomplete: {why}"),
        Kind::Table { .. } => {}
    }
    let unary = |l: &mut L, onnx: &str| -> Result<()> {
        let x = l.input(0)?;
        let x = l.cast(&x, dt);
        l.emit(onnx, &[&x], vec![]);
        Ok(())
    };
    match op {
        "add" | "sub" | "add_" | "sub_" => {
            let a = l.operand("self", dt)?;
            let mut b = l.operand("other", dt)?;
            let alpha = l.float("alpha").unwrap_or(1.0);
            if alpha != 1.0 {
                let c = l.g.scalar(alpha, dt);
                b = l.g.node("Mul", &[&b, &c], vec![]);
            }
            l.emit(if op.starts_with("add") { "Add" } else { "Sub" }, &[&a, &b], vec![]);
        }
        "mul" | "mul_" | "div" | "div_" => {
            if matches!(l.arg("rounding_mode"), Some(Value::Str(_))) {
                return unsupported(op, "div with a rounding_mode has no lowering");
            }
            let a = l.operand("self", dt)?;
            let b = l.operand("other", dt)?;
            l.emit(if op.starts_with("mul") { "Mul" } else { "Div" }, &[&a, &b], vec![]);
        }
        "pow" => {
            let a = l.operand("self", dt)?;
            let b = l.operand("exponent", dt)?;
            l.emit("Pow", &[&a, &b], vec![]);
        }
        "maximum" | "minimum" => {
            let a = l.operand("self", dt)?;
            let b = l.operand("other", dt)?;
            l.emit(if op == "maximum" { "Max" } else { "Min" }, &[&a, &b], vec![]);
        }
        "eq" | "ne" | "lt" | "le" | "gt" | "ge" => {
            let s = l.t("self").expect("a comparison's self is a tensor");
            // The dtype the operands meet in: core's promotion, as the op ran.
            let c = match (l.t("other"), l.arg("other")) {
                (Some(o), _) => crate::vocab::promote(s.meta.dtype, s.rank() > 0, o.meta.dtype, o.rank() > 0),
                (None, Some(Value::Scalar(v))) => crate::vocab::promote_scalar(s.meta.dtype, *v),
                _ => s.meta.dtype,
            };
            let a = l.operand("self", c)?;
            let b = l.operand("other", c)?;
            let onnx = match op {
                "eq" | "ne" => "Equal",
                "lt" => "Less",
                "le" => "LessOrEqual",
                "gt" => "Greater",
                _ => "GreaterOrEqual",
            };
            if op == "ne" {
                let e = l.g.node("Equal", &[&a, &b], vec![]);
                l.emit("Not", &[&e], vec![]);
            } else {
                l.emit(onnx, &[&a, &b], vec![]);
            }
        }
        "where" => {
            let c = l.t("condition").expect("where's condition is a tensor");
            let cond = l.cast(&c, DType::Bool);
            let a = l.operand("self", dt)?;
            let b = l.operand("other", dt)?;
            l.emit("Where", &[&cond, &a, &b], vec![]);
        }
        "masked_fill" | "masked_fill_" => {
            let m = l.t("mask").expect("masked_fill's mask is a tensor");
            let x = l.operand("self", dt)?;
            let v = l.operand("value", dt)?;
            l.emit("Where", &[&m.name, &v, &x], vec![]);
        }
        "exp" => unary(l, "Exp")?,
        "log" => unary(l, "Log")?,
        "sqrt" => unary(l, "Sqrt")?,
        "reciprocal" => unary(l, "Reciprocal")?,
        "sin" => unary(l, "Sin")?,
        "cos" => unary(l, "Cos")?,
        "tan" => unary(l, "Tan")?,
        "asin" => unary(l, "Asin")?,
        "acos" => unary(l, "Acos")?,
        "atan" => unary(l, "Atan")?,
        "sinh" => unary(l, "Sinh")?,
        "cosh" => unary(l, "Cosh")?,
        "erf" => unary(l, "Erf")?,
        "sigmoid" => unary(l, "Sigmoid")?,
        "tanh" => unary(l, "Tanh")?,
        "abs" => unary(l, "Abs")?,
        "neg" => unary(l, "Neg")?,
        "sign" => unary(l, "Sign")?,
        "floor" => unary(l, "Floor")?,
        "ceil" => unary(l, "Ceil")?,
        "relu" | "relu_" => unary(l, "Relu")?,
        "round" if l.arg("decimals").is_none() => unary(l, "Round")?,
        "rsqrt" => {
            let x = l.input(0)?;
            let x = l.cast(&x, dt);
            let s = l.g.node("Sqrt", &[&x], vec![]);
            l.emit("Reciprocal", &[&s], vec![]);
        }
        "log2" | "log10" => {
            let x = l.input(0)?;
            let x = l.cast(&x, dt);
            let lg = l.g.node("Log", &[&x], vec![]);
            let c = l.g.scalar(if op == "log2" { std::f64::consts::LN_2 } else { std::f64::consts::LN_10 }, dt);
            l.emit("Div", &[&lg, &c], vec![]);
        }
        "square" => {
            let x = l.input(0)?;
            l.emit("Mul", &[&x.name, &x.name], vec![]);
        }
        "silu" => {
            let x = l.input(0)?;
            let s = l.g.node("Sigmoid", &[&x.name], vec![]);
            l.emit("Mul", &[&x.name, &s], vec![]);
        }
        "gelu" => {
            let x = l.input(0)?;
            let half = l.g.scalar(0.5, dt);
            let one = l.g.scalar(1.0, dt);
            let inner = if matches!(l.arg("approximate"), Some(Value::Str(s)) if s == "tanh") {
                // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
                let three = l.g.scalar(3.0, dt);
                let cube = l.g.node("Pow", &[&x.name, &three], vec![]);
                let k = l.g.scalar(0.044715, dt);
                let kc = l.g.node("Mul", &[&cube, &k], vec![]);
                let s = l.g.node("Add", &[&x.name, &kc], vec![]);
                let c = l.g.scalar((2.0 / std::f64::consts::PI).sqrt(), dt);
                let a = l.g.node("Mul", &[&s, &c], vec![]);
                l.g.node("Tanh", &[&a], vec![])
            } else {
                let c = l.g.scalar(std::f64::consts::FRAC_1_SQRT_2, dt);
                let a = l.g.node("Mul", &[&x.name, &c], vec![]);
                l.g.node("Erf", &[&a], vec![])
            };
            let p = l.g.node("Add", &[&inner, &one], vec![]);
            let hx = l.g.node("Mul", &[&x.name, &half], vec![]);
            l.emit("Mul", &[&hx, &p], vec![]);
        }
        "leaky_relu" => {
            let x = l.input(0)?;
            let a = l.float("negative_slope").unwrap_or(0.01);
            l.emit("LeakyRelu", &[&x.name], vec![attr_f("alpha", a)]);
        }
        "elu" if l.float("scale") == Some(1.0) && l.float("input_scale") == Some(1.0) => {
            let x = l.input(0)?;
            let a = l.float("alpha").unwrap_or(1.0);
            l.emit("Elu", &[&x.name], vec![attr_f("alpha", a)]);
        }
        "softplus" => {
            let x = l.input(0)?;
            let (beta, thr) = (l.float("beta").unwrap_or(1.0), l.float("threshold").unwrap_or(20.0));
            let b = l.g.scalar(beta, dt);
            let bx = l.g.node("Mul", &[&x.name, &b], vec![]);
            let sp = l.g.node("Softplus", &[&bx], vec![]);
            let y = l.g.node("Div", &[&sp, &b], vec![]);
            let t = l.g.scalar(thr, dt);
            let big = l.g.node("Greater", &[&bx, &t], vec![]);
            l.emit("Where", &[&big, &x.name, &y], vec![]);
        }
        "hardtanh" | "clamp" => {
            let x = l.input(0)?;
            let (lo_name, hi_name) = if op == "hardtanh" { ("min_val", "max_val") } else { ("min", "max") };
            let bound = |name: &str, l: &mut L| -> Result<String> {
                if let Some(t) = l.t(name) {
                    return Ok(l.cast(&t, dt));
                }
                match l.arg(name) {
                    Some(Value::Scalar(s)) => Ok(l.g.scalar(s.to_f64(), dt)),
                    _ => Ok(String::new()),
                }
            };
            let lo = bound(lo_name, l)?;
            let hi = bound(hi_name, l)?;
            let x = l.cast(&x, dt);
            if l.t(lo_name).is_some() || l.t(hi_name).is_some() {
                // Tensor bounds broadcast: Max then Min, as clamp does.
                let a = if lo.is_empty() { x } else { l.g.node("Max", &[&x, &lo], vec![]) };
                if hi.is_empty() {
                    l.alias(&a);
                } else {
                    l.emit("Min", &[&a, &hi], vec![]);
                }
            } else {
                l.emit("Clip", &[&x, &lo, &hi], vec![]);
            }
        }
        "dropout" => {
            let x = l.input(0)?;
            if l.flag("train") || l.flag("training") {
                if l.float("p").unwrap_or(0.5) != 0.0 {
                    return unsupported(op, "dropout in training mode is random: trace the model in eval mode (train=False)");
                }
            }
            l.alias(&x.name);
        }
        "contiguous" | "clone" | "detach" | "alias" => {
            let x = l.input(0)?;
            l.alias(&x.name);
        }
        "softmax" | "log_softmax" => {
            let x = l.input(0)?;
            let axis = norm(l.int("dim"), x.rank()) as i64;
            let xc = l.cast(&x, dt);
            let onnx = if op == "softmax" { "Softmax" } else { "LogSoftmax" };
            if x.rank() == 0 {
                // ONNX wants a dim: a 0-d tensor as [1] and back.
                let u = l.unsqueeze(&xc, &[0]);
                let y = l.g.node(onnx, &[&u], vec![attr_i("axis", 0)]);
                let a = l.g.ints(&[0]);
                l.emit("Squeeze", &[&y, &a], vec![]);
            } else {
                l.emit(onnx, &[&xc], vec![attr_i("axis", axis)]);
            }
        }
        "mean" | "sum" => {
            let x = l.input(0)?;
            let xc = l.cast(&x, dt);
            let keep = l.flag("keepdim");
            let mut axes: Option<Vec<i64>> = l.ints("dim").filter(|v| !v.is_empty()).map(|v| v.iter().map(|&d| norm(d, x.rank()) as i64).collect());
            if let Some(a) = axes.as_mut() {
                a.sort_unstable();
                a.dedup();
            }
            if x.rank() == 0 {
                // A 0-d tensor's sum or mean over its dim 0 is itself.
                l.alias(&xc);
                return Ok(());
            }
            // The mean as sum / count: ONNX's ReduceMean of nothing is 0, PyTorch's NaN.
            let r = match &axes {
                Some(a) => l.reduce("ReduceSum", &xc, Some(a), keep),
                None => l.reduce("ReduceSum", &xc, None, false),
            };
            if op == "mean" {
                let n: i64 = match &axes {
                    Some(a) => a.iter().map(|&d| x.meta.dims[d as usize]).product(),
                    None => x.meta.dims.iter().product(),
                };
                let c = l.g.scalar(n as f64, dt);
                l.emit("Div", &[&r, &c], vec![]);
            } else {
                l.alias(&r);
            }
            l.out_bd[0] = match (&axes, x.bd) {
                (Some(a), Some(b)) if !a.contains(&(b.dim as i64)) => {
                    let dim = if keep { b.dim } else { b.dim - a.iter().filter(|&&d| (d as usize) < b.dim).count() };
                    Some(Bd { dim, ..b })
                }
                _ => None,
            };
        }
        "matmul" | "mm" | "bmm" => {
            let a = l.input(0)?;
            let b = l.input(1)?;
            l.emit("MatMul", &[&a.name, &b.name], vec![]);
            if b.bd.is_some() && l.dynamic(&b) && b.bd.map(|x| x.dim) >= Some(b.rank().saturating_sub(2)) {
                return unsupported(op, "the dynamic batch is in the second operand's matrix dims; export with a static batch");
            }
        }
        "linear" => {
            let x = l.input(0)?;
            let w = l.t("weight").expect("linear's weight is a tensor");
            let wt = if w.rank() == 2 { l.g.node("Transpose", &[&w.name], vec![attr_ints("perm", &[1, 0])]) } else { w.name.clone() };
            let b = l.t("bias").map(|b| b.name);
            l.emit_then("MatMul", &[&x.name, &wt], "Add", b.as_deref());
        }
        "embedding" => {
            let ids = l.t("input").expect("embedding's ids are a tensor");
            let w = l.t("weight").expect("embedding's weight is a tensor");
            l.emit("Gather", &[&w.name, &ids.name], vec![attr_i("axis", 0)]);
            l.out_bd[0] = ids.bd;
        }
        "index_select" | "gather" if l.input(0)?.rank() == 0 => {
            return unsupported(op, "a 0-d input has no ONNX form (Gather needs a dim)");
        }
        "index_select" => {
            let x = l.input(0)?;
            let idx = l.t("index").expect("a tensor index");
            let axis = norm(l.int("dim"), x.rank());
            l.no_batch_axis(&x, axis, "index_select")?;
            l.emit("Gather", &[&x.name, &idx.name], vec![attr_i("axis", axis as i64)]);
        }
        "gather" => {
            let x = l.input(0)?;
            let idx = l.t("index").expect("a tensor index");
            let axis = norm(l.int("dim"), x.rank());
            l.emit("GatherElements", &[&x.name, &idx.name], vec![attr_i("axis", axis as i64)]);
            l.out_bd[0] = idx.bd;
        }
        "layer_norm" => {
            let x = l.input(0)?;
            let k = l.ints("normalized_shape").unwrap_or_default();
            let scale = match l.t("weight") {
                Some(w) => w.name,
                None => {
                    let shape = l.g.ints(&k);
                    let v = value_attr(1.0, dt, l.g);
                    l.g.node("ConstantOfShape", &[&shape], vec![v])
                }
            };
            let mut ins = vec![x.name.clone(), scale];
            if let Some(b) = l.t("bias") {
                ins.push(b.name);
            }
            let eps = l.float("eps").unwrap_or(1e-5);
            let refs: Vec<&str> = ins.iter().map(String::as_str).collect();
            l.emit("LayerNormalization", &refs, vec![attr_i("axis", -(k.len() as i64)), attr_f("epsilon", eps)]);
        }
        "rms_norm" => {
            let x = l.input(0)?;
            let k = l.ints("normalized_shape").unwrap_or_default().len() as i64;
            let axes: Vec<i64> = (x.rank() as i64 - k..x.rank() as i64).collect();
            let eps = l.float("eps").unwrap_or_else(|| finfo_eps(x.meta.dtype));
            let sq = l.g.node("Mul", &[&x.name, &x.name], vec![]);
            let ms = l.reduce("ReduceMean", &sq, Some(&axes), true);
            let e = l.g.scalar(eps, dt);
            let s = l.g.node("Add", &[&ms, &e], vec![]);
            let r = l.g.node("Sqrt", &[&s], vec![]);
            let inv = l.g.node("Reciprocal", &[&r], vec![]);
            let w = l.t("weight").map(|w| w.name);
            l.emit_then("Mul", &[&x.name, &inv], "Mul", w.as_deref());
        }
        "batch_norm" => {
            let x = l.input(0)?;
            if l.flag("training") {
                return unsupported(op, "batch_norm in training mode uses the batch's statistics: trace the model in eval mode (training=False)");
            }
            let (Some(mean), Some(var)) = (l.t("running_mean"), l.t("running_var")) else {
                return unsupported(op, "batch_norm in eval mode needs running_mean and running_var");
            };
            let c = x.meta.dims.get(1).copied().unwrap_or(1);
            let fill = |l: &mut L, name: &str, v: f64| -> String {
                match l.t(name) {
                    Some(t) => t.name,
                    None => {
                        let shape = l.g.ints(&[c]);
                        let a = value_attr(v, dt, l.g);
                        l.g.node("ConstantOfShape", &[&shape], vec![a])
                    }
                }
            };
            let scale = fill(l, "weight", 1.0);
            let bias = fill(l, "bias", 0.0);
            let eps = l.float("eps").unwrap_or(1e-5);
            l.emit("BatchNormalization", &[&x.name, &scale, &bias, &mean.name, &var.name], vec![attr_f("epsilon", eps)]);
        }
        "conv1d" | "conv2d" | "conv_transpose2d" => {
            let x = l.input(0)?;
            let w = l.t("weight").expect("a conv's weight is a tensor");
            let n = w.rank() - 2;
            // An unbatched input ([C, ...]): ONNX's Conv wants the batch dim.
            let unbatched = x.rank() == n + 1;
            let fit = |v: Vec<i64>| if v.len() == 1 && n > 1 { vec![v[0]; n] } else { v };
            let stride = fit(l.ints("stride").unwrap_or_else(|| vec![1; n]));
            let dilation = fit(l.ints("dilation").unwrap_or_else(|| vec![1; n]));
            let groups = l.int("groups").max(1);
            let pads: Vec<i64> = match l.arg("padding") {
                Some(Value::Str(s)) if s == "valid" => vec![0; 2 * n],
                Some(Value::Str(_)) => {
                    // "same": PyTorch puts the odd one of the total padding after.
                    let k = &w.meta.dims[2..];
                    let total: Vec<i64> = (0..n).map(|i| dilation[i] * (k[i] - 1)).collect();
                    total.iter().map(|t| t / 2).chain(total.iter().map(|t| t - t / 2)).collect()
                }
                _ => {
                    let p = fit(l.ints("padding").unwrap_or_else(|| vec![0; n]));
                    p.iter().chain(p.iter()).copied().collect()
                }
            };
            let xin = if unbatched { l.unsqueeze(&x.name, &[0]) } else { x.name.clone() };
            let mut ins = vec![xin, w.name.clone()];
            if let Some(b) = l.t("bias") {
                ins.push(b.name);
            }
            let mut attrs = vec![attr_ints("strides", &stride), attr_ints("pads", &pads), attr_ints("dilations", &dilation), attr_i("group", groups)];
            let onnx = if op == "conv_transpose2d" {
                attrs.push(attr_ints("output_padding", &fit(l.ints("output_padding").unwrap_or_else(|| vec![0; n]))));
                "ConvTranspose"
            } else {
                "Conv"
            };
            let refs: Vec<&str> = ins.iter().map(String::as_str).collect();
            if unbatched {
                let y = l.g.node(onnx, &refs, attrs);
                let a = l.g.ints(&[0]);
                l.emit("Squeeze", &[&y, &a], vec![]);
            } else {
                l.emit(onnx, &refs, attrs);
            }
        }
        "max_pool2d" | "avg_pool2d" | "adaptive_avg_pool2d" if l.input(0)?.rank() == 3 => {
            return unsupported(op, "an unbatched [C, H, W] input is lowered only for the convolutions; add the batch dim");
        }
        "max_pool2d" | "avg_pool2d" => {
            let x = l.input(0)?;
            let k = l.pair("kernel_size", 1);
            let s = match l.ints("stride") {
                Some(v) if !v.is_empty() => l.pair("stride", 1),
                _ => k.clone(),
            };
            let p = l.pair("padding", 0);
            let pads: Vec<i64> = p.iter().chain(p.iter()).copied().collect();
            let mut attrs = vec![attr_ints("kernel_shape", &k), attr_ints("strides", &s), attr_ints("pads", &pads), attr_i("ceil_mode", i64::from(l.flag("ceil_mode")))];
            if op == "max_pool2d" {
                attrs.push(attr_ints("dilations", &l.pair("dilation", 1)));
                l.emit("MaxPool", &[&x.name], attrs);
            } else {
                if !matches!(l.arg("divisor_override"), None | Some(Value::None)) {
                    return unsupported(op, "avg_pool2d with a divisor_override has no lowering");
                }
                attrs.push(attr_i("count_include_pad", i64::from(!matches!(l.arg("count_include_pad"), Some(Value::Bool(false))))));
                l.emit("AveragePool", &[&x.name], attrs);
            }
        }
        "adaptive_avg_pool2d" => {
            let x = l.input(0)?;
            let o = l.pair("output_size", 1);
            let hw = &x.meta.dims[x.rank() - 2..];
            if o == [1, 1] {
                l.emit("GlobalAveragePool", &[&x.name], vec![]);
            } else if hw[0] % o[0] == 0 && hw[1] % o[1] == 0 {
                let k = [hw[0] / o[0], hw[1] / o[1]];
                l.emit("AveragePool", &[&x.name], vec![attr_ints("kernel_shape", &k), attr_ints("strides", &k)]);
            } else {
                return unsupported(op, "adaptive_avg_pool2d to a size that does not divide the input's has no lowering");
            }
        }
        "scaled_dot_product_attention" => sdpa(l)?,
        "reshape" | "view" | "flatten" | "unflatten" | "_unsafe_view" => {
            let x = l.input(0)?;
            l.reshape_to_out(&x)?;
        }
        "squeeze" | "transpose" | "permute" | "t" | "movedim" | "swapaxes" if l.input(0)?.rank() == 0 => {
            let x = l.input(0)?;
            l.alias(&x.name);
        }
        "transpose" | "permute" | "t" | "movedim" | "swapaxes" => {
            let x = l.input(0)?;
            let r = x.rank();
            let mut perm: Vec<usize> = (0..r).collect();
            match op {
                "permute" => perm = l.ints("dims").unwrap_or_default().iter().map(|&d| norm(d, r)).collect(),
                "t" if r < 2 => {}
                "t" => perm.swap(0, 1),
                "movedim" => {
                    // torch.movedim: each source dim to its destination, the
                    // other dims keep their order in the places left.
                    let src: Vec<usize> = l.ints("source").unwrap_or_default().iter().map(|&d| norm(d, r)).collect();
                    let dst: Vec<usize> = l.ints("destination").unwrap_or_default().iter().map(|&d| norm(d, r)).collect();
                    let mut placed = vec![None; r];
                    for (&s, &d) in src.iter().zip(&dst) {
                        placed[d] = Some(s);
                    }
                    let mut rest = (0..r).filter(|i| !src.contains(i));
                    perm = placed.into_iter().map(|p| p.or_else(|| rest.next()).unwrap_or(0)).collect();
                }
                _ => {
                    let (a, b) = match op {
                        "swapaxes" => (l.int("axis0"), l.int("axis1")),
                        _ => (l.int("dim0"), l.int("dim1")),
                    };
                    perm.swap(norm(a, r), norm(b, r));
                }
            }
            let p: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
            l.emit("Transpose", &[&x.name], vec![attr_ints("perm", &p)]);
            l.perm_bd(&x, &perm);
        }
        "unsqueeze" => {
            let x = l.input(0)?;
            let d = norm(l.int("dim"), x.rank() + 1);
            let u = l.unsqueeze(&x.name, &[d as i64]);
            l.alias(&u);
            l.out_bd[0] = x.bd.map(|b| Bd { dim: if b.dim >= d { b.dim + 1 } else { b.dim }, ..b });
        }
        "squeeze" => {
            let x = l.input(0)?;
            let r = x.rank();
            let dims: Vec<usize> = match l.ints("dim") {
                Some(v) => v.iter().map(|&d| norm(d, r)).collect(),
                None => (0..r).collect(),
            };
            let axes: Vec<i64> = dims.iter().filter(|&&d| x.meta.dims[d] == 1).map(|&d| d as i64).collect();
            if axes.is_empty() {
                l.alias(&x.name);
            } else {
                let a = l.g.ints(&axes);
                l.emit("Squeeze", &[&x.name, &a], vec![]);
            }
            l.out_bd[0] = x.bd.map(|b| Bd { dim: b.dim - axes.iter().filter(|&&a| (a as usize) < b.dim).count(), ..b });
        }
        "narrow" => {
            let x = l.input(0)?;
            let axis = norm(l.int("dim"), x.rank());
            let size = x.meta.dims[axis];
            let start = l.int("start");
            let start = if start < 0 { start + size } else { start };
            l.no_batch_axis(&x, axis, "narrow")?;
            let s = l.slice(&x.name, axis as i64, start, start + l.int("length"), 1);
            l.alias(&s);
        }
        "select" => {
            let x = l.input(0)?;
            let axis = norm(l.int("dim"), x.rank());
            l.no_batch_axis(&x, axis, "select")?;
            let i = l.int("index");
            let i = if i < 0 { i + x.meta.dims[axis] } else { i };
            let idx = l.g.scalar(i as f64, DType::I64);
            l.emit("Gather", &[&x.name, &idx], vec![attr_i("axis", axis as i64)]);
            l.out_bd[0] = x.bd.map(|b| Bd { dim: if b.dim > axis { b.dim - 1 } else { b.dim }, ..b });
        }
        "cat" | "stack" => {
            let Some(Value::Tensors(ts)) = l.arg("tensors").cloned() else { return unsupported(op, "no tensor list") };
            let mut parts: Vec<In> = ts.iter().flatten().filter_map(|&k| l.ins.get(k).cloned().flatten()).collect();
            if op == "cat" && parts.iter().any(|p| p.meta.dims[..] != [0]) {
                // torch.cat skips a 1-d empty tensor whatever the others' rank.
                parts.retain(|p| p.meta.dims[..] != [0]);
            }
            let Some(first) = parts.first().cloned() else { return unsupported(op, "an empty tensor list") };
            let rank = if op == "stack" { first.rank() + 1 } else { first.rank() };
            let axis = norm(l.int("dim"), rank);
            let mut names = Vec::new();
            for p in &parts {
                if op == "cat" {
                    l.no_batch_axis(p, axis, "cat")?;
                }
                let c = l.cast(p, dt);
                names.push(if op == "stack" { l.unsqueeze(&c, &[axis as i64]) } else { c });
            }
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            l.emit("Concat", &refs, vec![attr_i("axis", axis as i64)]);
            l.out_bd[0] = first.bd.map(|b| Bd { dim: if op == "stack" && b.dim >= axis { b.dim + 1 } else { b.dim }, ..b });
        }
        "roll" => {
            let x = l.input(0)?;
            let (shifts, dims) = (l.ints("shifts").unwrap_or_default(), l.ints("dims").unwrap_or_default());
            if dims.is_empty() || dims.len() != shifts.len() {
                return unsupported(op, "roll without dims (over the flattened tensor) has no lowering");
            }
            let mut cur = x.name.clone();
            for (s, d) in shifts.iter().zip(&dims) {
                let axis = norm(*d, x.rank());
                l.no_batch_axis(&x, axis, "roll")?;
                let n = x.meta.dims[axis];
                let s = s.rem_euclid(n.max(1));
                if s == 0 {
                    continue;
                }
                let tail = l.slice(&cur, axis as i64, n - s, n, 1);
                let head = l.slice(&cur, axis as i64, 0, n - s, 1);
                cur = l.g.node("Concat", &[&tail, &head], vec![attr_i("axis", axis as i64)]);
            }
            l.alias(&cur);
        }
        "expand" | "broadcast_to" | "expand_as" => {
            let x = l.input(0)?;
            let target = l.outs[0].1.dims.to_vec();
            let r = target.len();
            let mut shape = target.clone();
            // Dims the input already has at full size stay: 1 lets Expand keep them (the batch's, too).
            for (i, &d) in x.meta.dims.iter().enumerate() {
                let o = i + r - x.rank();
                if d == target[o] {
                    shape[o] = 1;
                }
            }
            if let (Some(_), Some(bd)) = (l.batch, l.out_bd[0]) {
                if shape[bd.dim] != 1 {
                    return unsupported(op, "the expansion makes the dynamic batch dim; export with a static batch");
                }
            }
            let s = l.g.ints(&shape);
            l.emit("Expand", &[&x.name, &s], vec![]);
        }
        "split" | "chunk" | "unbind" | "split_with_sizes" => {
            let x = l.input(0)?;
            let axis = norm(l.int("dim"), x.rank());
            l.no_batch_axis(&x, axis, op)?;
            let sizes: Vec<i64> = l.outs.iter().map(|(_, m)| if op == "unbind" { 1 } else { m.dims[axis] }).collect();
            let sz = l.g.ints(&sizes);
            let names: Vec<String> = l.outs.iter().map(|(n, _)| n.clone()).collect();
            if op == "unbind" {
                let parts: Vec<String> = names.iter().map(|_| l.g.fresh()).collect();
                let prefs: Vec<&str> = parts.iter().map(String::as_str).collect();
                l.g.node_to("Split", &[&x.name, &sz], &prefs, vec![attr_i("axis", axis as i64)]);
                let a = l.g.ints(&[axis as i64]);
                for (p, n) in parts.iter().zip(&names) {
                    l.g.node_to("Squeeze", &[p, &a], &[n], vec![]);
                }
            } else {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                l.g.node_to("Split", &[&x.name, &sz], &refs, vec![attr_i("axis", axis as i64)]);
            }
        }
        "tril" | "triu" => {
            let x = l.input(0)?;
            let k = l.g.scalar(l.int("diagonal") as f64, DType::I64);
            l.emit("Trilu", &[&x.name, &k], vec![attr_i("upper", i64::from(op == "triu"))]);
        }
        "zeros_like" | "ones_like" | "full_like" => {
            let x = l.input(0)?;
            let v = match op {
                "zeros_like" => 0.0,
                "ones_like" => 1.0,
                _ => l.float("fill_value").unwrap_or(0.0),
            };
            let s = l.g.node("Shape", &[&x.name], vec![]);
            let a = value_attr(v, dt, l.g);
            l.emit("ConstantOfShape", &[&s], vec![a]);
        }
        "zeros" | "ones" | "full" => {
            let v = match op {
                "zeros" => 0.0,
                "ones" => 1.0,
                _ => l.float("fill_value").unwrap_or(0.0),
            };
            let dims = l.outs[0].1.dims.to_vec();
            let s = l.g.ints(&dims);
            let a = value_attr(v, dt, l.g);
            l.emit("ConstantOfShape", &[&s], vec![a]);
        }
        "arange" => {
            let start = l.float("start").unwrap_or(0.0);
            let end = l.float("end").unwrap_or(0.0);
            let step = l.float("step").unwrap_or(1.0);
            let (a, b, c) = (l.g.scalar(start, dt), l.g.scalar(end, dt), l.g.scalar(step, dt));
            l.emit("Range", &[&a, &b, &c], vec![]);
        }
        "to" | "_to_copy" | "type_as" => {
            let x = l.input(0)?;
            let c = l.cast(&x, dt);
            l.alias(&c);
        }
        _ => return more(l, op, dt),
    }
    Ok(())
}

/// The axes of a `dim` argument (`int[1]?`/`int?`), normalized and sorted; None: every dim.
fn axes_of(l: &L, x: &In) -> Option<Vec<i64>> {
    let mut a: Vec<i64> = l.ints("dim").filter(|v| !v.is_empty())?.iter().map(|&d| norm(d, x.rank()) as i64).collect();
    a.sort_unstable();
    a.dedup();
    Some(a)
}

/// The element count `axes` reduce (every element when None).
fn count(x: &In, axes: &Option<Vec<i64>>) -> i64 {
    match axes {
        Some(a) => a.iter().map(|&d| x.meta.dims.get(d as usize).copied().unwrap_or(1)).product(),
        None => x.meta.dims.iter().product(),
    }
}

/// The table's ops past the common ones: reductions, logic, activations,
/// the losses and the reorderings.
fn more(l: &mut L, op: &'static str, dt: DType) -> Result<()> {
    let compose = |l: &mut L, f: &dyn Fn(&mut G, &str) -> String| -> Result<()> {
        let x = l.input(0)?;
        let x = l.cast(&x, dt);
        let y = f(l.g, &x);
        l.alias(&y);
        Ok(())
    };
    match op {
        "logical_and" | "logical_or" | "logical_xor" => {
            let (a, b) = (l.input(0)?, l.input(1)?);
            let (a, b) = (l.cast(&a, DType::Bool), l.cast(&b, DType::Bool));
            let onnx = match op {
                "logical_and" => "And",
                "logical_or" => "Or",
                _ => "Xor",
            };
            l.emit(onnx, &[&a, &b], vec![]);
        }
        "logical_not" => {
            let a = l.input(0)?;
            let a = l.cast(&a, DType::Bool);
            l.emit("Not", &[&a], vec![]);
        }
        "isnan" | "isinf" | "isfinite" => {
            let x = l.input(0)?;
            if !is_float(x.meta.dtype) {
                // Integers are finite: a constant of the input's shape.
                let s = l.g.node("Shape", &[&x.name], vec![]);
                let a = value_attr(if op == "isfinite" { 1.0 } else { 0.0 }, DType::Bool, l.g);
                l.emit("ConstantOfShape", &[&s], vec![a]);
                return Ok(());
            }
            match op {
                "isnan" => l.emit("IsNaN", &[&x.name], vec![]),
                "isinf" => l.emit("IsInf", &[&x.name], vec![]),
                _ => {
                    let (n, i) = (l.g.node("IsNaN", &[&x.name], vec![]), l.g.node("IsInf", &[&x.name], vec![]));
                    let o = l.g.node("Or", &[&n, &i], vec![]);
                    l.emit("Not", &[&o], vec![]);
                }
            }
        }
        "amax" | "amin" | "prod" | "logsumexp" | "max" | "min" if l.input(0)?.rank() == 0 => {
            let x = l.input(0)?;
            if l.outs.len() == 2 {
                return unsupported(op, "a 0-d input's indices have no ONNX form here");
            }
            let c = l.cast(&x, dt);
            l.alias(&c);
        }
        "amax" | "amin" | "prod" | "logsumexp" => {
            let x = l.input(0)?;
            let xc = l.cast(&x, dt);
            let keep = l.flag("keepdim");
            let axes = axes_of(l, &x);
            let onnx = match op {
                "amax" => "ReduceMax",
                "amin" => "ReduceMin",
                "prod" => "ReduceProd",
                _ => "ReduceLogSumExp",
            };
            let r = l.reduce(onnx, &xc, axes.as_deref(), keep);
            l.alias(&r);
        }
        "max" | "min" => {
            let x = l.input(0)?;
            let (red, arg) = if op == "max" { ("ReduceMax", "ArgMax") } else { ("ReduceMin", "ArgMin") };
            if l.outs.len() == 1 {
                let r = l.reduce(red, &x.name, None, false);
                l.alias(&r);
                return Ok(());
            }
            let axis = norm(l.int("dim"), x.rank()) as i64;
            let keep = l.flag("keepdim");
            let v = l.reduce(red, &x.name, Some(&[axis]), keep);
            let (o0, o1) = (l.outs[0].0.clone(), l.outs[1].0.clone());
            l.g.node_to("Identity", &[&v], &[&o0], vec![]);
            l.g.node_to(arg, &[&x.name], &[&o1], vec![attr_i("axis", axis), attr_i("keepdims", i64::from(keep))]);
            l.out_bd = vec![None, None];
        }
        "argmax" | "argmin" => {
            let x = l.input(0)?;
            let onnx = if op == "argmax" { "ArgMax" } else { "ArgMin" };
            let keep = l.flag("keepdim");
            match l.arg("dim") {
                Some(Value::Int(d)) if x.rank() > 0 => {
                    let axis = norm(*d, x.rank()) as i64;
                    l.emit(onnx, &[&x.name], vec![attr_i("axis", axis), attr_i("keepdims", i64::from(keep))]);
                }
                _ => {
                    // Over the flattened tensor.
                    let s = l.g.ints(&[-1]);
                    let f = l.g.node("Reshape", &[&x.name, &s], vec![]);
                    let a = l.g.node(onnx, &[&f], vec![attr_i("axis", 0), attr_i("keepdims", 0)]);
                    let shape = l.outs[0].1.dims.to_vec();
                    let t = l.g.ints(&shape);
                    l.emit("Reshape", &[&a, &t], vec![]);
                }
            }
        }
        "all" | "any" => {
            let x = l.input(0)?;
            let b = l.cast(&x, DType::Bool);
            // any: some true (a sum of none is 0); all: no false.
            let b = if op == "all" { l.g.node("Not", &[&b], vec![]) } else { b };
            if matches!(l.arg("dim"), Some(Value::Ints(v)) if v.is_empty()) {
                // `dim=[]` reduces nothing (unlike amax's): the truth values themselves.
                let t = if op == "all" { l.g.node("Not", &[&b], vec![]) } else { b };
                l.alias(&t);
                return Ok(());
            }
            let i = l.g.node("Cast", &[&b], vec![attr_i("to", i64::from(onnx_dtype(DType::I64)))]);
            let axes = axes_of(l, &x).filter(|_| x.rank() > 0);
            let keep = l.flag("keepdim") && x.rank() > 0;
            let sum = if axes.is_none() && x.rank() == 0 { i } else { l.reduce("ReduceSum", &i, axes.as_deref(), keep) };
            let z = l.g.scalar(0.0, DType::I64);
            if op == "all" {
                l.emit("Equal", &[&sum, &z], vec![]);
            } else {
                l.emit("Greater", &[&sum, &z], vec![]);
            }
        }
        "var" | "std" => {
            let x = l.input(0)?;
            if x.rank() == 0 {
                return unsupported(op, "a 0-d input has no ONNX form here");
            }
            let axes = axes_of(l, &x);
            let all: Vec<i64> = (0..x.rank() as i64).collect();
            let ax = axes.clone().unwrap_or(all);
            let keep = l.flag("keepdim");
            let correction = match (l.arg("correction"), l.arg("unbiased")) {
                (Some(Value::Scalar(c)), _) => c.to_f64(),
                (_, Some(Value::Bool(false))) => 0.0,
                _ => 1.0,
            };
            let n = count(&x, &Some(ax.clone())) as f64;
            let s = l.reduce("ReduceSum", &x.name, Some(&ax), true);
            let nc = l.g.scalar(n, dt);
            let mean = l.g.node("Div", &[&s, &nc], vec![]);
            let d = l.g.node("Sub", &[&x.name, &mean], vec![]);
            let sq = l.g.node("Mul", &[&d, &d], vec![]);
            let ss = l.reduce("ReduceSum", &sq, Some(&ax), keep);
            let den = l.g.scalar((n - correction).max(0.0), dt);
            if op == "var" {
                l.emit("Div", &[&ss, &den], vec![]);
            } else {
                let v = l.g.node("Div", &[&ss, &den], vec![]);
                l.emit("Sqrt", &[&v], vec![]);
            }
        }
        "cumsum" => {
            let x = l.input(0)?;
            let xc = l.cast(&x, dt);
            if x.rank() == 0 {
                l.alias(&xc);
                return Ok(());
            }
            let a = l.g.scalar(norm(l.int("dim"), x.rank()) as f64, DType::I64);
            l.emit("CumSum", &[&xc, &a], vec![]);
        }
        "flip" => {
            let x = l.input(0)?;
            let dims: Vec<i64> = l.ints("dims").unwrap_or_default().iter().map(|&d| norm(d, x.rank()) as i64).collect();
            if x.rank() == 0 || dims.is_empty() {
                l.alias(&x.name);
                return Ok(());
            }
            for &d in &dims {
                l.no_batch_axis(&x, d as usize, "flip")?;
            }
            let (s, e, a, st) = (l.g.ints(&vec![-1; dims.len()]), l.g.ints(&vec![i64::MIN; dims.len()]), l.g.ints(&dims), l.g.ints(&vec![-1; dims.len()]));
            l.emit("Slice", &[&x.name, &s, &e, &a, &st], vec![]);
        }
        "repeat" | "tile" => {
            let x = l.input(0)?;
            let reps = l.ints(if op == "repeat" { "repeats" } else { "dims" }).unwrap_or_default();
            let r = x.rank().max(reps.len());
            let mut name = x.name.clone();
            if r > x.rank() {
                let axes: Vec<i64> = (0..(r - x.rank()) as i64).collect();
                name = l.unsqueeze(&name, &axes);
            }
            let mut full = vec![1i64; r - reps.len()];
            full.extend(&reps);
            if let (Some(b), Some(_)) = (x.bd, l.batch) {
                if full[b.dim + r - x.rank()] != 1 {
                    return unsupported(op, "a repeat along the dynamic batch dim; export with a static batch");
                }
            }
            let t = l.g.ints(&full);
            l.emit("Tile", &[&name, &t], vec![]);
        }
        "pad" => {
            let x = l.input(0)?;
            let p = l.ints("pad").unwrap_or_default();
            let r = x.rank();
            let mut begin = vec![0i64; r];
            let mut end = vec![0i64; r];
            for (i, pair) in p.chunks(2).enumerate() {
                let d = r - 1 - i;
                begin[d] = pair[0];
                end[d] = *pair.get(1).unwrap_or(&0);
            }
            let mode = match l.arg("mode") {
                Some(Value::Str(m)) => m.clone(),
                _ => "constant".into(),
            };
            let onnx_mode = match mode.as_str() {
                "constant" => "constant",
                "reflect" => "reflect",
                "replicate" => "edge",
                "circular" if l.g.opset >= 19 => "wrap",
                m => return unsupported(op, &format!("mode {m:?} has no ONNX form at opset {}", l.g.opset)),
            };
            let pads = l.g.ints(&[begin, end].concat());
            let mut ins = vec![x.name.clone(), pads];
            if onnx_mode == "constant" {
                let v = l.float("value").unwrap_or(0.0);
                ins.push(l.g.scalar(v, dt));
            }
            let refs: Vec<&str> = ins.iter().map(String::as_str).collect();
            l.emit("Pad", &refs, vec![crate::onnx::attr_s("mode", onnx_mode)]);
        }
        "one_hot" => {
            let x = l.input(0)?;
            let depth = *l.outs[0].1.dims.last().unwrap_or(&0);
            let d = l.g.scalar(depth as f64, DType::I64);
            let v = l.g.ints(&[0, 1]);
            if x.rank() == 0 {
                // OneHot wants indices of a dim: a 0-d index as [1] and back.
                let u = l.unsqueeze(&x.name, &[0]);
                let y = l.g.node("OneHot", &[&u, &d, &v], vec![attr_i("axis", -1)]);
                let a = l.g.ints(&[0]);
                l.emit("Squeeze", &[&y, &a], vec![]);
            } else {
                l.emit("OneHot", &[&x.name, &d, &v], vec![attr_i("axis", -1)]);
            }
        }
        "topk" | "sort" => {
            let x = l.input(0)?;
            if x.rank() == 0 {
                return unsupported(op, "a 0-d input has no ONNX form here");
            }
            let axis = norm(l.int("dim"), x.rank());
            l.no_batch_axis(&x, axis, op)?;
            let (k, largest) = if op == "topk" {
                (l.int("k"), !matches!(l.arg("largest"), Some(Value::Bool(false))))
            } else {
                (x.meta.dims[axis], l.flag("descending"))
            };
            let kk = l.g.ints(&[k]);
            let (o0, o1) = (l.outs[0].0.clone(), l.outs[1].0.clone());
            l.g.node_to("TopK", &[&x.name, &kk], &[&o0, &o1], vec![attr_i("axis", axis as i64), attr_i("largest", i64::from(largest)), attr_i("sorted", 1)]);
        }
        "einsum" => {
            let Some(Value::Str(eq)) = l.arg("equation").cloned() else { return unsupported(op, "no equation") };
            let Some(Value::Tensors(ts)) = l.arg("tensors").cloned() else { return unsupported(op, "no tensor list") };
            let parts: Vec<In> = ts.iter().flatten().filter_map(|&k| l.ins.get(k).cloned().flatten()).collect();
            let lhs = eq.split("->").next().unwrap_or("");
            let spans: Vec<usize> = lhs
                .split(',')
                .zip(&parts)
                .filter(|(sub, _)| sub.contains("..."))
                .map(|(sub, t)| t.rank().saturating_sub(sub.chars().filter(char::is_ascii_alphabetic).count()))
                .collect();
            if spans.windows(2).any(|w| w[0] != w[1]) {
                return unsupported(op, "an ellipsis that spans different ranks in different operands (broadcast) has no ONNX Einsum form");
            }
            let names: Vec<String> = parts.into_iter().map(|t| t.name).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            l.emit("Einsum", &refs, vec![crate::onnx::attr_s("equation", &eq.replace(' ', ""))]);
        }
        "hardsigmoid" => {
            let x = l.input(0)?;
            l.emit("HardSigmoid", &[&x.name], vec![attr_f("alpha", 1.0 / 6.0), attr_f("beta", 0.5)]);
        }
        "hardswish" => {
            let x = l.input(0)?;
            l.emit("HardSwish", &[&x.name], vec![]);
        }
        "selu" => {
            let x = l.input(0)?;
            l.emit("Selu", &[&x.name], vec![]);
        }
        "celu" => {
            let x = l.input(0)?;
            let a = l.float("alpha").unwrap_or(1.0);
            l.emit("Celu", &[&x.name], vec![attr_f("alpha", a)]);
        }
        "mish" => compose(l, &|g, x| {
            let sp = g.node("Softplus", &[x], vec![]);
            let t = g.node("Tanh", &[&sp], vec![]);
            g.node("Mul", &[x, &t], vec![])
        })?,
        "log_sigmoid" => compose(l, &|g, x| {
            let n = g.node("Neg", &[x], vec![]);
            let sp = g.node("Softplus", &[&n], vec![]);
            g.node("Neg", &[&sp], vec![])
        })?,
        "expm1" => compose(l, &|g, x| {
            let e = g.node("Exp", &[x], vec![]);
            let one = g.scalar(1.0, dt);
            g.node("Sub", &[&e, &one], vec![])
        })?,
        "log1p" => compose(l, &|g, x| {
            let one = g.scalar(1.0, dt);
            let s = g.node("Add", &[x, &one], vec![]);
            g.node("Log", &[&s], vec![])
        })?,
        "exp2" => compose(l, &|g, x| {
            let two = g.scalar(2.0, dt);
            g.node("Pow", &[&two, x], vec![])
        })?,
        "erfc" => compose(l, &|g, x| {
            let e = g.node("Erf", &[x], vec![]);
            let one = g.scalar(1.0, dt);
            g.node("Sub", &[&one, &e], vec![])
        })?,
        "trunc" if is_float(dt) => compose(l, &|g, x| {
            let a = g.node("Abs", &[x], vec![]);
            let f = g.node("Floor", &[&a], vec![]);
            let s = g.node("Sign", &[x], vec![]);
            g.node("Mul", &[&s, &f], vec![])
        })?,
        "trunc" => {
            let x = l.input(0)?;
            l.alias(&x.name);
        }
        "addcmul" | "addcdiv" => {
            let s = l.operand("self", dt)?;
            let a = l.operand("tensor1", dt)?;
            let b = l.operand("tensor2", dt)?;
            let p = l.g.node(if op == "addcmul" { "Mul" } else { "Div" }, &[&a, &b], vec![]);
            let v = l.float("value").unwrap_or(1.0);
            let p = if v == 1.0 {
                p
            } else {
                let c = l.g.scalar(v, dt);
                l.g.node("Mul", &[&p, &c], vec![])
            };
            l.emit("Add", &[&s, &p], vec![]);
        }
        "lerp" => {
            let s = l.operand("self", dt)?;
            let e = l.operand("end", dt)?;
            let w = l.operand("weight", dt)?;
            let d = l.g.node("Sub", &[&e, &s], vec![]);
            let m = l.g.node("Mul", &[&w, &d], vec![]);
            l.emit("Add", &[&s, &m], vec![]);
        }
        "fmod" => {
            let a = l.operand("self", dt)?;
            let b = l.operand("other", dt)?;
            l.emit("Mod", &[&a, &b], vec![attr_i("fmod", 1)]);
        }
        "mse_loss" | "l1_loss" => {
            let a = l.operand("input", dt)?;
            let b = l.operand("target", dt)?;
            let d = l.g.node("Sub", &[&a, &b], vec![]);
            let e = if op == "mse_loss" { l.g.node("Mul", &[&d, &d], vec![]) } else { l.g.node("Abs", &[&d], vec![]) };
            let reduction = match l.arg("reduction") {
                Some(Value::Str(r)) => r.clone(),
                _ => "mean".into(),
            };
            match reduction.as_str() {
                "none" => l.alias(&e),
                "sum" => {
                    let r = l.reduce("ReduceSum", &e, None, false);
                    l.alias(&r);
                }
                _ => {
                    let r = l.reduce("ReduceSum", &e, None, false);
                    let dims = |name: &str| l.t(name).map(|t| t.meta.dims.to_vec()).unwrap_or_default();
                    let n: i64 = crate::vocab::broadcast(&dims("input"), &dims("target")).unwrap_or_default().iter().product();
                    let c = l.g.scalar(n as f64, dt);
                    l.emit("Div", &[&r, &c], vec![]);
                }
            }
            l.out_bd[0] = None;
        }
        "eye" => {
            let dims = l.outs[0].1.dims.to_vec();
            let s = l.g.ints(&dims);
            let a = value_attr(0.0, dt, l.g);
            let z = l.g.node("ConstantOfShape", &[&s], vec![a]);
            l.emit("EyeLike", &[&z], vec![]);
        }
        "group_norm" => {
            let x = l.input(0)?;
            if x.rank() < 2 {
                return unsupported(op, "an input of fewer than 2 dims");
            }
            let g = l.int("num_groups");
            let eps = l.float("eps").unwrap_or(1e-5);
            // [N, C, *] -> [N, G, C/G * ...]: the statistics per group, then back.
            let per: i64 = x.meta.dims[1..].iter().product::<i64>() / g.max(1);
            let shape = l.g.ints(&[0, g, per]);
            let r = l.g.node("Reshape", &[&x.name, &shape], vec![]);
            let nc = l.g.scalar(per as f64, dt);
            let s = l.reduce("ReduceSum", &r, Some(&[2]), true);
            let mean = l.g.node("Div", &[&s, &nc], vec![]);
            let d = l.g.node("Sub", &[&r, &mean], vec![]);
            let sq = l.g.node("Mul", &[&d, &d], vec![]);
            let ss = l.reduce("ReduceSum", &sq, Some(&[2]), true);
            let var = l.g.node("Div", &[&ss, &nc], vec![]);
            let e = l.g.scalar(eps, dt);
            let ve = l.g.node("Add", &[&var, &e], vec![]);
            let sd = l.g.node("Sqrt", &[&ve], vec![]);
            let n = l.g.node("Div", &[&d, &sd], vec![]);
            let xs = l.g.node("Shape", &[&x.name], vec![]);
            let mut y = l.g.node("Reshape", &[&n, &xs], vec![]);
            // weight and bias per channel, as [C, 1, ...].
            let tail: Vec<i64> = (1..x.rank() as i64 - 1).collect();
            for (name, onnx) in [("weight", "Mul"), ("bias", "Add")] {
                if let Some(t) = l.t(name) {
                    let u = if tail.is_empty() { t.name.clone() } else { l.unsqueeze(&t.name, &tail) };
                    y = l.g.node(onnx, &[&y, &u], vec![]);
                }
            }
            l.alias(&y);
        }
        "scatter" => {
            let x = l.input(0)?;
            let idx = l.t("index").expect("scatter's index is a tensor");
            if x.rank() == 0 {
                return unsupported(op, "a 0-d input has no ONNX form here");
            }
            let axis = norm(l.int("dim"), x.rank()) as i64;
            let src = match l.t("src") {
                Some(s) => s.name,
                None => {
                    let v = l.float("value").unwrap_or(0.0);
                    let sh = l.g.node("Shape", &[&idx.name], vec![]);
                    let a = value_attr(v, dt, l.g);
                    l.g.node("ConstantOfShape", &[&sh], vec![a])
                }
            };
            // ScatterElements wants the updates of the index's shape.
            let sh = l.g.node("Shape", &[&idx.name], vec![]);
            let zeros = l.g.ints(&vec![0; idx.rank()]);
            let src = l.g.node("Slice", &[&src, &zeros, &sh], vec![]);
            let mut attrs = vec![attr_i("axis", axis)];
            match l.arg("reduce") {
                Some(Value::Str(r)) if r == "add" || r == "sum" => attrs.push(crate::onnx::attr_s("reduction", "add")),
                Some(Value::Str(r)) if r == "multiply" || r == "prod" => attrs.push(crate::onnx::attr_s("reduction", "mul")),
                Some(Value::Str(r)) => return unsupported(op, &format!("reduce {r:?} has no ONNX form")),
                _ => {}
            }
            l.emit("ScatterElements", &[&x.name, &idx.name, &src], attrs);
        }
        _ => return unsupported(op, "has no ONNX lowering in this export"),
    }
    Ok(())
}

/// `F.scaled_dot_product_attention` written out: `softmax(q kᵀ · scale + mask) v`.
fn sdpa(l: &mut L) -> Result<()> {
    let dt = l.out_dtype();
    let (q, k, v) = (l.t("query").expect("q"), l.t("key").expect("k"), l.t("value").expect("v"));
    if l.float("dropout_p").unwrap_or(0.0) != 0.0 {
        return unsupported(l.op, "attention dropout is random: trace with dropout_p=0");
    }
    let (lq, e) = (q.meta.dims[q.rank() - 2], q.meta.dims[q.rank() - 1]);
    let s = k.meta.dims[k.rank() - 2];
    let (mut kn, mut vn) = (k.name.clone(), v.name.clone());
    if l.flag("enable_gqa") && q.rank() >= 3 {
        let (hq, hk) = (q.meta.dims[q.rank() - 3], k.meta.dims[k.rank() - 3]);
        if hq != hk {
            if q.rank() != 4 || k.rank() != 4 || hk == 0 || hq % hk != 0 {
                return unsupported(l.op, "grouped-query attention is lowered for 4-d [batch, heads, seq, dim] inputs");
            }
            // repeat_interleave of each kv head: [B, Hk, S, D] -> [B, Hk, r, S, D] -> [B, Hq, S, D].
            let rep = hq / hk;
            for (t, name) in [(&k, &mut kn), (&v, &mut vn)] {
                let u = l.unsqueeze(&t.name, &[2]);
                let ex = l.g.ints(&[1, 1, rep, 1, 1]);
                let x = l.g.node("Expand", &[&u, &ex], vec![]);
                let d = t.meta.dims[3];
                let shape = l.g.ints(&[0, hq, t.meta.dims[2], d]);
                *name = l.g.node("Reshape", &[&x, &shape], vec![]);
            }
        }
    }
    let r = k.rank() as i64;
    let mut perm: Vec<i64> = (0..r).collect();
    perm.swap(r as usize - 1, r as usize - 2);
    let kt = l.g.node("Transpose", &[&kn], vec![attr_ints("perm", &perm)]);
    let scores = l.g.node("MatMul", &[&q.name, &kt], vec![]);
    let scale = l.float("scale").unwrap_or(1.0 / (e as f64).sqrt());
    let c = l.g.scalar(scale, dt);
    let mut scores = l.g.node("Mul", &[&scores, &c], vec![]);
    if l.flag("is_causal") {
        // PyTorch's causal mask: the lower triangle of [L, S] from the top left.
        let bytes: Vec<u8> = (0..lq).flat_map(|i| (0..s).map(move |j| u8::from(j <= i))).collect();
        let name = l.g.fresh();
        let m = l.g.init(name, &[lq, s], DType::Bool, bytes);
        let (z, ninf) = (l.g.scalar(0.0, dt), l.g.scalar(f64::NEG_INFINITY, dt));
        let add = l.g.node("Where", &[&m, &z, &ninf], vec![]);
        scores = l.g.node("Add", &[&scores, &add], vec![]);
    }
    if let Some(m) = l.t("attn_mask") {
        let add = if m.meta.dtype == DType::Bool {
            // True means attend (PyTorch's polarity).
            let (z, ninf) = (l.g.scalar(0.0, dt), l.g.scalar(f64::NEG_INFINITY, dt));
            l.g.node("Where", &[&m.name, &z, &ninf], vec![])
        } else {
            l.cast(&m, dt)
        };
        scores = l.g.node("Add", &[&scores, &add], vec![]);
    }
    let p = l.g.node("Softmax", &[&scores], vec![attr_i("axis", -1)]);
    l.emit("MatMul", &[&p, &vn], vec![]);
    l.out_bd[0] = q.bd;
    Ok(())
}

/// The seed's functions outside the table (`crate::ops`).
fn seed(l: &mut L, args: Vec<f64>, ints: Vec<i64>) -> Result<()> {
    let op = l.op;
    let dt = l.out_dtype();
    match op {
        "view" => {
            let x = l.input(0)?;
            l.reshape_to_out(&x)?;
        }
        "concat" => {
            let axis = ints[0];
            let parts: Vec<In> = l.ins.iter().flatten().cloned().collect();
            let axis = norm(axis, parts[0].rank());
            let mut names = Vec::new();
            for p in &parts {
                l.no_batch_axis(p, axis, "concat")?;
                names.push(l.cast(p, dt));
            }
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            l.emit("Concat", &refs, vec![attr_i("axis", axis as i64)]);
        }
        "slice" => {
            let x = l.input(0)?;
            let (dim, start, end, step) = (ints[0], ints[1], ints[2], ints[3]);
            let axis = norm(dim, x.rank());
            let n = x.meta.dims[axis];
            let clamp = |v: i64| (if v < 0 { v + n } else { v }).clamp(0, n);
            let (s, e) = (clamp(start), clamp(end));
            if l.dynamic(&x) && x.bd.map(|b| b.dim) == Some(axis) {
                if (s, e, step) != (0, n, 1) {
                    return unsupported(op, "a slice of the dynamic batch dim; export with a static batch");
                }
                let r = l.slice(&x.name, axis as i64, 0, i64::MAX, 1);
                l.alias(&r);
                return Ok(());
            }
            let r = l.slice(&x.name, axis as i64, s, e, step);
            l.alias(&r);
        }
        "masked_softmax" => {
            let (x, m) = (l.input(0)?, l.input(1)?);
            let (dim, mask_type) = (ints[0], ints[1]);
            let axis = norm(dim, x.rank()) as i64;
            // True means masked out; a row masked entirely is 0, as the kernel gives.
            let mask = match mask_type {
                1 => l.unsqueeze(&m.name, &[1, 2]),
                _ => m.name.clone(),
            };
            let ninf = l.g.scalar(f64::NEG_INFINITY, dt);
            let filled = l.g.node("Where", &[&mask, &ninf, &x.name], vec![]);
            let p = l.g.node("Softmax", &[&filled], vec![attr_i("axis", axis)]);
            let z = l.g.scalar(0.0, dt);
            l.emit("Where", &[&mask, &z, &p], vec![]);
        }
        "dropout" => {
            let x = l.input(0)?;
            if ints[0] != 0 && args[0] != 0.0 {
                return unsupported(op, "dropout in training mode is random: trace with train=0");
            }
            l.alias(&x.name);
        }
        "layernorm" => {
            let (x, w) = (l.input(0)?, l.input(1)?);
            let mut ins = vec![x.name.clone(), w.name.clone()];
            if let Some(Some(b)) = l.ins.get(2).cloned() {
                ins.push(b.name);
            }
            let refs: Vec<&str> = ins.iter().map(String::as_str).collect();
            l.emit("LayerNormalization", &refs, vec![attr_i("axis", -(w.rank() as i64)), attr_f("epsilon", args[0])]);
        }
        "embedding" => {
            let (w, ids) = (l.input(0)?, l.input(1)?);
            l.emit("Gather", &[&w.name, &ids.name], vec![attr_i("axis", 0)]);
            l.out_bd[0] = ids.bd;
        }
        "linear_in_out" => {
            let (x, w) = (l.input(0)?, l.input(1)?);
            let b = l.ins.get(2).cloned().flatten().map(|b| b.name);
            l.emit_then("MatMul", &[&x.name, &w.name], "Add", b.as_deref());
        }
        "to_dtype" => {
            let x = l.input(0)?;
            let c = l.cast(&x, dt);
            l.alias(&c);
        }
        "to_device" => {
            let x = l.input(0)?;
            l.alias(&x.name);
        }
        _ => return unsupported(op, "has no ONNX lowering in this export"),
    }
    Ok(())
}
