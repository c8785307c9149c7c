"""`make bench`: a 4-operand einsum chain whose left-to-right order costs
100x the best one, on the native backend (`enkai_op("einsum")`, which
plans the order itself) against `torch.einsum` with opt_einsum enabled
(PyTorch's default when the package is installed), at 1 thread. Also shown:
each side made to go left to right (ours with that `path`, PyTorch with
opt_einsum disabled), and forward+backward.

    python benches/einsum_compare.py
"""

import os
import time

import numpy as np
import opt_einsum
import torch

import enkai_tensor as et
from timing import best

EQ = "ij,jk,kl,lm->im"
SHAPES = [(1024, 1024), (1024, 1024), (1024, 5), (5, 5)]
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))


def main():
    et.set_num_threads(1)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    ours = [et.from_numpy(a) for a in arrays]
    theirs = [torch.from_numpy(a) for a in arrays]
    plan = et.einsum_path(EQ, *SHAPES)
    _, info = opt_einsum.contract_path(EQ, *SHAPES, shapes=True, optimize="auto")
    _, ltr = opt_einsum.contract_path(EQ, *SHAPES, shapes=True, optimize=[(0, 1), (0, 1), (0, 1)])
    print(f"einsum {EQ} {[list(s) for s in SHAPES]} fp32, 1 thread, best of {ROUNDS}; PyTorch {torch.__version__}")
    print(f"our path {plan['path']}: {plan['flops']:.3e} FLOPs; opt_einsum's: {int(info.opt_cost):.3e}; "
          f"left to right: {int(ltr.opt_cost):.3e} ({int(ltr.opt_cost) / plan['flops']:.0f}x)")

    rows = []
    o = best(lambda: et.einsum(EQ, *ours), ROUNDS)
    torch.backends.opt_einsum.enabled = True
    t = best(lambda: torch.einsum(EQ, *theirs), ROUNDS)
    rows.append(("forward, planned order", o, t))
    o_ltr = best(lambda: et.op("einsum", ours, equation=EQ, path=[0, 1, 0, 1, 0, 1]), 2)
    torch.backends.opt_einsum.enabled = False
    t_ltr = best(lambda: torch.einsum(EQ, *theirs), 2)
    torch.backends.opt_einsum.enabled = True
    rows.append(("forward, left to right", o_ltr, t_ltr))

    og = [et.from_numpy(a).require_grad() for a in arrays]
    tg = [torch.from_numpy(a).requires_grad_() for a in arrays]
    o_bw = best(lambda: et.einsum(EQ, *og).sum().backward(), ROUNDS)
    t_bw = best(lambda: torch.einsum(EQ, *tg).sum().backward(), ROUNDS)
    rows.append(("forward+backward, planned", o_bw, t_bw))

    print(f"{'case':<28}{'native ms':>12}{'torch ms':>12}{'native/torch':>14}")
    for name, a, b in rows:
        print(f"{name:<28}{a * 1e3:>12.2f}{b * 1e3:>12.2f}{a / b:>14.2f}")
    print("target: forward, planned order: native/torch <= 1.00")


if __name__ == "__main__":
    main()
