"""`make bench`: a TinyLM training step (V=256, D=128, L=2, H=4, B=8, S=64;
zero_grad, forward, backward, AdamW) through the C ABI on the torch backend
and on the native one, vs the same model and optimizer in PyTorch eager; at
1 and 2 threads, all in this one run. Then the peak RSS of the demo on each
backend (and on the libtorch-free library, when built).

    python benches/tinylm_compare.py build/bench/tinylm_c [build/examples/train_tinylm]
"""

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "tests"))
import lm_reference as ref  # noqa: E402

STEPS = 20
NOTORCH_DIR = ROOT / "target" / "notorch" / "release"


def pytorch_ms(threads):
    torch.set_num_threads(threads)
    spec = {"vocab_size": 256, "seq_len": 64, "d_model": 128, "n_layers": 2, "n_heads": 4}
    params = ref.init(spec, 0)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=False)
    i = torch.arange(8 * 64)
    x, y = (i * 7 % 256).view(8, 64), (i * 13 % 256).view(8, 64)
    best = float("inf")
    for block in range(4):
        t0 = time.perf_counter()
        for _ in range(STEPS):
            opt.zero_grad()
            ref.forward(params, spec, x, y).backward()
            opt.step()
        ms = (time.perf_counter() - t0) * 1e3 / STEPS
        if block:
            best = min(best, ms)
    return best


def c_ms(bench, backend, threads):
    env = dict(os.environ, ENKAI_BACKEND=backend, ENKAI_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run([bench, str(STEPS)], check=True, capture_output=True, text=True, env=env).stdout
    return float(out.split()[1])


def peak_rss_mib(argv, **env):
    """Peak RSS of one child run (ru_maxrss of the children reaped since the last call is a running max,
    so each measurement runs in a fresh helper process)."""
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *argv], check=True, capture_output=True, text=True,
                         env=dict(os.environ, **env)).stdout
    return int(out) / 1024


def main():
    bench = sys.argv[1]
    rows = []
    for threads in (2, 1):
        best = {"torch": float("inf"), "cpu": float("inf"), "eager": float("inf")}
        for _ in range(2):  # alternate the three sides
            for b in ("torch", "cpu"):
                best[b] = min(best[b], c_ms(bench, b, threads))
            best["eager"] = min(best["eager"], pytorch_ms(threads))
        rows.append((threads, best))
    print("TinyLM train step (V256 D128 L2 H4 B8 S64; zero_grad, forward, backward, AdamW), ms/step, best of 2x3 blocks")
    print(f"{'threads':>7} {'torch backend':>14} {'native':>8} {'PyTorch eager':>14} {'native/eager':>13} {'native/torch':>13}")
    for threads, b in rows:
        print(f"{threads:>7} {b['torch']:>14.2f} {b['cpu']:>8.2f} {b['eager']:>14.2f} "
              f"{b['cpu'] / b['eager']:>12.2f}x {b['cpu'] / b['torch']:>12.2f}x")
    if len(sys.argv) > 2:
        demo = sys.argv[2]
        print("peak RSS of the demo (300 steps), MiB:")
        for label, env in [("torch backend", {"ENKAI_BACKEND": "torch"}), ("native, full build", {"ENKAI_BACKEND": "cpu"})]:
            print(f"  {label:<32} {peak_rss_mib([demo], **env):8.1f}")
        if (NOTORCH_DIR / "libenkai_tensor.so").exists():
            rss = peak_rss_mib([demo], LD_LIBRARY_PATH=str(NOTORCH_DIR))
            print(f"  {'native, libtorch-free build':<32} {rss:8.1f}")


if __name__ == "__main__":
    main()
