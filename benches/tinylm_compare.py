"""`make bench`: a TinyLM training step (V=256, D=128, L=2, H=4, B=8, S=64;
zero_grad, forward, backward, AdamW) through the C ABI vs the same model and
optimizer in PyTorch eager, same run, same thread count."""

import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))
import lm_reference as ref  # noqa: E402

THREADS = int(os.environ.get("OMP_NUM_THREADS", str(torch.get_num_threads())))
STEPS = 20


def pytorch_ms():
    torch.set_num_threads(THREADS)
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


def main():
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    ours, eager = float("inf"), float("inf")
    for _ in range(2):  # alternate the two sides
        out = subprocess.run([sys.argv[1], str(STEPS)], check=True, capture_output=True, text=True, env=env).stdout
        ours = min(ours, float(out.split()[1]))
        eager = min(eager, pytorch_ms())
    print(f"TinyLM train step, threads={THREADS}: C ABI {ours:.2f} ms/step, PyTorch eager {eager:.2f} ms/step, "
          f"ratio {ours / eager:.2f}")


if __name__ == "__main__":
    main()
