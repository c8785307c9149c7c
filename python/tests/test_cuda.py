"""CUDA paths, against PyTorch on the same GPU. Skipped where no GPU is usable
(CI machines have none; run these on a GPU machine)."""

import pytest
import torch
import torch.nn.functional as F

import enkai_tensor as et
from helpers import same, to_et, to_torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def cuda(t):
    return to_et(t).to_device("cuda:0")


def test_device_names_and_round_trip():
    d = et.Device("cuda")
    x = torch.randn(3, 4)
    e = cuda(x)
    same(e.to_device("cpu"), x)
    with pytest.raises(et.EnkaiError) as ex:
        et.Device(f"cuda:{torch.cuda.device_count()}")
    assert ex.value.code == "E_DEVICE"
    assert et.Device("auto") is not None and d is not None


def test_ops_and_grads_match_torch_on_cuda():
    a, b = torch.randn(8, 16, device="cuda"), torch.randn(16, 4, device="cuda")
    ea, eb = cuda(a.cpu()).require_grad(), cuda(b.cpu()).require_grad()
    ta, tb = a.clone().requires_grad_(), b.clone().requires_grad_()
    (ea @ eb).gelu().sum().backward()
    F.gelu(ta @ tb).sum().backward()
    same(ea.grad.to_device("cpu"), ta.grad.cpu())
    same(eb.grad.to_device("cpu"), tb.grad.cpu())


def test_autocast_is_fp16_on_cuda():
    a, b = torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        expect = a @ b
    with et.autocast():
        got = cuda(a.cpu()) @ cuda(b.cpu())
    assert got.dtype == "fp16"
    same(got.to_device("cpu"), expect.cpu())


def test_scaler_unscale_on_cuda_matches_torch():
    ts = torch.amp.GradScaler("cuda", init_scale=64.0)
    p = torch.zeros(5, device="cuda", requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.0)
    g = torch.randn(5, device="cuda") * 64
    g[2] = float("inf")
    p.grad = g.clone()
    ts.scale(torch.zeros((), device="cuda"))
    ts.unscale_(opt)
    es = et.GradScaler(64.0)
    eg = cuda(g.cpu())
    assert es.unscale_([eg]) is True
    same(eg.to_device("cpu"), p.grad.cpu())
