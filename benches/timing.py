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


def best(f, rounds):
    """The shortest of `rounds` single calls of `f`, in seconds, after one warm-up call."""
    f()
    t = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        t = min(t, time.perf_counter() - t0)
    return t
