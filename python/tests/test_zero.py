"""Optimizer-state sharding (ZeRO stage 1): a sharded AdamW over 2 and 4 ranks
(and SGD and Adam over 2) gives the parameters of the unsharded one, and of
PyTorch's ZeroRedundancyOptimizer (gloo), from the same weights and
gradients, while each rank holds about 1/world of the optimizer state
(zero_worker.py)."""

import json
import sys
from pathlib import Path

import pytest
import torch

from launch import finish, spawn

WORKER = Path(__file__).resolve().parent / "zero_worker.py"


def run(mode, world, tmp_path, **env):
    results = finish(spawn(world, [sys.executable, str(WORKER), mode, str(tmp_path / f"{mode}-{{rank}}.pt")], **env), 180)
    for rank, (rc, o, e) in enumerate(results):
        assert rc == 0, f"{mode} rank {rank}:\n{o}\n{e}"
    return [torch.load(tmp_path / f"{mode}-{r}.pt") for r in range(world)]


@pytest.mark.parametrize("world,kind", [(2, "adamw"), (4, "adamw"), (2, "sgd"), (2, "adam")])
def test_sharded_adamw_equals_unsharded_and_zero_redundancy_optimizer(world, kind, tmp_path):
    sharded, plain, zro = (run(m, world, tmp_path, OPT=kind) for m in ["sharded", "plain", "zro"])
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


def test_grad_scaler_skips_every_rank_together_on_a_sharded_optimizer(tmp_path):
    sharded, plain = run("sharded", 2, tmp_path, AMP=1), run("plain", 2, tmp_path, AMP=1)
    for r in range(2):
        # found-inf is the same on every rank, so every rank skips step 2 (no collective
        # is entered by one rank alone) and the scale backs off the same way
        assert sharded[r]["skipped"] == plain[r]["skipped"] == [2]
        assert sharded[r]["scale"] == plain[r]["scale"] == 2.0 ** 9
        for i, (a, b) in enumerate(zip(sharded[r]["params"], plain[0]["params"])):
            assert torch.equal(a, b), (r, i)


@pytest.mark.parametrize("saved,loaded,kind", [(2, 2, "adamw"), (4, 2, "adamw"), (2, 4, "adamw"), (2, 4, "sgd"),
                                               (4, 2, "adam")])
def test_sharded_checkpoints_restore_and_reshard(saved, loaded, kind, tmp_path):
    ckpt = tmp_path / "ckpt"
    run("first", saved, tmp_path, CKPT_DIR=ckpt, OPT=kind)
    manifest = json.loads((ckpt / "latest" / "manifest.json").read_text())
    assert manifest["partition"]["world"] == saved and len(manifest["partition"]["owners"]) == 30
    assert set(manifest["partition"]["owners"]) == set(range(saved))
    # the params, alike on every rank, were written once in pieces; each rank's moments are its own
    assert manifest["format"] == 2 and len(manifest["replicated"]["pieces"]) == saved
    assert {t["file"] for t in manifest["replicated"]["tensors"]} == {"params.safetensors"}
    second = run("second", loaded, tmp_path, CKPT_DIR=ckpt, OPT=kind)
    straight = run("sharded", 2, tmp_path, OPT=kind)
    # Moments are restored bit for bit (re-partitioned when the world changes) and
    # the update of each param does not depend on which rank runs it, so the
    # resumed run equals the uninterrupted one exactly.
    for r in range(loaded):
        for i, (a, b) in enumerate(zip(second[r]["params"], straight[0]["params"])):
            assert torch.equal(a, b), (r, i, (a - b).abs().max())
    assert sum(s["state_bytes"] for s in second) == sum(s["state_bytes"] for s in straight)


def test_a_sharded_optimizer_is_not_saved_by_the_single_process_save(tmp_path, monkeypatch):
    import enkai_tensor as et
    import enkai_tensor.dist as dist

    for k in ["RANK", "WORLD_SIZE"]:
        monkeypatch.delenv(k, raising=False)
    dist.init(1, 0)
    try:
        p = et.ones([3]).require_grad()
        opt = et.AdamW([p]).shard()
        (p * p).sum().backward()
        opt.step()  # a world of one owns everything
        assert opt.state_bytes == 2 * 3 * 4
        with pytest.raises(et.EnkaiError) as ex:
            et.checkpoint_save(tmp_path, [p], opt)
        assert ex.value.code == "E_INVALID_ARG" and "save_ranked" in str(ex.value)
        with pytest.raises(et.EnkaiError) as ex:
            opt.shard()
        assert ex.value.code == "E_INVALID_ARG"
    finally:
        dist.shutdown()
    with pytest.raises(et.EnkaiError) as ex:
        et.AdamW([et.ones([1])]).shard()  # no process group
    assert ex.value.code == "E_DIST"
