"""Named tensors in and out of safetensors files (issue 23), with the
reference `safetensors` package as the oracle: files it writes read here
bit for bit, files written here read by it (and laid out byte for byte as
it lays them out), hostile files refused exactly where it refuses them,
with the documented code and no crash; zero-copy reads whose writes never
reach the file or the other tensors; atomic saves that leave nothing behind
when they fail."""

import ctypes
import gc
import json
import os
import random
import resource
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch

import enkai_tensor as et
from enkai_tensor import safetensors as st
from enkai_tensor._lib import lib
from helpers import DT, to_et, to_torch

pytestmark = pytest.mark.usefixtures("backend")

DTYPES = list(DT)
FORMAT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.bool: "BOOL",
          torch.uint8: "U8"}


def live():
    """Live tensors and files (devices are made lazily, once)."""
    gc.collect()
    return {k: v for k, v in et.live().items() if k in ("tensors", "safetensors")}


def sample(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    lo, hi = (0, 256) if dtype == torch.uint8 else (-100, 100)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def bitwise(e, t):
    """`e` (ours) holds exactly `t`'s dtype, shape and bytes."""
    assert e.dtype == DT[t.dtype] and list(e.shape) == list(t.shape), (e.dtype, e.shape, t.dtype, t.shape)
    assert torch.equal(to_torch(e).reshape(-1).view(torch.uint8), t.reshape(-1).contiguous().view(torch.uint8))


def mappings_of(path):
    """Memory mappings of `path` in this process (zero-copy tensors hold the shared one or their own)."""
    real = os.path.realpath(path)
    return sum(line.rstrip().endswith(real) for line in Path("/proc/self/maps").read_text().splitlines())


def error_of(fn, *args):
    """Calls a raw C entry that must fail; returns its code name and message."""
    fn(*args)
    text = lib.enkai_tensor_last_error()
    assert text, f"{fn.__name__} succeeded"
    text = text.decode()
    return text.split(":", 1)[0], text


def forge(path, header, data=b"", n=None):
    """A file with `header` (a dict, or JSON bytes/str as is) and `data`; `n` overrides the length prefix."""
    h = header if isinstance(header, bytes) else (header.encode() if isinstance(header, str) else json.dumps(header).encode())
    Path(path).write_bytes(struct.pack("<Q", len(h) if n is None else n) + h + data)
    return path


# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize("dtype", DTYPES, ids=[DT[d] for d in DTYPES])
def test_files_the_reference_writes_read_here_bit_for_bit(tmp_path, dtype):
    base = live()
    ref = {"weight": sample(dtype, (3, 5)), "scalar": sample(dtype, ()), "empty": sample(dtype, (0, 4)),
           "other.f64": sample(torch.float64, (2,), seed=1), "ids": sample(torch.int64, (4, 1), seed=2)}
    path = tmp_path / "ref.safetensors"
    safetensors.torch.save_file(ref, path, metadata={"format": "pt", "note": "ü"})
    got = st.load_file(path)
    assert set(got) == set(ref)
    for name, t in ref.items():
        bitwise(got[name], t)
    with st.safe_open(path) as f:
        assert f.metadata() == {"format": "pt", "note": "ü"}
        for name, t in ref.items():
            assert f.info(name) == {"dtype": FORMAT[t.dtype], "shape": list(t.shape)}
        # file order: by data offset, as the header says
        header = json.loads((path.read_bytes()[8:8 + struct.unpack("<Q", path.read_bytes()[:8])[0]]))
        assert f.keys() == sorted(ref, key=lambda n: header[n]["data_offsets"])
        assert live()["safetensors"] == base["safetensors"] + 1
    del got
    assert live() == base


@pytest.mark.parametrize("dtype", DTYPES, ids=[DT[d] for d in DTYPES])
def test_files_written_here_read_by_the_reference(tmp_path, dtype):
    base = live()
    ref = {"a.weight": sample(dtype, (4, 3)), "b": sample(dtype, ()), "c": sample(dtype, (0,)),
           "d": sample(torch.float32, (2, 2), seed=3)}
    ours = {k: to_et(v) for k, v in ref.items()}
    # views (non-contiguous, broadcast) are written as their values in row-major order; one tensor may go twice
    ours["t"], ref["t"] = ours["a.weight"].transpose(0, 1), ref["a.weight"].t().contiguous()
    ours["x"], ref["x"] = et.op("expand", ours["b"], size=[2, 3]), ref["b"].expand(2, 3).contiguous()
    ours["d.again"], ref["d.again"] = ours["d"], ref["d"].clone()
    path = tmp_path / "ours.safetensors"
    st.save_file(ours, path, metadata={"k": "v", "empty": ""})
    back = safetensors.torch.load_file(path)
    assert set(back) == set(ref)
    for k, t in ref.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t), k
    with safetensors.safe_open(path, "pt") as f:
        assert f.metadata() == {"k": "v", "empty": ""}
    # and back here, through the file
    for k, e in st.load_file(path).items():
        bitwise(e, ref[k])
    del ours, back, e
    assert live() == base


def test_the_layout_is_the_reference_writers_byte_for_byte(tmp_path):
    ref = {f"n{i}": sample(d, (i % 3 + 1, 2), seed=i) for i, d in enumerate(DTYPES)}
    ref.update({"z.scalar": sample(torch.float16, ()), "a.empty": sample(torch.int32, (0, 3)), "é": sample(torch.int8, (5,)),
                'q"\\\n\t\u2028': sample(torch.uint8, (2,))})
    ours = tmp_path / "ours.safetensors"
    st.save_file({k: to_et(v) for k, v in ref.items()}, ours)
    theirs = tmp_path / "theirs.safetensors"
    safetensors.torch.save_file(ref, theirs)
    assert ours.read_bytes() == theirs.read_bytes()
    # one metadata key serializes alike too (more would be in the reference's hash-map order)
    st.save_file({k: to_et(v) for k, v in ref.items()}, ours, metadata={"format": "pt"})
    safetensors.torch.save_file(ref, theirs, metadata={"format": "pt"})
    assert ours.read_bytes() == theirs.read_bytes()


def test_no_tensors_and_no_metadata(tmp_path):
    path = tmp_path / "empty.safetensors"
    st.save_file({}, path)
    assert path.read_bytes() == safetensors.torch.save({})
    assert st.load_file(path) == {}
    with st.safe_open(path) as f:
        assert f.keys() == [] and f.metadata() == {}


# ------------------------------------------------------------------ zero-copy


def test_a_write_lands_on_a_private_copy(tmp_path):
    base = live()
    ref = {"w": sample(torch.float32, (1024, 8)), "b": sample(torch.int64, (3,))}
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file(ref, path)
    original = path.read_bytes()
    f = st.safe_open(path)
    a, b = f.get_tensor("w"), f.get_tensor("w")
    # zero-copy: the first get of a name views the file's one shared mapping, a second maps its bytes again
    assert mappings_of(path) == 2
    a.add_(1.0)
    b2 = f.get_tensor("b")
    assert mappings_of(path) == 2
    b2.copy_(et.tensor([7, 8, 9]))
    assert torch.equal(to_torch(a), ref["w"] + 1.0)
    bitwise(b, ref["w"])
    bitwise(f.get_tensor("w"), ref["w"])
    bitwise(f.get_tensor("b"), ref["b"])
    assert path.read_bytes() == original
    bitwise(st.load_file(path)["w"], ref["w"])
    # the tensors outlive the file handle; each mapping goes with its tensor
    f.close()
    assert live()["safetensors"] == base["safetensors"]
    assert torch.equal(to_torch(a), ref["w"] + 1.0) and to_torch(b2).tolist() == [7, 8, 9]
    view = a.transpose(0, 1)
    del a, b
    gc.collect()
    assert mappings_of(path) == 1  # the view and b2 keep the shared mapping; b's own went with b
    assert torch.equal(to_torch(view), (ref["w"] + 1.0).t())
    del view, b2
    assert live() == base and mappings_of(path) == 0


def test_a_file_replaced_by_a_save_leaves_its_tensors_as_they_were(tmp_path):
    path = tmp_path / "m.safetensors"
    ref = {"w": sample(torch.float32, (64, 64))}
    safetensors.torch.save_file(ref, path)
    w = st.load_file(path)["w"]
    st.save_file({"w": et.zeros([64, 64])}, path)  # a rename: the mapped file is untouched
    bitwise(w, ref["w"])
    assert not to_torch(st.load_file(path)["w"]).any()


def test_unaligned_tensors_are_copied(tmp_path):
    """Another writer may leave the data at an odd offset: readable, not mappable in place."""
    ref = torch.arange(6, dtype=torch.float32)
    h = json.dumps({"x": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}).encode()
    h += b" " * ((1 - 8 - len(h)) % 4)  # the data starts at 1 mod 4
    path = forge(tmp_path / "odd.safetensors", h, ref.numpy().tobytes())
    with safetensors.safe_open(path, "pt") as f:
        assert torch.equal(f.get_tensor("x"), ref)
    x = st.load_file(path)["x"]
    bitwise(x, ref)
    assert mappings_of(path) == 0


def test_every_tensor_of_a_file_on_cuda(tmp_path):
    if et.backend_current() != "torch" or not torch.cuda.is_available():
        pytest.skip("needs the torch backend and a CUDA device")
    ref = {"w": sample(torch.bfloat16, (5, 7))}
    path = tmp_path / "c.safetensors"
    safetensors.torch.save_file(ref, path)
    w = st.load_file(path, device="cuda")["w"]
    assert w.device == "cuda:0"
    bitwise(w.to_device("cpu"), ref["w"])


# ------------------------------------------------------------------ hostile files

VALID = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]}}


def _valid_bytes():
    return safetensors.torch.save({"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([1, 2, 3, 4], dtype=torch.uint8)})


def _cut(n):
    return lambda p: p.write_bytes(_valid_bytes()[:n])


def _tail(extra):
    return lambda p: p.write_bytes(_valid_bytes() + extra)


def _header(header, data=b"\0" * 12, n=None):
    return lambda p: forge(p, header, data, n)


def _entry(**change):
    h = json.loads(json.dumps(VALID))
    h["a"].update(change)
    return _header(h)


HOSTILE = [
    # (id, writer, code, text, the reference refuses it too)
    ("empty", _cut(0), "E_CKPT_FORMAT", "too short", True),
    ("truncated-prefix", _cut(5), "E_CKPT_FORMAT", "too short", True),
    ("truncated-header", _cut(20), "E_CKPT_FORMAT", "past the end", True),
    ("truncated-data", lambda p: p.write_bytes(_valid_bytes()[:-1]), "E_CKPT_FORMAT", "spans bytes", True),
    ("trailing-bytes", _tail(b"\0" * 8), "E_CKPT_FORMAT", "cover 12 bytes", True),
    ("header-past-eof", _header(VALID, b"", n=10_000), "E_CKPT_FORMAT", "past the end", True),
    ("header-over-cap", _header(VALID, b"", n=100_000_001), "E_CKPT_FORMAT", "limit of 100000000", True),
    ("header-2^64-1", _header(VALID, b"", n=2**64 - 1), "E_CKPT_FORMAT", "limit", True),
    ("invalid-json", _header('{"a": {"dtype": "F32",'), "E_CKPT_FORMAT", "not a valid JSON object", True),
    ("not-an-object", _header("[1, 2]"), "E_CKPT_FORMAT", "not a valid JSON object", True),
    ("a-string", _header('"abc"'), "E_CKPT_FORMAT", "not a valid JSON object", True),
    ("entry-not-object", _header({"a": 5}, b""), "E_CKPT_FORMAT", "not an object", True),
    ("overlap", _header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}, b"\0" * 8),
     "E_CKPT_FORMAT", "overlaps", True),
    ("out-of-range", _entry(data_offsets=[0, 4000], shape=[1000]), "E_CKPT_FORMAT", "spans bytes", True),
    ("reversed-offsets", _entry(data_offsets=[8, 0]), "E_CKPT_FORMAT", "spans bytes", True),
    ("three-offsets", _entry(data_offsets=[0, 4, 8]), "E_CKPT_FORMAT", "data_offsets", True),
    ("negative-offset", _entry(data_offsets=[-8, 0]), "E_CKPT_FORMAT", "data_offsets", True),
    ("hole", _header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "U8", "shape": [4], "data_offsets": [10, 14]}}, b"\0" * 14),
     "E_CKPT_FORMAT", "hole", True),
    ("unknown-dtype", _entry(dtype="Q4_K"), "E_CKPT_FORMAT", "unsupported dtype \"Q4_K\"", True),
    ("dtype-not-a-string", _entry(dtype=4), "E_CKPT_FORMAT", "dtype", True),
    ("missing-shape", lambda p: forge(p, {"a": {"dtype": "F32", "data_offsets": [0, 8]}}, b"\0" * 8),
     "E_CKPT_FORMAT", "shape", True),
    ("shape-length-disagree", _entry(shape=[3]), "E_CKPT_FORMAT", "do not hold", True),
    ("negative-dim", _entry(shape=[-2]), "E_CKPT_FORMAT", "shape", True),
    ("float-dim", _entry(shape=[2.0]), "E_CKPT_FORMAT", "shape", True),
    ("2^60-elements", _entry(shape=[2**30, 2**30]), "E_CKPT_FORMAT", "", True),
    ("2^60-elements-u8", _header({"a": {"dtype": "U8", "shape": [2**30, 2**30], "data_offsets": [0, 12]}}),
     "E_CKPT_FORMAT", "do not hold", True),
    ("overflowing-elements", _entry(shape=[2**32, 2**32, 2**32]), "E_CKPT_FORMAT", "too many elements", True),
    ("non-utf8-name", _header(b'{"\xff\xfe":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"),
     "E_CKPT_FORMAT", "not UTF-8", True),
    ("lone-surrogate-name", _header('{"\\udc80":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"),
     "E_CKPT_FORMAT", "not a valid JSON object", True),
    ("metadata-not-string", _header({"__metadata__": {"k": 1}, **VALID}), "E_CKPT_FORMAT", "metadata \"k\" is not a string", True),
    ("metadata-not-object", _header({"__metadata__": [1], **VALID}), "E_CKPT_FORMAT", "not a valid JSON object", True),
    # serde_json's maps keep the last of a repeated name: the reference reads one of the two tensors, we refuse
    ("duplicate-names", _header('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                                '"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}', b"\0" * 8),
     "E_CKPT_FORMAT", "appears twice", False),
]


@pytest.mark.parametrize("write,code,text,ref_refuses", [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_files_are_refused_at_open(tmp_path, write, code, text, ref_refuses):
    path = tmp_path / "bad.safetensors"
    write(path)
    base, rss = live(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got, msg = error_of(lib.enkai_safetensors_open, os.fsencode(path))
    assert got == code and text in msg and str(path) in msg, msg
    assert len(msg) < 1000
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 64 * 1024  # KiB: no allocation sized by the file
    assert live() == base
    if ref_refuses:
        with pytest.raises(Exception):
            with safetensors.safe_open(path, "pt") as f:
                [f.get_tensor(k) for k in f.keys()]


def test_files_the_reference_accepts_open_here_and_what_the_library_cannot_hold_is_refused_at_get(tmp_path):
    path = forge(tmp_path / "f8.safetensors", {
        "__metadata__": None,
        "q": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]},
        "u": {"dtype": "U32", "shape": [1], "data_offsets": [2, 6]},
        "ok": {"dtype": "BOOL", "shape": [2], "data_offsets": [6, 8]},
        "bad": {"dtype": "BOOL", "shape": [1], "data_offsets": [8, 9]},
    }, b"\1\2" + b"\0" * 4 + b"\1\0" + b"\2")
    with safetensors.safe_open(path, "pt") as f:
        assert sorted(f.keys()) == ["bad", "ok", "q", "u"]
    with st.safe_open(path) as f:
        assert f.keys() == ["q", "u", "ok", "bad"] and f.metadata() == {}
        assert f.info("q") == {"dtype": "F8_E4M3", "shape": [2]}
        for name in ["q", "u"]:
            code, msg = error_of(lib.enkai_safetensors_get, f.handle, name.encode(), et.device().handle)
            assert code == "E_DTYPE" and name in msg, msg
        assert to_torch(f.get_tensor("ok")).tolist() == [True, False]
        code, msg = error_of(lib.enkai_safetensors_get, f.handle, b"bad", et.device().handle)
        assert code == "E_CKPT_FORMAT" and "bool byte 0 = 2" in msg, msg
        code, msg = error_of(lib.enkai_safetensors_get, f.handle, b"nope", et.device().handle)
        assert code == "E_INVALID_ARG" and "nope" in msg


def test_mutated_files_are_refused_exactly_where_the_reference_refuses_them(tmp_path):
    """A small fuzzer with the reference as the oracle: flip bytes of a valid
    file (length prefix, JSON text, data) and open it both ways."""
    valid = safetensors.torch.save({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
                                    "i": torch.tensor([1, -2], dtype=torch.int64),
                                    "h": torch.tensor([0.5], dtype=torch.float16)}, metadata={"m": "x"})
    rng = random.Random(23)
    path = tmp_path / "m.safetensors"
    base, agreed, refused = live(), 0, 0
    for _ in range(400):
        b = bytearray(valid)
        for _ in range(rng.choice([1, 1, 2, 3])):
            r = rng.random()  # the length prefix, the data (accepted as is), or anywhere
            at = rng.randrange(8) if r < 0.1 else len(b) - 1 - rng.randrange(36) if r < 0.5 else rng.randrange(len(b))
            b[at] = rng.choice([rng.randrange(256), ord(rng.choice('{}[],:" 0123456789eE-.')), b[at] ^ 1])
        if rng.random() < 0.1:
            b = b[:rng.randrange(len(b))]
        path.write_bytes(bytes(b))
        try:
            with safetensors.safe_open(path, "pt") as f:
                theirs = {k: f.get_tensor(k) for k in f.keys()}
        except Exception:
            theirs = None
        h = lib.enkai_safetensors_open(os.fsencode(path))
        if not h:
            code = lib.enkai_tensor_last_error().decode()
            assert code.startswith("E_CKPT_FORMAT"), code
            assert theirs is None or "appears twice" in code, (bytes(b), code)
            refused += 1
            continue
        try:
            assert theirs is not None, bytes(b)
            f = st.safe_open.__new__(st.safe_open)
            f.handle, f._dev = h, et.device()
            assert sorted(f.keys()) == sorted(theirs)
            for k, t in theirs.items():
                if t.dtype not in DT:
                    assert error_of(lib.enkai_safetensors_get, h, k.encode(), et.device().handle)[0] == "E_DTYPE"
                    continue
                e = f.get_tensor(k)
                assert e.dtype == DT[t.dtype] and list(e.shape) == list(t.shape)
                assert torch.equal(to_torch(e).reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8))
                del e
            agreed += 1
        finally:
            lib.enkai_safetensors_free(h)
    assert agreed > 50 and refused > 50, (agreed, refused)
    assert live() == base


# ------------------------------------------------------------------ the C boundary


def test_handles_and_pointers(tmp_path):
    path = tmp_path / "v.safetensors"
    path.write_bytes(_valid_bytes())
    base = live()
    dev = et.device().handle
    out, n = ctypes.c_char_p(), ctypes.c_size_t()
    assert error_of(lib.enkai_safetensors_open, None)[0] == "E_NULL_POINTER"
    assert error_of(lib.enkai_safetensors_open, b"")[0] == "E_INVALID_ARG"
    assert error_of(lib.enkai_safetensors_open, os.fsencode(tmp_path / "nope"))[0] == "E_CKPT_MISSING"
    assert error_of(lib.enkai_safetensors_open, os.fsencode(tmp_path))[0] == "E_CKPT_IO"
    h = lib.enkai_safetensors_open(os.fsencode(path))
    assert h > 0 and h < 2**53
    assert lib.enkai_tensor_live_safetensors() == base["safetensors"] + 1
    assert error_of(lib.enkai_safetensors_names, h, None, ctypes.byref(n))[0] == "E_NULL_POINTER"
    assert error_of(lib.enkai_safetensors_names, h, ctypes.byref(out), None)[0] == "E_NULL_POINTER"
    assert error_of(lib.enkai_safetensors_metadata, h, None, ctypes.byref(n))[0] == "E_NULL_POINTER"
    assert error_of(lib.enkai_safetensors_info, h, None, ctypes.byref(out), ctypes.byref(n))[0] == "E_NULL_POINTER"
    assert error_of(lib.enkai_safetensors_info, h, b"a", None, ctypes.byref(n))[0] == "E_NULL_POINTER"
    assert error_of(lib.enkai_safetensors_info, h, b"zz", ctypes.byref(out), ctypes.byref(n))[0] == "E_INVALID_ARG"
    assert error_of(lib.enkai_safetensors_get, h, None, dev)[0] == "E_NULL_POINTER"
    assert error_of(lib.enkai_safetensors_get, h, b"a", 0)[0] == "E_HANDLE_INVALID"
    assert error_of(lib.enkai_safetensors_get, h, b"a", h)[0] == "E_HANDLE_KIND"
    t = et.zeros([1])
    assert error_of(lib.enkai_safetensors_names, t.handle, ctypes.byref(out), ctypes.byref(n))[0] == "E_HANDLE_KIND"
    assert error_of(lib.enkai_tensor_free, h)[0] == "E_HANDLE_KIND"
    assert error_of(lib.enkai_safetensors_free, t.handle)[0] == "E_HANDLE_KIND"
    for forged in [0, -1, 12345, 2**53 + 5, h + 1]:
        assert error_of(lib.enkai_safetensors_metadata, forged, ctypes.byref(out), ctypes.byref(n))[0] in (
            "E_HANDLE_INVALID", "E_HANDLE_STALE")
    x = lib.enkai_safetensors_get(h, b"a", dev)
    assert lib.enkai_safetensors_free(h) == 0
    for call in [lambda: lib.enkai_safetensors_names(h, ctypes.byref(out), ctypes.byref(n)),
                 lambda: lib.enkai_safetensors_info(h, b"a", ctypes.byref(out), ctypes.byref(n)),
                 lambda: lib.enkai_safetensors_metadata(h, ctypes.byref(out), ctypes.byref(n)),
                 lambda: lib.enkai_safetensors_get(h, b"a", dev),
                 lambda: lib.enkai_safetensors_free(h)]:
        call()
        assert lib.enkai_tensor_last_error().decode().startswith("E_HANDLE_STALE")
    assert to_torch(et.Tensor._from_handle(x)).tolist() == [1.0, 2.0]
    del t
    assert live() == base


def test_every_tensor_in_one_call(tmp_path):
    """enkai_safetensors_get_all: the count, then every tensor as `get` makes
    each, in file order; a failure makes nothing and writes no out."""
    ref = {"w": sample(torch.float32, (3, 5)), "ids": sample(torch.int64, (4,), seed=1),
           "empty": sample(torch.bfloat16, (0, 2)), "s": sample(torch.float64, ())}
    path = tmp_path / "all.safetensors"
    safetensors.torch.save_file(ref, path)
    get_all, dev = lib.enkai_safetensors_get_all, et.device().handle
    base = live()
    h = lib.enkai_safetensors_open(os.fsencode(path))
    opened = {**base, "safetensors": base["safetensors"] + 1}
    assert get_all(h, dev, None, 0, None, None) == 4 and live() == opened
    out, names, n = (ctypes.c_int64 * 6)(), ctypes.c_char_p(), ctypes.c_size_t(7)
    refused = [((h, dev, out, 3, ctypes.byref(names), ctypes.byref(n)), "E_INVALID_ARG"),  # cap short of 4
               ((h, dev, None, 4, ctypes.byref(names), ctypes.byref(n)), "E_NULL_POINTER"),
               ((h, dev, out, 6, None, ctypes.byref(n)), "E_NULL_POINTER"),
               ((h, dev, out, 6, ctypes.byref(names), None), "E_NULL_POINTER"),
               ((h, 0, out, 6, ctypes.byref(names), ctypes.byref(n)), "E_HANDLE_INVALID"),
               ((dev, dev, out, 6, ctypes.byref(names), ctypes.byref(n)), "E_HANDLE_KIND"),
               ((h + 1, dev, None, 0, None, None), "E_HANDLE_")]
    for args, code in refused:
        assert get_all(*args) == -1
        assert lib.enkai_tensor_last_error().decode().startswith(code), (args, lib.enkai_tensor_last_error())
    assert list(out) == [0] * 6 and names.value is None and n.value == 7 and live() == opened
    assert get_all(h, dev, out, 6, ctypes.byref(names), ctypes.byref(n)) == 4
    listed = json.loads(ctypes.string_at(names, n.value))
    lib.enkai_tensor_string_free(names)
    assert out[4] == 0 and out[5] == 0
    got = dict(zip(listed, map(et.Tensor._from_handle, out[:4])))
    with st.safe_open(path) as f:
        assert listed == f.keys()
        for name, t in ref.items():
            bitwise(got[name], t)
            bitwise(f.get_tensor(name), t)  # a second get of a name: its own mapping
    assert lib.enkai_safetensors_free(h) == 0
    del got
    assert live() == base
    # A tensor that cannot be made after others that were: none is left.
    bad = forge(tmp_path / "bad.safetensors", {
        "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
        "q": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [4, 6]}}, b"\0" * 6)
    with st.safe_open(bad) as f:
        code, msg = error_of(get_all, f.handle, dev, out, 6, ctypes.byref(names), ctypes.byref(n))
        assert code == "E_DTYPE" and "q" in msg, msg
        assert live() == opened
    with pytest.raises(et.EnkaiError, match="E_DTYPE"):
        st.load_file(bad)
    assert live() == base


# ------------------------------------------------------------------ saving


def _listing(d):
    return sorted(p.name for p in Path(d).iterdir())


def test_refused_saves_leave_nothing(tmp_path):
    base = live()
    a, b = et.ones([2]), et.zeros([3], "int32")
    stale = et.zeros([1])
    stale_h = stale.handle
    del stale
    gc.collect()
    path = os.fsencode(tmp_path / "out.safetensors")
    cases = [
        ((path, b'["__metadata__"]', f"[{a.handle}]".encode(), None), "E_INVALID_ARG", "__metadata__"),
        ((path, b'["x","x"]', f"[{a.handle},{b.handle}]".encode(), None), "E_INVALID_ARG", "appears twice"),
        ((path, b'["x","y"]', f"[{a.handle}]".encode(), None), "E_INVALID_ARG", "2 names for 1 tensors"),
        ((path, b'["x"]', f"[{stale_h}]".encode(), None), "E_HANDLE_STALE", ""),
        ((path, b'["x"]', b"[424242]", None), "E_HANDLE_INVALID", ""),
        ((path, b'[1]', f"[{a.handle}]".encode(), None), "E_INVALID_ARG", "names_json"),
        ((path, b'["x"]', f"[{a.handle}]".encode(), b'{"k": 1}'), "E_INVALID_ARG", "metadata_json"),
        ((path, b'["x"]', f"[{a.handle}]".encode(), b'[]'), "E_INVALID_ARG", "metadata_json"),
        ((None, b'["x"]', f"[{a.handle}]".encode(), None), "E_NULL_POINTER", "path"),
        ((path, None, f"[{a.handle}]".encode(), None), "E_NULL_POINTER", "names_json"),
        ((path, b'["x"]', None, None), "E_NULL_POINTER", "handles_json"),
        ((b"", b'["x"]', f"[{a.handle}]".encode(), None), "E_INVALID_ARG", "empty"),
        ((os.fsencode(tmp_path / "no" / "dir.safetensors"), b'["x"]', f"[{a.handle}]".encode(), None), "E_CKPT_IO", ""),
        ((os.fsencode(tmp_path), b'["x"]', f"[{a.handle}]".encode(), None), "E_CKPT_IO", ""),
    ]
    for fn in [lib.enkai_safetensors_save, lib.enkai_state_dict_save]:
        for args, code, text in cases:
            got, msg = error_of(fn, *args)
            assert got == code and text in msg, (args, msg)
            assert _listing(tmp_path) == [], (args, _listing(tmp_path))
    # a refused save leaves the previous file as it was
    st.save_file({"x": a}, tmp_path / "out.safetensors")
    before = (tmp_path / "out.safetensors").read_bytes()
    assert error_of(lib.enkai_safetensors_save, path, b'["x"]', b"[424242]", None)[0] == "E_HANDLE_INVALID"
    assert (tmp_path / "out.safetensors").read_bytes() == before and _listing(tmp_path) == ["out.safetensors"]
    del a, b
    assert live() == base


def test_a_write_that_fails_midway_leaves_no_file_and_no_temporary(tmp_path):
    """The file-size limit makes the write itself fail after the temporary exists."""
    code = f"""
import resource, signal
import enkai_tensor as et
from enkai_tensor import safetensors as st
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
try:
    st.save_file({{"x": et.zeros([1 << 16])}}, {str(tmp_path / "big.safetensors")!r})
except et.EnkaiError as e:
    print(e.code, e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(et.__file__).parents[1])})
    assert out.stdout.startswith("E_CKPT_IO"), (out.stdout, out.stderr)
    assert _listing(tmp_path) == []


def test_a_state_dict_that_torch_loads(tmp_path):
    """Parameters trained here, saved by name, loaded by `load_state_dict`: the module computes what we compute."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    params = {k: to_et(v).require_grad() for k, v in module.state_dict().items()}
    x = sample(torch.float32, (5, 3))
    xs = to_et(x)

    def forward():
        h = et.linear(xs, params["0.weight"].transpose(0, 1), params["0.bias"]).tanh()
        return et.linear(h, params["2.weight"].transpose(0, 1), params["2.bias"])

    opt = et.AdamW(list(params.values()), lr=0.1)
    for _ in range(3):
        (forward() * forward()).sum().backward()
        opt.step()
        et.zero_grad_multi(list(params.values()))
    names, hs = list(params), list(params.values())
    path = tmp_path / "model.safetensors"
    rc = lib.enkai_state_dict_save(os.fsencode(path), json.dumps(names).encode(),
                                   json.dumps([t.handle for t in hs]).encode(), b'{"format": "pt"}')
    assert rc == 0, lib.enkai_tensor_last_error()
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    fresh.load_state_dict(safetensors.torch.load_file(path))  # strict: every name, shape and dtype
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, to_torch(params[k]).detach())
    torch.testing.assert_close(fresh(x), to_torch(forward()).detach(), rtol=1e-5, atol=1e-6)
