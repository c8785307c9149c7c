//! The safetensors format (8-byte little-endian header length, a JSON header
//! of `name -> {dtype, shape, data_offsets}` plus `__metadata__`, then the
//! bytes), written and read with every bound checked: files on disk are
//! untrusted input.

use std::collections::BTreeMap;

use crate::dtype::DType;
use crate::error::Result;

/// Headers larger than this are refused before anything is allocated for them.
const MAX_HEADER: u64 = 64 << 20;

/// A tensor as stored: its bytes borrowed from the file being read.
pub struct Entry<'a> {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub data: &'a [u8],
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

/// Parses a whole file; `what` names it in errors (`E_CKPT_FORMAT`).
pub fn decode<'a>(bytes: &'a [u8], what: &str) -> Result<(Vec<Entry<'a>>, BTreeMap<String, String>)> {
    let bad = |why: String| crate::err!(E_CKPT_FORMAT, "{what}: {why}");
    if bytes.len() < 8 {
        return Err(bad(format!("{} bytes is too short for a safetensors file", bytes.len())));
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if n > MAX_HEADER || n > (bytes.len() - 8) as u64 {
        return Err(bad(format!("header length {n} exceeds the file ({} bytes) or the {MAX_HEADER}-byte limit", bytes.len())));
    }
    let header_end = 8 + n as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..header_end]).map_err(|e| bad(format!("header is not a JSON object: {e}")))?;
    let data = &bytes[header_end..];
    let mut metadata = BTreeMap::new();
    let mut entries = Vec::new();
    let mut spans = Vec::new();
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
        let offs: Vec<u64> = obj
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|d| d.as_u64()).collect())
            .filter(|o: &Vec<u64>| o.len() == 2)
            .ok_or_else(|| bad(format!("tensor {name:?} has invalid data_offsets")))?;
        let (begin, end) = (offs[0], offs[1]);
        if begin > end || end > data.len() as u64 {
            return Err(bad(format!("tensor {name:?} spans bytes {begin}..{end} of a {}-byte data section", data.len())));
        }
        let numel = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        let want = numel.and_then(|n| n.checked_mul(dtype.size() as u64));
        if want != Some(end - begin) {
            return Err(bad(format!("tensor {name:?}: {} bytes do not hold shape {shape:?} of {dname}", end - begin)));
        }
        spans.push((begin, end, name.clone()));
        entries.push(Entry { name, dtype, shape, data: &data[begin as usize..end as usize] });
    }
    spans.sort();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(bad(format!("tensors {:?} and {:?} overlap", w[0].2, w[1].2)));
        }
    }
    Ok((entries, metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_hostile_headers() {
        let e = Spec { name: "param_0".into(), dtype: DType::F32, shape: vec![2], nbytes: 8 };
        let mut meta = BTreeMap::new();
        meta.insert("k".to_string(), "v".to_string());
        let mut bytes = header(&[e], &meta);
        bytes.extend_from_slice(&[0, 0, 128, 63, 0, 0, 0, 64]);
        let (back, m) = decode(&bytes, "t").unwrap();
        assert_eq!(back[0].data, &[0, 0, 128, 63, 0, 0, 0, 64]);
        assert_eq!(m["k"], "v");
        let mut huge = bytes.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&huge, "t").err().unwrap().detail.contains("exceeds"));
        let forged = br#"{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        let mut f = (forged.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(forged);
        f.extend_from_slice(&[0u8; 8]);
        assert!(decode(&f, "t").err().unwrap().detail.contains("spans bytes 0..16"));
        let wrong = br#"{"x":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}"#;
        let mut w = (wrong.len() as u64).to_le_bytes().to_vec();
        w.extend_from_slice(wrong);
        w.push(0);
        assert!(decode(&w, "t").err().unwrap().detail.contains("unsupported dtype \"Q4\""));
    }
}
