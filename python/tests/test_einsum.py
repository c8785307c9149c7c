"""einsum beyond the op table's generated cases (`test_op_table.py` runs the
row's 44 equations, values in every dtype and gradients in fp32/fp64, on
both backends): the contraction order against opt_einsum, the order's
effect, PyTorch's `torch.einsum` (with opt_einsum) as the oracle of
planned chains, and the refusals.

Tolerances: fp32 rtol 1e-5 / atol 1e-5 of the largest value, fp64 1e-10:
the planned order sums the same products in another order than
PyTorch's, a rounding difference of a few ulps of the sum's terms; an
indexing error would move values by O(1).
"""

import ctypes
import itertools
import json

import numpy as np
import opt_einsum
import pytest
import torch

import enkai_tensor as et

pytestmark = pytest.mark.usefixtures("backend")

LETTERS = "abcdefghij"


def random_network(rng, n, max_labels=6):
    """A random contraction of `n` operands: labels shared by two or three
    operands, some kept in the output, sizes 1 to 6."""
    labels = LETTERS[:max_labels]
    sizes = {c: int(rng.integers(1, 7)) for c in labels}
    terms = []
    for _ in range(n):
        k = int(rng.integers(1, 4))
        terms.append("".join(rng.choice(list(labels), size=k, replace=False)))
    used = sorted(set("".join(terms)))
    out = "".join(c for c in used if rng.random() < 0.3)
    eq = ",".join(terms) + "->" + out
    return eq, [tuple(sizes[c] for c in t) for t in terms]


def all_paths(n):
    """Every pairwise contraction order of n operands, in positional form."""
    return [[(0,)]] if n == 1 else list(orders(n))


def orders(n):
    if n == 1:
        yield []
        return
    for i, j in itertools.combinations(range(n), 2):
        for rest in orders(n - 1):
            yield [(i, j)] + rest


def test_the_order_has_the_least_flops_of_all_orders_by_opt_einsums_count():
    """The oracle is opt_einsum's count of every pairwise order (its
    `contract_path` with each path given): ours is the least of them. Its
    own `optimal` search caches a pair's result by the pair alone, though
    the labels that survive depend on the other terms left, so it can
    miss the least order (ed,dcf,af->c at [2,5],[5,2,5],[2,5]: 300 FLOPs
    where 240 exist): ours is never above its choice."""
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4, 5):
        for _ in range(12 if n > 2 else 4):
            eq, shapes = random_network(rng, n)
            ours = et.einsum_path(eq, *shapes)
            cost = lambda path: int(opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=path)[1].opt_cost)
            assert ours["flops"] == cost([tuple(p) for p in ours["path"]]), f"{eq} {shapes}: {ours}"
            assert ours["flops"] == min(cost(p) for p in all_paths(n)), f"{eq} {shapes}: {ours}"
            for strategy in ("optimal", "auto"):
                _, theirs = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=strategy)
                assert ours["flops"] <= int(theirs.opt_cost), f"{eq} {shapes}: {ours} vs {strategy} {theirs.opt_cost}"
    for n in (6, 8):
        for _ in range(5):
            eq, shapes = random_network(rng, n)
            ours = et.einsum_path(eq, *shapes)
            _, theirs = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize="auto")
            assert ours["flops"] <= int(theirs.opt_cost), f"{eq} {shapes}"


def test_beyond_twelve_operands_the_greedy_order_is_counted_as_opt_einsum_counts_it():
    rng = np.random.default_rng(1)
    for n in (13, 16):
        for _ in range(3):
            eq, shapes = random_network(rng, n, max_labels=10)
            ours = et.einsum_path(eq, *shapes)
            assert len(ours["path"]) == n - 1
            _, mine = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=[tuple(p) for p in ours["path"]])
            assert ours["flops"] == int(mine.opt_cost)
            _, ltr = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=[(0, 1)] * (n - 1))
            assert ours["flops"] <= int(ltr.opt_cost)


def test_path_of_ellipsis_and_broadcast_operands():
    for eq, shapes in [("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("ij,jk,kl->il", [(3, 1), (4, 5), (5, 2)]),
                       ("ii,ij,jk", [(3, 3), (3, 4), (4, 4)]), ("a,b,c", [(2,), (3,), (4,)])]:
        ours = et.einsum_path(eq, *shapes)
        cost = lambda path: int(opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=path)[1].opt_cost)
        assert ours["flops"] == min(cost(p) for p in all_paths(len(shapes))), eq


def values(rng, shapes, dtype=np.float64):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def check(ours, ref, dtype):
    a, b = ours.numpy(), ref.detach().numpy()
    assert a.shape == b.shape
    rtol, atol = (1e-10, 1e-12) if dtype == np.float64 else (1e-5, 1e-5)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * max(1.0, float(np.abs(b).max(initial=0))))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_planned_contractions_equal_torch_einsum_with_their_gradients(dtype):
    rng = np.random.default_rng(2)
    torch.backends.opt_einsum.enabled = True
    cases = [random_network(rng, n) for n in (3, 4, 5, 6) for _ in range(6)]
    cases += [("ij,jk,kl,lm->im", [(40, 30), (30, 20), (20, 3), (3, 2)]), ("bij,bjk,bkl->bil", [(2, 5, 6), (2, 6, 7), (2, 7, 3)]),
              ("ab,bc,cd,da->", [(3, 4), (4, 5), (5, 2), (2, 3)]), ("i,i,i,i->", [(5,)] * 4)]
    for eq, shapes in cases:
        arrays = values(rng, shapes, dtype)
        ours = [et.from_numpy(a).require_grad() for a in arrays]
        theirs = [torch.from_numpy(a).requires_grad_() for a in arrays]
        got, ref = et.einsum(eq, *ours), torch.einsum(eq, *theirs)
        check(got, ref, dtype)
        w = rng.standard_normal(tuple(ref.shape)).astype(dtype)
        (got * et.from_numpy(w)).sum().backward()
        grads = torch.autograd.grad((ref * torch.from_numpy(w)).sum(), theirs, allow_unused=True)
        for o, g in zip(ours, grads):
            if g is None:
                g = torch.zeros(o.shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)
            check(o.grad, g, dtype)


def test_a_given_path_is_run_and_gives_the_same_values():
    rng = np.random.default_rng(3)
    eq, shapes = "ij,jk,kl,lm->im", [(6, 5), (5, 4), (4, 3), (3, 2)]
    arrays = values(rng, shapes)
    ours = [et.from_numpy(a) for a in arrays]
    ref = torch.einsum(eq, *[torch.from_numpy(a) for a in arrays])
    for path in ([0, 1, 0, 1, 0, 1], [2, 3, 1, 2, 0, 1], [0, 3, 0, 1, 0, 1]):
        check(et.op("einsum", ours, equation=eq, path=path), ref, np.float64)


def test_the_python_forms_of_torch_einsum():
    rng = np.random.default_rng(4)
    a, b = values(rng, [(3, 4), (4, 5)])
    ref = torch.einsum("ij,jk->ik", torch.from_numpy(a), torch.from_numpy(b))
    check(et.einsum("ij,jk->ik", et.from_numpy(a), et.from_numpy(b)), ref, np.float64)
    check(et.einsum("ij,jk->ik", [et.from_numpy(a), et.from_numpy(b)]), ref, np.float64)


def refused(code, words, f):
    with pytest.raises(et.EnkaiError) as e:
        f()
    assert e.value.code == code, str(e.value)
    assert "einsum" in str(e.value) and words in str(e.value), str(e.value)


def test_refusals_name_einsum_with_their_codes():
    x, y = et.zeros([3, 4]), et.zeros([4, 5])
    refused("E_INVALID_ARG", "fewer operands", lambda: et.einsum("ij,jk,kl", x, y))
    refused("E_INVALID_ARG", "more operands", lambda: et.einsum("ij", x, y))
    refused("E_INVALID_ARG", "invalid subscript", lambda: et.einsum("i2,jk", x, y))
    refused("E_INVALID_ARG", "ellipsis", lambda: et.einsum("i.j,jk", x, y))
    refused("E_INVALID_ARG", "more than once in the output", lambda: et.einsum("ij,jk->ii", x, y))
    refused("E_INVALID_ARG", "does not appear", lambda: et.einsum("ij,jk->iz", x, y))
    refused("E_SHAPE", "number of subscripts", lambda: et.einsum("ijk,jk", x, y))
    refused("E_SHAPE", "broadcast", lambda: et.einsum("ij,ik", x, y))
    refused("E_SHAPE", "repeated", lambda: et.einsum("ii", x))
    refused("E_DTYPE", "dtype", lambda: et.einsum("ij,jk", x, y.to_dtype("fp64")))
    z = et.zeros([5, 2])
    refused("E_INVALID_ARG", "path", lambda: et.op("einsum", [x, y, z], equation="ij,jk,kl", path=[0, 0, 0, 1]))
    refused("E_INVALID_ARG", "path", lambda: et.op("einsum", [x, y, z], equation="ij,jk,kl", path=[0, 1, 0, 2]))
    refused("E_INVALID_ARG", "path", lambda: et.op("einsum", [x, y, z], equation="ij,jk,kl", path=[0, 1]))
    refused("E_INVALID_ARG", "path", lambda: et.op("einsum", [x, y, z], equation="ij,jk,kl", path=[-1, 1, 0, 1]))


def test_einsum_path_c_entry_refuses_bad_arguments():
    lib = et.lib
    p, n = ctypes.c_char_p(), ctypes.c_size_t()
    for eq, shapes, code in [(None, b"[[2]]", "E_NULL_POINTER"), (b"i", None, "E_NULL_POINTER"), (b"i", b"[[2]", "E_INVALID_ARG"),
                             (b"i", b"{}", "E_INVALID_ARG"), (b"i", b"[[-1]]", "E_INVALID_ARG"), (b"i", b"[[2.5]]", "E_INVALID_ARG"),
                             (b"ij", b"[[2]]", "E_SHAPE"), (b"i,i", b"[[2]]", "E_INVALID_ARG")]:
        assert lib.enkai_einsum_path(eq, shapes, ctypes.byref(p), ctypes.byref(n)) == 1
        assert lib.enkai_tensor_last_error().decode().startswith(code), (eq, shapes, lib.enkai_tensor_last_error())
    assert lib.enkai_einsum_path(b"ij,jk", b"[[2,3],[3,4]]", None, ctypes.byref(n)) == 1
    assert lib.enkai_einsum_path(b"ij,jk", b"[[2,3],[3,4]]", ctypes.byref(p), ctypes.byref(n)) == 0
    text = ctypes.string_at(p, n.value).decode()
    lib.enkai_tensor_string_free(p)
    assert json.loads(text) == {"path": [[0, 1]], "flops": 2 * 2 * 3 * 4}
    # A 2^62-element contraction counts without overflow.
    big = et.einsum_path("ij,jk", [2**31, 2**31], [2**31, 2**31])
    assert big["flops"] == 2 * 2**93


def test_zero_sized_and_huge_expanded_operands():
    got = et.einsum("ij,jk->ik", et.zeros([3, 0]), et.zeros([0, 5]))
    assert tuple(got.shape) == (3, 5) and not got.numpy().any()
    # An outer product of two expanded (storage-free) operands whose result cannot exist is an error, not a crash.
    v = et.op("expand", et.zeros([1]), size=[2**40])
    with pytest.raises(et.EnkaiError) as e:
        et.einsum("i,j->ij", v, v)
    assert e.value.code in ("E_SHAPE", "E_RESOURCE", "E_TORCH"), str(e.value)


def test_all_forty_four_table_equations_match_across_layouts():
    # The row's cases run in test_op_table; this one checks that the row has them all.
    row = [o for o in et.op_schema() if o["name"] == "einsum"][0]
    eqs = [json.loads(c)["kwargs"]["equation"] if isinstance(c, str) else c["kwargs"]["equation"] for c in row["cases"]]
    assert len(eqs) >= 40
    kinds = {"...": any("..." in e for e in eqs), "trace": "ii->" in eqs, "diagonal": "ii->i" in eqs,
             "outer": "i,j->ij" in eqs, "4-chain": "ij,jk,kl,lm->im" in eqs, "bilinear": "bn,anm,bm->ba" in eqs}
    assert all(kinds.values()), kinds
