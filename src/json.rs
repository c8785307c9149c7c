//! Parsing of the small JSON inputs of the ABI: integer arrays used as shapes
//! and handle lists. Hand-written so every rejection names the offending text
//! precisely (`element 1 is not an integer: 2.5`).

use crate::error::Result;

/// Parses `[1, -2, 3]` into integers. `what` names the argument in messages.
pub fn int_list(text: &str, what: &str) -> Result<Vec<i64>> {
    // Shapes are parsed on every tensor-creating call: take the common,
    // well-formed case in one pass and leave everything else, errors
    // included, to the precise parser below.
    match quick_int_list(str_bytes(text)) {
        Some(v) => Ok(v.to_vec()),
        None => precise_int_list(text, what),
    }
}

/// Reads a `&str` as the quick parser does a C string: 0 past the end, and
/// an embedded NUL (never in a C string) as a byte the parser declines.
fn str_bytes(text: &str) -> impl Fn(usize) -> u8 + '_ {
    |i| text.as_bytes().get(i).map_or(0, |&c| if c == 0 { 0xff } else { c })
}

/// Dimensions held inline up to this rank, so that parsing a usual shape allocates nothing.
pub const INLINE_DIMS: usize = 8;

/// A parsed shape: on the stack up to [`INLINE_DIMS`], on the heap beyond.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dims {
    Inline(u8, [i64; INLINE_DIMS]),
    Heap(Vec<i64>),
}

impl std::ops::Deref for Dims {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        match self {
            Dims::Inline(n, d) => &d[..*n as usize],
            Dims::Heap(v) => v,
        }
    }
}

/// One pass over `[d,d,...]` (at most [`INLINE_DIMS`] elements) with
/// optional spaces after `[` and around commas; `at(i)` is byte `i`, 0 at the
/// end. Bytes are read in order and never past the first 0, so `at` may read
/// a C string directly. `None` for anything else (leading zeros, overflow,
/// floats, other whitespace, more dims...), which the precise parser then
/// accepts or names.
pub fn quick_int_list(at: impl Fn(usize) -> u8) -> Option<Dims> {
    let mut d = [0i64; INLINE_DIMS];
    let mut n = 0;
    if at(0) != b'[' {
        return None;
    }
    let mut i = 1;
    let skip = |i: &mut usize| {
        while at(*i) == b' ' {
            *i += 1;
        }
    };
    skip(&mut i);
    if at(i) == b']' {
        return (at(i + 1) == 0).then_some(Dims::Inline(0, d));
    }
    loop {
        let neg = at(i) == b'-';
        i += usize::from(neg);
        let start = i;
        let first = at(i);
        let mut v: i64 = 0;
        let mut c = first;
        while c.is_ascii_digit() {
            // Accumulate negatively so i64::MIN parses like str::parse does.
            v = v.checked_mul(10)?.checked_sub(i64::from(c - b'0'))?;
            i += 1;
            c = at(i);
        }
        let len = i - start;
        if len == 0 || (len > 1 && first == b'0') || n == INLINE_DIMS {
            return None;
        }
        d[n] = if neg { v } else { v.checked_neg()? };
        n += 1;
        skip(&mut i);
        match at(i) {
            b',' => {
                i += 1;
                skip(&mut i);
            }
            b']' if at(i + 1) == 0 => return Some(Dims::Inline(n as u8, d)),
            _ => return None,
        }
    }
}

/// JSON's whitespace (RFC 8259): space, tab, newline, carriage return, and no other.
fn json_trim(s: &str) -> &str {
    s.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'))
}

fn precise_int_list(text: &str, what: &str) -> Result<Vec<i64>> {
    let fail = |why: String| crate::err!(E_INVALID_ARG, "{what} {text:?}: {why}");
    let body = json_trim(text);
    let inner = body
        .strip_prefix('[')
        .and_then(|b| b.strip_suffix(']'))
        .ok_or_else(|| fail("expected a JSON array of integers such as [2,3]".into()))?;
    if json_trim(inner).is_empty() {
        return Ok(Vec::new());
    }
    inner
        .split(',')
        .enumerate()
        .map(|(i, raw)| {
            let tok = json_trim(raw);
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
/// The most dimensions a tensor may have. No model comes near it, and a rank
/// from one hostile string would otherwise be copied into every derived
/// tensor's metadata and every checkpoint header.
pub const MAX_DIMS: usize = 64;

fn dims_within(text: &str, dims: Vec<i64>) -> Result<Vec<i64>> {
    if dims.len() > MAX_DIMS {
        let head: String = text.chars().take(40).collect();
        crate::bail!(E_INVALID_ARG, "shape {head:?}...: {} dimensions, more than the limit of {MAX_DIMS}", dims.len());
    }
    Ok(dims)
}

/// What a shape argument may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DimsRule {
    /// A shape to create a tensor with: every dimension `>= 0`.
    Shape,
    /// A reshape/view target: at most one `-1`, other dimensions `>= 0`.
    Target,
}

impl DimsRule {
    /// Why `dims` break this rule (the message after `shape "...": `), or `None`.
    pub fn fault(self, dims: &[i64]) -> Option<String> {
        let least = if self == DimsRule::Target { -1 } else { 0 };
        if let Some((i, d)) = dims.iter().enumerate().find(|(_, d)| **d < least) {
            return Some(match self {
                DimsRule::Shape => format!("dimension {i} is negative ({d})"),
                DimsRule::Target => format!("dimension {i} is negative ({d}); only -1 may be inferred"),
            });
        }
        (dims.iter().filter(|d| **d == -1).count() > 1).then(|| "only one dimension may be -1".to_string())
    }
}

/// The dims of the one-pass parser, when it takes the text `at` reads and
/// they obey `rule`; `None` leaves the text to [`precise_dims`].
pub fn quick_dims(rule: DimsRule, at: impl Fn(usize) -> u8) -> Option<Dims> {
    quick_int_list(at).filter(|d| rule.fault(d).is_none())
}

/// The dims of `text` under `rule`, or the precise reason they are refused.
pub fn precise_dims(rule: DimsRule, text: &str) -> Result<Dims> {
    let dims = dims_within(text, precise_int_list(text, "shape")?)?;
    if let Some(why) = rule.fault(&dims) {
        crate::bail!(E_INVALID_ARG, "shape {text:?}: {why}");
    }
    Ok(Dims::Heap(dims))
}

/// A shape argument given as a `&str`: the quick path, else the precise one.
pub fn dims(rule: DimsRule, text: &str) -> Result<Dims> {
    match quick_dims(rule, str_bytes(text)) {
        Some(d) => Ok(d),
        None => precise_dims(rule, text),
    }
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
        let shape = |t| dims(DimsRule::Shape, t);
        let target = |t| dims(DimsRule::Target, t);
        assert!(shape("[2,-1]").unwrap_err().to_string().contains("dimension 1 is negative (-1)"));
        assert!(shape("[2, -1]").unwrap_err().to_string().contains("dimension 1 is negative (-1)"));
        assert_eq!(target("[-1,4]").unwrap().to_vec(), vec![-1, 4]);
        assert!(target("[-1,-1]").unwrap_err().to_string().contains("only one dimension may be -1"));
        assert!(target("[2,-2]").unwrap_err().to_string().contains("dimension 1 is negative (-2); only -1 may be inferred"));
        assert_eq!(write_int_list(&[2, 3]), "[2,3]");
    }

    /// The one-pass parser is only a shortcut: on every input it either
    /// declines or agrees with the precise parser.
    #[test]
    fn quick_path_agrees_with_the_precise_parser() {
        let mut texts: Vec<String> = [
            "[]", "[ ]", "[4]", "[2,3]", "[ 2 , 3 ]", "[-1,4]", "[0]", "[00]", "[-0]", "[-]", "[1,]", "[,1]",
            "[1 2]", "[1]x", " [1]", "[1] ", "[1", "1]", "[2.5]", "[1e3]", "[+1]", "[[1]]", "[\t1]",
            "[9223372036854775807]", "[9223372036854775808]", "[-9223372036854775808]", "[-9223372036854775809]",
            "[1,2,3,4,5,6,7,8]", "[1,2,3,4,5,6,7,8,9]", "[1]\0", "[1\0]",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Random strings over the alphabet the parsers care about.
        let alphabet = b"[]0123456789-, .e+";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut t = String::from("[");
            for _ in 0..(x % 9) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                t.push(alphabet[(x % alphabet.len() as u64) as usize] as char);
            }
            if !x.is_multiple_of(3) {
                t.push(']');
            }
            texts.push(t);
        }
        let quick = |t: &str| quick_int_list(str_bytes(t)).map(|d| d.to_vec());
        for t in &texts {
            if let Some(v) = quick(t) {
                assert_eq!(precise_int_list(t, "shape").ok(), Some(v), "{t:?}");
            }
        }
        assert_eq!(quick("[ 2 , -3,4 ]"), Some(vec![2, -3, 4]));
        assert_eq!(quick("[-9223372036854775808]"), Some(vec![i64::MIN]));
        assert_eq!(quick("[9223372036854775808]"), None);
        // more dims than fit inline, and embedded NULs, are left to the precise parser
        assert_eq!(quick("[1,2,3,4,5,6,7,8,9]"), None);
        assert_eq!(dims(DimsRule::Shape, "[1,2,3,4,5,6,7,8,9]").unwrap().to_vec(), (1..=9).collect::<Vec<_>>());
        assert_eq!(quick("[1]\0"), None);
    }
}
