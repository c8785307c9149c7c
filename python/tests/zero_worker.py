"""One rank of the optimizer-sharding equivalence test (test_zero.py): the LM
of lm_reference.py, 2 param groups, 6 AdamW steps on the whole batch of each
step (so every rank has the same gradients), group 1's lr changed after step 3.

    python zero_worker.py sharded OUT   our AdamW sharded with enkai_opt_shard
    python zero_worker.py plain OUT     our AdamW, not sharded
    python zero_worker.py zro OUT       torch.distributed.optim.ZeroRedundancyOptimizer (gloo)
    python zero_worker.py first OUT     sharded, steps 0-2, then a ranked save to CKPT_DIR
    python zero_worker.py second OUT    a ranked load from CKPT_DIR (any world size), steps 3-5

OUT ({rank} becomes the rank) gets the final parameters and the optimizer-state
bytes this rank held (torch.save of a dict). OPT=sgd or OPT=adam runs SGD
(momentum, nesterov, weight decay) or Adam (amsgrad, weight decay) instead of
AdamW, on both sides.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

import torch  # noqa: E402

import lm_reference as ref  # noqa: E402

SPEC = {"vocab_size": 32, "seq_len": 16, "d_model": 32, "n_layers": 2, "n_heads": 4}
STEPS, BATCH, SEED = 6, 4, 5
LR, WD, BETAS, EPS = 1e-2, 0.01, (0.9, 0.95), 1e-8
WORLD, RANK = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
KIND = os.environ.get("OPT", "adamw")
# Each kind's hyperparameters, as keyword arguments of both libraries' constructors.
HYPER = {"adamw": dict(lr=LR, betas=BETAS, eps=EPS, weight_decay=WD),
         "adam": dict(lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, amsgrad=True),
         "sgd": dict(lr=LR, momentum=0.9, weight_decay=WD, nesterov=True)}[KIND]


def batch(step):
    g = torch.Generator().manual_seed(2000 + step)
    x = torch.randint(0, SPEC["vocab_size"], (BATCH, SPEC["seq_len"]), generator=g)
    return x, torch.randint(0, SPEC["vocab_size"], (BATCH, SPEC["seq_len"]), generator=g)


def split(params):
    half = len(params) // 2
    return params[:half], params[half:]


def ours(sharded, phase="all"):
    import enkai_tensor as et
    import enkai_tensor.dist as dist
    from helpers import to_torch

    dist.init(WORLD, RANK, "", 120)
    if phase == "second":
        params, opt, meta = et.checkpoint_load_ranked(os.environ["CKPT_DIR"], RANK)
        assert meta == b'{"step": 3}', meta
        steps = range(3, STEPS)
    else:
        params = et.lm_init(SPEC, seed=SEED)
        g0, g1 = split(params)
        opt = {"adamw": et.AdamW, "adam": et.Adam, "sgd": et.SGD}[KIND](g0, **HYPER)
        opt.add_param_group(g1, LR / 2, 0.1)
        if sharded:
            opt.shard()
        steps = range(3) if phase == "first" else range(STEPS)
    # AMP=1: GradScaler steps (enkai_amp_step), with an inf injected at step 2 on every rank
    scaler = et.GradScaler(init_scale=2.0 ** 10) if os.environ.get("AMP") == "1" else None
    skipped = []
    for s in steps:
        if s == 3:
            opt.set_lr(1, LR / 4)
        x, y = batch(s)
        et.zero_grad_multi(params)
        loss = et.forward_lm(params, SPEC, x.flatten().tolist(), y.flatten().tolist(), BATCH, SPEC["seq_len"])
        if scaler is None:
            loss.backward()
            opt.step()
            continue
        if s == 2:
            loss = loss * float("inf")
        if not scaler.step(loss, params, opt):
            skipped.append(s)
    if phase == "first":
        et.checkpoint_save_ranked(os.environ["CKPT_DIR"], RANK, WORLD, params, opt, '{"step": 3}')
    out = {"params": [to_torch(p) for p in params], "state_bytes": opt.state_bytes, "skipped": skipped,
           "scale": scaler.get_scale() if scaler else None}
    dist.shutdown()
    return out


def zro():
    import torch.distributed as tdist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    tdist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    params = ref.init(SPEC, SEED)
    g0, g1 = split(params)
    opt = ZeroRedundancyOptimizer([{"params": g0}, {"params": g1, "lr": LR / 2, "weight_decay": 0.1}],
                                  optimizer_class={"adamw": torch.optim.AdamW, "adam": torch.optim.Adam,
                                                   "sgd": torch.optim.SGD}[KIND], foreach=False, **HYPER)
    for s in range(STEPS):
        if s == 3:
            opt.param_groups[1]["lr"] = LR / 4
        x, y = batch(s)
        opt.zero_grad(set_to_none=False)
        ref.forward(params, SPEC, x, y).backward()
        opt.step()
    tdist.destroy_process_group()
    return {"params": [p.detach().clone() for p in params]}


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2].format(rank=RANK)
    modes = {"sharded": lambda: ours(True), "plain": lambda: ours(False), "zro": zro,
             "first": lambda: ours(True, "first"), "second": lambda: ours(True, "second")}
    torch.save(modes[mode](), out)
