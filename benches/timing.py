"""What the Python bench scripts share: PyTorch's side of a comparison, timed."""

import time


def bench(f, iters):
    """Best of 7 rounds of `iters` calls of `f`, in ns per call, after a warm-up."""
    for _ in range(iters // 10 + 1):
        f()
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            f()
        best = min(best, (time.perf_counter_ns() - t0) / iters)
    return best
