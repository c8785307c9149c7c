//! Scaled dot-product attention as one fused, tiled kernel, forward and
//! backward (FlashAttention-2's algorithm): a block of queries meets the
//! keys a block at a time with an online softmax (running max and sum), so
//! no `[L, S]` score matrix is ever held — memory grows with L, not L² —
//! and the backward pass recomputes each score tile from the saved
//! log-sum-exp of every query row. Every tile product is a single-threaded
//! GEMM of the `gemm` crate; the pool splits the work by (batch entry,
//! query block) forward and by batch entry backward, so no two tasks write
//! the same rows.
//!
//! Semantics are `torch.nn.functional.scaled_dot_product_attention`'s: a
//! causal mask is top-left aligned (query i sees keys j ≤ i), an additive
//! bias (a float mask, or a bool mask turned into 0 / -inf) combines with
//! it, and a query row that sees no key gets a zero output and zero
//! gradients, as PyTorch's CPU kernels give.

use super::fused::{bigger, max, sum, Real};
use super::kernels::Ptr;
use super::par;
use super::simd::multiversion;

/// Query rows and key columns of one tile. A tile of scores (BR × BC) and
/// the query, key and value rows it reads stay in L2 at head sizes to 128.
const BR: usize = 64;
const BC: usize = 256;

/// One attention problem over `batch` entries, every operand contiguous.
pub struct Problem<'a, R> {
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
    pub scale: R,
    pub causal: bool,
    /// Per output batch entry: the entry of q, k, v and bias it reads.
    pub q_at: &'a [usize],
    pub k_at: &'a [usize],
    pub v_at: &'a [usize],
    pub bias_at: &'a [usize],
    /// `[.., L, E]`, `[.., S, E]`, `[.., S, Ev]`, optional additive bias `[.., L, S]`.
    pub q: &'a [R],
    pub k: &'a [R],
    pub v: &'a [R],
    pub bias: Option<&'a [R]>,
    /// Multipliers of the probabilities after the softmax (dropout: 0 or
    /// 1/(1-p)), `[batch, L, S]`; None without dropout.
    pub keep: Option<&'a [R]>,
}

impl<R: Real> Problem<'_, R> {
    fn batch(&self) -> usize {
        self.q_at.len()
    }

    /// The keys query block `i0..i1` meets: all, or under the causal mask those before `i1`.
    fn keys(&self, i1: usize) -> usize {
        if self.causal {
            self.s.min(i1)
        } else {
            self.s
        }
    }

    /// Scores of queries `i0..i0+br` against keys `j0..j0+bc` of entry `b`
    /// into `t` (row stride `bc`): scaled products, plus the bias, with
    /// masked-out positions at -inf.
    fn scores(&self, b: usize, i0: usize, br: usize, j0: usize, bc: usize, t: &mut [R]) {
        let (q, k) = (&self.q[(self.q_at[b] * self.l + i0) * self.e..], &self.k[(self.k_at[b] * self.s + j0) * self.e..]);
        // SAFETY: q holds br rows of e, k bc rows of e (j0 + bc ≤ s), t br × bc.
        unsafe { mm(br, bc, self.e, t.as_mut_ptr(), bc, false, q.as_ptr(), self.e, 1, k.as_ptr(), 1, self.e, self.scale) };
        if let Some(bias) = self.bias {
            let bias = &bias[self.bias_at[b] * self.l * self.s..];
            for (r, row) in t.chunks_exact_mut(bc).enumerate() {
                for (x, &a) in row.iter_mut().zip(&bias[(i0 + r) * self.s + j0..]) {
                    *x = *x + a;
                }
            }
        }
        if self.causal && j0 + bc > i0 + 1 {
            for (r, row) in t.chunks_exact_mut(bc).enumerate() {
                let first_hidden = (i0 + r + 1).saturating_sub(j0);
                row.iter_mut().skip(first_hidden).for_each(|x| *x = R::neg_infinity());
            }
        }
    }
}

/// `dst (m × n, row stride ld) = [dst +] alpha · a · b`, with `a` m × k and
/// `b` k × n given by row and column strides.
///
/// # Safety
/// The pointers must cover the given extents.
#[allow(clippy::too_many_arguments)]
unsafe fn mm<R: Real>(m: usize, n: usize, k: usize, dst: *mut R, ld: usize, acc: bool, a: *const R, a_rs: usize, a_cs: usize, b: *const R, b_rs: usize, b_cs: usize, alpha: R) {
    if k == 0 {
        if !acc {
            for i in 0..m {
                std::slice::from_raw_parts_mut(dst.add(i * ld), n).fill(R::zero());
            }
        }
        return;
    }
    gemm::gemm(m, n, k, dst, 1, ld as isize, acc, a, a_cs as isize, a_rs as isize, b, b_cs as isize, b_rs as isize, R::one(), alpha, false, false, false, gemm::Parallelism::None)
}

/// The forward pass: `out` `[batch, L, Ev]` and the log-sum-exp of every
/// query row `lse` `[batch, L]` (+inf for a row that sees no key).
pub fn forward<R: Real>(p: &Problem<R>, out: &mut [R], lse: &mut [R]) {
    let blocks = p.l.div_ceil(BR);
    let (po, pl) = (Ptr(out.as_mut_ptr()), Ptr(lse.as_mut_ptr()));
    let task = |t: usize| {
        let (b, i0) = (t / blocks, (t % blocks) * BR);
        let br = BR.min(p.l - i0);
        // SAFETY: task t writes rows i0..i0+br of entry b only.
        let (o, m) = unsafe {
            (std::slice::from_raw_parts_mut(po.at(((b * p.l + i0) * p.ev) as isize), br * p.ev), std::slice::from_raw_parts_mut(pl.at((b * p.l + i0) as isize), br))
        };
        forward_block(p, b, i0, br, o, m);
    };
    let tasks = p.batch() * blocks;
    if par::parallel(tasks * BR * p.s * (p.e + p.ev)) {
        par::for_each(tasks, &task);
    } else {
        (0..tasks).for_each(task);
    }
}

fn forward_block<R: Real>(p: &Problem<R>, b: usize, i0: usize, br: usize, o: &mut [R], lse: &mut [R]) {
    let mut t = vec![R::zero(); br * BC];
    let mut l = vec![R::zero(); br];
    lse.fill(R::neg_infinity()); // the running max until the end
    o.fill(R::zero());
    let v = &p.v[p.v_at[b] * p.s * p.ev..];
    let keep = p.keep.map(|k| &k[b * p.l * p.s..]);
    for j0 in (0..p.keys(i0 + br)).step_by(BC) {
        let bc = BC.min(p.keys(i0 + br) - j0);
        let t = &mut t[..br * bc];
        p.scores(b, i0, br, j0, bc, t);
        online_softmax(t, bc, lse, &mut l, o, p.ev);
        if let Some(keep) = keep {
            for (r, row) in t.chunks_exact_mut(bc).enumerate() {
                for (x, &z) in row.iter_mut().zip(&keep[(i0 + r) * p.s + j0..]) {
                    *x = *x * z;
                }
            }
        }
        // SAFETY: t is br × bc, v's rows j0.. hold bc × ev, o br × ev.
        unsafe { mm(br, p.ev, bc, o.as_mut_ptr(), p.ev, true, t.as_ptr(), bc, 1, v[j0 * p.ev..].as_ptr(), p.ev, 1, R::one()) };
    }
    for (r, orow) in o.chunks_exact_mut(p.ev).enumerate() {
        if l[r] == R::zero() {
            orow.fill(R::zero());
            lse[r] = R::infinity();
        } else {
            let inv = R::one() / l[r];
            orow.iter_mut().for_each(|x| *x = *x * inv);
            lse[r] = lse[r] + l[r].ln();
        }
    }
}

/// The gradients, each per output batch entry: `dq` `[batch, L, E]`, `dk`
/// `[batch, S, E]`, `dv` `[batch, S, Ev]` and, when asked, the bias's
/// `dbias` `[batch, L, S]`; the caller sums entries that share an input.
#[allow(clippy::too_many_arguments)]
pub fn backward<R: Real>(p: &Problem<R>, out: &[R], lse: &[R], g: &[R], dq: &mut [R], dk: &mut [R], dv: &mut [R], dbias: Option<&mut [R]>) {
    let (pq, pk, pv) = (Ptr(dq.as_mut_ptr()), Ptr(dk.as_mut_ptr()), Ptr(dv.as_mut_ptr()));
    let pb = dbias.map(|d| Ptr(d.as_mut_ptr()));
    let (l, s, e, ev) = (p.l, p.s, p.e, p.ev);
    let task = |b: usize| {
        // SAFETY: task b writes entry b's slabs only.
        let slab = |ptr: &Ptr<R>, n: usize| unsafe { std::slice::from_raw_parts_mut(ptr.at((b * n) as isize), n) };
        let db = pb.as_ref().map(|d| slab(d, l * s));
        backward_entry(p, b, &out[b * l * ev..(b + 1) * l * ev], &lse[b * l..(b + 1) * l], &g[b * l * ev..(b + 1) * l * ev], slab(&pq, l * e), slab(&pk, s * e), slab(&pv, s * ev), db);
    };
    if par::parallel(p.batch() * l * s * (e + ev)) {
        par::for_each(p.batch(), &task);
    } else {
        (0..p.batch()).for_each(task);
    }
}

#[allow(clippy::too_many_arguments)]
fn backward_entry<R: Real>(p: &Problem<R>, b: usize, o: &[R], lse: &[R], g: &[R], dq: &mut [R], dk: &mut [R], dv: &mut [R], mut dbias: Option<&mut [R]>) {
    let (s, e, ev) = (p.s, p.e, p.ev);
    dq.fill(R::zero());
    dk.fill(R::zero());
    dv.fill(R::zero());
    if let Some(d) = dbias.as_deref_mut() {
        d.fill(R::zero());
    }
    // D_i = Σ_c dO_ic O_ic = Σ_j P_ij dP_ij, the softmax backward's row term.
    let dd: Vec<R> = g.chunks_exact(ev).zip(o.chunks_exact(ev)).map(|(g, o)| g.iter().zip(o).fold(R::zero(), |a, (&g, &o)| a + g * o)).collect();
    let (q, k, v) = (&p.q[p.q_at[b] * p.l * e..], &p.k[p.k_at[b] * s * e..], &p.v[p.v_at[b] * s * ev..]);
    let keep = p.keep.map(|k| &k[b * p.l * s..]);
    let mut pt = vec![R::zero(); BR * BC];
    let mut dp = vec![R::zero(); BR * BC];
    for i0 in (0..p.l).step_by(BR) {
        let br = BR.min(p.l - i0);
        for j0 in (0..p.keys(i0 + br)).step_by(BC) {
            let bc = BC.min(p.keys(i0 + br) - j0);
            let (pt, dp) = (&mut pt[..br * bc], &mut dp[..br * bc]);
            p.scores(b, i0, br, j0, bc, pt);
            probabilities(pt, bc, &lse[i0..i0 + br]);
            // SAFETY (every mm below): the slices cover the tile extents.
            unsafe {
                // dP = dO_i · V_jᵀ
                mm(br, bc, ev, dp.as_mut_ptr(), bc, false, g[i0 * ev..].as_ptr(), ev, 1, v[j0 * ev..].as_ptr(), 1, ev, R::one());
            }
            if let Some(keep) = keep {
                // With dropout Z: O = (P∘Z) V, so dV takes P∘Z and dP becomes Z∘dP.
                for (r, drow) in dp.chunks_exact_mut(bc).enumerate() {
                    for (d, &z) in drow.iter_mut().zip(&keep[(i0 + r) * s + j0..]) {
                        *d = *d * z;
                    }
                }
                let mut pz = pt.to_vec();
                for (r, row) in pz.chunks_exact_mut(bc).enumerate() {
                    for (x, &z) in row.iter_mut().zip(&keep[(i0 + r) * s + j0..]) {
                        *x = *x * z;
                    }
                }
                unsafe { mm(bc, ev, br, dv[j0 * ev..].as_mut_ptr(), ev, true, pz.as_ptr(), 1, bc, g[i0 * ev..].as_ptr(), ev, 1, R::one()) };
            } else {
                // dV_j += Pᵀ · dO_i
                unsafe { mm(bc, ev, br, dv[j0 * ev..].as_mut_ptr(), ev, true, pt.as_ptr(), 1, bc, g[i0 * ev..].as_ptr(), ev, 1, R::one()) };
            }
            score_grads(pt, dp, bc, &dd[i0..i0 + br]);
            if let Some(db) = dbias.as_deref_mut() {
                for (r, drow) in dp.chunks_exact(bc).enumerate() {
                    db[(i0 + r) * s + j0..(i0 + r) * s + j0 + bc].copy_from_slice(drow);
                }
            }
            unsafe {
                // dQ_i += scale · dS · K_j ; dK_j += scale · dSᵀ · Q_i
                mm(br, e, bc, dq[i0 * e..].as_mut_ptr(), e, true, dp.as_ptr(), bc, 1, k[j0 * e..].as_ptr(), e, 1, p.scale);
                mm(bc, e, br, dk[j0 * e..].as_mut_ptr(), e, true, dp.as_ptr(), 1, bc, q[i0 * e..].as_ptr(), e, 1, p.scale);
            }
        }
    }
}

// The element-wise passes over a tile, compiled for AVX2/AVX-512 as well
// (`multiversion!`): the rest of the crate builds for baseline x86-64, where
// they took a third of the forward's time beside the GEMMs. Maxima and sums
// are the softmax kernels' lane-wise ones (`fused::max`, `fused::sum`): a
// fold over one accumulator is a serial chain that does not vectorise.

/// The online softmax's step for a tile of scores `t` (rows of `bc`): per
/// row, the running max (`lse`, -inf at first) and sum (`l`) are updated,
/// the output row (`o`, rows of `ev`) rescaled, and the row turned into
/// `exp(x - max)`. A row that has seen only -inf becomes zeros.
#[inline(always)]
fn online_softmax_imp<R: Real>(t: &mut [R], bc: usize, lse: &mut [R], l: &mut [R], o: &mut [R], ev: usize) {
    for (r, row) in t.chunks_exact_mut(bc).enumerate() {
        let m_old = lse[r];
        let m = bigger(m_old, max(row));
        if m == R::neg_infinity() {
            row.fill(R::zero());
            continue;
        }
        let alpha = (m_old - m).vexp();
        row.iter_mut().for_each(|x| *x = (*x - m).vexp());
        l[r] = l[r] * alpha + sum(row);
        lse[r] = m;
        if alpha != R::one() {
            o[r * ev..(r + 1) * ev].iter_mut().for_each(|x| *x = *x * alpha);
        }
    }
}
multiversion!(fn online_softmax<R: Real>(t: &mut [R], bc: usize, lse: &mut [R], l: &mut [R], o: &mut [R], ev: usize) => online_softmax_imp);

/// The backward's probabilities: row `r` of the scores `t` becomes `exp(x - lse[r])`.
#[inline(always)]
fn probabilities_imp<R: Real>(t: &mut [R], bc: usize, lse: &[R]) {
    for (row, &m) in t.chunks_exact_mut(bc).zip(lse) {
        row.iter_mut().for_each(|x| *x = (*x - m).vexp());
    }
}
multiversion!(fn probabilities<R: Real>(t: &mut [R], bc: usize, lse: &[R]) => probabilities_imp);

/// The scores' gradient `dS = P ∘ (dP - D)`, written over `dp`.
#[inline(always)]
fn score_grads_imp<R: Real>(pt: &[R], dp: &mut [R], bc: usize, dd: &[R]) {
    for ((prow, drow), &di) in pt.chunks_exact(bc).zip(dp.chunks_exact_mut(bc)).zip(dd) {
        for (d, &pv) in drow.iter_mut().zip(prow) {
            *d = pv * (*d - di);
        }
    }
}
multiversion!(fn score_grads<R: Real>(pt: &[R], dp: &mut [R], bc: usize, dd: &[R]) => score_grads_imp);
