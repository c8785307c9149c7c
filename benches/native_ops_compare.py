"""`make bench`: native kernels against PyTorch eager, 1 thread. For each op,
runs the C bench (the native backend through `enkai_op`) as a subprocess and
times the same op in PyTorch eager here, one right after the other, ROUNDS
times over, keeping each side's best; then prints one table with native ns /
eager ns per op (target <= 1). These ops read megabytes, so on a shared
machine their time swings with the neighbours' use of the caches and memory
for seconds at a time: alternating op by op puts both sides in the same
spells, and the best of several alternations is what each side does when
left alone.

    python benches/native_ops_compare.py build/bench/native_ops_c
"""

import os
import subprocess
import sys

import torch
from timing import bench

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))

# name, what (as printed), calls per timed round (about 20 ms): the C bench
# runs the same cases under the same names, the count passed on its command line.
CASES = [
    ("sum_dim1", "sum dim=1 [512,4096] fp32", 200),
    ("softmax_dim0", "softmax dim=0 [512,4096] fp32", 20),
    ("topk_50", "topk k=50 [64,32000] fp32", 10),
    ("gather_dim1", "gather dim=1 [4096,1024] by [4096,64]", 60),
    ("index_select_dim0", "index_select dim=0 [4096,1024] by [1024]", 200),
]


def eager_ops():
    """The same ops in PyTorch eager, on inputs of the same shapes and kinds."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 4096, generator=g)
    logits = torch.randn(64, 32000, generator=g)
    table = torch.randn(4096, 1024, generator=g)
    gidx = torch.randint(0, 1024, (4096, 64), generator=g)
    sidx = torch.randint(0, 4096, (1024,), generator=g)
    return {
        "sum_dim1": lambda: torch.sum(x, dim=1),
        "softmax_dim0": lambda: torch.softmax(x, dim=0),
        "topk_50": lambda: torch.topk(logits, k=50),
        "gather_dim1": lambda: torch.gather(table, 1, gidx),
        "index_select_dim0": lambda: torch.index_select(table, 0, sidx),
    }


def native(c_bin, name, iters):
    env = dict(os.environ, OMP_NUM_THREADS="1", ENKAI_NUM_THREADS="1")
    out = subprocess.run([c_bin, name, str(iters)], check=True, capture_output=True, text=True, env=env).stdout
    got, ns = out.split()
    assert got == name, out
    return float(ns)


def main():
    c_bin = sys.argv[1] if len(sys.argv) > 1 else "build/bench/native_ops_c"
    ops = eager_ops()
    ours, theirs = {}, {}
    with torch.no_grad():
        for _ in range(ROUNDS):
            for name, _, iters in CASES:
                ours[name] = min(ours.get(name, float("inf")), native(c_bin, name, iters))
                theirs[name] = min(theirs.get(name, float("inf")), bench(ops[name], iters))
    print(f"native backend (enkai_op) vs PyTorch {torch.__version__} eager, 1 thread; "
          f"ns per op, best of {ROUNDS} alternations x 7 rounds each")
    print(f"{'op':<20}{'what':<42}{'native ns':>12}{'eager ns':>12}{'native/eager':>14}")
    for name, what, _ in CASES:
        print(f"{name:<20}{what:<42}{ours[name]:>12.0f}{theirs[name]:>12.0f}{ours[name] / theirs[name]:>14.2f}")
    print("target: native/eager <= 1.00 on each row")


if __name__ == "__main__":
    main()
