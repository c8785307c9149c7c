"""Optimizer-state sharding (ZeRO stage 1): a sharded AdamW over 2 and 4 ranks
gives the parameters of the unsharded one, and of PyTorch's
ZeroRedundancyOptimizer (gloo), from the same weights and gradients, while
each rank holds about 1/world of the optimizer state (zero_worker.py)."""

import sys
from pathlib import Path

import pytest
import torch

from launch import finish, spawn

WORKER = Path(__file__).resolve().parent / "zero_worker.py"


def run(mode, world, tmp_path):
    results = finish(spawn(world, [sys.executable, str(WORKER), mode, str(tmp_path / f"{mode}-{{rank}}.pt")]), 180)
    for rank, (rc, o, e) in enumerate(results):
        assert rc == 0, f"{mode} rank {rank}:\n{o}\n{e}"
    return [torch.load(tmp_path / f"{mode}-{r}.pt") for r in range(world)]


@pytest.mark.parametrize("world", [2, 4])
def test_sharded_adamw_equals_unsharded_and_zero_redundancy_optimizer(world, tmp_path):
    sharded, plain, zro = (run(m, world, tmp_path) for m in ["sharded", "plain", "zro"])
    # Each parameter is updated by one rank with the same per-tensor AdamW ops
    # as unsharded (and as torch.optim.AdamW(foreach=False) inside the
    # ZeroRedundancyOptimizer), then copied bit for bit by a broadcast: no
    # tolerance is needed, the results are identical on every rank.
    for r in range(world):
        for i, (a, b, c) in enumerate(zip(sharded[r]["params"], plain[0]["params"], zro[r]["params"])):
            assert torch.equal(a, b), (r, i, (a - b).abs().max())
            assert torch.equal(a, c), (r, i, (a - c).abs().max())
    # every moment exists exactly once across the ranks, each rank holding about 1/world
    full = plain[0]["state_bytes"]
    per_rank = [s["state_bytes"] for s in sharded]
    assert sum(per_rank) == full > 0
    assert max(per_rank) <= full / world * 1.25, (per_rank, full)
