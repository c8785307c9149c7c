"""Python bindings for libenkai_tensor.so (ctypes; numpy optional).

    import enkai_tensor as et
    x = et.randn([2, 3]).require_grad()
    y = (x @ et.ones([3, 2])).relu().sum()
    y.backward()
    print(x.grad.numpy())
"""

import builtins
import ctypes
import functools
import json
import numbers
import os
import struct
import threading
import types
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, NoReturn, Optional, Sequence, Tuple, Union

from . import _dlpack, _format
from ._lib import EnkaiSlice, lib  # noqa: F401  (lib is part of the API)

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "EnkaiError", "Tensor", "Device", "device", "tensor", "from_dlpack", "randn", "zeros", "ones", "full", "from_bytes",
    "from_numpy", "ids_u32", "manual_seed", "set_num_threads", "get_num_threads", "backend_list", "backend_set", "backend_current",
    "is_grad_enabled", "set_grad_enabled", "no_grad", "enable_grad",
    "live", "concat", "matmul", "softmax", "masked_softmax", "masked_softmax_backward", "layernorm",
    "layernorm_backward", "embedding", "linear", "cross_entropy", "dropout", "grad_multi",
    "zero_grad_multi", "check_finite_multi", "scale_grads_multi", "clip_grad_norm_multi",
    "Optimizer", "AdamW", "Adam", "SGD", "lr_schedule", "adamw_step_multi", "GradScaler", "autocast", "tinylm_init",
    "forward_tinylm", "lm_init", "forward_lm", "lm_logits",
    "checkpoint_save", "checkpoint_load", "checkpoint_load_scaler", "checkpoint_save_ranked", "checkpoint_load_ranked",
    "checkpoint_load_ranked_scaler", "op", "op_schema", "einsum", "einsum_path",
    "quantize_per_channel", "quantize_q8_0", "dequantize", "q_scales",
]

Shape = Sequence[int]


class EnkaiError(Exception):
    """A failed call: `code` is the E_ name (e.g. "E_SHAPE"), `number` its value."""

    def __init__(self, message: str, code: str, number: int) -> None:
        super().__init__(message)
        self.code, self.number = code, number


# An exception a Python callback (a checkpointed span) raised inside the
# current library call on this thread: the call's error is chained to it.
_callback_failure = threading.local()


def _raise() -> NoReturn:
    text = lib.enkai_tensor_last_error()
    text = text.decode() if text else "E_INTERNAL: failed without an error message"
    code = lib.enkai_tensor_last_error_code()
    cause, _callback_failure.exc = getattr(_callback_failure, "exc", None), None
    # Raised unnamed: a local holding the error would make a cycle through
    # its traceback, and keep the failed call's arguments alive until a GC.
    if cause is not None:
        raise EnkaiError(text, text.split(":", 1)[0], code) from cause
    raise EnkaiError(text, text.split(":", 1)[0], code)


def _check_handle(h: int) -> int:
    if h == 0:
        _raise()
    return h


def _check_status(rc: int) -> None:
    if rc != 0:
        _raise()


def _enc(s: Union[str, bytes]) -> bytes:
    return s.encode() if isinstance(s, str) else s


def _shape_json(shape: Iterable[int]) -> bytes:
    return json.dumps(list(shape), separators=(",", ":")).encode()


def _handles_json(ts: Iterable[Union["Tensor", int, None]]) -> bytes:
    return _shape_json(0 if t is None else (t.handle if isinstance(t, Tensor) else int(t)) for t in ts)


def _out_string(fn: Callable[..., int], *args: Any) -> str:
    p, n = ctypes.c_char_p(), ctypes.c_size_t()
    _check_status(fn(*args, ctypes.byref(p), ctypes.byref(n)))
    try:
        return ctypes.string_at(p, n.value).decode()
    finally:
        lib.enkai_tensor_string_free(p)


def _slice_text(s: EnkaiSlice) -> str:
    if not s.ptr:
        _raise()
    try:
        return ctypes.string_at(s.ptr, s.len).decode()
    finally:
        lib.enkai_free(s.ptr, s.len)


class Device:
    """A device handle (`cpu`, `cuda`, `cuda:N`, `auto`)."""

    def __init__(self, spec: str = "cpu") -> None:
        self.spec = spec
        self.handle: int = _check_handle(lib.enkai_tensor_device(_enc(spec)))

    def __del__(self) -> None:
        h, self.handle = getattr(self, "handle", 0), 0
        if h and lib is not None:
            lib.enkai_tensor_device_free(h)

    def __repr__(self) -> str:
        return f"Device({self.spec!r})"


_default_device: Optional[Device] = None


def device(spec: Optional[str] = None) -> Device:
    """`device()` is the shared CPU device; `device("cuda:0")` a new one."""
    global _default_device
    if spec is None:
        if _default_device is None:
            _default_device = Device("cpu")
        return _default_device
    return Device(spec)


_DTYPE_SIZES = {"qint8": 1, "fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
                "bool": 1, "uint8": 1, "complex64": 8, "complex128": 16}
_NUMPY = {"qint8": "int8", "fp32": "float32", "fp16": "float16", "fp64": "float64", "int64": "int64", "int32": "int32",
          "int16": "int16", "int8": "int8", "bool": "bool", "uint8": "uint8", "complex64": "complex64",
          "complex128": "complex128"}
_COMPLEX = ("complex64", "complex128")
# Weight-only quantized dtypes (`quantize_per_channel`, `quantize_q8_0`):
# qint8's bytes are its int8 values (numpy: `int_repr`), q8_0's ggml's blocks.
_QUANTIZED = ("qint8", "q8_0")
_STRUCT = {"fp32": "f", "fp16": "e", "fp64": "d", "int64": "q", "int32": "i", "int16": "h", "int8": "b", "bool": "?",
           "uint8": "B"}
_FLOATING = ("fp32", "fp64", "bf16", "fp16")
DeviceLike = Union["Device", str, None]
Spec = Union[str, bytes, Dict[str, Any]]  # an LM spec: JSON text or a dict
PathLike = Union[str, bytes, "os.PathLike[str]"]


def _wrap(handle: int) -> "Tensor":
    return Tensor._from_handle(handle)


def _nest(flat: List[Any], shape: List[int]) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _shape_of(data: Any) -> List[int]:
    shape = []
    while isinstance(data, (list, tuple)):
        shape.append(len(data))
        if not data:
            break
        data = data[0]
    return shape


def _flatten(data: Any, shape: List[int], out: List[Any]) -> List[Any]:
    if not shape:
        if isinstance(data, (list, tuple)):
            raise ValueError("ragged nested sequence: every row must have the same length")
        out.append(data)
        return out
    if not isinstance(data, (list, tuple)) or len(data) != shape[0]:
        raise ValueError(f"ragged nested sequence: expected a sequence of {shape[0]} at this depth")
    for x in data:
        _flatten(x, shape[1:], out)
    return out


# torch.promote_types over the dtypes the library has: bool < integers <
# floats < complex; within a kind the wider wins, fp16 with bf16 meet at fp32,
# and complex64 with fp64 at complex128.
_KIND = {"bool": 0, "uint8": 1, "int8": 1, "int16": 1, "int32": 1, "int64": 1, "fp16": 2, "bf16": 2, "fp32": 2,
         "fp64": 2, "complex64": 3, "complex128": 3}


def _promote(a: str, b: str) -> str:
    if a == b:
        return a
    if {a, b} == {"complex64", "fp64"}:
        return "complex128"
    if _KIND[a] != _KIND[b]:
        return a if _KIND[a] > _KIND[b] else b
    if {a, b} == {"fp16", "bf16"}:
        return "fp32"
    if {a, b} == {"uint8", "int8"}:
        return "int16"
    return a if _DTYPE_SIZES[a] > _DTYPE_SIZES[b] else b


def _element_dtype(v: Any) -> str:
    """torch.tensor's dtype for one element of a nested sequence: Python
    bool/int/float give bool/int64/fp32 (torch's default float dtype), numpy
    scalars and 0-dim Tensors their own dtype."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int64"
    if isinstance(v, Tensor):
        if v.ndim != 0:
            raise ValueError("only 0-dim Tensors can be elements of a nested sequence")
        return v.dtype
    name = getattr(getattr(v, "dtype", None), "name", None)  # a numpy scalar
    if name is not None:
        names = {n: k for k, n in _NUMPY.items()}
        if name not in names:
            raise TypeError(f"unsupported numpy dtype {name}")
        return names[name]
    if isinstance(v, float):
        return "fp32"
    if isinstance(v, complex):
        return "complex64"
    raise TypeError(f"cannot make a tensor of {type(v).__name__} elements")


_INT_RANGE = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-2 ** 15, 2 ** 15 - 1), "int32": (-2 ** 31, 2 ** 31 - 1),
              "int64": (-2 ** 63, 2 ** 63 - 1)}


def _check_range(flat: List[Any], dtype: str) -> None:
    """torch.tensor(data, dtype=<integer>) refuses a value the dtype cannot
    hold (c10::checked_convert): a float outside [min, max], NaN or inf; an
    int outside it, except that an unsigned dtype takes -max..-1 (wrapping)."""
    lo, hi = _INT_RANGE[dtype]
    for v in flat:
        if isinstance(v, Tensor) or not isinstance(v, numbers.Real):
            continue
        if isinstance(v, numbers.Integral):
            i = int(v)
            bad = i > hi or (i < lo if lo < 0 else -i > hi)
        else:
            f = float(v)
            bad = f != f or f < lo or f > hi
        if bad:
            raise OverflowError(f"value {v} cannot be converted to type {dtype} without overflow")


def _from_data(data: Any, dtype: Optional[str], dev: DeviceLike) -> "Tensor":
    """torch.tensor's inference: bool -> bool, int -> int64, float -> fp32,
    numpy scalars their dtype, promoted as torch.promote_types; arrays keep
    their dtype. Values travel as int64 or fp64 and are converted once, by
    libtorch, to the dtype asked for (so `tensor([0.1], dtype="fp64")` is the
    double 0.1, not a float32 widened)."""
    if hasattr(data, "__array__") and not isinstance(data, (list, tuple, Tensor)):
        src = from_numpy(data, dev)
    else:
        shape = _shape_of(data)
        flat = _flatten(data, shape, [])
        inferred = "fp32"
        if flat:
            inferred = _element_dtype(flat[0])
            for v in flat[1:]:
                inferred = _promote(inferred, _element_dtype(v))
        if dtype in _INT_RANGE:
            _check_range(flat, dtype)
        if inferred == "bool":
            wire, code, flat = "bool", "?", [bool(v) for v in flat]
        elif _KIND[inferred] == 1:
            wire, code, flat = "int64", "q", [int(v) for v in flat]
        elif _KIND[inferred] == 3:
            # (re, im) interleaved, as the ABI lays complex numbers out.
            pairs = [complex(v) for v in flat]
            wire, code, flat = "complex128", "d", [x for c in pairs for x in (c.real, c.imag)]
        else:
            wire, code, flat = "fp64", "d", [float(v) for v in flat]
        try:
            raw = struct.pack(f"<{len(flat)}{code}", *flat)
        except struct.error as e:
            raise OverflowError(f"a value does not fit in {wire}: {e}") from None
        src = from_bytes(raw, shape, wire, dev)
        dtype = dtype or inferred
    if dtype is not None and src.dtype != dtype:
        src = src.to_dtype(dtype)
    return src


def _index(t: "Tensor", index: Any) -> "Tensor":
    items = list(index) if isinstance(index, tuple) else [index]
    for it in items:
        if not (it is Ellipsis or isinstance(it, slice) or _is_int(it)):
            raise IndexError(f"only integers, slices and ... index a Tensor, not {type(it).__name__}")
    if items.count(Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    shape = list(t.shape)
    n_dims = sum(1 for it in items if it is not Ellipsis)
    if n_dims > len(shape):
        raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (len(shape) - n_dims)
    out, keep = t, []
    for d, it in enumerate(items):
        size = shape[d]
        if isinstance(it, slice):
            if it.step is not None and it.step <= 0:
                raise ValueError("step must be greater than zero")
            start, stop, step = it.indices(size)
            out = out.slice(d, start, max(start, stop), step)
            keep.append(True)
        else:
            i = int(it)
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {size}")
            i %= size
            out = out.slice(d, i, i + 1, 1)
            keep.append(False)
    if all(keep):
        return out
    new = [n for n, k in zip(list(out.shape), keep + [True] * (len(shape) - len(keep))) if k]
    return out.view(new)


def _dims_arg(shape: Tuple[Union[int, Shape], ...]) -> List[int]:
    """`f(2, 3)` or `f([2, 3])`, as torch's reshape/view take them."""
    dims = shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else shape
    # ints, or int() raises TypeError
    return [int(n) for n in dims]  # type: ignore[arg-type]


def _is_bool(x: Any) -> bool:
    """A Python or numpy bool (numpy 2 names its type `numpy.bool`, numpy 1 `numpy.bool_`)."""
    return isinstance(x, bool) or (type(x).__module__ == "numpy" and type(x).__name__ in ("bool", "bool_"))


def _is_int(x: Any) -> bool:
    # bools index like None in torch (a new dim), which is not supported here
    return not _is_bool(x) and hasattr(x, "__index__")


class Tensor:
    """A tensor: owns one reference to a library handle, freed on garbage
    collection, `free()` or `with` exit.

    `Tensor(data, dtype=None, dev=None)` copies data in, as `torch.tensor`
    does: nested lists and Python scalars (floats become fp32, ints int64,
    bools bool, mixed ones promoted as torch does, so `Tensor(5)` is a 0-dim
    int64 tensor), numpy arrays and numpy scalars (their dtype kept: float32,
    float64, float16, int64, int32, int16, int8, uint8, bool; bf16 has no numpy dtype),
    or anything with `__array__`. `dtype` converts. A handle is never data:
    to take over one a C function returned, use `Tensor._from_handle(h)`
    (or `Tensor.borrow(h)` to add a reference to one you keep).

    Operators follow torch: `@`, and `+ - * /` with a Tensor or a Python
    number on either side (the result dtype is torch's: `int64 + 2.5` is
    fp32, `fp16 * 3` stays fp16); unary `-` and `+`; indexing with ints,
    slices (positive steps, as torch) and `...` (see `__getitem__`). The C
    ABI has no comparison ops, so there are none: `==` and `!=` are Python's
    identity (a Tensor is hashable, usable as a dict key), and `<`, `<=`,
    `>`, `>=` raise TypeError."""

    __slots__ = ("handle", "__weakref__")
    # as torch.Tensor: numpy scalars on the left (`np.float32(2) * t`) defer
    # to our reflected operators instead of turning `t` into an ndarray
    __array_priority__ = 1000

    def __init__(self, data: Any, dtype: Optional[str] = None, dev: DeviceLike = None) -> None:
        self.handle = 0
        if isinstance(data, Tensor):
            raise TypeError("Tensor(t) of a Tensor: use t.detach() or t.to_dtype(...)")
        src = _from_data(data, dtype, dev)
        self.handle, src.handle = src.handle, 0

    @classmethod
    def _from_handle(cls, handle: int) -> "Tensor":
        """Takes ownership of a tensor handle a C function returned (0 raises
        the library's last error)."""
        t = object.__new__(cls)
        t.handle = _check_handle(handle)
        return t

    @classmethod
    def borrow(cls, handle: int) -> "Tensor":
        """A new reference to an existing handle (retained)."""
        _check_status(lib.enkai_tensor_retain(handle))
        return cls._from_handle(handle)

    def free(self) -> None:
        h, self.handle = self.handle, 0
        if h:
            _check_status(lib.enkai_tensor_free(h))

    def __del__(self) -> None:
        h, self.handle = getattr(self, "handle", 0), 0
        if h and lib is not None:
            lib.enkai_tensor_free(h)

    def __enter__(self) -> "Tensor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()

    # metadata
    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(json.loads(_slice_text(lib.enkai_tensor_shape(self.handle))))

    @property
    def dtype(self) -> str:
        """The dtype's name: fp32, fp64, bf16, fp16, int64, int32, int16, int8, bool, uint8, complex64 or complex128."""
        return _out_string(lib.enkai_tensor_dtype, self.handle)

    @property
    def device(self) -> str:
        """Where the tensor lives: `cpu` or `cuda:N`."""
        return _out_string(lib.enkai_tensor_device_name, self.handle)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = lib.enkai_tensor_numel(self.handle)
        if n < 0:
            _raise()
        return n

    def item(self) -> Union[float, int, bool]:
        """The value of a one-element tensor as a Python number, as torch:
        float for floating dtypes, int for integer ones (exact past 2**53),
        bool for bool."""
        v = lib.enkai_tensor_item(self.handle)
        if v != v and lib.enkai_tensor_last_error_code() != 0:
            _raise()
        if self.dtype in _FLOATING:
            return v
        return self._values()[0]

    def to_bytes(self) -> bytes:
        """The elements' bytes, contiguous; a qint8 tensor's int8 values, a
        q8_0 tensor's ggml blocks (fp16 scale, then 32 int8 each)."""
        dt = self.dtype
        n = self.numel() // 32 * 34 if dt == "q8_0" else self.numel() * _DTYPE_SIZES[dt]
        buf = ctypes.create_string_buffer(max(n, 1))
        _check_status(lib.enkai_tensor_copy_to(self.handle, buf, n))
        return buf.raw[:n]

    def numpy(self) -> "np.ndarray":
        """A copy as a numpy array (bf16, which numpy lacks, as float32)."""
        import numpy as np

        dt = self.dtype
        if dt == "bf16":
            return self.to_dtype("fp32").numpy()
        if dt == "q8_0":
            raise TypeError("a q8_0 tensor has no numpy form: dequantize() it, or read its ggml bytes with to_bytes()")
        return np.frombuffer(self.to_bytes(), dtype=_NUMPY[dt]).reshape(self.shape).copy()

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> "np.ndarray":
        # numpy()'s result is always a fresh copy, so copy=False cannot be honoured
        # (numpy 2's protocol: raise rather than silently copy).
        if copy is False:
            raise ValueError("a Tensor's memory reaches numpy without a copy through np.from_dlpack(t)")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def tolist(self) -> Any:
        """Nested Python lists (a number for a 0-dim tensor); needs no numpy."""
        return _nest(self._values(), list(self.shape))

    def _values(self) -> List[Any]:
        dt = self.dtype
        if dt == "bf16":
            return self.to_dtype("fp32")._values()
        raw = self.to_bytes()
        if dt in _COMPLEX:
            code = "f" if dt == "complex64" else "d"
            parts = struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw)
            return [complex(parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
        code = _STRUCT[dt]
        return list(struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw))

    def __repr__(self) -> str:
        """torch's repr with our dtype names and the device always shown:

            tensor([[0.1000, 0.2000]], dtype=fp32, device=cpu)
            tensor(7, dtype=int64, device=cpu)
            tensor([], size=(2, 0), dtype=fp32, device=cuda:0)

        The values are printed as `torch.Tensor.__repr__` prints them with its
        default print options: 4 decimals, scientific notation when torch
        would use it, integer-valued floats as `1.`, lines wrapped at 80
        columns, and a tensor of over 1000 elements summarized to its first
        and last 3 items in every dimension with `...` (only those corners are
        read from the library). `size=` is shown for an empty tensor that is
        not 1-d, and a suffix moves to its own line when it would pass 80
        columns, as in torch. Needs no numpy. `str(t)` is the same text."""
        if self.dtype in _QUANTIZED:
            return f"quantized tensor of shape {self.shape}, dtype={self.dtype}, device={self.device}"
        indent = len("tensor(")
        shape = list(self.shape)
        numel = self.numel()
        summarize = numel > _format.THRESHOLD
        cuts = [summarize and n > 2 * _format.EDGEITEMS for n in shape]
        corner = self._corners(cuts) if any(cuts) else self
        if self.dtype in _COMPLEX:
            # Each part in torch's float style, as `a+bj`.
            values = _format.values_str_complex(corner.tolist(), cuts, numel, indent)
            suffixes = [f"dtype={self.dtype}", f"device={self.device}"]
            return _format.tensor_repr(values, suffixes, indent)
        values = _format.values_str(corner.tolist(), cuts, numel, self.dtype in _FLOATING, indent)
        suffixes = [f"dtype={self.dtype}", f"device={self.device}"]
        if numel == 0 and len(shape) != 1:
            suffixes.insert(0, f"size={tuple(shape)}")
        return _format.tensor_repr(values, suffixes, indent)

    __str__ = __repr__

    def _corners(self, cuts: List[bool]) -> "Tensor":
        """The first and last EDGEITEMS along every cut dim: all repr reads of
        a large tensor."""
        t, e = self.detach(), _format.EDGEITEMS
        for d, cut in enumerate(cuts):
            if cut:
                n = t.shape[d]
                t = concat([t.slice(d, 0, e), t.slice(d, n - e, n)], d)
        return t

    # Python number protocol for one-element tensors, as torch
    def __bool__(self) -> bool:
        return bool(self._single())

    def __float__(self) -> float:
        return float(self._single())

    def __int__(self) -> int:
        return int(self._single())

    def _single(self) -> Union[float, int, bool]:
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to a Python number")
        return self.item()

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __getitem__(self, index: Any) -> "Tensor":
        """Basic indexing as torch: ints, slices with a positive step and
        `...`, each dim through `enkai_tensor_slice` (a view; gradients flow)."""
        return _index(self, index)

    # DLPack (zero-copy exchange with torch, numpy, …)
    def __dlpack__(self, *, stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None) -> Any:
        """A "dltensor_versioned" capsule sharing this tensor's memory (DLPack
        >= 1.0 consumers only: the library produces only the versioned
        struct). CUDA tensors are synchronized first, so `stream` needs no
        event; `copy=True` exports a copy."""
        if max_version is None or max_version[0] < _dlpack.MAJOR:
            raise BufferError("enkai_tensor exports DLPack >= 1.0 only; the consumer asked for an older version")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"cannot export a {self.device} tensor to DLPack device {tuple(dl_device)}")
        src = concat([self.reshape([self.numel()])], 0).reshape(list(self.shape)) if copy else self
        cap = _dlpack.to_capsule(src.handle)
        if cap is None:
            _raise()
        return cap

    def __dlpack_device__(self) -> Tuple[int, int]:
        return _dlpack.device_tuple(self.device)

    # ops
    def _binary(self, fn: Callable[[int, int], int], o: Any, reflected: bool = False) -> "Tensor":
        if isinstance(o, Tensor):
            a, b = (o, self) if reflected else (self, o)
            return _wrap(fn(a.handle, b.handle))
        scalar = _scalar(o, self)
        if scalar is None:
            return NotImplemented
        if not self.shape and scalar.dtype != self.dtype:
            # libtorch lets a 0-dim operand of a wider dtype win over another
            # 0-dim one; a Python number never does (torch wraps it). With a
            # dimensioned operand the number is a "CPU scalar" as in torch.
            return self.reshape([1])._binary(fn, o, reflected).reshape([])
        # `scalar` is held here: a temporary freed before the call would be a stale handle
        a, b = (scalar, self) if reflected else (self, scalar)
        return _wrap(fn(a.handle, b.handle))

    def __add__(self, o: Any) -> "Tensor":
        return self._binary(lib.enkai_tensor_add, o)

    def __sub__(self, o: Any) -> "Tensor":
        return self._binary(lib.enkai_tensor_sub, o)

    def __mul__(self, o: Any) -> "Tensor":
        return self._binary(lib.enkai_tensor_mul, o)

    def __truediv__(self, o: Any) -> "Tensor":
        return self._binary(lib.enkai_tensor_div, o)

    def __radd__(self, o: Any) -> "Tensor":
        return self._binary(lib.enkai_tensor_add, o)  # as torch: `n + t` is `t + n`

    def __rsub__(self, o: Any) -> "Tensor":
        return self._binary(lib.enkai_tensor_sub, o, reflected=True)

    def __rmul__(self, o: Any) -> "Tensor":
        return self._binary(lib.enkai_tensor_mul, o)  # as torch: `n * t` is `t * n`

    def __rtruediv__(self, o: Any) -> "Tensor":
        if isinstance(o, Tensor):
            return self._binary(lib.enkai_tensor_div, o, reflected=True)
        # torch computes `scalar / t` as `t.reciprocal() * scalar` (Tensor.__rtruediv__)
        return self._binary(lib.enkai_tensor_div, 1.0, reflected=True) * o

    def __neg__(self) -> "Tensor":
        if self.dtype == "bool":
            raise TypeError("negation, the `-` operator, on a bool tensor is not supported (as in torch)")
        return self * -1

    def __pos__(self) -> "Tensor":
        return self

    def __matmul__(self, o: Any) -> "Tensor":
        if not isinstance(o, Tensor):
            return NotImplemented
        return _wrap(lib.enkai_tensor_matmul(self.handle, o.handle))

    # No comparison operators: the C ABI has no comparison ops. `==` is
    # Python's identity (so tensors can be dict keys); `<` raises TypeError.

    def reshape(self, *shape: Union[int, Shape]) -> "Tensor":
        """`t.reshape(2, 3)` or `t.reshape([2, 3])`; -1 infers a dim."""
        return _wrap(lib.enkai_tensor_reshape(self.handle, _shape_json(_dims_arg(shape))))

    def view(self, *shape: Union[int, Shape]) -> "Tensor":
        return _wrap(lib.enkai_tensor_view(self.handle, _shape_json(_dims_arg(shape))))

    def transpose(self, d0: int, d1: int) -> "Tensor":
        return _wrap(lib.enkai_tensor_transpose(self.handle, d0, d1))

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> "Tensor":
        return _wrap(lib.enkai_tensor_slice(self.handle, dim, start, end, step))

    def sum(self, dim: int = -1, keepdim: bool = False) -> "Tensor":
        """Sum over `dim`, or over everything when `dim` is negative (the C ABI's rule)."""
        return _wrap(lib.enkai_tensor_sum(self.handle, dim, int(keepdim)))

    def mean(self, dim: int = -1, keepdim: bool = False) -> "Tensor":
        return _wrap(lib.enkai_tensor_mean(self.handle, dim, int(keepdim)))

    def softmax(self, dim: int) -> "Tensor":
        return _wrap(lib.enkai_tensor_softmax(self.handle, dim))

    def relu(self) -> "Tensor":
        return _wrap(lib.enkai_tensor_relu(self.handle))

    def sigmoid(self) -> "Tensor":
        return _wrap(lib.enkai_tensor_sigmoid(self.handle))

    def tanh(self) -> "Tensor":
        return _wrap(lib.enkai_tensor_tanh(self.handle))

    def gelu(self) -> "Tensor":
        return _wrap(lib.enkai_tensor_gelu(self.handle))

    def detach(self) -> "Tensor":
        return _wrap(lib.enkai_tensor_detach(self.handle))

    def dequantize(self) -> "Tensor":
        """A quantized tensor's values as float32 (`et.dequantize`)."""
        return dequantize(self)

    def to_dtype(self, dtype: str) -> "Tensor":
        return _wrap(lib.enkai_tensor_to_dtype(self.handle, _enc(dtype)))

    def to_backend(self, name: str) -> "Tensor":
        """A copy made by backend `name` ("torch" or "cpu"), with no autograd history."""
        return _wrap(lib.enkai_tensor_to_backend(self.handle, _enc(name)))

    def to_device(self, dev: DeviceLike) -> "Tensor":
        return _wrap(lib.enkai_tensor_to_device(self.handle, _dev(dev).handle))

    # autograd
    def require_grad(self) -> "Tensor":
        _check_handle(lib.enkai_tensor_require_grad(self.handle))
        return self

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """As `Tensor.requires_grad_`: False freezes a leaf (a parameter)."""
        _check_status(lib.enkai_tensor_requires_grad_(self.handle, int(bool(requires_grad))))
        return self

    @property
    def requires_grad(self) -> bool:
        r = lib.enkai_tensor_requires_grad(self.handle)
        if r < 0:
            _raise()
        return bool(r)

    def backward(self) -> None:
        _check_status(lib.enkai_tensor_backward(self.handle))

    @property
    def grad(self) -> Optional["Tensor"]:
        h = lib.enkai_tensor_grad(self.handle)
        if h == 0:
            if lib.enkai_tensor_last_error_code() != 0:
                _raise()
            return None
        return _wrap(h)

    def zero_grad(self) -> None:
        _check_status(lib.enkai_tensor_zero_grad(self.handle))


def _scalar(o: Any, like: "Tensor") -> Optional["Tensor"]:
    """A Python (or numpy) number as the 0-dim tensor that gives torch's
    result with the dimensioned tensor `like`; None for anything else.

    torch wraps a number into a 0-dim double/int64/bool tensor that never
    widens the other operand within its kind, and takes the default dtype
    (fp32, int64) when it is of a higher kind. libtorch's rule for a 0-dim
    operand is the same except that it brings its own dtype: so an int is an
    exact int64, a float an fp64 against a floating tensor (computed as torch
    does: fp16/bf16 in float32 with the number unrounded) and an fp32
    against an integer or bool one, a bool a bool."""
    if _is_bool(o):
        return full([], float(o), "bool", like.device)  # lowest kind: `-` refuses it, as torch
    if isinstance(o, numbers.Integral):
        try:
            return from_bytes(struct.pack("<q", int(o)), [], "int64", like.device)
        except struct.error:
            raise OverflowError(f"{o} does not fit in int64") from None
    if isinstance(o, numbers.Real):
        return full([], float(o), "fp64" if like.dtype in _FLOATING else "fp32", like.device)
    if isinstance(o, numbers.Complex):
        # torch: a complex number brings the complex dtype of the tensor's precision.
        return Tensor(complex(o), "complex128" if like.dtype in ("fp64", "complex128") else "complex64", like.device)
    return None


_devices: Dict[str, Device] = {}


def _dev(dev: DeviceLike) -> "Device":
    """The device `dev` names. Named ones are kept for the process: callers
    pass `_dev(dev).handle` straight into C, so the Device must outlive the
    expression."""
    if dev is None:
        return device()
    if isinstance(dev, Device):
        return dev
    if dev not in _devices:
        _devices[dev] = Device(dev)
    return _devices[dev]


def randn(shape: Shape, dtype: str = "fp32", dev: DeviceLike = None) -> Tensor:
    return _wrap(lib.enkai_tensor_randn(_shape_json(shape), _enc(dtype), _dev(dev).handle))


def zeros(shape: Shape, dtype: str = "fp32", dev: DeviceLike = None) -> Tensor:
    return _wrap(lib.enkai_tensor_zeros(_shape_json(shape), _enc(dtype), _dev(dev).handle))


def ones(shape: Shape, dtype: str = "fp32", dev: DeviceLike = None) -> Tensor:
    return _wrap(lib.enkai_tensor_ones(_shape_json(shape), _enc(dtype), _dev(dev).handle))


def full(shape: Shape, value: float, dtype: str = "fp32", dev: DeviceLike = None) -> Tensor:
    return _wrap(lib.enkai_tensor_full(_shape_json(shape), float(value), _enc(dtype), _dev(dev).handle))


def from_bytes(data: Union[bytes, bytearray, memoryview], shape: Shape, dtype: str, dev: DeviceLike = None) -> Tensor:
    data = bytes(data)
    return _wrap(lib.enkai_tensor_from_data(data, len(data), _shape_json(shape), _enc(dtype), _dev(dev).handle))


def from_numpy(a: Any, dev: DeviceLike = None) -> Tensor:
    """A copy of a numpy array (or numpy scalar, or anything with
    `__array__`) with its dtype: float32/float64/float16/int64/int32/int16/
    int8/uint8/bool become fp32/fp64/fp16/int64/int32/int16/int8/uint8/bool; others raise
    TypeError. Any strides; a 0-d array gives a 0-dim tensor."""
    import numpy as np

    a = np.asarray(a)  # tobytes() below is C order whatever the strides
    names = {v: k for k, v in _NUMPY.items()}
    if a.dtype.name not in names:
        raise TypeError(f"unsupported numpy dtype {a.dtype}")
    return from_bytes(a.tobytes(), a.shape, names[a.dtype.name], dev)


def tensor(data: Any, dtype: Optional[str] = None, dev: DeviceLike = None) -> Tensor:
    """`torch.tensor`: a new tensor holding a copy of `data` (see `Tensor`)."""
    return Tensor(data, dtype, dev)


def from_dlpack(obj: Any) -> Tensor:
    """Wraps another framework's tensor (anything with `__dlpack__`, or a
    DLPack 1.x capsule) without copying; its memory is released through its
    producer when the last tensor using it is freed. Read-only arrays are
    copied."""
    return _wrap(_dlpack.import_capsule(_dlpack.capsule_of(obj)))


def ids_u32(ids: Sequence[int], batch: int, seq: int, dev: DeviceLike = None) -> Tensor:
    arr = (ctypes.c_uint32 * len(ids))(*ids)
    return _wrap(lib.enkai_tensor_ids_u32(arr, len(ids), batch, seq, _dev(dev).handle))


def manual_seed(seed: int) -> None:
    _check_status(lib.enkai_tensor_manual_seed(seed))


def set_num_threads(n: int) -> None:
    """`torch.set_num_threads`: the threads compute kernels use, process-wide (1..1024)."""
    _check_status(lib.enkai_set_num_threads(n))


def get_num_threads() -> int:
    return int(lib.enkai_get_num_threads())


def is_grad_enabled() -> bool:
    """`torch.is_grad_enabled()`: whether ops on this thread record a graph."""
    return bool(lib.enkai_is_grad_enabled())


def _set_grad(mode: bool) -> bool:
    prev = lib.enkai_set_grad_enabled(int(bool(mode)))
    if prev < 0:
        _raise()
    return bool(prev)


class set_grad_enabled:
    """`torch.set_grad_enabled(mode)`: sets this thread's grad mode at once;
    used as `with et.set_grad_enabled(mode):` the previous mode comes back on exit."""

    def __init__(self, mode: bool) -> None:
        self.prev = _set_grad(mode)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        _set_grad(self.prev)


class _GradMode:
    mode = True

    def __enter__(self) -> None:
        self.prev = _set_grad(self.mode)

    def __exit__(self, *exc: Any) -> None:
        _set_grad(self.prev)

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        mode = self.mode

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            prev = _set_grad(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                _set_grad(prev)
        return wrapped


class no_grad(_GradMode):
    """`with et.no_grad():` (or `@et.no_grad()`), as `torch.no_grad`: ops
    record no graph on this thread, so inference holds no activations."""
    mode = False


class enable_grad(_GradMode):
    """`with et.enable_grad():`, as `torch.enable_grad`, inside a no_grad block."""
    mode = True


def backend_list() -> List[str]:
    return json.loads(_out_string(lib.enkai_backend_list))


def backend_set(name: str) -> None:
    _check_status(lib.enkai_backend_set(_enc(name)))


def backend_current() -> str:
    return _out_string(lib.enkai_backend_current)


def live() -> Dict[str, int]:
    """Live handle counts per kind."""
    return {"tensors": lib.enkai_tensor_live_tensors(), "devices": lib.enkai_tensor_live_devices(),
            "opts": lib.enkai_tensor_live_opts(), "scalers": lib.enkai_tensor_live_scalers(),
            "safetensors": lib.enkai_tensor_live_safetensors()}


def matmul(a: Tensor, b: Tensor) -> Tensor:
    return a @ b


def concat(ts: Sequence[Tensor], dim: int = 0) -> Tensor:
    return _wrap(lib.enkai_tensor_concat(_handles_json(ts), dim))


def softmax(x: Tensor, dim: int) -> Tensor:
    return x.softmax(dim)


def masked_softmax(x: Tensor, mask: Tensor, dim: int, mask_type: int = 2) -> Tensor:
    return _wrap(lib.enkai_tensor_masked_softmax(x.handle, mask.handle, dim, mask_type))


def masked_softmax_backward(grad_out: Tensor, out: Tensor, mask: Tensor, dim: int) -> Tensor:
    return _wrap(lib.enkai_tensor_masked_softmax_backward(grad_out.handle, out.handle, mask.handle, dim))


def dropout(x: Tensor, p: float, train: bool = True) -> Tensor:
    return _wrap(lib.enkai_tensor_dropout(x.handle, p, int(train)))


def layernorm(x: Tensor, w: Tensor, b: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    return _wrap(lib.enkai_tensor_layernorm(x.handle, w.handle, b.handle if b is not None else 0, eps))


def layernorm_backward(x: Tensor, w: Tensor, b: Optional[Tensor], eps: float,
                       grad_out: Tensor) -> List[Optional[Tensor]]:
    hs = json.loads(_slice_text(lib.enkai_tensor_layernorm_backward(
        x.handle, w.handle, b.handle if b is not None else 0, eps, grad_out.handle)))
    return [_wrap(h) if h else None for h in hs]


def embedding(w: Tensor, ids: Tensor) -> Tensor:
    return _wrap(lib.enkai_tensor_embedding(w.handle, ids.handle))


def quantize_per_channel(x: Tensor, axis: int = 0) -> Tensor:
    """Symmetric int8 per slice along `axis` (zero point 0, scale max|slice|/127),
    as `torch.quantize_per_channel(x, scales, zeros, axis, torch.qint8)`: a
    `qint8` tensor, which `linear`/`matmul` take as a weight."""
    return Tensor._from_handle(lib.enkai_quantize_per_channel(x.handle, axis))


def quantize_q8_0(x: Tensor) -> Tensor:
    """ggml's `q8_0` along the last dim (blocks of 32, one fp16 scale each)."""
    return Tensor._from_handle(lib.enkai_quantize_q8_0(x.handle))


def dequantize(q: Tensor) -> Tensor:
    """A quantized tensor's values (`q * scale`) as float32."""
    return Tensor._from_handle(lib.enkai_dequantize(q.handle))


def q_scales(q: Tensor) -> Tensor:
    """A quantized tensor's scales as float32 (`[shape[axis]]`, or one per block of 32)."""
    return Tensor._from_handle(lib.enkai_quantized_scales(q.handle))


def linear(x: Tensor, w: Tensor, b: Optional[Tensor] = None) -> Tensor:
    return _wrap(lib.enkai_tensor_linear(x.handle, w.handle, b.handle if b is not None else 0))


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    return _wrap(lib.enkai_tensor_cross_entropy(logits.handle, targets.handle))


def grad_multi(params: Sequence[Tensor]) -> List[Optional[Tensor]]:
    hs = json.loads(_out_string(lib.enkai_tensor_grad_multi, _handles_json(params)))
    return [_wrap(h) if h else None for h in hs]


def zero_grad_multi(params: Sequence[Tensor]) -> None:
    _check_status(lib.enkai_tensor_zero_grad_multi(_handles_json(params)))


def check_finite_multi(ts: Sequence[Tensor]) -> None:
    _check_status(lib.enkai_tensor_check_finite_multi(_handles_json(ts)))


def scale_grads_multi(grads: Sequence[Optional[Tensor]], scale: float) -> None:
    _check_status(lib.enkai_tensor_scale_grads_multi(_handles_json(grads), scale))


def clip_grad_norm_multi(grads: Sequence[Optional[Tensor]], max_norm: float, norm_type: float = 2.0) -> float:
    total = ctypes.c_double()
    _check_status(lib.enkai_tensor_clip_grad_norm_multi(_handles_json(grads), max_norm, norm_type, ctypes.byref(total)))
    return total.value


class Optimizer:
    """An optimizer handle of any kind (AdamW, Adam, SGD): what `checkpoint_load`
    returns, and the methods every kind shares."""

    @classmethod
    def adopt(cls, handle: int) -> "Optimizer":
        """Takes ownership of an optimizer handle returned by a C function."""
        self = cls.__new__(cls)
        self.handle = _check_handle(handle)
        return self

    def step(self) -> None:
        _check_status(lib.enkai_opt_step(self.handle))

    def shard(self) -> "Optimizer":
        """ZeRO stage 1 over the process group (see enkai_opt_shard)."""
        _check_status(lib.enkai_opt_shard(self.handle))
        return self

    @property
    def state_bytes(self) -> int:
        n = lib.enkai_opt_state_bytes(self.handle)
        if n < 0:
            _raise()
        return n

    def add_param_group(self, params: Sequence[Tensor], lr: float, weight_decay: float) -> None:
        _check_status(lib.enkai_opt_add_param_group(self.handle, _handles_json(params), lr, weight_decay))

    def set_lr(self, group: int, lr: float) -> None:
        _check_status(lib.enkai_opt_set_lr(self.handle, group, lr))

    def group_step(self, group: int) -> None:
        _check_status(lib.enkai_opt_param_group_step(self.handle, group))

    def free(self) -> None:
        h, self.handle = getattr(self, "handle", 0), 0
        if h and lib is not None:
            _check_status(lib.enkai_tensor_opt_free(h))

    __del__ = free


class AdamW(Optimizer):
    """An optimizer handle: `torch.optim.AdamW` over `params` (one group to start)."""

    def __init__(self, params: Sequence[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
        self.handle = _check_handle(lib.enkai_opt_adamw_create(_handles_json(params), lr, betas[0], betas[1], eps,
                                                                weight_decay))

    def step(self) -> None:
        _check_status(lib.enkai_opt_adamw_step(self.handle))


class Adam(Optimizer):
    """An optimizer handle: `torch.optim.Adam` over `params` (one group to start):
    coupled L2 weight decay, `amsgrad`."""

    def __init__(self, params: Sequence[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False) -> None:
        self.handle = _check_handle(lib.enkai_opt_adam_create(_handles_json(params), lr, betas[0], betas[1], eps,
                                                               weight_decay, int(amsgrad)))


class SGD(Optimizer):
    """An optimizer handle: `torch.optim.SGD` over `params` (one group to start)."""

    def __init__(self, params: Sequence[Tensor], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        self.handle = _check_handle(lib.enkai_opt_sgd_create(_handles_json(params), lr, momentum, dampening,
                                                              weight_decay, int(nesterov)))


def lr_schedule(spec: Union[str, Dict[str, Any]], step: int, base_lr: float) -> float:
    """The lr of schedule `spec` (a dict or its JSON, see enkai_lr_schedule) after
    `step` scheduler steps, for an optimizer created with `base_lr`."""
    text = spec if isinstance(spec, str) else json.dumps(spec)
    out = ctypes.c_double()
    _check_status(lib.enkai_lr_schedule(text.encode(), step, base_lr, ctypes.byref(out)))
    return out.value


def adamw_step_multi(params: Sequence[Tensor], grads: Sequence[Optional[Tensor]], state: Optional[AdamW] = None,
                     lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                     weight_decay: float = 1e-2) -> AdamW:
    """The functional step; returns the state (an `AdamW`), created when `state` is None."""
    h = state.handle if state is not None else 0
    out = _check_handle(lib.enkai_tensor_adamw_step_multi(_handles_json(params), _handles_json(grads), h, lr,
                                                          betas[0], betas[1], eps, weight_decay))
    return state if state is not None else AdamW.adopt(out)


class GradScaler:
    """`torch.amp.GradScaler` rules over a scaler handle."""

    def __init__(self, init_scale: float = 65536.0, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000) -> None:
        self.handle = _check_handle(lib.enkai_amp_scaler_create(init_scale, growth_factor, backoff_factor,
                                                                growth_interval))

    def scale(self, loss: Tensor) -> Tensor:
        return _wrap(lib.enkai_amp_scale_loss(loss.handle, self.handle))

    def unscale_(self, grads: Sequence[Optional[Tensor]]) -> bool:
        found = ctypes.c_int()
        _check_status(lib.enkai_amp_unscale_grads(_handles_json(grads), self.handle, ctypes.byref(found)))
        return bool(found.value)

    def update(self, found_inf: bool = False) -> None:
        _check_status(lib.enkai_amp_scaler_update(self.handle, int(found_inf)))

    def get_scale(self) -> float:
        v = lib.enkai_amp_scaler_get_scale(self.handle)
        if v != v:
            _raise()
        return v

    def step(self, loss: Tensor, params: Sequence[Tensor], opt: Optimizer) -> bool:
        """Scaled backward + step; returns False when the step was skipped for an inf."""
        rc = lib.enkai_amp_step(loss.handle, self.handle, _handles_json(params), opt.handle)
        if rc == 1:
            _raise()
        return rc == 0

    def free(self) -> None:
        h, self.handle = getattr(self, "handle", 0), 0
        if h and lib is not None:
            _check_status(lib.enkai_amp_scaler_free(h))

    __del__ = free


class autocast:
    """`with et.autocast():` (bf16 on CPU, fp16 on CUDA), or `autocast(dev, "fp16")` for one device."""

    def __init__(self, dev: DeviceLike = None, dtype: Optional[str] = None) -> None:
        self.dev, self.dtype = dev, dtype

    def __enter__(self) -> "autocast":
        if self.dev is None:
            _check_status(lib.enkai_autocast_enter())
        else:
            _check_status(lib.enkai_autocast_enter_device(_dev(self.dev).handle, _enc(self.dtype or "bf16")))
        return self

    def __exit__(self, *exc: Any) -> None:
        _check_status(lib.enkai_autocast_exit())


def _u32(seq: Sequence[int]) -> Any:
    return (ctypes.c_uint32 * len(seq))(*seq)


def tinylm_init(vocab: int, seq: int, d_model: int, n_layers: int, n_heads: int, dev: DeviceLike = None,
                seed: int = 0) -> List[Tensor]:
    hs = json.loads(_out_string(lib.enkai_tensor_tinylm_init, vocab, seq, d_model, n_layers, n_heads,
                                _dev(dev).handle, seed))
    return [_wrap(h) for h in hs]


def forward_tinylm(params: Sequence[Tensor], inputs: Sequence[int], targets: Sequence[int], batch: int, seq: int,
                   n_heads: int) -> Tensor:
    return _wrap(lib.enkai_tensor_forward_tinylm(_handles_json(params), _u32(inputs), len(inputs), _u32(targets),
                                                  len(targets), batch, seq, n_heads))


def lm_init(spec: Spec, dev: DeviceLike = None, seed: int = 0) -> List[Tensor]:
    spec = spec if isinstance(spec, (str, bytes)) else json.dumps(spec)
    hs = json.loads(_out_string(lib.enkai_tensor_lm_init, _enc(spec), _dev(dev).handle, seed))
    return [_wrap(h) for h in hs]


def forward_lm(params: Sequence[Tensor], spec: Spec, inputs: Sequence[int], targets: Sequence[int], batch: int,
               seq: int, training: bool = False) -> Tensor:
    spec = spec if isinstance(spec, (str, bytes)) else json.dumps(spec)
    return _wrap(lib.enkai_tensor_forward_lm(_handles_json(params), _enc(spec), _u32(inputs), len(inputs),
                                              _u32(targets), len(targets), batch, seq, int(training)))


def lm_logits(params: Sequence[Tensor], spec: Spec, inputs: Sequence[int], batch: int, seq: int) -> Tensor:
    spec = spec if isinstance(spec, (str, bytes)) else json.dumps(spec)
    return _wrap(lib.enkai_tensor_lm_logits(_handles_json(params), _enc(spec), _u32(inputs), len(inputs), batch, seq))


Loaded = Tuple[List[Tensor], Optional[Optimizer], bytes]


def _path(p: PathLike) -> bytes:
    return os.fsencode(p)


def checkpoint_save(dir: PathLike, params: Sequence[Tensor], opt: Optional[Optimizer] = None,
                    meta: Union[str, bytes] = "{}", scaler: Optional[GradScaler] = None) -> None:
    meta = _enc(meta)
    if scaler is None:
        _check_status(lib.enkai_checkpoint_save(_path(dir), _handles_json(params), opt.handle if opt else 0, meta))
    else:
        _check_status(lib.enkai_checkpoint_save_amp(_path(dir), _handles_json(params), opt.handle if opt else 0,
                                                    scaler.handle, meta))


def _load_outputs(fn: Callable[..., int], *args: Any) -> Loaded:
    p, pl, o, m, ml = ctypes.c_char_p(), ctypes.c_size_t(), ctypes.c_int64(), ctypes.c_char_p(), ctypes.c_size_t()
    _check_status(fn(*args, ctypes.byref(p), ctypes.byref(pl), ctypes.byref(o), ctypes.byref(m), ctypes.byref(ml)))
    try:
        hs = json.loads(ctypes.string_at(p, pl.value))
        meta = ctypes.string_at(m, ml.value)
    finally:
        lib.enkai_tensor_string_free(p)
        lib.enkai_tensor_string_free(m)
    return [_wrap(h) for h in hs], (Optimizer.adopt(o.value) if o.value else None), meta


def checkpoint_load(dir: PathLike) -> Loaded:
    """(params, optimizer or None, meta bytes) from the latest snapshot of `dir`."""
    return _load_outputs(lib.enkai_checkpoint_load, _path(dir))


def checkpoint_load_scaler(dir: PathLike) -> GradScaler:
    s = GradScaler.__new__(GradScaler)
    s.handle = _check_handle(lib.enkai_checkpoint_load_scaler(_path(dir)))
    return s


def checkpoint_save_ranked(dir: PathLike, rank: int, world: int, params: Sequence[Tensor], opt: Optional[Optimizer] = None,
                           meta: Union[str, bytes] = "{}", scaler: Optional[GradScaler] = None) -> None:
    if scaler is None:
        _check_status(lib.enkai_checkpoint_save_ranked(_path(dir), rank, world, _handles_json(params),
                                                       opt.handle if opt else 0, _enc(meta)))
    else:
        _check_status(lib.enkai_checkpoint_save_ranked_amp(_path(dir), rank, world, _handles_json(params),
                                                           opt.handle if opt else 0, scaler.handle, _enc(meta)))


def checkpoint_load_ranked_scaler(dir: PathLike, rank: int) -> GradScaler:
    s = GradScaler.__new__(GradScaler)
    s.handle = _check_handle(lib.enkai_checkpoint_load_ranked_scaler(_path(dir), rank))
    return s


def checkpoint_load_ranked(dir: PathLike, rank: int) -> Loaded:
    return _load_outputs(lib.enkai_checkpoint_load_ranked, _path(dir), rank)


# ------------------------------------------------------------------ the op table
#
# Every op of the library's op table, by its PyTorch name: `et.op("topk", x,
# k=5)`, and, built from `enkai_op_schema()` at import, a function
# `et.<name>` and a Tensor method for each op that has no hand-written one
# here. Nothing below names an op: a new table row needs no Python code.

_MAX_RESULTS = 1 << 16


def op_schema() -> List[Dict[str, Any]]:
    """The op table: one entry per overload (see `enkai_op_schema` in the header)."""
    return json.loads(_slice_text(lib.enkai_op_schema()))


def _op_inputs(inputs: Sequence[Any]) -> List[int]:
    out: List[int] = []
    for t in inputs:
        if t is None:
            out.append(0)
        elif isinstance(t, Tensor):
            out.append(t.handle)
        elif isinstance(t, (list, tuple)):
            out.extend(_op_inputs(t))
        else:
            raise TypeError(f"an op input must be a Tensor, None or a list of them, got {type(t).__name__}")
    return out


def _kwarg(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_kwarg(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, Tensor):  # numpy scalars
        return v.item()
    return v


def op(name: str, *inputs: Any, **kwargs: Any) -> Any:
    """`enkai_op`: runs PyTorch's op `name` on tensor `inputs` (None for an
    optional tensor left out; a list for a TensorList) with keyword
    arguments by PyTorch name. Returns a Tensor, or a tuple (ops with several
    results) or list (ops returning Tensor[])."""
    hs = _op_inputs(inputs)
    arr = (ctypes.c_int64 * max(len(hs), 1))(*hs)
    text = json.dumps({k: _kwarg(v) for k, v in kwargs.items()}).encode() if kwargs else None
    out = (ctypes.c_int64 * _MAX_RESULTS)()
    n = lib.enkai_op(_enc(name), arr, len(hs), text, out, _MAX_RESULTS)
    if n < 0:
        _raise()
    results = [_wrap(out[i]) for i in range(n)]
    kind = _returns.get(name)
    if kind == "list":
        return results
    # One result is a Tensor even for an op with a tuple overload (max() beside max.dim).
    if len(results) == 1:
        return results[0]
    return tuple(results)


def einsum(equation: str, *operands: Any) -> "Tensor":
    """`torch.einsum(equation, *operands)` (or with one list of operands):
    the order of three or more operands is the one `einsum_path` shows."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return op("einsum", list(operands), equation=equation)


def einsum_path(equation: str, *shapes: Shape) -> Dict[str, Any]:
    """`enkai_einsum_path`: `{"path": [[i, j], ...], "flops": n}` for operands of these shapes."""
    text = _out_string(lib.enkai_einsum_path, _enc(equation), json.dumps([list(s) for s in shapes]).encode())
    return json.loads(text)


_returns: Dict[str, str] = {}
_overloads: Dict[str, List[Dict[str, Any]]] = {}


def _bind(ov: Dict[str, Any], args: Sequence[Any], kwargs: Dict[str, Any]) -> Optional[Tuple[List[Any], Dict[str, Any]]]:
    """Python's positional arguments laid onto one overload's parameters, or None when they do not fit."""
    inputs: List[Any] = []
    kw: Dict[str, Any] = {}
    params = [p for p in ov["params"] if not p["kw_only"]]
    names = {p["name"] for p in ov["params"]}
    if any(k not in names for k in kwargs):
        return None
    i = 0
    for p in params:
        if i >= len(args):
            break
        a = args[i]
        if p["type"] == "Tensor[]":
            if not isinstance(a, (list, tuple)):
                return None
            inputs.append(list(a))
        elif p["type"] == "Tensor":
            if not (isinstance(a, Tensor) or (a is None and p["optional"])):
                return None
            inputs.append(a)
        else:
            if isinstance(a, Tensor):
                return None
            kw[p["name"]] = a
        i += 1
    if i < len(args):
        return None
    for k, v in kwargs.items():
        p = next(q for q in ov["params"] if q["name"] == k)
        if p["type"] in ("Tensor", "Tensor[]"):
            return None
        kw[k] = v
    return inputs, kw


def _make(name: str) -> Callable[..., Any]:
    def fn(*args: Any, **kwargs: Any) -> Any:
        for ov in _overloads[name]:
            bound = _bind(ov, args, kwargs)
            if bound is not None:
                return op(name, *bound[0], **bound[1])
        # No overload fits Python's reading: let the library say why.
        ins = [a for a in args if isinstance(a, (Tensor, list, tuple)) or a is None]
        return op(name, *ins, **kwargs)

    fn.__name__ = name
    fn.__doc__ = "\n".join(f"{ov.get('python', 'torch.' + name)}: {ov['signature']}" for ov in _overloads[name])
    return fn


_shadowing: Dict[str, Callable[..., Any]] = {}


def __getattr__(name: str) -> Any:
    try:
        return _shadowing[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


# torch.nn.functional functions whose name is another op as a Tensor method
# in PyTorch (`Tensor.unfold(dimension, size, step)` is a sliding-window view).
_NOT_METHODS = {"unfold"}


def _install_ops() -> None:
    for ov in op_schema():
        name = ov["name"]
        _overloads.setdefault(name, []).append(ov)
        if "Tensor[]" in ov["returns"]:
            _returns[name] = "list"
        elif len(ov["returns"]) > 1:
            _returns[name] = "tuple"
    g = globals()
    for name in _overloads:
        fn = _make(name)
        if "." in name:
            # `torch.linalg.cholesky` is `et.linalg.cholesky` (and `et.op("linalg.cholesky", ...)`).
            space, _, attr = name.partition(".")
            if space not in g:
                g[space] = types.SimpleNamespace()
                __all__.append(space)
            setattr(g[space], attr, fn)
            continue
        if hasattr(builtins, name):
            # `et.sum`, `et.any`...: served by `__getattr__`, so that this
            # module's own code keeps Python's builtins.
            _shadowing[name] = fn
            __all__.append(name)
        elif name not in g:
            g[name] = fn
            __all__.append(name)
        if name in _NOT_METHODS:
            continue
        if not hasattr(Tensor, name) and any(ov["params"] and ov["params"][0]["type"] == "Tensor" for ov in _overloads[name]):
            setattr(Tensor, name, fn)


_install_ops()
