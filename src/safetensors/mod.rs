//! The safetensors format (8-byte little-endian header length N, N bytes of
//! JSON header `name -> {dtype, shape, data_offsets}` plus `__metadata__`,
//! then the data section), written and read with every bound checked: files
//! on disk are untrusted input. A header is accepted exactly when the
//! reference implementation (huggingface/safetensors, `read_metadata` and
//! `Metadata::validate`) accepts it, and duplicate names, which its JSON maps
//! keep the last of silently, are refused too. Corrupt files are
//! `E_CKPT_FORMAT`, the code checkpoint loads use for them.

pub mod file;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::dtype::DType;
use crate::error::Result;

/// The reference's `MAX_HEADER_SIZE`: a longer header is refused before
/// anything is allocated for it.
pub const MAX_HEADER: u64 = 100_000_000;

/// A dtype the format names, with its size and the library's dtype if any.
#[derive(Debug, PartialEq, Eq)]
pub struct FileDType {
    pub name: &'static str,
    pub bits: u64,
    pub lib: Option<DType>,
}

const fn fd(name: &'static str, bits: u64, lib: Option<DType>) -> FileDType {
    FileDType { name, bits, lib }
}

/// Every dtype the reference knows, in its enum order, which is the order of
/// alignment its writer sorts tensors by (largest first); then `C128`, which
/// the reference (0.8) does not name: complex128 has no other name to go by,
/// and it sorts first, 16-byte aligned.
static DTYPES: [FileDType; 23] = [
    fd("BOOL", 8, Some(DType::Bool)),
    fd("F4", 4, None),
    fd("F6_E2M3", 6, None),
    fd("F6_E3M2", 6, None),
    fd("U8", 8, Some(DType::U8)),
    fd("I8", 8, Some(DType::I8)),
    fd("F8_E5M2", 8, None),
    fd("F8_E4M3", 8, None),
    fd("F8_E8M0", 8, None),
    fd("F8_E4M3FNUZ", 8, None),
    fd("F8_E5M2FNUZ", 8, None),
    fd("I16", 16, Some(DType::I16)),
    fd("U16", 16, None),
    fd("F16", 16, Some(DType::F16)),
    fd("BF16", 16, Some(DType::BF16)),
    fd("I32", 32, Some(DType::I32)),
    fd("U32", 32, None),
    fd("F32", 32, Some(DType::F32)),
    fd("C64", 64, Some(DType::C64)),
    fd("F64", 64, Some(DType::F64)),
    fd("I64", 64, Some(DType::I64)),
    fd("U64", 64, None),
    fd("C128", 128, Some(DType::C128)),
];

fn rank(d: DType) -> usize {
    DTYPES.iter().position(|f| f.lib == Some(d)).unwrap_or(0)
}

/// The format's name of a library dtype (every one has a name).
pub fn format_name(d: DType) -> &'static str {
    DTYPES[rank(d)].name
}

/// The order the reference writer lays tensors out in: by dtype, largest
/// alignment first, then by name. With the header padded to 8 bytes, every
/// tensor starts aligned to its element size, so a reader can map it in place.
pub fn write_order(d: DType, name: &str) -> (std::cmp::Reverse<usize>, &str) {
    (std::cmp::Reverse(rank(d)), name)
}

/// Where a tensor lies in the data section, as the header says.
pub struct Layout {
    pub name: String,
    pub format: &'static FileDType,
    pub shape: Vec<i64>,
    pub begin: u64,
    pub end: u64,
}

impl Layout {
    /// The library's dtype of the tensor; `E_DTYPE` for the format's dtypes
    /// it cannot hold (F8_*, F4, F6_*, U16, U32, U64).
    pub fn dtype(&self) -> Result<DType> {
        self.format.lib.ok_or_else(|| {
            crate::err!(E_DTYPE, "tensor {:?} has dtype {}, which this library cannot hold", self.name, self.format.name)
        })
    }
}

/// What the header says of a tensor about to be written.
pub struct Spec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub nbytes: usize,
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// The length prefix and JSON header for `specs` (in this order, back to
/// back) with `metadata`, as the reference writes them (same key order, no
/// spaces, padded with spaces to a multiple of 8), so a writer can stream the
/// tensors' bytes after it.
pub fn header<'a>(specs: impl IntoIterator<Item = &'a Spec>, metadata: &BTreeMap<String, String>) -> Vec<u8> {
    let mut text = String::from("{");
    if !metadata.is_empty() {
        text += "\"__metadata__\":{";
        let pairs: Vec<String> = metadata.iter().map(|(k, v)| format!("{}:{}", json_str(k), json_str(v))).collect();
        text += &pairs.join(",");
        text += "}";
    }
    let mut offset = 0usize;
    for e in specs {
        let end = offset + e.nbytes;
        let sep = if text.len() > 1 { "," } else { "" };
        text += &format!(
            "{sep}{}:{{\"dtype\":\"{}\",\"shape\":{},\"data_offsets\":[{offset},{end}]}}",
            json_str(&e.name),
            format_name(e.dtype),
            crate::json::write_int_list(&e.shape)
        );
        offset = end;
    }
    text.push('}');
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = Vec::with_capacity(8 + text.len());
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

/// The header length from the 8-byte prefix of a `file_len`-byte file,
/// refused before anything is allocated for it when it cannot be right.
pub fn header_len(prefix: [u8; 8], file_len: u64, what: &str) -> Result<usize> {
    let n = u64::from_le_bytes(prefix);
    if n > MAX_HEADER {
        crate::bail!(E_CKPT_FORMAT, "{what}: header length {n} is over the format's limit of {MAX_HEADER} bytes");
    }
    if n > file_len.saturating_sub(8) {
        crate::bail!(E_CKPT_FORMAT, "{what}: header length {n} runs past the end of the file ({file_len} bytes)");
    }
    Ok(n as usize)
}

/// Refuses a name a JSON object repeats: serde_json's maps would keep the
/// last one silently, and which tensor a name means must not be a guess.
fn unique<'de, A: MapAccess<'de>>(mut m: A, mut take: impl FnMut(String, &mut A) -> std::result::Result<(), A::Error>) -> std::result::Result<(), A::Error> {
    let mut seen = HashSet::new();
    while let Some(k) = m.next_key::<String>()? {
        if !seen.insert(k.clone()) {
            return Err(de::Error::custom(format_args!("the name {k:?} appears twice")));
        }
        take(k, &mut m)?;
    }
    Ok(())
}

/// `__metadata__`'s entries, in file order.
struct Meta(Vec<(String, Value)>);

/// The header's entries: tensors in file order, and `__metadata__`.
struct RawHeader {
    tensors: Vec<(String, Value)>,
    metadata: Option<Meta>,
}

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Meta;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of strings for __metadata__")
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> std::result::Result<Meta, A::Error> {
                let mut out = Vec::new();
                unique(m, |k, m| Ok(out.push((k, m.next_value()?))))?;
                Ok(Meta(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawHeader;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> std::result::Result<RawHeader, A::Error> {
                let mut h = RawHeader { tensors: Vec::new(), metadata: None };
                unique(m, |k, m| {
                    if k == "__metadata__" {
                        // `null` is no metadata, as the reference's Option reads it.
                        h.metadata = m.next_value::<Option<Meta>>()?;
                    } else {
                        h.tensors.push((k, m.next_value()?));
                    }
                    Ok(())
                })?;
                Ok(h)
            }
        }
        d.deserialize_map(V)
    }
}

/// A tensor entry of a well-formed header, read without building JSON
/// values: `open` parses the whole header, and a checkpoint of thousands of
/// tensors spent most of its open in the values' allocations. Anything this
/// does not read (a field of the wrong type or repeated, a repeated name)
/// goes through `RawHeader`, which says what is wrong.
#[derive(serde::Deserialize)]
struct Entry<'a> {
    #[serde(borrow)]
    dtype: Cow<'a, str>,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// A well-formed header: its tensor entries in file order, and `__metadata__`.
struct FastHeader<'a> {
    tensors: Vec<(String, Entry<'a>)>,
    metadata: Option<Meta>,
}

impl<'de> Deserialize<'de> for FastHeader<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FastHeader<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<FastHeader<'de>, A::Error> {
                let (mut h, mut seen_meta) = (FastHeader { tensors: Vec::new(), metadata: None }, false);
                while let Some(k) = m.next_key::<String>()? {
                    if k == "__metadata__" {
                        if std::mem::replace(&mut seen_meta, true) {
                            return Err(de::Error::custom("__metadata__ twice"));
                        }
                        h.metadata = m.next_value::<Option<Meta>>()?;
                    } else {
                        h.tensors.push((k, m.next_value()?));
                    }
                }
                Ok(h)
            }
        }
        d.deserialize_map(V)
    }
}

/// What a header entry says of a tensor: each field `None` when it is missing
/// or not of its type.
struct Parts<'a> {
    name: String,
    dtype: Option<Cow<'a, str>>,
    shape: Option<Vec<i64>>,
    offsets: Option<(u64, u64)>,
}

fn dims(shape: impl IntoIterator<Item = Option<u64>>) -> Option<Vec<i64>> {
    shape.into_iter().map(|d| d.and_then(|d| i64::try_from(d).ok())).collect()
}

/// The entries of a header `FastHeader` reads (no name twice), or None.
fn fast_parts(text: &str) -> Option<(Vec<Parts<'_>>, Option<Meta>)> {
    let h: FastHeader = serde_json::from_str(text).ok()?;
    let mut names: Vec<&str> = h.tensors.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    let parts = h.tensors.into_iter().map(|(name, e)| Parts {
        name,
        dtype: Some(e.dtype),
        shape: dims(e.shape.into_iter().map(Some)),
        offsets: Some(e.data_offsets),
    });
    Some((parts.collect(), h.metadata))
}

/// The entries of any JSON object header, or the precise error.
fn slow_parts(text: &str, bad: &dyn Fn(String) -> crate::Error) -> Result<(Vec<Parts<'static>>, Option<Meta>)> {
    let raw: RawHeader = serde_json::from_str(text).map_err(|e| bad(format!("header is not a valid JSON object: {e}")))?;
    let mut parts = Vec::with_capacity(raw.tensors.len());
    for (name, v) in raw.tensors {
        let obj = v.as_object().ok_or_else(|| bad(format!("tensor {name:?} is not an object")))?;
        let dtype = obj.get("dtype").and_then(Value::as_str).map(|s| Cow::Owned(s.to_owned()));
        let shape = obj.get("shape").and_then(Value::as_array).and_then(|a| dims(a.iter().map(Value::as_u64)));
        let offsets = match obj.get("data_offsets").and_then(Value::as_array).map(|a| a.iter().map(Value::as_u64).collect::<Vec<_>>()) {
            Some(o) if o.len() == 2 => o[0].zip(o[1]),
            _ => None,
        };
        parts.push(Parts { name, dtype, shape, offsets });
    }
    Ok((parts, raw.metadata))
}

/// One header entry as a layout, its sizes checked with no arithmetic that can overflow.
fn layout(p: Parts, data_len: u64, bad: &dyn Fn(String) -> crate::Error) -> Result<Layout> {
    let name = p.name;
    let dname = p.dtype.ok_or_else(|| bad(format!("tensor {name:?} has no dtype string")))?;
    let format = DTYPES
        .iter()
        .find(|f| f.name == dname)
        .ok_or_else(|| bad(format!("tensor {name:?} has unsupported dtype {dname:?} (not one the format defines)")))?;
    let shape = p.shape.ok_or_else(|| bad(format!("tensor {name:?} has no shape of non-negative integers")))?;
    if shape.len() > crate::json::MAX_DIMS {
        return Err(bad(format!("tensor {name:?} has {} dimensions, more than the limit of {}", shape.len(), crate::json::MAX_DIMS)));
    }
    let (begin, end) = p.offsets.ok_or_else(|| bad(format!("tensor {name:?} has no data_offsets [begin, end]")))?;
    if begin > end || end > data_len {
        return Err(bad(format!("tensor {name:?} spans bytes {begin}..{end} of a {data_len}-byte data section")));
    }
    // Elements are counted in int64 by libtorch, so a count past i64::MAX is no tensor.
    let numel = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64)).filter(|&n| n <= i64::MAX as u64);
    let bits = numel.and_then(|n| n.checked_mul(format.bits));
    let Some(bits) = bits else {
        return Err(bad(format!("tensor {name:?}: shape {shape:?} has too many elements")));
    };
    if bits % 8 != 0 || end - begin != bits / 8 {
        return Err(bad(format!(
            "tensor {name:?}: data_offsets [{begin}, {end}] do not hold shape {shape:?} of {dname} ({bits} bits)"
        )));
    }
    Ok(Layout { name, format, shape, begin, end })
}

/// How strictly the tensors must fill the data section.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tiling {
    /// Back to back from byte 0 to the end, as the reference demands.
    Exact,
    /// Within it and not overlapping; bytes between and after them are
    /// skipped (checkpoints: their hash already covers every byte).
    Disjoint,
}

/// Parses and validates the JSON header of a file whose data section holds
/// `data_len` bytes; `what` names the file in errors (`E_CKPT_FORMAT`). The
/// layouts come back in data order, inside the data section, never
/// overlapping, and with `Tiling::Exact` without holes or a tail either, so
/// a reader allocates no more than the file holds.
pub fn parse_header(header: &[u8], data_len: u64, tiling: Tiling, what: &str) -> Result<(Vec<Layout>, BTreeMap<String, String>)> {
    let bad = |why: String| crate::err!(E_CKPT_FORMAT, "{what}: {why}");
    let text = std::str::from_utf8(header).map_err(|e| bad(format!("header is not UTF-8 (invalid byte at offset {})", e.valid_up_to())))?;
    let (parts, meta) = match fast_parts(text) {
        Some(p) => p,
        None => slow_parts(text, &bad)?,
    };
    let mut metadata = BTreeMap::new();
    for (k, v) in meta.map_or(Vec::new(), |m| m.0) {
        match v {
            Value::String(s) => drop(metadata.insert(k, s)),
            _ => return Err(bad(format!("metadata {k:?} is not a string"))),
        }
    }
    let mut layouts = parts.into_iter().map(|p| layout(p, data_len, &bad)).collect::<Result<Vec<_>>>()?;
    layouts.sort_by_key(|l| (l.begin, l.end));
    let mut at = 0u64;
    for l in &layouts {
        if l.begin < at || (l.begin > at && tiling == Tiling::Exact) {
            let how = if l.begin < at { "overlaps the tensor before it" } else { "leaves a hole before it" };
            return Err(bad(format!("tensor {:?} at bytes [{}, {}] {how} (which ends at {at})", l.name, l.begin, l.end)));
        }
        at = l.end;
    }
    if at != data_len && tiling == Tiling::Exact {
        return Err(bad(format!("the tensors cover {at} bytes but the data section holds {data_len}")));
    }
    Ok((layouts, metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(h: &str, data_len: u64) -> std::result::Result<Vec<Layout>, String> {
        parse_header(h.as_bytes(), data_len, Tiling::Exact, "t").map(|(l, _)| l).map_err(|e| e.detail)
    }

    #[test]
    fn round_trip_and_hostile_headers() {
        let e = Spec { name: "param_0".into(), dtype: DType::F32, shape: vec![2], nbytes: 8 };
        let mut meta = BTreeMap::new();
        meta.insert("k".to_string(), "v".to_string());
        let bytes = header(&[e], &meta);
        let n = header_len(bytes[..8].try_into().unwrap(), bytes.len() as u64 + 8, "t").unwrap();
        assert_eq!((n + 8, n % 8), (bytes.len(), 0));
        let (back, m) = parse_header(&bytes[8..], 8, Tiling::Exact, "t").unwrap();
        assert_eq!((back[0].name.as_str(), back[0].begin, back[0].end, &back[0].shape), ("param_0", 0, 8, &vec![2]));
        assert_eq!(m["k"], "v");
        assert!(header_len(u64::MAX.to_le_bytes(), 100, "t").err().unwrap().detail.contains("limit"));
        assert!(header_len(8u64.to_le_bytes(), 4, "t").err().unwrap().detail.contains("past the end"));
        let hostile = [
            (r#"{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#, 8, "spans bytes 0..16"),
            (r#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#, 8, "cover 4 bytes"),
            (r#"{"x":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}"#, 1, "unsupported dtype \"Q4\""),
            (r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#, 3, "overlaps"),
            (r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}}"#, 5, "hole"),
            (r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}"#, 4, "appears twice"),
            (r#"{"x":{"dtype":"U8","shape":[1073741824,1073741824],"data_offsets":[0,4]}}"#, 4, "do not hold"),
            (r#"{"x":{"dtype":"F32","shape":[1073741824,1073741824],"data_offsets":[0,4]}}"#, 4, "too many elements"),
            (r#"{"x":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}"#, 1, "too many elements"),
            (r#"{"x":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}"#, 1, "12 bits"),
            (r#"{"__metadata__":{"k":1}}"#, 0, "not a string"),
            (r#"{"__metadata__":{"k":"a","k":"b"}}"#, 0, "appears twice"),
            (r#"[1,2]"#, 0, "not a valid JSON object"),
            (r#"{"x":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}"#, 0, "no shape"),
        ];
        for (h, len, why) in hostile {
            let e = parse(h, len).err().unwrap_or_else(|| panic!("{h} was accepted"));
            assert!(e.contains(why), "{h}: {e}");
        }
        assert!(parse_header(b"{\"\xff\":1}", 0, Tiling::Exact, "t").err().unwrap().detail.contains("not UTF-8"));
        // Whitespace around the object, zero-size tensors sharing an offset, a null
        // __metadata__ and a dtype the library cannot hold are all the reference's.
        let ok = r#"  {"__metadata__":null,"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"f":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]},"g":{"dtype":"BOOL","shape":[],"data_offsets":[2,3]}}    "#;
        let l = parse(ok, 3).unwrap();
        assert_eq!(l.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(), ["e", "f", "g"]);
        assert_eq!(l[1].dtype().err().unwrap().code, crate::Code::E_DTYPE);
    }

    #[test]
    fn well_formed_headers_take_the_fast_parse_and_others_the_general_one() {
        let e = Spec { name: "w.0".into(), dtype: DType::BF16, shape: vec![3, 2], nbytes: 12 };
        let bytes = header(&[e], &BTreeMap::from([("format".to_string(), "pt".to_string())]));
        assert!(fast_parts(std::str::from_utf8(&bytes[8..]).unwrap()).is_some());
        // A repeated field: serde_json's maps keep the last, and so does the general parse.
        let rep = r#"{"x":{"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"U8","shape":[2],"data_offsets":[4,6],"extra":1}}"#;
        assert!(fast_parts(rep).is_none());
        let l = parse(rep, 6).unwrap();
        assert_eq!((l[0].format.name, l[1].format.name, l[1].begin), ("F32", "U8", 4));
        let twice = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
        assert!(fast_parts(twice).is_none());
    }

    #[test]
    fn the_writer_lays_out_as_the_reference_does() {
        let mut names = [("b", DType::U8), ("a", DType::F64), ("c", DType::F64), ("d", DType::Bool), ("e", DType::BF16)];
        names.sort_by(|x, y| write_order(x.1, x.0).cmp(&write_order(y.1, y.0)));
        assert_eq!(names.map(|n| n.0), ["a", "c", "e", "b", "d"]);
        let specs = [Spec { name: "w\"x".into(), dtype: DType::BF16, shape: vec![], nbytes: 2 }];
        let h = header(&specs, &BTreeMap::new());
        assert_eq!(&h[8..], br#"{"w\"x":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}}       "#);
    }
}
