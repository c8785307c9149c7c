"""Named tensors in and out of safetensors files, with the `safetensors`
package's names:

    from enkai_tensor.safetensors import load_file, save_file, safe_open
    ts = load_file("model.safetensors")       # {name: Tensor}; zero-copy on the CPU
    save_file({"w": ts["w"]}, "out.safetensors", metadata={"format": "pt"})
    with safe_open("model.safetensors") as f:  # one tensor at a time
        w = f.get_tensor(f.keys()[0])

A tensor read on the CPU is the file's bytes in place, through a private
copy-on-write mapping: writing into it changes only that tensor (and its
views), never the file or other tensors read from it.
"""

import ctypes
import json
from typing import Any, Dict, List, Mapping, Optional

from . import DeviceLike, PathLike, Tensor, _check_handle, _check_status, _dev, _enc, _handles_json, _out_string, _path, _raise, _wrap
from ._lib import lib

__all__ = ["safe_open", "load_file", "save_file"]


class safe_open:
    """An open safetensors file, its header validated (a handle counted in
    `et.live()["safetensors"]`). `close()` (or leaving `with`) frees the
    handle; tensors got from it stay valid."""

    def __init__(self, filename: PathLike, device: DeviceLike = None) -> None:
        self.handle = 0
        self._dev = _dev(device)
        self.handle = _check_handle(lib.enkai_safetensors_open(_path(filename)))

    def keys(self) -> List[str]:
        """Tensor names in file (offset) order."""
        return json.loads(_out_string(lib.enkai_safetensors_names, self.handle))

    def info(self, name: str) -> Dict[str, Any]:
        """`{"dtype": "F32", "shape": [...]}` in the format's dtype names."""
        return json.loads(_out_string(lib.enkai_safetensors_info, self.handle, _enc(name)))

    def metadata(self) -> Dict[str, str]:
        return json.loads(_out_string(lib.enkai_safetensors_metadata, self.handle))

    def get_tensor(self, name: str) -> Tensor:
        return _wrap(lib.enkai_safetensors_get(self.handle, _enc(name), self._dev.handle))

    def close(self) -> None:
        h, self.handle = self.handle, 0
        if h:
            _check_status(lib.enkai_safetensors_free(h))

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        h, self.handle = getattr(self, "handle", 0), 0
        if h and lib is not None:
            lib.enkai_safetensors_free(h)


def load_file(filename: PathLike, device: DeviceLike = None) -> Dict[str, Tensor]:
    """Every tensor of the file by name, in file order (a qint8 tensor's
    scales come inside it, not as a tensor of their own)."""
    with safe_open(filename, device) as f:
        # One call for all of them (enkai_safetensors_get_all): a call per
        # tensor cost most of the load in ctypes.
        n = lib.enkai_safetensors_get_all(f.handle, f._dev.handle, None, 0, None, None)
        if n < 0:
            _raise()
        out = (ctypes.c_int64 * n)()
        p, size = ctypes.c_char_p(), ctypes.c_size_t()
        if lib.enkai_safetensors_get_all(f.handle, f._dev.handle, out, n, ctypes.byref(p), ctypes.byref(size)) < 0:
            _raise()
        tensors = list(map(_wrap, out))  # owned from here on, whatever follows
        try:
            names = json.loads(ctypes.string_at(p, size.value))
        finally:
            lib.enkai_tensor_string_free(p)
        return dict(zip(names, tensors))


def save_file(tensors: Mapping[str, Tensor], filename: PathLike, metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes `tensors` (any dtype, layout and device) atomically, laid out as
    the `safetensors` package lays them out."""
    names = json.dumps(list(tensors)).encode()
    meta = None if metadata is None else json.dumps(dict(metadata)).encode()
    _check_status(lib.enkai_safetensors_save(_path(filename), names, _handles_json(tensors.values()), meta))
