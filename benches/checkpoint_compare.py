"""`make bench`: save and load of 256 MiB of fp32 parameters plus their AdamW
state (768 MiB written in all) through the C ABI — SHA-256 and fsync
included — vs torch.save + hashlib.sha256 (+ fsync) in Python, same run, best of 3
alternating rounds."""

import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import enkai_tensor as et  # noqa: E402

N_PARAMS = 16
NUMEL = 256 * 1024 * 1024 // 4 // N_PARAMS  # 256 MiB of fp32 in 16 tensors


def timed(f):
    t0 = time.perf_counter()
    result = f()
    elapsed = time.perf_counter() - t0
    del result  # loaded tensors are freed outside the timing
    return elapsed


def ours(d):
    params = [et.randn([NUMEL]).require_grad() for _ in range(N_PARAMS)]
    opt = et.AdamW(params)
    for p in params:  # one step so the optimizer has moments to save
        (p * p).sum().backward()
    opt.step()
    return (lambda: et.checkpoint_save(d, params, opt, '{"step": 1}'),
            lambda: et.checkpoint_load(d))


def pytorch(d):
    params = [torch.randn(NUMEL, requires_grad=True) for _ in range(N_PARAMS)]
    opt = torch.optim.AdamW(params, foreach=False)
    for p in params:
        (p * p).sum().backward()
    opt.step()
    path = os.path.join(d, "ckpt.pt")

    def save():
        torch.save({"params": params, "optimizer": opt.state_dict()}, path)
        with open(path, "rb+") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
            os.fsync(f.fileno())
        with open(path + ".sha256", "w") as f:
            f.write(digest)
            os.fsync(f.fileno())

    def load():
        with open(path, "rb") as f:
            data = f.read()
        assert hashlib.sha256(data).hexdigest() == open(path + ".sha256").read()
        return torch.load(path, weights_only=True)

    return save, load


def main():
    mib = 3 * 256  # params + two moments
    rounds = 3
    best = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        sides = {"ours": ours(os.path.join(d, "ours")), "torch": pytorch(d)}
        for _ in range(rounds):  # alternate the two sides, keep each one's best
            for side, (save, load) in sides.items():
                t_save, t_load = timed(save), timed(load)
                prev = best.get(side, (t_save, t_load))
                best[side] = (min(t_save, prev[0]), min(t_load, prev[1]))
    (s1, l1), (s2, l2) = best["ours"], best["torch"]
    print(f"checkpoint of {mib} MiB (256 MiB fp32 params + AdamW moments), SHA-256 + fsync included, best of {rounds}:")
    print(f"  save: C ABI {mib / s1:7.0f} MB/s   torch.save+hashlib {mib / s2:7.0f} MB/s   ratio {s2 / s1:.2f}x")
    print(f"  load: C ABI {mib / l1:7.0f} MB/s   torch.load+hashlib {mib / l2:7.0f} MB/s   ratio {l2 / l1:.2f}x")


if __name__ == "__main__":
    main()
