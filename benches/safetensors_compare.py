"""`make bench`: opening a 1 GiB safetensors file (64 fp32 tensors of 16 MiB)
into tensors, then touching a quarter of them, in one run:
`enkai_tensor.safetensors.load_file` (enkai_safetensors_open + get of every
tensor: views of a private mapping, so nothing is read yet) on each backend
vs `safetensors.torch.load_file`.

Each contender runs in a fresh subprocess, so its RSS growth is its own
(VmRSS counts the mapped file pages it touched, not the ones it only
mapped). Both start after the same warm-up (the library loaded, one small
op run), and both touch tensors the same way: `t.sum().item()`, which reads
every page. Warm: the file is wholly in the page cache before each run
(checked with mincore). Cold: its pages are dropped from the cache with
posix_fadvise(POSIX_FADV_DONTNEED) on this file only (no root needed, and
the machine's other caches stay), checked with mincore too.

The reference copies nothing eagerly either: as measured with safetensors
0.8, its torch load_file maps the whole file privately (one mapping in
/proc/self/maps) and has the file read into the page cache at open, its
pages counted in RSS only once touched. The RSS and cached columns show
what each side does at open.

Usage: safetensors_compare.py LIB [NOTORCH_LIB]  (the libtorch build, which
has both backends, and optionally the libtorch-free build)."""

import ctypes
import inspect
import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N_TENSORS = 64
NUMEL = 16 * 1024 * 1024 // 4  # 16 MiB of fp32 each: 1 GiB in all
TOUCHED = N_TENSORS // 4
ROUNDS = 3

# Runs in the subprocess (after resident_fraction's source): argv = path, contender, touched.
CHILD = r"""
import json, sys, time

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

path, who, touched = sys.argv[1], sys.argv[2], int(sys.argv[3])
if who == "torch":
    import torch
    from safetensors.torch import load_file
    torch.ones(8).sum().item()  # warm-up: the library's first op outside the timing
else:
    import enkai_tensor as et
    from enkai_tensor.safetensors import load_file
    et.ones([8]).sum().item()
    assert "torch" not in sys.modules, "torch must not be loaded beside ours: its pages would count in RSS"
base = rss()
t0 = time.perf_counter()
ts = load_file(path)
t1 = time.perf_counter()
after_open = rss()
cached = resident_fraction(path)
names = list(ts)
for n in names[:touched]:
    ts[n].sum().item()
t2 = time.perf_counter()
after_touch = rss()
for n in names[touched:]:
    ts[n].sum().item()
t3 = time.perf_counter()
after_all = rss()
print(json.dumps({"n": len(ts), "cached": cached, "open": t1 - t0, "touch": t2 - t1, "rest": t3 - t2,
                  "rss_open": after_open - base, "rss_touch": after_touch - base, "rss_all": after_all - base}))
"""


def resident_fraction(path):
    """The fraction of the file's pages in the page cache (mincore over a
    shared read-only mapping, which itself reads nothing)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = os.path.getsize(path)
    page = os.sysconf("SC_PAGE_SIZE")
    pages = (size + page - 1) // page
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        vec = ctypes.create_string_buffer(pages)
        rc = libc.mincore(addr, size, vec)
        libc.munmap(addr, size)
        if rc != 0:
            raise OSError(ctypes.get_errno(), "mincore")
    finally:
        os.close(fd)
    return sum(b & 1 for b in vec.raw) / pages


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass
    return resident_fraction(path)


def cold(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages would stay
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return resident_fraction(path)


def write_file(path):
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    tensors = {f"layer{i:02d}.weight": torch.randn(NUMEL, generator=g) for i in range(N_TENSORS)}
    save_file(tensors, path, metadata={"format": "pt"})


def run(path, who, lib, backend):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + env.get("PYTHONPATH", "")
    if lib:
        env["ENKAI_TENSOR_PATH"] = str(Path(lib).resolve())
    if backend:
        env["ENKAI_BACKEND"] = backend
    code = "import ctypes, os\n" + inspect.getsource(resident_fraction) + CHILD
    out = subprocess.run([sys.executable, "-c", code, path, who, str(TOUCHED)], env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{who} ({backend or 'torch'}) failed:\n{out.stderr}")
    r = json.loads(out.stdout.splitlines()[-1])
    assert r["n"] == N_TENSORS, r
    return r


def main():
    lib = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target" / "release" / "libenkai_tensor.so")
    notorch = sys.argv[2] if len(sys.argv) > 2 else None
    contenders = [("ours, torch backend", "ours", lib, "torch"), ("ours, native backend", "ours", lib, "cpu")]
    if notorch and Path(notorch).exists():
        contenders.append(("ours, native (libtorch-free build)", "ours", notorch, "cpu"))
    contenders.append(("safetensors.torch.load_file", "torch", None, None))

    mib = N_TENSORS * NUMEL * 4 / 2**20
    torch_version, st_version = version("torch"), version("safetensors")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", "/tmp")) as d:
        path = os.path.join(d, "model.safetensors")
        write_file(path)
        for cache, prepare, rounds in [("warm", warm, ROUNDS), ("cold", cold, 1)]:
            best, resident = {}, []
            for _ in range(rounds):  # alternate the contenders, keep each one's best time
                for label, who, lb, backend in contenders:
                    resident.append(prepare(path))
                    r = run(path, who, lb, backend)
                    if label in best:
                        for k in ("open", "touch", "rest"):
                            r[k] = min(r[k], best[label][k])
                        for k in ("rss_open", "rss_touch", "rss_all"):
                            r[k] = max(r[k], best[label][k])
                    best[label] = r
            ref = best["safetensors.torch.load_file"]
            print(f"open a {mib:.0f} MiB safetensors file ({N_TENSORS} fp32 tensors of {NUMEL * 4 >> 20} MiB), "
                  f"{cache}: {min(resident):.0%}-{max(resident):.0%} of its pages in the page cache before each run, "
                  f"{'best of ' + str(rounds) if rounds > 1 else 'one run'}; torch {torch_version}, "
                  f"safetensors {st_version}")
            print("  open = load_file (every tensor); touch = t.sum().item() per tensor (1/4 of them, then the rest); "
                  "RSS = growth since warm-up; cached = the file's pages in the page cache after open")
            print(f"  {'':36} {'open':>9} {'vs ref':>7} {'touch 1/4':>10} {'touch rest':>11} "
                  f"{'RSS open':>9} {'RSS 1/4':>8} {'RSS all':>8} {'cached':>7}")
            for label, r in best.items():
                print(f"  {label:36} {r['open'] * 1e3:7.1f}ms {ref['open'] / r['open']:6.1f}x "
                      f"{r['touch'] * 1e3:8.1f}ms {r['rest'] * 1e3:9.1f}ms "
                      f"{r['rss_open'] / 2**20:6.0f}MiB {r['rss_touch'] / 2**20:5.0f}MiB {r['rss_all'] / 2**20:5.0f}MiB "
                      f"{r['cached']:6.0%}")


if __name__ == "__main__":
    main()
