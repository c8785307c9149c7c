"""One rank of a multi-process test, started by test_dist.py with RANK,
WORLD_SIZE and MASTER_ADDR/MASTER_PORT (or an init method) in its
environment. Prints one JSON line per event so the parent can follow it.

    python dist_worker.py collectives   exact collectives through the Python API
    python dist_worker.py loop          all-reduce every 50 ms until a collective fails
"""

import gc
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # python/
import enkai_tensor as et  # noqa: E402
import enkai_tensor.dist as dist  # noqa: E402

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
# CUDA=1: this rank's tensors live on cuda:LOCAL_RANK (enkai_dist_config's device -1), so
# their collectives go through NCCL.
DEV = None


def full(shape, value, dtype="fp32"):
    return et.full(shape, value, dtype, DEV)


def say(**kw):
    print(json.dumps(dict(rank=RANK, **kw)), flush=True)


def collectives():
    run_collectives()
    gc.collect()  # the tensors of run_collectives are gone: every handle must be freed
    say(ok=True, live=et.live())


def run_collectives():
    global DEV
    if os.environ.get("CUDA") == "1":
        dist.config(WORLD, RANK, -1, 0)
        DEV = dist.device()
        assert DEV is not None
    dist.init(WORLD, RANK, os.environ.get("INIT_METHOD", ""), float(os.environ.get("TIMEOUT_S", "60")))
    assert (dist.rank(), dist.world_size()) == (RANK, WORLD)
    tri = WORLD * (WORLD + 1) // 2
    for dt in ["fp32", "fp64", "bf16", "int64"]:
        # integer-valued data: every result is exact whatever the summation order
        t = full([3, 2], RANK + 1, dt)
        big = full([70000], RANK + 1, dt)  # more than one Gloo chunk
        dist.all_reduce([t, big], "sum")
        assert t.tolist() == [[tri] * 2] * 3 and set(big.tolist()) == {tri}, (dt, t.tolist())
        for op, want in [("max", WORLD), ("min", 1)]:
            t = full([2], RANK + 1, dt)
            dist.all_reduce([t], op)
            assert t.tolist() == [want] * 2, (dt, op, t.tolist())
    m = full([4], 4 * RANK, "fp32")
    dist.all_reduce([m], "mean")
    assert m.tolist() == [2.0 * (WORLD - 1)] * 4
    empty = [full([0], 0), full([2, 0], 0, "int64")]
    dist.all_reduce(empty, "sum")
    dist.broadcast(empty, 0)
    assert dist.all_gather(empty[0]).shape == (WORLD, 0)
    g = dist.all_gather(full([], float(RANK), "fp64"))
    assert g.tolist() == [float(r) for r in range(WORLD)]
    w = full([5], float(RANK), "bf16")
    dist.broadcast([w], WORLD - 1)
    assert w.tolist() == [float(WORLD - 1)] * 5
    # a bad handle on one rank: that rank gets its own error, the others E_DIST_MISMATCH
    errors = []
    for bad in [12345 if RANK == 1 else m, full([3], 1.0) if RANK == 0 else m]:
        try:
            dist.all_reduce([bad])
        except et.EnkaiError as e:
            errors.append(e.code)
    assert errors == ["E_HANDLE_INVALID" if RANK == 1 else "E_DIST_MISMATCH", "E_DIST_MISMATCH"], errors
    one = full([1], 1.0)
    dist.all_reduce([one])  # still usable
    assert one.tolist() == [float(WORLD)]
    dist.barrier()
    dist.shutdown()


def loop():
    dist.init(WORLD, RANK, "", float(os.environ.get("TIMEOUT_S", "60")))
    t = et.full([1024], 1.0)
    step = 0
    while True:
        start = time.monotonic()
        try:
            dist.all_reduce([t], "mean")
        except et.EnkaiError as e:
            elapsed = time.monotonic() - start
            # the group is broken now: later calls fail at once with the same code
            again = time.monotonic()
            try:
                dist.barrier()
                later = None
            except et.EnkaiError as e2:
                later = e2.code
            say(error=e.code, message=str(e), elapsed=elapsed, later=later, later_s=time.monotonic() - again)
            dist.shutdown()
            dist.shutdown()
            say(exited=True)
            return
        step += 1
        say(step=step)
        time.sleep(0.05)


def ckpt():
    """Ranked saves committed through the group, with rank-specific meta."""
    d = os.environ["CKPT_DIR"]
    dist.init(WORLD, RANK, "", 60)
    p = full([4], 10 * RANK + 1).require_grad()
    params = [p, full([2], RANK, "int64")]
    opt = et.AdamW([p])
    (p * p).sum().backward()
    opt.step()
    meta = json.dumps({"rank": RANK, "loader": "x" * (50 * RANK)})
    for step in [1, 2]:
        et.checkpoint_save_ranked(d, RANK, WORLD, params, opt, meta[:-1] + ', "step": %d}' % step)
        # every rank returned only after the commit: its own shard of this round loads at once
        ps, o, m = et.checkpoint_load_ranked(d, RANK)
        assert json.loads(m) == dict(json.loads(meta), step=step) and o is not None
        assert ps[1].tolist() == [RANK] * 2 and ps[0].tolist() == p.tolist()
    # one rank cannot save: every rank fails, and the previous round stays latest
    codes = []
    for bad in [[12345] if RANK == 1 else params, params]:
        try:
            et.checkpoint_save_ranked(d, RANK, WORLD, bad, opt, "{}" if bad is params else "{")
            codes.append(None)
        except et.EnkaiError as e:
            codes.append(e.code)
            # nothing was committed: every rank still loads the step-2 round
            assert json.loads(et.checkpoint_load_ranked(d, RANK)[2])["step"] == 2
    assert codes == ["E_HANDLE_INVALID" if RANK == 1 else "E_CKPT_INCOMPLETE", None], codes
    # the ranks' arguments must match the group (checked before anything is written)
    try:
        et.checkpoint_save_ranked(d, (RANK + 1) % WORLD, WORLD, params, opt, "{}")
        codes.append(None)
    except et.EnkaiError as e:
        codes.append(e.code)
    assert codes[-1] == "E_INVALID_ARG", codes
    assert et.checkpoint_load_ranked(d, RANK)[2] == b"{}"
    dist.shutdown()
    say(ok=True)


def replicas():
    """A data-parallel ranked save: params and moments alike on every rank are
    written once, in pieces; a rank-specific tensor stays in its rank's shard.
    The load (collective) resumes exactly: the next AdamW step equals the
    uninterrupted one. LOAD_ONLY=1: only load, and print the error code."""
    d = os.environ["CKPT_DIR"]
    dist.init(WORLD, RANK, "", 60)
    if os.environ.get("LOAD_ONLY") == "1":
        try:
            et.checkpoint_load_ranked(d, RANK)
            say(code=None)
        except et.EnkaiError as e:
            say(code=e.code, error=str(e))
        dist.shutdown()
        return
    et.manual_seed(7)
    params = [et.randn([1000]).require_grad(), et.randn([33, 7]).require_grad(), et.randn([5], "bf16"),
              full([3], RANK, "int64")]
    opt = et.AdamW(params[:2])

    def step(ps, o):
        for p in ps[:2]:
            (p * p * 0.5).sum().backward()
        o.step()
        et.zero_grad_multi(ps[:2])

    step(params, opt)
    et.checkpoint_save_ranked(d, RANK, WORLD, params, opt, json.dumps({"rank": RANK}))
    step(params, opt)  # the uninterrupted run
    ps, o, meta = et.checkpoint_load_ranked(d, RANK)
    assert json.loads(meta) == {"rank": RANK} and ps[3].tolist() == [RANK] * 3
    step(ps, o)  # the resumed run
    for a, b in zip(ps, params):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()
    dist.shutdown()
    say(ok=True)


{"collectives": collectives, "loop": loop, "ckpt": ckpt, "replicas": replicas}[sys.argv[1]]()
