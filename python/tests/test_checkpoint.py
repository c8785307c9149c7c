"""Checkpoints: exact resume, verification, hostile files, interop with the
safetensors package, concurrent ranked saves, and SIGKILL at random moments,
each on both backends (the processes a test starts use its backend too);
and checkpoints crossing backends and builds (saved by one, loaded by the
other, identical bytes back)."""

import gc
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import enkai_tensor as et
from helpers import same, to_et, to_torch

CHILD = Path(__file__).with_name("ckpt_child.py")
ROOT = Path(__file__).resolve().parents[2]
NOTORCH = ROOT / "target" / "notorch" / "release" / "libenkai_tensor.so"

pytestmark = pytest.mark.usefixtures("backend")


def live():
    gc.collect()
    return et.live()


def tree(d):
    """Every file under d with its bytes' hash: to prove a failed load changed nothing."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(d).rglob("*"))
            if p.is_file() and p.name != ".lock"}


def test_round_trip_keeps_dtypes_shapes_values_meta_and_optimizer(tmp_path):
    ts = [torch.randn(3, 4), torch.randn(5, dtype=torch.float64), torch.randn(2, 2).to(torch.bfloat16),
          torch.arange(6, dtype=torch.int64).reshape(2, 3), torch.tensor([True, False]), torch.zeros(0, 3)]
    es = [to_et(t) for t in ts]
    es[0].require_grad()
    opt = et.AdamW([es[0]], lr=0.1)
    (es[0] * es[0]).sum().backward()
    opt.step()
    meta = '{"step": 12,  "note": "ünïcode \\u2603", "lr": 1e-3}\n'
    et.checkpoint_save(tmp_path, es, opt, meta)
    before = live()
    ps, o, m = et.checkpoint_load(tmp_path)
    assert m == meta.encode()  # verbatim bytes
    assert live()["tensors"] == before["tensors"] + len(ts) and o is not None
    for p, e in zip(ps, es):
        same(p, to_torch(e))
    assert ps[0].grad is None and ps[0].handle != es[0].handle
    # the restored optimizer continues exactly like the original
    et.zero_grad_multi([es[0]])
    for x in (es[0], ps[0]):
        (x * x).sum().backward()
    opt.step()
    o.step()
    same(ps[0], to_torch(es[0]))


def resume_run(tmp_path, split):
    """A TinyLM trained 6 steps with AMP; when `split` is set, saved after
    `split` steps, loaded into fresh handles and continued."""
    et.manual_seed(0)
    params = et.tinylm_init(11, 6, 8, 1, 2, seed=3)
    opt = et.AdamW(params, lr=0.01)
    scaler = et.GradScaler(1024.0, 2.0, 0.5, 2)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 11, (12,), generator=g).tolist(), torch.randint(0, 11, (12,), generator=g).tolist())
               for _ in range(6)]
    for step, (x, y) in enumerate(batches):
        if step == split:
            et.checkpoint_save(tmp_path, params, opt, '{"step": %d}' % step, scaler=scaler)
            params, opt, meta = et.checkpoint_load(tmp_path)
            scaler = et.checkpoint_load_scaler(tmp_path)
            assert json.loads(meta)["step"] == step
        et.zero_grad_multi(params)
        with et.autocast():
            loss = et.forward_tinylm(params, x, y, 2, 6, 2)
        scaler.step(loss, params, opt)
    return [to_torch(p) for p in params], scaler.get_scale()


def test_resume_is_bit_exact(tmp_path):
    straight, s1 = resume_run(tmp_path / "a", None)
    resumed, s2 = resume_run(tmp_path / "b", 3)
    assert s1 == s2
    for a, b in zip(straight, resumed):
        assert torch.equal(a, b)


def saved(tmp_path):
    ps = [et.randn([4, 4]).require_grad(), et.ones([3], "int64")]
    opt = et.AdamW([ps[0]])
    (ps[0] * ps[0]).sum().backward()
    opt.step()
    et.checkpoint_save(tmp_path, ps, opt, '{"ok": true}', scaler=et.GradScaler())
    return tmp_path / os.readlink(tmp_path / "latest")


def flip(p, at=None):
    """Flips one bit of the byte at `at` (the middle one by default)."""
    b = bytearray(p.read_bytes())
    b[len(b) // 2 if at is None else at] ^= 0x01
    p.write_bytes(bytes(b))


def truncate(p):
    p.write_bytes(p.read_bytes()[:-1])


@pytest.mark.parametrize("name", ["params.safetensors", "optimizer.safetensors", "scaler.json", "meta.json",
                                  "integrity.json"])
@pytest.mark.parametrize("damage,codes", [(flip, {"E_CKPT_HASH_MISMATCH", "E_CKPT_FORMAT"}),
                                          (truncate, {"E_CKPT_HASH_MISMATCH", "E_CKPT_FORMAT"}),
                                          (os.remove, {"E_CKPT_MISSING"})])
def test_damaged_files_fail_cleanly_and_create_nothing(tmp_path, name, damage, codes):
    snap = saved(tmp_path)
    damage(snap / name)
    files = tree(tmp_path)
    before = live()
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load(tmp_path)
    code = ex.value.code
    del ex
    if damage is not os.remove and name != "integrity.json":
        # a damaged file is judged by its hash before its format is looked at
        codes = {"E_CKPT_HASH_MISMATCH"}
    assert code in codes
    assert live() == before
    assert tree(tmp_path) == files


def test_edited_integrity_is_refused(tmp_path):
    snap = saved(tmp_path)
    integ = json.loads((snap / "integrity.json").read_text())
    integ["files"]["meta.json"] = "0" * 64
    (snap / "integrity.json").write_text(json.dumps(integ))
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load(tmp_path)
    assert ex.value.code == "E_CKPT_HASH_MISMATCH"
    del integ["files"]["meta.json"]
    (snap / "integrity.json").write_text(json.dumps(integ))
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load(tmp_path)
    assert ex.value.code == "E_CKPT_FORMAT"


def rehash(snap):
    """Rewrites integrity.json to match the files, so the parser itself is exercised."""
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in snap.iterdir() if p.name != "integrity.json"}
    (snap / "integrity.json").write_text(json.dumps({"format": 1, "files": files}))


def forge_params(snap, header, data=b""):
    h = json.dumps(header).encode()
    (snap / "params.safetensors").write_bytes(len(h).to_bytes(8, "little") + h + data)
    rehash(snap)


@pytest.mark.parametrize("forge,text", [
    (lambda s: (s / "params.safetensors").write_bytes((1 << 62).to_bytes(8, "little") + b"{}"), "header length"),
    (lambda s: forge_params(s, {"param_0": {"dtype": "F32", "shape": [1 << 20], "data_offsets": [0, 1 << 22]}}),
     "spans bytes"),
    (lambda s: forge_params(s, {"param_0": {"dtype": "Q4_K", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
     "unsupported dtype"),
    (lambda s: forge_params(s, {"param_0": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4),
     "do not hold shape"),
])
def test_hostile_safetensors_are_refused_with_bounded_memory(tmp_path, forge, text):
    snap = saved(tmp_path)
    forge(snap)
    rehash(snap)
    before = live()
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load(tmp_path)
    code, msg = ex.value.code, str(ex.value)
    del ex
    assert code == "E_CKPT_FORMAT" and text in msg
    assert live() == before


def test_bytes_between_and_after_tensors_are_hashed_and_skipped(tmp_path):
    snap = saved(tmp_path)
    (snap / "optimizer.safetensors").unlink()
    meta = {"requires_grad": "[false, true]", "devices": '["cpu", "cpu"]'}
    header = {"__metadata__": meta,
              "param_1": {"dtype": "F64", "shape": [2], "data_offsets": [28, 44]},
              "param_0": {"dtype": "F32", "shape": [1, 2], "data_offsets": [4, 12]}}
    data = torch.tensor([9, 1.5, -2, 9], dtype=torch.float32).numpy().tobytes()
    data += b"gap!" * 3 + torch.tensor([0.25, 8], dtype=torch.float64).numpy().tobytes() + b"tail"
    forge_params(snap, header, data)
    before = live()
    ps, opt, meta_bytes = et.checkpoint_load(tmp_path)
    assert opt is None and meta_bytes == b'{"ok": true}'
    same(ps[0], torch.tensor([[1.5, -2]]))
    same(ps[1], torch.tensor([0.25, 8], dtype=torch.float64, requires_grad=True))
    assert live()["tensors"] == before["tensors"] + 2
    del ps
    # the gap is covered by the hash like every other byte
    flip(snap / "params.safetensors", at=-21)  # the last byte of the gap
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load(tmp_path)
    assert ex.value.code == "E_CKPT_HASH_MISMATCH"


def test_paths_in_manifests_and_links_cannot_escape(tmp_path):
    snap = saved(tmp_path)
    integ = json.loads((snap / "integrity.json").read_text())
    integ["files"]["../../etc/passwd"] = "0" * 64
    (snap / "integrity.json").write_text(json.dumps(integ))
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load(tmp_path)
    assert ex.value.code == "E_CKPT_FORMAT" and "plain file name" in str(ex.value)
    os.remove(tmp_path / "latest")
    os.symlink("../elsewhere", tmp_path / "latest")
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load(tmp_path)
    assert ex.value.code == "E_CKPT_FORMAT"


def test_missing_checkpoint(tmp_path):
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load(tmp_path / "nothing")
    assert ex.value.code == "E_CKPT_MISSING"
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load_scaler(tmp_path / "nothing")
    assert ex.value.code == "E_CKPT_MISSING"


def test_keeps_the_last_n_snapshots(tmp_path, monkeypatch):
    p = [et.ones([2])]
    for k in range(5):
        et.checkpoint_save(tmp_path, p, None, str(k))
    snaps = sorted(x.name for x in tmp_path.iterdir() if x.name.startswith("snap-"))
    assert snaps == ["snap-000004", "snap-000005"]
    assert et.checkpoint_load(tmp_path)[2] == b"4"


def test_params_open_with_the_safetensors_package_and_back(tmp_path):
    ts = {"param_0": torch.randn(3, 5), "param_1": torch.randn(4).to(torch.bfloat16), "param_2": torch.arange(3)}
    et.checkpoint_save(tmp_path, [to_et(ts[f"param_{i}"]) for i in range(3)])
    got = load_file(tmp_path / "latest" / "params.safetensors")
    assert set(got) == set(ts)
    for k in ts:
        assert torch.equal(got[k], ts[k])
    # a checkpoint written from PyTorch in our layout loads through the C ABI
    d = tmp_path / "from_torch"
    snap = d / "snap-000001"
    snap.mkdir(parents=True)
    save_file(ts, snap / "params.safetensors",
              metadata={"requires_grad": "[true, false, false]", "devices": '["cpu", "cpu", "cpu"]'})
    (snap / "meta.json").write_text('{"from": "torch"}')
    rehash(snap)
    os.symlink("snap-000001", d / "latest")
    ps, opt, meta = et.checkpoint_load(d)
    assert opt is None and meta == b'{"from": "torch"}'
    for i, p in enumerate(ps):
        same(p, ts[f"param_{i}"])


def test_four_ranks_save_concurrently_and_each_loads_its_shard(tmp_path):
    procs = [subprocess.Popen([sys.executable, str(CHILD), "rank", str(tmp_path), str(r), "4", "7"]) for r in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    snap = tmp_path / os.readlink(tmp_path / "latest")
    manifest = json.loads((snap / "manifest.json").read_text())
    assert manifest["world"] == 4 and sorted(manifest["ranks"]) == ["0", "1", "2", "3"]
    for r in range(4):
        ps, opt, meta = et.checkpoint_load_ranked(tmp_path, r)
        assert meta == b'{"step": 7}' and opt is not None
        assert to_torch(ps[1]).tolist() == [r] * 5
    import shutil
    shutil.rmtree(snap / "rank2")
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load_ranked(tmp_path, 2)
    assert ex.value.code == "E_CKPT_MISSING" and "rank2" in str(ex.value)
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load_ranked(tmp_path, 4)
    assert ex.value.code == "E_INVALID_ARG"


def ranks_save(tmp_path, world, step, metas=None, ranks=None, **env):
    """Starts one ranked-save process per rank (all of `ranks`, default every rank)."""
    env = dict(os.environ, **{k: str(v) for k, v in env.items()})
    return {r: subprocess.Popen([sys.executable, str(CHILD), "rank", str(tmp_path), str(r), str(world), str(step)]
                                + ([metas[r]] if metas else []), env=env, stdout=subprocess.PIPE, text=True)
            for r in (ranks if ranks is not None else range(world))}


def outcomes(procs, timeout=120):
    return {r: (p.wait(timeout=timeout), p.stdout.read().strip()) for r, p in procs.items()}


@pytest.mark.parametrize("metas", [
    ['{"r":0}', '{"r":1}', '{"r":2}'],  # the reported case: each rank's loader position
    ['{"r":0}', '{"loader": "' + "x" * 300 + '", "r": 1}', '[2, "two", {"deep": [null]}]'],
], ids=["per-rank", "lengths-and-shapes"])
def test_ranks_saving_different_meta_complete_one_round(tmp_path, metas):
    # Once every rank's save has returned 0, every rank's load returns that round.
    assert outcomes(ranks_save(tmp_path, 3, 5, metas)) == {r: (0, "") for r in range(3)}
    for r in range(3):
        ps, opt, meta = et.checkpoint_load_ranked(tmp_path, r)
        assert meta == metas[r].encode() and opt is not None
        assert to_torch(ps[1]).tolist() == [r] * 5 and to_torch(ps[2]).tolist() == [5]
    # a second round the same way becomes the new latest
    assert outcomes(ranks_save(tmp_path, 3, 6, metas)) == {r: (0, "") for r in range(3)}
    assert to_torch(et.checkpoint_load_ranked(tmp_path, 2)[0][2]).tolist() == [6]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith((".round-", ".pending-", ".staging"))]


def ranked_params(r, step):
    """ckpt_child.py's params of rank r at step `step`, made in this process."""
    return [et.full([8, 8], 10 * r + 1).require_grad(), et.full([5], r, "int32"), et.full([1], step, "int64")]


def loaded_step(d, r):
    ps, _, meta = et.checkpoint_load_ranked(d, r)
    assert to_torch(ps[1]).tolist() == [r] * 5
    return to_torch(ps[2]).item(), json.loads(meta)


def test_one_process_saves_every_rank_in_turn(tmp_path):
    # No process group: each save returns once its shard is durable; the third
    # completes the round and commits it (each used to wait for the others).
    start = time.monotonic()
    for r in range(3):
        et.checkpoint_save_ranked(tmp_path, r, 3, ranked_params(r, 4), None, json.dumps({"rank": r, "loader": [r] * r}))
        assert (r == 2) == (tmp_path / "latest").exists()
    assert time.monotonic() - start < 10
    assert [loaded_step(tmp_path, r) for r in range(3)] == [(4, {"rank": r, "loader": [r] * r}) for r in range(3)]
    # a rank that saves again before its round completes replaces its shard there
    et.checkpoint_save_ranked(tmp_path, 0, 3, ranked_params(0, 5), None, "{}")
    et.checkpoint_save_ranked(tmp_path, 0, 3, ranked_params(0, 6), None, "{}")
    assert [loaded_step(tmp_path, r)[0] for r in range(3)] == [4, 4, 4]
    for r in [1, 2]:
        et.checkpoint_save_ranked(tmp_path, r, 3, ranked_params(r, 6), None, "{}")
    assert [loaded_step(tmp_path, r)[0] for r in range(3)] == [6, 6, 6]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("snap-")) == [".lock", "latest"]


def test_a_round_a_rank_never_joins_keeps_latest(tmp_path):
    assert outcomes(ranks_save(tmp_path, 2, 1)) == {0: (0, ""), 1: (0, "")}
    start = time.monotonic()
    # rank 0 returns as soon as its shard is durable; the round waits for rank 1
    assert outcomes(ranks_save(tmp_path, 2, 2, ranks=[0])) == {0: (0, "")}
    assert time.monotonic() - start < 30
    for r in range(2):  # the previous round is still the one every rank loads
        assert et.checkpoint_load_ranked(tmp_path, r)[2] == b'{"step": 1}'
    # the round keeps rank 0's shard until rank 0 saves again (its newest shard
    # replaces it), so the next round is saved rank by rank: it commits and sweeps the rest
    for r in range(2):
        assert outcomes(ranks_save(tmp_path, 2, 3, ranks=[r])) == {r: (0, "")}
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("snap-")) == [".lock", "latest"]
    assert [et.checkpoint_load_ranked(tmp_path, r)[2] for r in range(2)] == [b'{"step": 3}'] * 2


def test_a_waiting_save_a_rank_never_joins_fails_and_keeps_latest(tmp_path):
    # ENKAI_CKPT_RANKED_WAIT=1: the save waits for its round's commit, bounded.
    assert outcomes(ranks_save(tmp_path, 2, 1, ENKAI_CKPT_RANKED_WAIT=1)) == {0: (0, ""), 1: (0, "")}
    start = time.monotonic()
    ((rc, out),) = outcomes(ranks_save(tmp_path, 2, 2, ranks=[0], ENKAI_DIST_TIMEOUT_S=1, ENKAI_CKPT_RANKED_WAIT=1)).values()
    assert rc == 3 and out.startswith("E_CKPT_INCOMPLETE") and "[1]" in out, out
    assert time.monotonic() - start < 30
    for r in range(2):
        assert et.checkpoint_load_ranked(tmp_path, r)[2] == b'{"step": 1}'
    (pending,) = [p for p in tmp_path.iterdir() if p.name.startswith(".round-")]
    assert not (pending / "rank0").exists()  # the failed save withdrew its shard
    assert outcomes(ranks_save(tmp_path, 2, 3, ENKAI_CKPT_RANKED_WAIT=1)) == {0: (0, ""), 1: (0, "")}
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("snap-")) == [".lock", "latest"]
    assert et.checkpoint_load_ranked(tmp_path, 1)[2] == b'{"step": 3}'
    ((rc, out),) = outcomes(ranks_save(tmp_path, 2, 4, ranks=[0], ENKAI_CKPT_RANKED_WAIT="yes")).values()
    assert rc == 3 and out.startswith("E_INVALID_ARG") and "ENKAI_CKPT_RANKED_WAIT" in out, out


def test_a_save_makes_room_first_and_keeps_the_newest(tmp_path, monkeypatch):
    # ENKAI_CKPT_KEEP=3: a save removes what its commit would prune before it
    # writes (while it writes, the 2 newest remain), so the directory never
    # holds 4 snapshots; with a keep of 1 the old one goes only after the new one is in.
    monkeypatch.setenv("ENKAI_CKPT_KEEP", "3")
    snaps = lambda: sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("snap-"))  # noqa: E731
    p = et.ones([3])
    for k in range(1, 6):
        et.checkpoint_save(tmp_path, [p * k], None, '{"k": %d}' % k)
        assert snaps() == [f"snap-{n:06d}" for n in range(max(1, k - 2), k + 1)]
        assert json.loads(et.checkpoint_load(tmp_path)[2]) == {"k": k}
    with pytest.raises(et.EnkaiError):  # fails before anything is touched
        et.checkpoint_save(tmp_path, [123456789], None, "{}")
    assert snaps() == ["snap-000003", "snap-000004", "snap-000005"]
    monkeypatch.setenv("ENKAI_CKPT_KEEP", "1")
    et.checkpoint_save(tmp_path, [p * 6], None, '{"k": 6}')
    assert snaps() == ["snap-000006"] and json.loads(et.checkpoint_load(tmp_path)[2]) == {"k": 6}


def test_the_first_ranked_format_still_loads(tmp_path):
    # fixtures/ranked-v1: written before replicated tensors were written once
    # (fixtures/make_ranked_v1.py): rank r saved [full([2,3], 1.5), [r, r]] with
    # AdamW(lr=0.1) after one step on the loss sum(p*p). Resumed, the next step
    # equals torch.optim.AdamW's second step from the same start.
    import shutil
    shutil.copytree(Path(__file__).with_name("fixtures") / "ranked-v1", tmp_path / "ckpt", symlinks=True)
    assert json.loads((tmp_path / "ckpt" / "latest" / "manifest.json").read_text())["format"] == 1
    ref = torch.full([2, 3], 1.5, requires_grad=True)
    topt = torch.optim.AdamW([ref], lr=0.1)
    for _ in range(2):
        topt.zero_grad()
        (ref * ref).sum().backward()
        topt.step()
    for r in range(2):
        (p, ids), opt, meta = et.checkpoint_load_ranked(tmp_path / "ckpt", r)
        assert json.loads(meta) == {"rank": r} and to_torch(ids).tolist() == [r, r]
        (p * p).sum().backward()
        opt.step()
        same(p, ref.detach())


def test_a_checkpoint_carries_the_generator_state(tmp_path):
    # A resumed run must draw what the uninterrupted one draws after the save
    # (dropout masks, fresh randn): load restores the CPU generator's state.
    p = et.randn([4])
    et.manual_seed(123)
    et.checkpoint_save(tmp_path / "plain", [p])
    et.checkpoint_save_ranked(tmp_path / "ranked", 0, 1, [p])
    after_save = et.randn([6]).tolist() + et.dropout(et.ones([64]), 0.5).tolist()
    for load in [lambda: et.checkpoint_load(tmp_path / "plain"), lambda: et.checkpoint_load_ranked(tmp_path / "ranked", 0)]:
        et.manual_seed(999)
        load()
        assert et.randn([6]).tolist() + et.dropout(et.ones([64]), 0.5).tolist() == after_save
    # Each built backend's state saved ("torch.cpu", "enkai.cpu") is torch.get_rng_state()'s, in
    # PyTorch's own format: the native generator is PyTorch's CPU generator too.
    torch.manual_seed(123)
    saved = load_file(tmp_path / "plain" / "latest" / "rng.safetensors")
    assert saved and all(torch.equal(s, torch.get_rng_state()) for s in saved.values())


def test_ranked_saves_keep_the_grad_scaler(tmp_path):
    scaler = et.GradScaler(init_scale=1024.0, growth_interval=3)
    scaler.update(found_inf=True)  # the scale halves: 512
    p = et.ones([2])
    et.checkpoint_save_ranked(tmp_path / "amp", 0, 1, [p], None, "{}", scaler=scaler)
    back = et.checkpoint_load_ranked_scaler(tmp_path / "amp", 0)
    assert back.get_scale() == scaler.get_scale() == 512.0
    et.checkpoint_save_ranked(tmp_path / "plain", 0, 1, [p])
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load_ranked_scaler(tmp_path / "plain", 0)
    assert ex.value.code == "E_CKPT_MISSING"
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_load_ranked_scaler(tmp_path / "plain", 1)
    assert ex.value.code == "E_INVALID_ARG"


def test_a_dead_writers_shard_never_completes_a_round(tmp_path):
    assert outcomes(ranks_save(tmp_path, 2, 1)) == {0: (0, ""), 1: (0, "")}
    # a waiting writer that died after its shard was in never completes the round
    (victim,) = ranks_save(tmp_path, 2, 2, ranks=[1], ENKAI_CKPT_RANKED_WAIT=1).values()
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".round-*/rank1")):  # its shard is in; it waits for rank 0
        assert time.monotonic() < deadline and victim.poll() is None
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    ((rc, out),) = outcomes(ranks_save(tmp_path, 2, 2, ranks=[0], ENKAI_DIST_TIMEOUT_S=1, ENKAI_CKPT_RANKED_WAIT=1)).values()
    assert rc == 3 and out.startswith("E_CKPT_INCOMPLETE"), out
    assert et.checkpoint_load_ranked(tmp_path, 0)[2] == b'{"step": 1}'
    # a writer that dies while writing leaves a staging directory, never a shard
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    staged = tmp_path / f".staging-rank1-{dead.pid}-1"
    staged.mkdir()
    (staged / "params.safetensors").write_bytes(b"\0" * 100)
    assert outcomes(ranks_save(tmp_path, 2, 2, ranks=[0])) == {0: (0, "")}
    assert [et.checkpoint_load_ranked(tmp_path, r)[2] for r in range(2)] == [b'{"step": 1}'] * 2
    # the restarted attempt completes the round and sweeps the staging directory
    assert outcomes(ranks_save(tmp_path, 2, 2)) == {0: (0, ""), 1: (0, "")}
    assert [et.checkpoint_load_ranked(tmp_path, r)[2] for r in range(2)] == [b'{"step": 2}'] * 2
    assert not staged.exists()


def test_sigkill_at_random_moments_never_loses_the_checkpoint(tmp_path):
    rng = random.Random(1234)
    kills = 0
    while kills < 50:
        child = subprocess.Popen([sys.executable, str(CHILD), "loop", str(tmp_path)], stdout=subprocess.PIPE)
        first = child.stdout.readline()  # at least one save finished in this run
        assert first
        time.sleep(rng.uniform(0.0, 0.08))
        child.send_signal(signal.SIGKILL)
        child.wait()
        kills += 1
        ps, opt, meta = et.checkpoint_load(tmp_path)
        k = json.loads(meta)["k"]
        for p in ps:
            values = set(to_torch(p).flatten().tolist())
            assert values == {k}, (k, values)
        del ps
    # what the killed savers left half-written is swept by the next save
    et.checkpoint_save(tmp_path, [et.ones([1])], None, "{}")
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith((".staging", ".latest-"))]
    assert leftovers == []


def training_state(tmp_path):
    """Params of several dtypes, an AdamW with two groups after two steps, and
    a GradScaler after an update: what a checkpoint must carry across."""
    torch.manual_seed(12)
    ts = [torch.randn(4, 3), torch.randn(5, dtype=torch.float64), torch.randn(3, 2).bfloat16(),
          torch.arange(4, dtype=torch.int32)]
    es = [to_et(t) for t in ts]
    for e in es[:3]:
        e.require_grad()
    opt = et.AdamW(es[:2], lr=0.01, weight_decay=0.1)
    opt.add_param_group([es[2]], 0.02, 0.0)
    scaler = et.GradScaler(512.0, 2.0, 0.5, 1)
    for _ in range(2):
        et.zero_grad_multi(es[:3])
        scaler.step(square_loss(es), es[:3], opt)
    return es, opt, scaler


def square_loss(es):
    return (es[0] * es[0]).sum() + (es[1] * es[1]).sum().to_dtype("fp32") + (es[2] * es[2]).sum().to_dtype("fp32")


def saved_state(tmp_path):
    """(param bytes, moments as loaded back, scale) of the checkpoint in tmp_path, loaded on the active backend."""
    ps, o, meta = et.checkpoint_load(tmp_path)
    scaler = et.checkpoint_load_scaler(tmp_path)
    ps[0] + et.zeros(ps[0].shape, ps[0].dtype)  # E_BACKEND_MISMATCH unless loaded on the active backend
    # The optimizer's moments are compared through its next step: equal
    # params, grads and state give equal results (bit for bit on one backend).
    return ps, o, scaler, meta


@pytest.mark.parametrize("target", ["torch", "cpu"])
def test_checkpoints_cross_backends_unchanged(tmp_path, backend, target):
    """Saved from one backend, loaded on the other (or the same): the same
    bytes in every tensor, the optimizer's groups and moments, the scaler."""
    if target not in et.backend_list():
        pytest.skip("the torch backend is not built in")
    es, opt, scaler = training_state(tmp_path)
    et.checkpoint_save(tmp_path, es, opt, '{"from": "%s"}' % backend, scaler=scaler)
    want = [e.to_bytes() for e in es]
    et.backend_set(target)
    ps, o, s2, meta = saved_state(tmp_path)
    assert json.loads(meta)["from"] == backend
    assert [p.to_bytes() for p in ps] == want and [p.dtype for p in ps] == [e.dtype for e in es]
    assert s2.get_scale() == scaler.get_scale()
    d = Path(tmp_path) / os.readlink(Path(tmp_path) / "latest")
    moments = load_file(d / "optimizer.safetensors")
    # one more step from the loaded state equals one more step from the live state
    for params, optim in ((es, opt), (ps, o)):
        et.zero_grad_multi(params[:3])
        square_loss(params).backward()
        optim.step()
    for p, e in zip(ps, es):
        same(p, to_torch(e), kind="reduce")
    assert moments  # the file holds the moments (checked by value in the step above)


def run_with(lib, code, tmp_path):
    """Runs `code` with library `lib`: the libtorch-free one on its only backend, the full one on the test's."""
    env = dict(os.environ, ENKAI_TENSOR_PATH=str(lib), PYTHONPATH=str(ROOT / "python"))
    if lib == NOTORCH:
        env["ENKAI_BACKEND"] = "cpu"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, cwd=Path(__file__).parent,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


SAVE = """
import sys, enkai_tensor as et
ps = [et.full([3, 4], 1.5), et.full([5], 2.0, "fp64"), et.full([2], 7, "int64")]
ps[0].require_grad()
opt = et.AdamW([ps[0]], lr=0.1)
(ps[0] * ps[0]).sum().backward()
opt.step()
s = et.GradScaler(256.0)
s.update(True)
et.checkpoint_save(sys.argv[1], ps, opt, '{"by": "%s"}' % ",".join(et.backend_list()), scaler=s)
print(",".join(p.to_bytes().hex() for p in ps))
"""

LOAD = """
import sys, enkai_tensor as et
ps, o, meta = et.checkpoint_load(sys.argv[1])
s = et.checkpoint_load_scaler(sys.argv[1])
assert o is not None and s.get_scale() == 128.0, s.get_scale()
print(",".join(p.to_bytes().hex() for p in ps))
"""


@pytest.mark.parametrize("direction", ["notorch-to-full", "full-to-notorch"])
def test_checkpoints_cross_the_libtorch_free_build(tmp_path, direction):
    """Saved by the libtorch-free library and loaded by the full one, and the
    reverse, each in its own process: the full one on the backend the
    fixture names (so native and libtorch tensors both cross)."""
    if not NOTORCH.exists():
        pytest.skip("the libtorch-free library is not built (make notorch-build)")
    full = Path(os.environ["ENKAI_TENSOR_PATH"])
    saver, loader = (NOTORCH, full) if direction == "notorch-to-full" else (full, NOTORCH)
    wrote = run_with(saver, SAVE, tmp_path)
    read = run_with(loader, LOAD, tmp_path)
    assert wrote == read
