"""One rank of the data-parallel equivalence test (test_ddp.py) and of the
data-parallel benchmark: trains the LM of lm_reference.py for STEPS AdamW
steps on this rank's share of each step's batch.

    python ddp_worker.py enkai OUT   our library: enkai_dist_allreduce_grads
    python ddp_worker.py torch OUT   PyTorch's DistributedDataParallel with gloo
    python ddp_worker.py single OUT  our library, one process, the whole batch

Each writes the final parameters to OUT, where {rank} becomes the rank (torch.save of a list); with
BENCH=1 it instead times STEPS steps after WARMUP and writes ms/step.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

import torch  # noqa: E402

import lm_reference as ref  # noqa: E402

SPEC = json.loads(os.environ.get("SPEC", '{"vocab_size": 32, "seq_len": 16, "d_model": 32, "n_layers": 2, "n_heads": 4}'))
BATCH, STEPS, WARMUP = int(os.environ.get("BATCH", "8")), int(os.environ.get("STEPS", "6")), int(os.environ.get("WARMUP", "0"))
SEED, LR, WD, BETAS, EPS = 5, 1e-2, 0.01, (0.9, 0.95), 1e-8
BENCH = os.environ.get("BENCH") == "1"


def batch(step):
    """The whole batch of a step: a function of the step alone."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randint(0, SPEC["vocab_size"], (BATCH, SPEC["seq_len"]), generator=g)
    y = torch.randint(0, SPEC["vocab_size"], (BATCH, SPEC["seq_len"]), generator=g)
    return x, y


def shard(t, rank, world):
    n = BATCH // world
    return t[rank * n:(rank + 1) * n]


def run(step_fn, out):
    for s in range(WARMUP):
        step_fn(s)
    start = time.perf_counter()
    for s in range(WARMUP, WARMUP + STEPS):
        step_fn(s)
    ms = (time.perf_counter() - start) * 1e3 / STEPS
    return ms


def enkai(out, world, rank):
    import enkai_tensor as et
    import enkai_tensor.dist as dist
    from helpers import to_torch

    if world > 1:
        dist.init(world, rank, "", 120)
    params = et.lm_init(SPEC, seed=SEED)
    if world > 1:
        dist.broadcast(params, 0)
    opt = et.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)

    def step(s):
        x, y = (shard(t, rank, world) for t in batch(s))
        et.zero_grad_multi(params)
        loss = et.forward_lm(params, SPEC, x.flatten().tolist(), y.flatten().tolist(), x.shape[0], x.shape[1])
        loss.backward()
        if world > 1:
            dist.allreduce_grads(params)
        opt.step()

    ms = run(step, out)
    result = ms if BENCH else [to_torch(p) for p in params]
    if world > 1:
        dist.shutdown()
    return result


def ddp(out, world, rank):
    import torch.distributed as tdist
    from torch.nn.parallel import DistributedDataParallel as DDP

    tdist.init_process_group("gloo", rank=rank, world_size=world)

    class LM(torch.nn.Module):
        def __init__(self, ps):
            super().__init__()
            self.ps = torch.nn.ParameterList([torch.nn.Parameter(p.detach().clone()) for p in ps])

        def forward(self, x, y):
            return ref.forward(list(self.ps), SPEC, x, y)

    model = DDP(LM(ref.init(SPEC, SEED)))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, foreach=False)

    def step(s):
        x, y = (shard(t, rank, world) for t in batch(s))
        opt.zero_grad(set_to_none=False)
        model(x, y).backward()
        opt.step()

    ms = run(step, out)
    result = ms if BENCH else [p.detach().clone() for p in model.module.ps]
    tdist.destroy_process_group()
    return result


if __name__ == "__main__":
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    mode, out = sys.argv[1], sys.argv[2].format(rank=rank)
    result = {"enkai": enkai, "torch": ddp, "single": lambda o, w, r: enkai(o, 1, 0)}[mode](out, world, rank)
    torch.save(result, out)
