"""The pre-norm GPT of the LM helpers (parameter order at enkai_tensor_tinylm_init in
the header) written in PyTorch: the oracle for the LM helpers."""

import math

import torch
import torch.nn.functional as F

EPS = 1e-5


def layout(spec):
    v, s, d = spec["vocab_size"], spec["seq_len"], spec["d_model"]
    f = d * spec.get("ff_mult", 4)
    shapes = [("n", (v, d)), ("n", (s, d))]
    for _ in range(spec["n_layers"]):
        shapes += [("1", (d,)), ("0", (d,)), ("n", (d, 3 * d)), ("0", (3 * d,)), ("n", (d, d)), ("0", (d,)),
                   ("1", (d,)), ("0", (d,)), ("n", (d, f)), ("0", (f,)), ("n", (f, d)), ("0", (d,))]
    shapes += [("1", (d,)), ("0", (d,))]
    if not spec.get("tie_embeddings", False):
        shapes.append(("n", (d, v)))
    shapes.append(("0", (v,)))
    return shapes


def init(spec, seed):
    torch.manual_seed(seed)
    make = {"n": lambda s: torch.randn(s) * 0.02, "1": torch.ones, "0": torch.zeros}
    return [make[k](s).requires_grad_() for k, s in layout(spec)]


def norm(x, w, b, kind):
    if kind == "rmsnorm":
        return x * (x.square().mean(-1, keepdim=True) + EPS).rsqrt() * w + b
    return F.layer_norm(x, w.shape, w, b, EPS)


def linear(x, w, b):
    return F.linear(x, w.t(), b)


def forward(params, spec, ids, targets, training=False):
    b, s = ids.shape
    d, h = spec["d_model"], spec["n_heads"]
    dh = d // h
    kind, act = spec.get("norm", "layernorm"), spec.get("activation", "gelu")
    p_drop = spec.get("dropout", 0.0)
    drop = (lambda t: F.dropout(t, p_drop, True)) if training and p_drop > 0 else (lambda t: t)
    x = drop(F.embedding(ids, params[0]) + params[1][:s])
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    heads = lambda t: t.view(b, s, h, dh).transpose(1, 2)
    for l in range(spec["n_layers"]):
        w = params[2 + 12 * l: 14 + 12 * l]
        qkv = linear(norm(x, w[0], w[1], kind), w[2], w[3])
        q, k, v = heads(qkv[..., :d]), heads(qkv[..., d:2 * d]), heads(qkv[..., 2 * d:])
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
        att = scores.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, d)
        x = x + drop(linear(y, w[4], w[5]))
        m = linear(norm(x, w[6], w[7], kind), w[8], w[9])
        m = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}[act](m)
        x = x + drop(linear(m, w[10], w[11]))
    base = 2 + 12 * spec["n_layers"]
    x = norm(x, params[base], params[base + 1], kind)
    if spec.get("tie_embeddings", False):
        logits = F.linear(x, params[0], params[base + 2])
    else:
        logits = linear(x, params[base + 2], params[base + 3])
    return F.cross_entropy(logits.view(b * s, -1), targets.reshape(b * s))
