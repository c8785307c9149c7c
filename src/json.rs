//! Parsing of the small JSON inputs of the ABI: integer arrays used as shapes
//! and handle lists. Hand-written so every rejection names the offending text
//! precisely (`element 1 is not an integer: 2.5`).

use crate::error::Result;

/// Parses `[1, -2, 3]` into integers. `what` names the argument in messages.
pub fn int_list(text: &str, what: &str) -> Result<Vec<i64>> {
    let fail = |why: String| crate::err!(E_INVALID_ARG, "{what} {text:?}: {why}");
    let body = text.trim();
    let inner = body
        .strip_prefix('[')
        .and_then(|b| b.strip_suffix(']'))
        .ok_or_else(|| fail("expected a JSON array of integers such as [2,3]".into()))?;
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    inner
        .split(',')
        .enumerate()
        .map(|(i, raw)| {
            let tok = raw.trim();
            element(tok).map_err(|why| fail(format!("element {i} {why}")))
        })
        .collect()
}

fn element(tok: &str) -> std::result::Result<i64, String> {
    if tok.is_empty() {
        return Err("is missing (empty element or trailing comma)".into());
    }
    if tok.starts_with('[') || tok.ends_with(']') {
        return Err(format!("is a nested array: {tok}"));
    }
    let digits = tok.strip_prefix('-').unwrap_or(tok);
    let is_int = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !(digits.len() > 1 && digits.starts_with('0'));
    if is_int {
        return tok.parse::<i64>().map_err(|_| format!("overflows int64: {tok}"));
    }
    let is_number = tok.parse::<f64>().is_ok() && tok.bytes().all(|b| b"+-.0123456789eE".contains(&b));
    if is_number {
        Err(format!("is not an integer: {tok}"))
    } else {
        Err(format!("is not a number: {tok}"))
    }
}

/// A shape for creating a tensor: every dimension `>= 0`.
pub fn shape(text: &str) -> Result<Vec<i64>> {
    let dims = int_list(text, "shape")?;
    if let Some((i, d)) = dims.iter().enumerate().find(|(_, d)| **d < 0) {
        crate::bail!(E_INVALID_ARG, "shape {text:?}: dimension {i} is negative ({d})");
    }
    Ok(dims)
}

/// A target shape for reshape/view: at most one `-1`, other dimensions `>= 0`.
pub fn target_shape(text: &str) -> Result<Vec<i64>> {
    let dims = int_list(text, "shape")?;
    if let Some((i, d)) = dims.iter().enumerate().find(|(_, d)| **d < -1) {
        crate::bail!(E_INVALID_ARG, "shape {text:?}: dimension {i} is negative ({d}); only -1 may be inferred");
    }
    if dims.iter().filter(|d| **d == -1).count() > 1 {
        crate::bail!(E_INVALID_ARG, "shape {text:?}: only one dimension may be -1");
    }
    Ok(dims)
}

/// A list of handles: positive integers (validity is checked by the registry).
pub fn handle_list(text: &str) -> Result<Vec<i64>> {
    int_list(text, "handle list")
}

/// Writes integers as a compact JSON array: `[2,3]`.
pub fn write_int_list(values: &[i64]) -> String {
    let mut s = String::with_capacity(2 + values.len() * 4);
    s.push('[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&v.to_string());
    }
    s.push(']');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(r: Result<Vec<i64>>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn parses_and_rejects_precisely() {
        assert_eq!(int_list(" [ 2 , -3,4 ] ", "shape").unwrap(), vec![2, -3, 4]);
        assert_eq!(int_list("[]", "shape").unwrap(), Vec::<i64>::new());
        assert_eq!(msg(int_list("[2,2.5]", "shape")), "E_INVALID_ARG: shape \"[2,2.5]\": element 1 is not an integer: 2.5");
        assert_eq!(
            msg(int_list("[99999999999999999999]", "shape")),
            "E_INVALID_ARG: shape \"[99999999999999999999]\": element 0 overflows int64: 99999999999999999999"
        );
        assert!(msg(int_list("[[1],2]", "shape")).contains("element 0 is a nested array"));
        assert!(msg(int_list("[1,\"x\"]", "shape")).contains("element 1 is not a number: \"x\""));
        assert!(msg(int_list("[1,]", "shape")).contains("element 1 is missing"));
        assert!(msg(int_list("2,3", "shape")).contains("expected a JSON array"));
        assert!(msg(int_list("[01]", "shape")).contains("is not an integer: 01"));
        assert!(msg(shape("[2,-1]")).contains("dimension 1 is negative (-1)"));
        assert_eq!(target_shape("[-1,4]").unwrap(), vec![-1, 4]);
        assert!(msg(target_shape("[-1,-1]")).contains("only one dimension may be -1"));
        assert_eq!(write_int_list(&[2, 3]), "[2,3]");
    }
}
