//! The safetensors format (8-byte little-endian header length, a JSON header
//! of `name -> {dtype, shape, data_offsets}` plus `__metadata__`, then the
//! bytes), written and read with every bound checked: files on disk are
//! untrusted input.

use std::collections::BTreeMap;

use crate::dtype::DType;
use crate::error::Result;

/// Headers larger than this are refused before anything is allocated for them.
pub const MAX_HEADER: u64 = 64 << 20;

/// Where a tensor lies in the data section, as the header says.
pub struct Layout {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub begin: u64,
    pub end: u64,
}

/// What the header says of a tensor about to be written.
pub struct Spec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub nbytes: usize,
}

fn st_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "F32",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::F64 => "F64",
        DType::I64 => "I64",
        DType::I32 => "I32",
        DType::Bool => "BOOL",
        DType::U8 => "U8",
        DType::I8 => "I8",
        DType::I16 => "I16",
    }
}

fn st_dtype(name: &str) -> Option<DType> {
    Some(match name {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F64" => DType::F64,
        "I64" => DType::I64,
        "I32" => DType::I32,
        "BOOL" => DType::Bool,
        "U8" => DType::U8,
        "I8" => DType::I8,
        "I16" => DType::I16,
        _ => return None,
    })
}

/// The length prefix and JSON header for `specs` (in order) with `metadata`;
/// the tensors' bytes follow it back to back, so a writer can stream them.
pub fn header(specs: &[Spec], metadata: &BTreeMap<String, String>) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        header.insert("__metadata__".into(), serde_json::to_value(metadata).expect("strings serialise"));
    }
    let mut offset = 0usize;
    for e in specs {
        let end = offset + e.nbytes;
        header.insert(
            e.name.clone(),
            serde_json::json!({ "dtype": st_name(e.dtype), "shape": e.shape, "data_offsets": [offset, end] }),
        );
        offset = end;
    }
    let mut text = serde_json::to_vec(&header).expect("json serialises");
    // Pad with spaces so the data starts 8-byte aligned, as the reference writer does.
    while !(8 + text.len()).is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + text.len());
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(&text);
    out
}

/// The header length from the 8-byte prefix of a `file_len`-byte file,
/// refused before anything is allocated for it when it cannot be right.
pub fn header_len(prefix: [u8; 8], file_len: u64, what: &str) -> Result<usize> {
    let n = u64::from_le_bytes(prefix);
    if n > MAX_HEADER || n > file_len.saturating_sub(8) {
        crate::bail!(E_CKPT_FORMAT, "{what}: header length {n} exceeds the file ({file_len} bytes) or the {MAX_HEADER}-byte limit");
    }
    Ok(n as usize)
}

/// Parses the JSON header of a file whose data section holds `data_len`
/// bytes; `what` names the file in errors (`E_CKPT_FORMAT`). The layouts come
/// back in data order, each inside the data section and none overlapping, so
/// a reader allocates no more than the file holds.
pub fn parse_header(header: &[u8], data_len: u64, what: &str) -> Result<(Vec<Layout>, BTreeMap<String, String>)> {
    let bad = |why: String| crate::err!(E_CKPT_FORMAT, "{what}: {why}");
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(header).map_err(|e| bad(format!("header is not a JSON object: {e}")))?;
    let mut metadata = BTreeMap::new();
    let mut layouts = Vec::new();
    for (name, v) in header {
        if name == "__metadata__" {
            let m = v.as_object().ok_or_else(|| bad("__metadata__ is not an object".into()))?;
            for (k, v) in m {
                let s = v.as_str().ok_or_else(|| bad(format!("metadata {k:?} is not a string")))?;
                metadata.insert(k.clone(), s.to_string());
            }
            continue;
        }
        let obj = v.as_object().ok_or_else(|| bad(format!("tensor {name:?} is not an object")))?;
        let dname = obj.get("dtype").and_then(|d| d.as_str()).unwrap_or("");
        let dtype = st_dtype(dname).ok_or_else(|| bad(format!("tensor {name:?} has unsupported dtype {dname:?}")))?;
        let shape: Vec<i64> = obj
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|d| d.as_u64().and_then(|d| i64::try_from(d).ok())).collect())
            .ok_or_else(|| bad(format!("tensor {name:?} has an invalid shape")))?;
        if shape.len() > crate::json::MAX_DIMS {
            return Err(bad(format!("tensor {name:?} has {} dimensions, more than the limit of {}", shape.len(), crate::json::MAX_DIMS)));
        }
        let offs: Vec<u64> = obj
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|d| d.as_u64()).collect())
            .filter(|o: &Vec<u64>| o.len() == 2)
            .ok_or_else(|| bad(format!("tensor {name:?} has invalid data_offsets")))?;
        let (begin, end) = (offs[0], offs[1]);
        if begin > end || end > data_len {
            return Err(bad(format!("tensor {name:?} spans bytes {begin}..{end} of a {data_len}-byte data section")));
        }
        let numel = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        let want = numel.and_then(|n| n.checked_mul(dtype.size() as u64));
        if want != Some(end - begin) {
            return Err(bad(format!("tensor {name:?}: {} bytes do not hold shape {shape:?} of {dname}", end - begin)));
        }
        layouts.push(Layout { name, dtype, shape, begin, end });
    }
    layouts.sort_by_key(|l| (l.begin, l.end));
    for w in layouts.windows(2) {
        if w[1].begin < w[0].end {
            return Err(bad(format!("tensors {:?} and {:?} overlap", w[0].name, w[1].name)));
        }
    }
    Ok((layouts, metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_hostile_headers() {
        let e = Spec { name: "param_0".into(), dtype: DType::F32, shape: vec![2], nbytes: 8 };
        let mut meta = BTreeMap::new();
        meta.insert("k".to_string(), "v".to_string());
        let bytes = header(&[e], &meta);
        let n = header_len(bytes[..8].try_into().unwrap(), bytes.len() as u64 + 8, "t").unwrap();
        assert_eq!(n + 8, bytes.len());
        let (back, m) = parse_header(&bytes[8..], 8, "t").unwrap();
        assert_eq!((back[0].name.as_str(), back[0].begin, back[0].end, &back[0].shape), ("param_0", 0, 8, &vec![2]));
        assert_eq!(m["k"], "v");
        assert!(header_len(u64::MAX.to_le_bytes(), 100, "t").err().unwrap().detail.contains("exceeds"));
        assert!(header_len(8u64.to_le_bytes(), 4, "t").is_err());
        let forged = br#"{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        assert!(parse_header(forged, 8, "t").err().unwrap().detail.contains("spans bytes 0..16"));
        let wrong = br#"{"x":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}"#;
        assert!(parse_header(wrong, 1, "t").err().unwrap().detail.contains("unsupported dtype \"Q4\""));
        let overlap = br#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#;
        assert!(parse_header(overlap, 3, "t").err().unwrap().detail.contains("overlap"));
    }
}
