//! `torch.einsum`'s equation, read as ATen reads it, and the contraction
//! order: both backends run the same plan (`enkai_einsum_path` shows it).
//!
//! Labels are numbered as ATen numbers them (`A`..`Z` 0..25, `a`..`z`
//! 26..51: the implicit output lists them in that order); the dims an
//! ellipsis covers become labels 52.. aligned from the right, so that an
//! operand whose ellipsis covers fewer dims broadcasts against the others.
//!
//! The order: with `n` operands, every pairwise order is a binary tree over
//! them, and the cost of contracting a subset does not depend on how the
//! rest was contracted (a label survives a contraction exactly when the
//! output or an operand outside the subset has it). So dynamic programming
//! over subsets finds the order of least FLOPs, by `opt_einsum`'s count
//! (`opt_einsum.helpers.flop_count`), in 3^n steps: that is its `optimal`
//! search's answer, found without its n! enumeration. Beyond `DP_MAX`
//! operands a greedy choice, as `opt_einsum`'s `greedy`.

use crate::error::Result;
use crate::json::write_int_list as fmt;

/// Letters are labels 0..52; ellipsis dims 52..MAX_LABELS.
const LETTERS: usize = 52;
const MAX_LABELS: usize = 128;
/// Operand counts up to this are planned exactly (3^12 subset pairs: milliseconds).
const DP_MAX: usize = 12;

type Mask = u128;

/// A parsed equation against its operands' shapes.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Each operand's label per dim, in dim order (a repeated label is a diagonal).
    pub inputs: Vec<Vec<usize>>,
    /// The result's labels in order.
    pub output: Vec<usize>,
    /// The size of each label (the largest: size-1 dims broadcast).
    pub sizes: Vec<i64>,
}

fn letter(c: u8) -> Option<usize> {
    match c {
        b'A'..=b'Z' => Some((c - b'A') as usize),
        b'a'..=b'z' => Some((c - b'a') as usize + 26),
        _ => None,
    }
}

/// The letter of label `l` (an ellipsis dim prints as `...`).
pub fn label_name(l: usize) -> String {
    match l {
        0..=25 => char::from(b'A' + l as u8).to_string(),
        26..=51 => char::from(b'a' + (l - 26) as u8).to_string(),
        _ => "...".to_string(),
    }
}

/// One side's terms: labels with `None` for an ellipsis, split at commas.
fn terms(side: &str, offset: usize, what: &str) -> Result<Vec<Vec<Option<usize>>>> {
    let bytes = side.as_bytes();
    let mut out = vec![Vec::new()];
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b' ' => {}
            b',' => out.push(Vec::new()),
            b'.' => {
                let term = out.len() - 1;
                if !bytes[i..].starts_with(b"...") {
                    crate::bail!(E_INVALID_ARG, "einsum(): found '.' for {what} {term} that is not part of any ellipsis");
                }
                let cur = out.last_mut().expect("one term at least");
                if cur.contains(&None) {
                    crate::bail!(E_INVALID_ARG, "einsum(): found '.' for {what} {term} for which an ellipsis was already found");
                }
                cur.push(None);
                i += 2;
            }
            _ => match letter(c) {
                Some(l) => out.last_mut().expect("one term at least").push(Some(l)),
                None => crate::bail!(
                    E_INVALID_ARG,
                    "einsum(): invalid subscript given at index {} in the equation string, subscripts must be in [a-zA-Z]",
                    offset + i
                ),
            },
        }
        i += 1;
    }
    Ok(out)
}

/// Parses `equation` against the operands' `shapes`, as `torch.einsum` does.
/// Errors: `E_INVALID_ARG` (the equation, or its operand count), `E_SHAPE`
/// (a rank or size that does not fit), each saying `einsum()`.
pub fn parse(equation: &str, shapes: &[&[i64]]) -> Result<Spec> {
    if shapes.is_empty() {
        crate::bail!(E_INVALID_ARG, "einsum(): must provide at least one operand");
    }
    let (lhs, rhs) = match equation.find("->") {
        Some(p) => (&equation[..p], Some(&equation[p + 2..])),
        None => (equation, None),
    };
    let ins = terms(lhs, 0, "operand")?;
    if ins.len() > shapes.len() {
        crate::bail!(E_INVALID_ARG, "einsum(): fewer operands were provided than specified in the equation ({} given, {} in {equation:?})", shapes.len(), ins.len());
    }
    if ins.len() < shapes.len() {
        crate::bail!(E_INVALID_ARG, "einsum(): more operands were provided than specified in the equation ({} given, {} in {equation:?})", shapes.len(), ins.len());
    }
    // The dims each ellipsis covers, and the most any covers.
    let mut ell = 0usize;
    for (i, (t, s)) in ins.iter().zip(shapes).enumerate() {
        let named = t.iter().filter(|l| l.is_some()).count();
        let has_ell = named < t.len();
        if (has_ell && named > s.len()) || (!has_ell && named != s.len()) {
            crate::bail!(
                E_SHAPE,
                "einsum(): the number of subscripts in the equation ({named}) {} the number of dimensions ({}) for operand {i}{}",
                if has_ell { "is more than" } else { "does not match" },
                s.len(),
                if has_ell { "" } else { " and no ellipsis was given" }
            );
        }
        if has_ell {
            ell = ell.max(s.len() - named);
        }
    }
    if LETTERS + ell > MAX_LABELS {
        crate::bail!(E_SHAPE, "einsum(): an ellipsis covers {ell} dims, more than the {} supported", MAX_LABELS - LETTERS);
    }
    let mut inputs = Vec::with_capacity(ins.len());
    let mut sizes = vec![-1i64; LETTERS + ell];
    let mut count = vec![0usize; LETTERS];
    for (i, (t, s)) in ins.iter().zip(shapes).enumerate() {
        let covered = s.len() + 1 - t.len();
        let mut labels = Vec::with_capacity(s.len());
        for l in t {
            match l {
                Some(l) => {
                    count[*l] += 1;
                    labels.push(*l);
                }
                None => labels.extend((ell - covered..ell).map(|k| LETTERS + k)),
            }
        }
        for (d, (&l, &n)) in labels.iter().zip(s.iter()).enumerate() {
            if let Some(first) = labels[..d].iter().position(|&m| m == l) {
                if s[first] != n {
                    crate::bail!(E_SHAPE, "einsum(): subscript {} is repeated for operand {i} but the sizes don't match, {n} != {}", label_name(l), s[first]);
                }
                continue;
            }
            let have = &mut sizes[l];
            if *have == -1 || *have == 1 {
                *have = n;
            } else if n != 1 && n != *have {
                let all: Vec<String> = shapes.iter().map(|s| fmt(s)).collect();
                crate::bail!(E_SHAPE, "einsum(): operands do not broadcast: subscript {} has sizes {} and {n} (shapes {})", label_name(l), *have, all.join(", "));
            }
        }
        inputs.push(labels);
    }
    let output = match rhs {
        None => (LETTERS..LETTERS + ell).chain((0..LETTERS).filter(|&l| count[l] == 1)).collect(),
        Some(rhs) => {
            let t = terms(rhs, lhs.len() + 2, "output")?;
            if t.len() != 1 {
                crate::bail!(E_INVALID_ARG, "einsum(): the output subscripts {rhs:?} hold a comma");
            }
            let mut out = Vec::new();
            for l in &t[0] {
                match l {
                    None => out.extend(LETTERS..LETTERS + ell),
                    Some(l) => {
                        if out.contains(l) {
                            crate::bail!(E_INVALID_ARG, "einsum(): output subscript {} appears more than once in the output", label_name(*l));
                        }
                        if count[*l] == 0 {
                            crate::bail!(E_INVALID_ARG, "einsum(): output subscript {} does not appear in the equation for any input operand", label_name(*l));
                        }
                        out.push(*l);
                    }
                }
            }
            out
        }
    };
    Ok(Spec { inputs, output, sizes })
}

fn mask_of(labels: &[usize]) -> Mask {
    labels.iter().fold(0, |m, &l| m | (1 << l))
}

impl Spec {
    fn size(&self, m: Mask) -> u128 {
        let mut p: u128 = 1;
        let mut m = m;
        while m != 0 {
            let l = m.trailing_zeros() as usize;
            p = p.saturating_mul(self.sizes[l].max(0) as u128);
            m &= m - 1;
        }
        p
    }

    /// `opt_einsum.helpers.flop_count` of contracting terms with label sets
    /// `parts` into the set `kept`.
    fn flops(&self, parts: &[Mask], kept: Mask) -> u128 {
        let all = parts.iter().fold(0, |a, &m| a | m);
        let factor = (parts.len().max(2) - 1) as u128 + u128::from(all & !kept != 0);
        self.size(all).saturating_mul(factor)
    }

    /// The contraction order, in `opt_einsum`'s positional form (each step
    /// names two places in the current list; the result goes to its end),
    /// and its FLOPs by `opt_einsum`'s count.
    pub fn plan(&self) -> (Vec<Vec<usize>>, u128) {
        let n = self.inputs.len();
        let sets: Vec<Mask> = self.inputs.iter().map(|t| mask_of(t)).collect();
        let out = mask_of(&self.output);
        if n == 1 {
            return (vec![vec![0]], self.flops(&sets, out & sets[0]));
        }
        let steps = if n <= DP_MAX { self.optimal(&sets, out) } else { self.greedy(&sets, out) };
        // Ids 0..n are the operands, n.. the results of `steps` in order.
        let mut list: Vec<usize> = (0..n).collect();
        let mut path = Vec::with_capacity(n - 1);
        let mut flops: u128 = 0;
        let mut term: Vec<Mask> = sets.clone();
        for (k, &(a, b)) in steps.iter().enumerate() {
            let pa = list.iter().position(|&x| x == a).expect("a live id");
            let pb = list.iter().position(|&x| x == b).expect("a live id");
            let (lo, hi) = (pa.min(pb), pa.max(pb));
            list.remove(hi);
            list.remove(lo);
            let others = list.iter().fold(out, |m, &x| m | term[x]);
            let kept = (term[a] | term[b]) & others;
            flops = flops.saturating_add(self.flops(&[term[a], term[b]], kept));
            term.push(kept);
            list.push(n + k);
            path.push(vec![lo, hi]);
        }
        (path, flops)
    }

    /// The least-FLOPs order, by dynamic programming over subsets: pairs of ids as `plan` reads them.
    fn optimal(&self, sets: &[Mask], out: Mask) -> Vec<(usize, usize)> {
        let n = sets.len();
        let full = (1usize << n) - 1;
        let mut union = vec![0 as Mask; 1 << n];
        for s in 1..=full {
            let low = s.trailing_zeros() as usize;
            union[s] = union[s & (s - 1)] | sets[low];
        }
        // The labels the result of contracting subset `s` keeps.
        let term = |s: usize| -> Mask {
            if s.count_ones() == 1 {
                sets[s.trailing_zeros() as usize]
            } else {
                union[s] & (out | union[full ^ s])
            }
        };
        let mut cost = vec![u128::MAX; 1 << n];
        let mut split = vec![0usize; 1 << n];
        for i in 0..n {
            cost[1 << i] = 0;
        }
        for s in 1..=full {
            if s.count_ones() < 2 {
                continue;
            }
            let kept = term(s);
            let low = s & s.wrapping_neg();
            // Each split once: the part holding the lowest operand.
            let rest = s ^ low;
            let mut sub = rest;
            loop {
                let a = sub | low;
                let b = s ^ a;
                if b != 0 {
                    let c = cost[a].saturating_add(cost[b]);
                    if c < cost[s] {
                        let c = c.saturating_add(self.flops(&[term(a), term(b)], kept));
                        if c < cost[s] {
                            cost[s] = c;
                            split[s] = a;
                        }
                    }
                }
                if sub == 0 {
                    break;
                }
                sub = (sub - 1) & rest;
            }
        }
        // The tree's contractions in post-order, named by ids.
        let mut steps = Vec::with_capacity(n - 1);
        fn emit(s: usize, split: &[usize], steps: &mut Vec<(usize, usize)>, n: usize) -> usize {
            if s.count_ones() == 1 {
                return s.trailing_zeros() as usize;
            }
            let a = emit(split[s], split, steps, n);
            let b = emit(s ^ split[s], split, steps, n);
            steps.push((a, b));
            n + steps.len() - 1
        }
        emit(full, &split, &mut steps, n);
        steps
    }

    /// `opt_einsum`'s greedy rule: contract the pair whose result is
    /// smallest against its inputs, among pairs that share a label (any
    /// pair when none does), cheaper FLOPs breaking ties.
    fn greedy(&self, sets: &[Mask], out: Mask) -> Vec<(usize, usize)> {
        let n = sets.len();
        let mut live: Vec<(usize, Mask)> = sets.iter().copied().enumerate().collect();
        let mut steps = Vec::with_capacity(n - 1);
        while live.len() > 1 {
            let mut best: Option<(bool, i128, u128, usize, usize, Mask)> = None;
            for i in 0..live.len() {
                for j in i + 1..live.len() {
                    let (a, b) = (live[i].1, live[j].1);
                    let others = live.iter().enumerate().filter(|&(k, _)| k != i && k != j).fold(out, |m, (_, t)| m | t.1);
                    let kept = (a | b) & others;
                    let shares = a & b != 0;
                    let score = self.size(kept) as i128 - self.size(a) as i128 - self.size(b) as i128;
                    let flops = self.flops(&[a, b], kept);
                    let key = (!shares, score, flops);
                    if best.is_none_or(|x| key < (x.0, x.1, x.2)) {
                        best = Some((!shares, score, flops, i, j, kept));
                    }
                }
            }
            let (_, _, _, i, j, kept) = best.expect("two live terms");
            steps.push((live[i].0, live[j].0));
            let id = n + steps.len() - 1;
            live.remove(j);
            live.remove(i);
            live.push((id, kept));
        }
        steps
    }
}

/// Checks a caller's path (flattened positional pairs) for `n` operands.
pub fn check_path(path: &[i64], n: usize) -> Result<()> {
    if path.len() != 2 * n.saturating_sub(1) {
        crate::bail!(E_INVALID_ARG, "einsum(): a path for {n} operands has {} pairs, got {} numbers", n.saturating_sub(1), path.len());
    }
    for (k, p) in path.chunks(2).enumerate() {
        let live = (n - k) as i64;
        if p[0] == p[1] || p.iter().any(|&i| i < 0 || i >= live) {
            crate::bail!(E_INVALID_ARG, "einsum(): step {k} of the path contracts {:?}, which is not two of the {live} terms left", p);
        }
    }
    Ok(())
}

/// The path `enkai_einsum_path` answers: `{"path": [[0, 1], ...], "flops": N}`
/// for `shapes_json`, a JSON list of shapes (one per operand).
pub fn path_json(equation: &str, shapes_json: &str) -> Result<String> {
    let v: serde_json::Value = serde_json::from_str(shapes_json).map_err(|e| crate::err!(E_INVALID_ARG, "einsum(): shapes_json is not valid JSON: {e}"))?;
    let Some(list) = v.as_array() else { crate::bail!(E_INVALID_ARG, "einsum(): shapes_json must be a list of shapes") };
    let mut shapes = Vec::with_capacity(list.len());
    for (k, s) in list.iter().enumerate() {
        let dims = s.as_array().and_then(|d| d.iter().map(|x| x.as_i64().filter(|&n| n >= 0)).collect::<Option<Vec<i64>>>());
        match dims {
            Some(d) => shapes.push(d),
            None => crate::bail!(E_INVALID_ARG, "einsum(): shape {k} of shapes_json is not a list of non-negative integers: {s}"),
        }
    }
    let refs: Vec<&[i64]> = shapes.iter().map(|s| s.as_slice()).collect();
    let spec = parse(equation, &refs)?;
    let (path, flops) = spec.plan();
    let steps: Vec<String> = path.iter().map(|p| format!("[{}]", p.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", "))).collect();
    Ok(format!("{{\"path\": [{}], \"flops\": {flops}}}", steps.join(", ")))
}

/// Core's completion of an `einsum` call (`opcall`): the equation checked
/// against the operands on both backends, and the planned order filled in
/// as `path` where the caller gave none (libtorch runs the path it is
/// handed; without one it goes left to right).
pub fn complete(equation: &str, path: Option<&[i64]>, shapes: &[&[i64]]) -> Result<Option<Vec<i64>>> {
    let spec = parse(equation, shapes)?;
    if let Some(p) = path {
        check_path(p, shapes.len())?;
        return Ok(None);
    }
    if shapes.len() < 3 {
        return Ok(None);
    }
    let (path, _) = spec.plan();
    Ok(Some(path.into_iter().flatten().map(|i| i as i64).collect()))
}

/// Core's completion of an `einsum` call (`vocab::arg_rule`): the
/// operands' dtypes equal, the equation and a caller's path checked, and
/// the planned path filled in.
pub fn fill(sig: &super::Sig, args: &mut [super::Value], ins: &[super::In]) -> Result<()> {
    use super::Value;
    let equation = match sig.param("equation").map(|i| &args[i]) {
        Some(Value::Str(s)) => s.clone(),
        _ => String::new(),
    };
    let items: Vec<super::In> = match sig.param("tensors").map(|i| &args[i]) {
        Some(Value::Tensors(items)) => items.iter().map(|i| i.and_then(|i| ins.get(i).copied().flatten())).collect(),
        _ => Vec::new(),
    };
    let mut shapes = Vec::with_capacity(items.len());
    for (k, it) in items.iter().enumerate() {
        let Some((s, d)) = it else { crate::bail!(E_INVALID_ARG, "einsum(): operand {k} is missing") };
        if let Some((_, d0)) = items[0] {
            if *d != d0 {
                crate::bail!(E_DTYPE, "einsum(): operand {k} is {} where operand 0 is {} (the operands must share one dtype)", d.name(), d0.name());
            }
        }
        shapes.push(*s);
    }
    let at = sig.param("path");
    let given = match at.map(|i| &args[i]) {
        Some(Value::Ints(p)) => Some(p.clone()),
        _ => None,
    };
    if let (Some(i), Some(p)) = (at, complete(&equation, given.as_deref(), &shapes)?) {
        args[i] = Value::Ints(p);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(eq: &str, shapes: &[&[i64]]) -> (Vec<Vec<usize>>, u128) {
        parse(eq, shapes).unwrap().plan()
    }

    #[test]
    fn implicit_output_is_ellipsis_then_single_labels_upper_first() {
        let s = parse("ba,Ab...", &[&[2, 3], &[4, 2, 5, 6]]).unwrap();
        assert_eq!(s.output, vec![52, 53, 0, 26]);
        assert_eq!(s.sizes[52..], [5, 6]);
    }

    #[test]
    fn chain_order_beats_left_to_right() {
        // ij,jk,kl->il with a tiny k: (B C) first, then A.
        let (path, flops) = plan("ij,jk,kl->il", &[&[100, 100], &[100, 2], &[2, 100]]);
        assert_eq!(path, vec![vec![0, 1], vec![0, 1]]);
        assert_eq!(flops, 2 * 100 * 100 * 2 + 2 * 100 * 2 * 100);
    }

    #[test]
    fn errors_name_einsum() {
        for (eq, shapes) in [("ij,jk", vec![vec![2, 3]]), ("i.j", vec![vec![2, 3]]), ("i->ii", vec![vec![2]]), ("i->j", vec![vec![2]]), ("i#", vec![vec![2]])] {
            let r: Vec<&[i64]> = shapes.iter().map(|s| s.as_slice()).collect();
            let e = parse(eq, &r).unwrap_err();
            assert!(e.detail.starts_with("einsum()"), "{eq}: {}", e.detail);
        }
        assert!(parse("ij,jk", &[&[2, 3], &[4, 5]]).unwrap_err().detail.contains("broadcast"));
        assert!(check_path(&[0, 3, 0, 1], 3).is_err());
        assert!(check_path(&[1, 1, 0, 1], 3).is_err());
        assert!(check_path(&[0, 2, 0, 2], 3).is_err());
        assert!(check_path(&[0, 1], 3).is_err());
        assert!(check_path(&[1, 2, 0, 1], 3).is_ok());
    }

    #[test]
    fn both_searches_contract_every_operand_once() {
        let shapes: Vec<Vec<i64>> = (0..5).map(|i| vec![2 + i, 3 + i]).collect();
        let eq = "ab,bc,cd,de,ef->af";
        let mut s = parse(eq, &shapes.iter().map(|s| s.as_slice()).collect::<Vec<_>>()).unwrap();
        s.sizes = vec![2; s.sizes.len()];
        let sets: Vec<Mask> = s.inputs.iter().map(|t| mask_of(t)).collect();
        assert_eq!(s.greedy(&sets, mask_of(&s.output)).len(), 4);
        assert_eq!(s.optimal(&sets, mask_of(&s.output)).len(), 4);
    }
}
