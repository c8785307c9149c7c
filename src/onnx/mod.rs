//! ONNX export (`enkai_onnx_export`): the graph that produced the outputs
//! from the inputs, as this thread's trace recorded it (`crate::trace`),
//! written as an ONNX model. The walk goes back from the outputs and stops
//! at the graph inputs and the named parameters; every recorded op on the
//! way is lowered to ONNX operators (`lower`), or the export fails naming
//! it: no node is dropped. A tensor used on the way that no recorded op made
//! is written as a constant initializer with its value.
//!
//! A dynamic batch: the inputs name the dim that is their batch; the export
//! follows that dim through each op (`Bd`), writes it as the symbolic dim
//! `batch` on the inputs and outputs, and writes the shapes that the ops fix
//! (reshape targets, expansions) relative to it.

mod lower;
pub mod proto;

use std::collections::HashMap;
use std::path::Path;

use prost::Message;

use crate::backend::imp;
use crate::dtype::DType;
use crate::error::Result;
use crate::registry::TENSORS;
use crate::trace::{Kind, Meta, Origin, Trace};
use proto::*;

/// The lowest and highest opsets written (ONNX 1.14's opset 17 to onnx 1.18's 23).
pub const OPSETS: std::ops::RangeInclusive<i64> = 17..=23;

/// Where a value's batch lives: dim `dim`, of size `coeff` × the batch
/// (`coeff` > 1 after a reshape folds the batch into a wider dim).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bd {
    pub dim: usize,
    pub coeff: i64,
}

/// A graph input or output as the caller names it.
struct Port {
    handle: i64,
    name: Option<String>,
    batch_dim: Option<i64>,
}

fn ports(text: &str, what: &str) -> Result<Vec<Port>> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| crate::err!(E_INVALID_ARG, "{what}: not JSON: {e}"))?;
    let serde_json::Value::Array(items) = v else {
        crate::bail!(E_INVALID_ARG, "{what}: expected a JSON array of tensor handles")
    };
    items
        .iter()
        .map(|it| match it {
            serde_json::Value::Number(n) => n.as_i64().map(|h| Port { handle: h, name: None, batch_dim: None }),
            serde_json::Value::Object(o) => {
                let handle = o.get("handle")?.as_i64()?;
                let name = match o.get("name") {
                    None => None,
                    Some(n) => Some(n.as_str()?.to_owned()),
                };
                let batch_dim = match o.get("batch_dim") {
                    None | Some(serde_json::Value::Null) => None,
                    Some(d) => Some(d.as_i64()?),
                };
                o.keys().all(|k| matches!(k.as_str(), "handle" | "name" | "batch_dim")).then_some(Port { handle, name, batch_dim })
            }
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| crate::err!(E_INVALID_ARG, "{what}: each item must be a handle or {{\"handle\": h, \"name\": \"...\", \"batch_dim\": d}}"))
}

fn params(text: &str) -> Result<Vec<(String, i64)>> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| crate::err!(E_INVALID_ARG, "names: not JSON: {e}"))?;
    let serde_json::Value::Object(o) = v else { crate::bail!(E_INVALID_ARG, "names: expected a JSON object {{\"name\": handle}}") };
    o.into_iter()
        .map(|(k, v)| match v.as_i64() {
            Some(h) if !k.is_empty() => Ok((k, h)),
            _ => Err(crate::err!(E_INVALID_ARG, "names: {k:?} must map to a tensor handle (and the name be non-empty)")),
        })
        .collect()
}

pub fn onnx_dtype(d: DType) -> i32 {
    match d {
        DType::F32 => data_type::FLOAT,
        DType::F16 => data_type::FLOAT16,
        DType::BF16 => data_type::BFLOAT16,
        DType::F64 => data_type::DOUBLE,
        DType::I64 => data_type::INT64,
        DType::I32 => data_type::INT32,
        DType::Bool => data_type::BOOL,
        DType::U8 => data_type::UINT8,
        DType::I8 => data_type::INT8,
        DType::I16 => data_type::INT16,
        DType::C64 => data_type::COMPLEX64,
        DType::C128 => data_type::COMPLEX128,
    }
}

/// The IR version a reader of `opset` expects (onnx's versioning table).
fn ir_version(opset: i64) -> i64 {
    match opset {
        ..=18 => 8,
        19 | 20 => 9,
        21 | 22 => 10,
        _ => 11,
    }
}

/// The graph being built: nodes, initializers, and fresh names.
pub struct G {
    pub nodes: Vec<NodeProto>,
    pub inits: Vec<TensorProto>,
    pub opset: i64,
    next: usize,
    bytes: usize,
}

pub fn attr_i(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attr_type::INT, i: Some(i), ..Default::default() }
}

pub fn attr_f(name: &str, f: f64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attr_type::FLOAT, f: Some(f as f32), ..Default::default() }
}

pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attr_type::INTS, ints: v.to_vec(), ..Default::default() }
}

pub fn attr_s(name: &str, s: &str) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attr_type::STRING, s: Some(s.as_bytes().to_vec()), ..Default::default() }
}

impl G {
    pub fn fresh(&mut self) -> String {
        self.next += 1;
        format!("/enkai/x{}", self.next)
    }

    /// Adds a node writing `outs`.
    pub fn node_to(&mut self, op: &str, ins: &[&str], outs: &[&str], attrs: Vec<AttributeProto>) {
        self.nodes.push(NodeProto {
            input: ins.iter().map(|s| (*s).to_owned()).collect(),
            output: outs.iter().map(|s| (*s).to_owned()).collect(),
            name: format!("/enkai/n{}", self.nodes.len()),
            op_type: op.into(),
            attribute: attrs,
            ..Default::default()
        });
    }

    /// Adds a node with one fresh output; returns its name.
    pub fn node(&mut self, op: &str, ins: &[&str], attrs: Vec<AttributeProto>) -> String {
        let out = self.fresh();
        self.node_to(op, ins, &[&out], attrs);
        out
    }

    pub fn init(&mut self, name: String, dims: &[i64], dtype: DType, raw: Vec<u8>) -> String {
        self.bytes += raw.len();
        self.inits.push(TensorProto { dims: dims.to_vec(), data_type: onnx_dtype(dtype), name: name.clone(), raw_data: raw });
        name
    }

    /// A constant int64 vector.
    pub fn ints(&mut self, v: &[i64]) -> String {
        let name = self.fresh();
        self.init(name, &[v.len() as i64], DType::I64, v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    /// A constant scalar (0-d) of a float or integer dtype.
    pub fn scalar(&mut self, v: f64, dtype: DType) -> String {
        let raw = match dtype {
            DType::F32 => (v as f32).to_le_bytes().to_vec(),
            DType::F64 => v.to_le_bytes().to_vec(),
            DType::F16 => half::f16::from_f64(v).to_le_bytes().to_vec(),
            DType::BF16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
            DType::I64 => (v as i64).to_le_bytes().to_vec(),
            DType::I32 => (v as i32).to_le_bytes().to_vec(),
            DType::I16 => (v as i16).to_le_bytes().to_vec(),
            DType::I8 => vec![v as i8 as u8],
            DType::U8 => vec![v as u8],
            DType::Bool => vec![u8::from(v != 0.0)],
            DType::C64 | DType::C128 => return self.scalar(v, DType::F32),
        };
        let name = self.fresh();
        self.init(name, &[], dtype, raw)
    }
}

fn tensor_bytes(t: &crate::backend::Tensor) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; crate::tensor::nbytes(t)?];
    imp::copy_to(&t.raw, &mut buf)?;
    Ok(buf)
}

fn value_info(name: &str, m: &Meta, bd: Option<Bd>) -> ValueInfoProto {
    let dim = m
        .dims
        .iter()
        .enumerate()
        .map(|(i, &d)| match bd {
            Some(b) if b.dim == i && b.coeff == 1 => Dimension { dim_param: Some("batch".into()), ..Default::default() },
            Some(b) if b.dim == i => Dimension { dim_param: Some(format!("batch*{}", b.coeff)), ..Default::default() },
            _ => Dimension { dim_value: Some(d), ..Default::default() },
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto { tensor_type: Some(TypeProtoTensor { elem_type: onnx_dtype(m.dtype), shape: Some(TensorShapeProto { dim }) }) }),
    }
}

/// Writes the ONNX model of `outputs_json` computed from `inputs_json` to `path`.
pub fn export(path: &str, inputs_json: &str, outputs_json: &str, names_json: &str, opset: i64) -> Result<()> {
    if !OPSETS.contains(&opset) {
        crate::bail!(E_INVALID_ARG, "opset {opset}: the export writes opsets {} to {}", OPSETS.start(), OPSETS.end());
    }
    let (ins, outs, names) = (ports(inputs_json, "inputs")?, ports(outputs_json, "outputs")?, params(names_json)?);
    if outs.is_empty() {
        crate::bail!(E_INVALID_ARG, "outputs: at least one output is needed");
    }
    if path.is_empty() {
        crate::bail!(E_INVALID_ARG, "path is empty");
    }
    let model = crate::trace::with(|tr| build(tr, &ins, &outs, &names, opset))?;
    let bytes = model.encode_to_vec();
    crate::checkpoint::fsutil::write_atomic(Path::new(path), |w| w(&bytes))
}

fn build(tr: &Trace, ins: &[Port], outs: &[Port], names: &[(String, i64)], opset: i64) -> Result<ModelProto> {
    if let Some(lost) = tr.nodes.iter().find_map(|n| if let Kind::Lost(why) = &n.kind { Some(why) } else { None }) {
        crate::bail!(E_INVALID_ARG, "the trace is incomplete: recording an op failed ({lost})");
    }
    // Each port's value, and the names the caller gave (unique across all).
    let mut taken: HashMap<String, &'static str> = HashMap::new();
    let mut claim = |name: &str, what: &'static str| -> Result<()> {
        if let Some(prev) = taken.insert(name.to_owned(), what) {
            crate::bail!(E_INVALID_ARG, "the name {name:?} is given to an {prev} and an {what}");
        }
        Ok(())
    };
    // An input (or parameter) is the value its handle had when the trace first
    // saw it; an output the value it has now (after any in-place write).
    let value = |h: i64, what: &str| -> Result<usize> {
        let map = if what == "output" { &tr.current } else { &tr.first };
        if let Some(&v) = map.get(&h) {
            return Ok(v);
        }
        // The registry's own error (stale, wrong kind, ...) for a handle that is not a live tensor.
        TENSORS.read(h, |_| ())?;
        crate::bail!(E_INVALID_ARG, "{what} {h} is not a value the trace saw (no traced op made or used it)")
    };
    let mut role: HashMap<usize, String> = HashMap::new();
    let mut graph_inputs = Vec::new();
    let mut batch: Option<i64> = None;
    let mut bds: HashMap<usize, Bd> = HashMap::new();
    for (i, p) in ins.iter().enumerate() {
        let v = value(p.handle, "input")?;
        let name = p.name.clone().unwrap_or_else(|| format!("input{i}"));
        claim(&name, "input")?;
        if role.insert(v, name.clone()).is_some() {
            crate::bail!(E_INVALID_ARG, "input {} is given twice", p.handle);
        }
        let m = &tr.values[v].meta;
        if let Some(d) = p.batch_dim {
            let rank = m.dims.len() as i64;
            if d < -rank || d >= rank {
                crate::bail!(E_INVALID_ARG, "input {name:?}: batch_dim {d} is out of range for a {rank}-d tensor");
            }
            let d = if d < 0 { d + rank } else { d } as usize;
            let b = m.dims[d];
            if b < 2 {
                crate::bail!(E_INVALID_ARG, "input {name:?}: a dynamic batch needs a trace with a batch of at least 2 (got {b}): a batch of 1 can't be told apart from broadcasting");
            }
            if batch.is_some_and(|x| x != b) {
                crate::bail!(E_INVALID_ARG, "input {name:?}: batch {b} differs from the other inputs' {}", batch.unwrap_or(0));
            }
            batch = Some(b);
            bds.insert(v, Bd { dim: d, coeff: 1 });
        }
        graph_inputs.push((v, name));
    }
    let mut g = G { nodes: Vec::new(), inits: Vec::new(), opset, next: 0, bytes: 0 };
    for (name, h) in names {
        claim(name, "initializer")?;
        let t = TENSORS.get(*h).map_err(|e| crate::err!(E_HANDLE_INVALID, "parameter {name:?}: {}", e.detail))?;
        if let Some(&v) = tr.first.get(h) {
            if role.contains_key(&v) {
                crate::bail!(E_INVALID_ARG, "tensor {h} is both a graph input and the parameter {name:?}");
            }
            role.insert(v, name.clone());
        }
        let dims = imp::dims(&t.raw);
        g.init(name.clone(), &dims, imp::dtype(&t.raw)?, tensor_bytes(&t)?);
    }
    let out_names: Vec<String> = outs.iter().enumerate().map(|(i, p)| p.name.clone().unwrap_or_else(|| format!("output{i}"))).collect();
    for n in &out_names {
        claim(n, "output")?;
    }
    let out_vals = outs.iter().map(|p| value(p.handle, "output")).collect::<Result<Vec<_>>>()?;

    // The nodes the outputs need, in an order that puts producers first.
    let mut order = Vec::new();
    let mut state: HashMap<usize, bool> = HashMap::new(); // node -> done
    let mut stack: Vec<(usize, bool)> = Vec::new();
    for &v in &out_vals {
        if let (Origin::Node(n, _), false) = (&tr.values[v].origin, role.contains_key(&v)) {
            stack.push((*n, false));
        }
        while let Some((n, expanded)) = stack.pop() {
            if expanded {
                state.insert(n, true);
                order.push(n);
                continue;
            }
            if state.contains_key(&n) {
                continue;
            }
            state.insert(n, false);
            stack.push((n, true));
            for &i in tr.nodes[n].inputs.iter().flatten() {
                if let (Origin::Node(p, _), false) = (&tr.values[i].origin, role.contains_key(&i)) {
                    if !state.contains_key(p) {
                        stack.push((*p, false));
                    }
                }
            }
        }
    }

    // Value names: the caller's for inputs and parameters, a constant for
    // other tensors from outside the trace, a fresh one for the rest.
    let mut vname: HashMap<usize, String> = role.clone();
    for &n in &order {
        let node = &tr.nodes[n];
        if let Kind::Opaque(what) = node.kind {
            crate::bail!(E_UNSUPPORTED, "{what} has no ONNX form: the graph to export goes through it");
        }
        for &i in node.inputs.iter().flatten() {
            if vname.contains_key(&i) {
                continue;
            }
            if let Origin::External(_, t) = &tr.values[i].origin {
                let name = format!("/enkai/const{i}");
                g.init(name.clone(), &tr.values[i].meta.dims, tr.values[i].meta.dtype, tensor_bytes(t)?);
                vname.insert(i, name);
            }
        }
        for &o in &node.outputs {
            vname.entry(o).or_insert_with(|| format!("/enkai/v{o}"));
        }
        lower::node(&mut g, tr, node, &vname, &mut bds, batch)?;
    }
    let mut graph_outputs = Vec::new();
    for (k, &v) in out_vals.iter().enumerate() {
        let src = match vname.get(&v) {
            Some(s) => s.clone(),
            None => {
                // An output no traced op on the way made: a constant.
                let Origin::External(_, t) = &tr.values[v].origin else { unreachable!("a node's outputs are named") };
                let name = format!("/enkai/const{v}");
                g.init(name.clone(), &tr.values[v].meta.dims, tr.values[v].meta.dtype, tensor_bytes(t)?);
                name
            }
        };
        g.node_to("Identity", &[&src], &[&out_names[k]], vec![]);
        graph_outputs.push(value_info(&out_names[k], &tr.values[v].meta, bds.get(&v).copied().filter(|_| batch.is_some())));
    }
    if g.bytes > (2usize << 30) - (64 << 20) {
        crate::bail!(E_UNSUPPORTED, "the model's tensors take {} bytes: an ONNX file holds at most 2 GiB without external data, which the export does not write", g.bytes);
    }
    let input = graph_inputs.iter().map(|(v, name)| value_info(name, &tr.values[*v].meta, bds.get(v).copied())).collect();
    Ok(ModelProto {
        ir_version: ir_version(opset),
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: opset }],
        producer_name: "enkai_tensor".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        graph: Some(GraphProto { node: g.nodes, name: "enkai_tensor".into(), initializer: g.inits, input, output: graph_outputs }),
    })
}
