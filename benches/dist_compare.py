"""Multi-rank benchmarks, 2 ranks on 127.0.0.1, 1 thread per rank, ratios taken in one run:

  1. a 64 MiB fp32 all-reduce: enkai_dist_allreduce_sum vs torch.distributed.all_reduce (gloo);
  2. a data-parallel TinyLM training step (V256 D128 L2 H4, 8 rows x 64 per rank; zero_grad,
     forward, backward, gradient all-reduce, AdamW): enkai_dist_allreduce_grads vs PyTorch's
     DistributedDataParallel with gloo (python/tests/ddp_worker.py runs both).

Rounds alternate between the two sides; each side's figure is its best round.
    python benches/dist_compare.py            (the launcher)
"""

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("ENKAI_TENSOR_PATH", str(ROOT / "target" / "release" / "libenkai_tensor.so"))
MIB, ITERS, ROUNDS = 64, 10, 3


def allreduce_worker(side):
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    n = MIB * 1024 * 1024 // 4
    times = []
    if side == "enkai":
        import enkai_tensor as et
        import enkai_tensor.dist as dist
        dist.init(world, rank, "", 120)
        t = et.full([n], 1.0)
        arg = b"[%d]" % t.handle
        run = lambda: et.lib.enkai_dist_allreduce_sum(arg) == 0 or et._raise()  # noqa: E731
        done = dist.shutdown
    else:
        import torch
        import torch.distributed as tdist
        tdist.init_process_group("gloo", rank=rank, world_size=world)
        t = torch.ones(n)
        run = lambda: tdist.all_reduce(t)  # noqa: E731
        done = tdist.destroy_process_group
    for i in range(2 + ITERS):
        start = time.perf_counter()
        run()
        if i >= 2:
            times.append(time.perf_counter() - start)
    done()
    print(json.dumps({"ms": statistics.median(times) * 1e3}))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv, **extra):
    """Runs 2 ranks; returns rank 0's stdout."""
    port = free_port()
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", **extra)
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit(f"a rank failed: {outs}")
    return outs[0]


def best(side_runs):
    return {side: min(v) for side, v in side_runs.items()}


def main():
    me = [sys.executable, __file__]
    ar = {"enkai": [], "torch": []}
    for _ in range(ROUNDS):
        for side in ar:
            ar[side].append(json.loads(launch(me + ["allreduce", side]).strip().splitlines()[-1])["ms"])
    ar = best(ar)
    worker = str(ROOT / "python" / "tests" / "ddp_worker.py")
    spec = '{"vocab_size": 256, "seq_len": 64, "d_model": 128, "n_layers": 2, "n_heads": 4}'
    env = dict(SPEC=spec, BATCH="16", STEPS="20", WARMUP="3", BENCH="1")
    step = {"enkai": [], "torch": []}
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"enkai-dist-bench-{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    for _ in range(ROUNDS):
        for side in step:
            out = tmp / f"{side}-{{rank}}.pt"
            launch([sys.executable, worker, side, str(out)], **env)
            import torch
            step[side].append(torch.load(str(out).format(rank=0)))
    step = best(step)
    gb = MIB / 1024
    print("\n2 ranks on 127.0.0.1, 1 thread each; best of %d alternating rounds" % ROUNDS)
    print(f"{'what':44} {'C ABI':>10} {'PyTorch':>10} {'ratio':>7}")
    print(f"{'64 MiB fp32 all-reduce, GB/s (algbw)':44} {gb / ar['enkai'] * 1e3:10.2f} {gb / ar['torch'] * 1e3:10.2f} "
          f"{ar['torch'] / ar['enkai']:7.2f}x   (throughput; >1 = faster)")
    print(f"{'data-parallel TinyLM step, ms (vs DDP)':44} {step['enkai']:10.2f} {step['torch']:10.2f} "
          f"{step['enkai'] / step['torch']:7.2f}x   (time; <1 = faster)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "allreduce":
        allreduce_worker(sys.argv[2])
    else:
        main()
