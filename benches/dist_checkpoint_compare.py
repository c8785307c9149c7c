"""`make bench`: a ranked checkpoint of 256 MiB of fp32 parameters plus their
AdamW moments (768 MiB of training state) on 2 ranks (127.0.0.1, gloo),
unsharded (every rank holds all moments) and sharded (ZeRO stage 1, each rank
half), through enkai_checkpoint_save_ranked / load_ranked vs PyTorch's
torch.distributed.checkpoint (dcp.save / dcp.load, FileSystemWriter with
fsync) on the same state, in one run; best of 2 alternating rounds.

Both sides write a replicated tensor once: DCP's planner de-duplicates by
key, ours by content (XXH3-128 fingerprints exchanged through the group),
each rank writing an even share. Ours also computes SHA-256 of every byte
written and verifies it on load (part of the format: each rank hashes its
share and checks the rest against its verifier); DCP hashes nothing. A load
through our C ABI returns new tensors (fresh memory, first touched there);
dcp.load fills the state dict's existing tensors in place. MB/s counts the
bytes each side actually wrote.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("ENKAI_TENSOR_PATH", str(ROOT / "target" / "release" / "libenkai_tensor.so"))
N_PARAMS, ROUNDS = 16, 2
NUMEL = 256 * 1024 * 1024 // 4 // N_PARAMS


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def du(path):
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file() and not f.is_symlink())


def worker(side, sharded, d):
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    import torch
    if side == "enkai":
        import enkai_tensor as et
        import enkai_tensor.dist as dist
        dist.init(world, rank, "", 600)
        et.manual_seed(0)
        params = [et.randn([NUMEL]).require_grad() for _ in range(N_PARAMS)]
        opt = et.AdamW(params)
        if sharded:
            opt.shard()
        for p in params:
            (p * p).sum().backward()
        before = rss()
        opt.step()  # the moments are allocated here
        grown = rss() - before
        save = lambda: et.checkpoint_save_ranked(d, rank, world, params, opt, "{}")  # noqa: E731
        load = lambda: et.checkpoint_load_ranked(d, rank)  # noqa: E731
        barrier, done, state = dist.barrier, dist.shutdown, opt.state_bytes
    else:
        import torch.distributed as tdist
        import torch.distributed.checkpoint as dcp
        tdist.init_process_group("gloo", rank=rank, world_size=world)
        torch.manual_seed(0)
        params = [torch.randn(NUMEL, requires_grad=True) for _ in range(N_PARAMS)]
        mine = [i for i in range(N_PARAMS) if not sharded or i % world == rank]
        opt = torch.optim.AdamW([params[i] for i in mine], foreach=False)
        for p in params:
            (p * p).sum().backward()
        before = rss()
        opt.step()
        grown = rss() - before
        st = opt.state_dict()["state"]
        key = f"moments.rank{rank}" if sharded else "moments"
        sd = {"params": {str(i): p.detach() for i, p in enumerate(params)},
              key: {f"{k}.{mine[i]}": s[k] for i, s in st.items() for k in ["exp_avg", "exp_avg_sq"]}}
        save = lambda: dcp.save(sd, checkpoint_id=d)  # noqa: E731
        load = lambda: dcp.load(sd, checkpoint_id=d)  # noqa: E731
        barrier, done = tdist.barrier, tdist.destroy_process_group
        state = sum(t.numel() * 4 for t in sd[key].values())
    barrier()
    t0 = time.perf_counter()
    save()
    barrier()
    t_save = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded = load()
    barrier()
    t_load = time.perf_counter() - t0
    del loaded
    done()
    print(json.dumps({"save": t_save, "load": t_load, "state_bytes": state, "rss_growth": grown}))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(side, sharded, d):
    port = free_port()
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, side, str(int(sharded)), d], env=env,
                                      stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit(f"a rank failed: {outs}")
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


def main():
    base = Path(os.environ.get("TMPDIR", "/tmp")) / f"enkai-dist-ckpt-bench-{os.getpid()}"
    rows = {}
    try:
        for _ in range(ROUNDS):
            for sharded in [False, True]:
                for side in ["enkai", "torch"]:
                    d = base / f"{side}-{int(sharded)}"
                    shutil.rmtree(d, ignore_errors=True)
                    d.mkdir(parents=True)
                    ranks = launch(side, sharded, str(d))
                    written = du(d)
                    shutil.rmtree(d)
                    key = (side, sharded)
                    t_save, t_load = max(r["save"] for r in ranks), max(r["load"] for r in ranks)
                    old = rows.get(key)
                    rows[key] = {"save": min(t_save, old["save"]) if old else t_save,
                                 "load": min(t_load, old["load"]) if old else t_load,
                                 "bytes": written, "state": [r["state_bytes"] for r in ranks],
                                 "rss": [r["rss_growth"] for r in ranks]}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    mb = 1024 * 1024
    print("\nranked checkpoint, 2 ranks, 256 MiB fp32 params + AdamW moments; best of %d alternating rounds" % ROUNDS)
    print("opt state/rank: the moments' bytes; RSS/rank: the resident-memory growth measured across the first")
    print("AdamW step (where the moments are allocated), on the rank that grew most")
    print(f"{'':26} {'written':>8} {'opt state':>10} {'RSS':>6} {'save MB/s':>22} {'load MB/s':>22} {'time vs DCP':>16}")
    print(f"{'':26} {'MiB':>8} {'MiB/rank':>10} {'MiB':>6} {'per rank':>10} {'total':>11} {'per rank':>10} {'total':>11} {'save':>7} {'load':>8}")
    for sharded in [False, True]:
        for side in ["enkai", "torch"]:
            r = rows[(side, sharded)]
            name = ("C ABI" if side == "enkai" else "torch DCP") + (" sharded" if sharded else " unsharded")
            per = r["bytes"] / 2 / mb
            ref = rows[("torch", sharded)]
            print(f"{name:26} {r['bytes'] / mb:8.0f} {max(r['state']) / mb:10.0f} {max(r['rss']) / mb:6.0f} {per / r['save']:10.0f} "
                  f"{r['bytes'] / mb / r['save']:11.0f} {per / r['load']:10.0f} {r['bytes'] / mb / r['load']:11.0f} "
                  f"{r['save'] / ref['save']:7.2f}x {r['load'] / ref['load']:7.2f}x")


if __name__ == "__main__":
    if len(sys.argv) == 4:
        worker(sys.argv[1], sys.argv[2] == "1", sys.argv[3])
    else:
        main()
