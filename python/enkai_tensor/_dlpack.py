"""DLPack 1.x through PyCapsules: the `__dlpack__` protocol on both sides.

The library hands out and takes `DLManagedTensorVersioned*`; this module
wraps them in capsules named as the protocol says ("dltensor_versioned",
renamed "used_dltensor_versioned" by whoever consumes it). A capsule nobody
consumed calls the tensor's deleter when it is collected.
"""

import ctypes
from typing import Any, Optional, Tuple

from ._lib import lib

VERSIONED = b"dltensor_versioned"
USED = b"used_dltensor_versioned"
LEGACY = b"dltensor"
# The names must outlive every capsule: these buffers live as long as the module.
_VERSIONED = ctypes.create_string_buffer(VERSIONED)
_USED = ctypes.create_string_buffer(USED)

KDL_CPU, KDL_CUDA = 1, 2
# The DLPack major version the library speaks (DLManagedTensorVersioned).
MAJOR = 1


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# Called from the destructor with a raw pointer: no reference counting there.
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_void_p]
_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))


def _delete(ptr: Optional[int]) -> None:
    if ptr:
        m = ctypes.cast(ptr, ctypes.POINTER(DLManagedTensorVersioned))
        if m.contents.deleter:
            m.contents.deleter(m)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: Optional[int]) -> None:
    # A consumer renames the capsule when it takes ownership; only an unused
    # one still owns its tensor.
    if _is_valid_raw(capsule, VERSIONED):
        _delete(_get_pointer_raw(capsule, VERSIONED))


def to_capsule(handle: int) -> Any:
    """A "dltensor_versioned" capsule sharing tensor `handle`'s memory."""
    ptr = lib.enkai_tensor_to_dlpack(handle)
    if not ptr:
        return None
    try:
        return _api.PyCapsule_New(ptr, _VERSIONED, ctypes.cast(_capsule_destructor, ctypes.c_void_p))
    except BaseException:
        _delete(ptr)
        raise


def device_tuple(name: str) -> Tuple[int, int]:
    """`__dlpack_device__` for a device name (`cpu`, `cuda:N`)."""
    if name.startswith("cuda"):
        return (KDL_CUDA, int(name.partition(":")[2] or 0))
    return (KDL_CPU, 0)


def capsule_of(obj: Any) -> Any:
    """The versioned capsule `obj` exports (or `obj` itself, if it is one)."""
    if not hasattr(obj, "__dlpack__"):
        return obj
    try:
        return obj.__dlpack__(max_version=(1, 0))
    except TypeError:  # a producer that predates DLPack 1.0's keyword
        return obj.__dlpack__()


def import_capsule(capsule: Any) -> int:
    """Hands the capsule's tensor to the library: the new handle, or 0 with
    the library's error set. The capsule is marked used either way: the
    library owns (and on failure has released) the tensor."""
    if not _api.PyCapsule_IsValid(capsule, VERSIONED):
        if _api.PyCapsule_IsValid(capsule, LEGACY):
            raise BufferError("the producer exported a pre-1.0 DLPack capsule; enkai_tensor needs DLPack >= 1.0")
        raise BufferError("not an unused DLPack capsule")
    ptr = _api.PyCapsule_GetPointer(capsule, VERSIONED)
    _api.PyCapsule_SetName(capsule, ctypes.cast(_USED, ctypes.c_void_p))
    return lib.enkai_tensor_from_dlpack(ptr)
