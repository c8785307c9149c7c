"""Multi-rank benchmarks, 2 ranks on 127.0.0.1, 1 thread per rank, ratios taken in one run:

  1. a 64 MiB fp32 all-reduce (and a 1-element one, for latency): enkai_dist_allreduce_sum vs
     torch.distributed.all_reduce (gloo), both groups in the same two processes, iterations
     alternating between them;
  2. a data-parallel TinyLM training step (V256 D128 L2 H4, 8 rows x 64 per rank; zero_grad,
     forward, backward, gradient all-reduce, AdamW): enkai_dist_allreduce_grads vs PyTorch's
     DistributedDataParallel with gloo (python/tests/ddp_worker.py runs both).

Each side's figure is its best of 3 rounds (the step benchmark alternates rounds between the sides).
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


def allreduce_worker():
    """Both groups live in the same two processes; iterations alternate between them."""
    import torch
    import torch.distributed as tdist

    import enkai_tensor as et
    import enkai_tensor.dist as dist

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    port = int(os.environ["MASTER_PORT"])
    dist.init(world, rank, f"tcp://127.0.0.1:{port + 1}", 120)
    tdist.init_process_group("gloo", rank=rank, world_size=world)
    n = MIB * 1024 * 1024 // 4
    ours, theirs = et.full([n], 1.0), torch.ones(n)
    arg = b"[%d]" % ours.handle
    tiny, tiny_arg = et.full([1], 1.0), None
    tiny_arg = b"[%d]" % tiny.handle
    runs = {
        "enkai": lambda: et.lib.enkai_dist_allreduce_sum(arg) == 0 or et._raise(),
        "torch": lambda: tdist.all_reduce(theirs),
        "enkai_tiny": lambda: et.lib.enkai_dist_allreduce_sum(tiny_arg) == 0 or et._raise(),
        "torch_tiny": lambda: tdist.all_reduce(theirs[:1]),
    }
    times = {k: [] for k in runs}
    for i in range(2 + ITERS):
        for k, run in runs.items():
            start = time.perf_counter()
            run()
            if i >= 2:
                times[k].append(time.perf_counter() - start)
    dist.shutdown()
    tdist.destroy_process_group()
    print(json.dumps({k: statistics.median(v) * 1e3 for k, v in times.items()}))


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
    rounds = [json.loads(launch(me + ["allreduce"]).strip().splitlines()[-1]) for _ in range(ROUNDS)]
    ar = best({k: [r[k] for r in rounds] for k in rounds[0]})
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
    print(f"{'4-byte all-reduce latency, ms':44} {ar['enkai_tiny']:10.3f} {ar['torch_tiny']:10.3f} "
          f"{ar['enkai_tiny'] / ar['torch_tiny']:7.2f}x   (time; <1 = faster)")
    print(f"{'data-parallel TinyLM step, ms (vs DDP)':44} {step['enkai']:10.2f} {step['torch']:10.2f} "
          f"{step['enkai'] / step['torch']:7.2f}x   (time; <1 = faster)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "allreduce":
        allreduce_worker()
    else:
        main()
