"""The C++ header's safetensors wrappers (enkai::SafetensorsFile and
enkai::save_safetensors), through examples-cpp/safetensors_inspect, against
the reference `safetensors` package: a file it writes (every dtype the
library holds) is listed with the names, dtypes, shapes and metadata it
reports and the sums torch computes, and the file the program writes back
from those zero-copy tensors is the same tensors, bit for bit, with the
metadata kept and one key added."""

import json
import math
import os
import struct
import subprocess
from pathlib import Path

import pytest
import safetensors
import safetensors.torch
import torch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("backend")

FORMAT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.bool: "BOOL",
          torch.uint8: "U8"}


def sample(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    lo, hi = (0, 256) if dtype == torch.uint8 else (-100, 100)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def inspect(*args):
    exe = ROOT / "build" / "examples" / "safetensors_inspect"
    if not exe.exists():
        pytest.skip(f"{exe} is not built (make {exe.relative_to(ROOT)})")
    # The library the suite tests (ENKAI_TENSOR_PATH), ahead of the program's RUNPATH.
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(Path(env["ENKAI_TENSOR_PATH"]).resolve().parent) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120, env=env)


def test_cpp_reads_and_writes_what_the_reference_package_does(tmp_path):
    ref = {f"layer.{i}.{FORMAT[d].lower()}": sample(d, (i % 3 + 2, 3), seed=i) for i, d in enumerate(FORMAT)}
    ref["scalar"] = sample(torch.float32, (), seed=20)
    ref["empty"] = sample(torch.int32, (0, 4), seed=21)
    meta = {"format": "pt", "note": 'ü "quoted"'}
    src, out = tmp_path / "ref.safetensors", tmp_path / "out.safetensors"
    safetensors.torch.save_file(ref, src, metadata=meta)

    run = inspect(src, out)
    assert run.returncode == 0, run.stderr
    rows = [line.split("\t") for line in run.stdout.splitlines()]
    listed = {r[0]: r[1:] for r in rows if r[0] != "__metadata__"}
    assert {r[1]: r[2] for r in rows if r[0] == "__metadata__"} == meta
    # names() is in file order: by data offset, as the header says
    raw = src.read_bytes()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    assert list(listed) == sorted(ref, key=lambda n: header[n]["data_offsets"])
    for name, t in ref.items():
        dtype, shape, total = listed[name]
        assert dtype == FORMAT[t.dtype] and shape == "[" + ",".join(map(str, t.shape)) + "]", name
        # The sum of the same values in fp64: exact for the integer dtypes;
        # the float ones may add in another order (a few ulps of fp64).
        want = t.double().sum().item()
        assert math.isclose(float(total), want, rel_tol=1e-12, abs_tol=1e-12), (name, total, want)

    back = safetensors.torch.load_file(out)
    assert set(back) == set(ref)
    for name, t in ref.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t), name
    with safetensors.safe_open(out, "pt") as f:
        assert f.metadata() == {**meta, "written_by": "safetensors_inspect"}


def test_cpp_errors_carry_the_code(tmp_path):
    missing = inspect(tmp_path / "missing.safetensors")
    assert missing.returncode == 1 and missing.stderr.startswith("E_CKPT_MISSING: "), missing.stderr
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\xff" * 64)
    bad = inspect(junk)
    assert bad.returncode == 1 and bad.stderr.startswith("E_CKPT_FORMAT: "), bad.stderr
