"""The op-table example programs (examples-c/), run as a user runs them, on
both backends, checked against the same computation in PyTorch."""

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("backend")


def run(name):
    exe = ROOT / "build" / "examples" / name
    if not exe.exists():
        pytest.skip(f"{exe} is not built (make {exe.relative_to(ROOT)})")
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_causal_attention_matches_sdpa(backend):
    lines = run("causal_attention").splitlines()
    assert lines[0] == "causal attention [2, 5, 4]"
    got = np.array([float(v) for v in lines[1:]], dtype=np.float32).reshape(2, 5, 4)
    idx = torch.arange(40, dtype=torch.float32)
    q, k, v = (torch.sin(0.37 * idx + w).reshape(2, 5, 4) for w in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # fp32 through two different but equivalent op sequences: a few ulps apart.
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5, atol=1e-6)


def test_accuracy_matches_pytorch(backend):
    out = run("accuracy").splitlines()
    pred = [int(v) for v in out[0].split(":")[1].split()]
    acc = float(out[1].split()[1])
    i = torch.arange(80, dtype=torch.float32)
    logits = (torch.cos(1.3 * i) + 0.01 * (torch.arange(80) % 7)).reshape(16, 5)
    labels = (torch.arange(16) * 3) % 5
    ref_pred = logits.argmax(dim=1)
    assert pred == ref_pred.tolist()
    assert acc == pytest.approx((ref_pred == labels).float().mean().item(), abs=0)
    assert math.isfinite(acc)


SPEC = {"vocab_size": 64, "seq_len": 16, "d_model": 32, "n_layers": 2, "n_heads": 2}


def test_sample_tinylm_replays_in_pytorch(backend):
    """The same sampling in PyTorch on the model's logits. On the torch
    backend the draws come from libtorch's generator, which PyTorch shares in
    this process: the tokens must be identical. The native backend has its
    own generator: there every token must be one of that step's top k, and a
    second run must give the same tokens."""
    import enkai_tensor as et

    tokens = [int(t) for t in run("sample_tinylm").split(":")[1].split()]
    assert len(tokens) == 50 and all(0 <= t < 64 for t in tokens)
    assert tokens == [int(t) for t in run("sample_tinylm").split(":")[1].split()]
    params = et.lm_init(SPEC, seed=42)
    ctx = [i * 5 % 64 for i in range(16)]
    torch.manual_seed(7)
    for t in tokens:
        logits = torch.from_numpy(et.lm_logits(params, SPEC, ctx, 1, 16).numpy())[:, -1] / 0.8
        values, indices = torch.topk(logits, 10)
        if backend == "torch":
            pick = torch.multinomial(torch.softmax(values, dim=-1), 1)
            assert t == indices.gather(-1, pick).item()
        else:
            assert t in indices[0].tolist()
        ctx = ctx[1:] + [t]


def test_tensor_network_norm_and_gradients_match_torch_einsum(backend):
    """examples-c/tensor_network.c: <psi|psi> of a periodic MPS as one
    8-operand einsum, and its gradient per site tensor, against
    torch.einsum and torch.autograd.grad in fp64 (rtol 1e-10: the same
    products summed in another order)."""
    import opt_einsum

    lines = run("tensor_network").splitlines()
    path = json.loads(lines[0].split(" ", 1)[1])
    eq = "aib,bjc,ckd,dla,eif,fjg,gkh,hle->"
    _, mine = opt_einsum.contract_path(eq, *[(3, 2, 3)] * 8, shapes=True, optimize=[tuple(p) for p in path["path"]])
    _, theirs = opt_einsum.contract_path(eq, *[(3, 2, 3)] * 8, shapes=True, optimize="optimal")
    assert path["flops"] == int(mine.opt_cost) <= int(theirs.opt_cost)
    z = float(lines[1].split()[1])
    x = torch.arange(18, dtype=torch.float64)
    sites = [torch.sin(0.7 * x + s).reshape(3, 2, 3).requires_grad_() for s in range(4)]
    ref = torch.einsum(eq, *(sites + sites))
    assert z == pytest.approx(ref.item(), rel=1e-10)
    grads = torch.autograd.grad(ref, sites)
    for s, line in enumerate(lines[2:6]):
        words = line.split()
        assert words[:2] == ["grad", str(s)]
        np.testing.assert_allclose(np.array([float(w) for w in words[2:]]), grads[s].numpy().ravel(), rtol=1e-10, atol=1e-12)
