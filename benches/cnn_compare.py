"""`make bench`: one training step of the digits CNN (examples-c/digits_cnn.c's
model: conv 3x3 1->16, batch_norm, relu, max_pool 2, conv 3x3 16->32,
batch_norm, relu, max_pool 2, linear 128->10; cross_entropy; AdamW) at
batch 64 on 8x8 images, native (the libtorch-free library through the
Python package, in a subprocess that loads no torch) against PyTorch eager
(`torch.nn` layers, `torch.optim.AdamW`), at 1 and 2 threads.

A step is zero_grad, forward, loss, backward and the optimizer step. Each
side runs ROUNDS alternations of STEPS steps and keeps its best mean.

    python benches/cnn_compare.py [path/to/notorch/libenkai_tensor.so]
"""

import json
import os
import subprocess
import sys
import time

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
STEPS = 50
BATCH = 64


def timed(step):
    for _ in range(5):
        step()  # warm-up: allocations, the op caches
    t0 = time.perf_counter()
    for _ in range(STEPS):
        step()
    return (time.perf_counter() - t0) / STEPS * 1e3


def native_child(threads):
    """Runs in the subprocess: only enkai_tensor is loaded."""
    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import enkai_tensor as et

    et.backend_set("cpu")
    et.set_num_threads(threads)
    rng = np.random.default_rng(0)

    def param(*shape, fan_in=0, value=0.0):
        a = rng.uniform(-1, 1, shape) / np.sqrt(fan_in) if fan_in else np.full(shape, value)
        return et.from_numpy(a.astype(np.float32))

    p = {
        "w1": param(16, 1, 3, 3, fan_in=9), "b1": param(16, fan_in=9), "g1": param(16, value=1), "e1": param(16),
        "w2": param(32, 16, 3, 3, fan_in=144), "b2": param(32, fan_in=144), "g2": param(32, value=1), "e2": param(32),
        "fw": param(10, 128, fan_in=128), "fb": param(10, fan_in=128),
    }
    stats = [param(16), param(16, value=1), param(32), param(32, value=1)]
    for t in p.values():
        t.require_grad()
    opt = et.AdamW(list(p.values()), lr=1e-3, weight_decay=0.01)
    x = et.from_numpy(rng.uniform(0, 1, (BATCH, 1, 8, 8)).astype(np.float32))
    y = et.from_numpy(rng.integers(0, 10, BATCH))
    bn = {"training": True, "momentum": 0.1, "eps": 1e-5}

    params = list(p.values())

    def step():
        et.zero_grad_multi(params)
        h = et.op("conv2d", x, p["w1"], p["b1"], padding=[1, 1])
        h = et.op("max_pool2d", et.op("relu", et.op("batch_norm", h, stats[0], stats[1], p["g1"], p["e1"], **bn)), kernel_size=[2, 2])
        h = et.op("conv2d", h, p["w2"], p["b2"], padding=[1, 1])
        h = et.op("max_pool2d", et.op("relu", et.op("batch_norm", h, stats[2], stats[3], p["g2"], p["e2"], **bn)), kernel_size=[2, 2])
        loss = et.op("cross_entropy", et.op("linear", h.reshape([BATCH, 128]), p["fw"], p["fb"]), y)
        loss.backward()
        opt.step()

    print(json.dumps({"ms": timed(step)}))


def native(lib, threads):
    env = dict(os.environ, ENKAI_TENSOR_PATH=lib, ENKAI_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, __file__, "--native", str(threads)], check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["ms"]


def eager(threads):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    conv1, bn1 = torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
    conv2, bn2 = torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32)
    fc = torch.nn.Linear(128, 10)
    mods = [conv1, bn1, conv2, bn2, fc]
    opt = torch.optim.AdamW([q for m in mods for q in m.parameters()], lr=1e-3, weight_decay=0.01)
    x, y = torch.rand(BATCH, 1, 8, 8), torch.randint(0, 10, (BATCH,))

    def step():
        opt.zero_grad()
        h = F.max_pool2d(F.relu(bn1(conv1(x))), 2)
        h = F.max_pool2d(F.relu(bn2(conv2(h))), 2)
        F.cross_entropy(fc(h.reshape(BATCH, 128)), y).backward()
        opt.step()

    return timed(step)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    lib = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "target", "notorch", "release", "libenkai_tensor.so")
    print(f"digits CNN training step, batch {BATCH}, 8x8 fp32 (forward, loss, backward, AdamW), mean of {STEPS} steps, best of {ROUNDS}")
    print(f"{'threads':>7} {'native ms':>10} {'eager ms':>9} {'ratio':>6}")
    for threads in (1, 2):
        nat, eag = float("inf"), float("inf")
        for _ in range(ROUNDS):
            nat = min(nat, native(lib, threads))
            eag = min(eag, eager(threads))
        print(f"{threads:>7} {nat:>10.2f} {eag:>9.2f} {nat / eag:>6.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--native":
        native_child(int(sys.argv[2]))
    else:
        main()
