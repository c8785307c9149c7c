"""DLPack 1.x both ways with PyTorch and NumPy: shared memory (the same data
pointer, writes seen from both sides), every dtype, views, and no leak
whichever side lets go first."""

import ctypes
import gc
import sys

import numpy as np
import pytest
import torch

import enkai_tensor as et
from enkai_tensor import _dlpack
from helpers import DT, same, to_et

DTYPES = list(DT)


def _live():
    gc.collect()
    return et.live()["tensors"]


def _sample(dtype, shape=(3, 4)):
    g = torch.Generator().manual_seed(5)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(0, 100, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=[DT[d] for d in DTYPES])
def test_torch_sees_our_tensor_and_we_see_torchs(dtype):
    base = _live()
    ref = _sample(dtype)
    t = to_et(ref)
    x = torch.from_dlpack(t)
    assert x.dtype == dtype and x.device.type == "cpu"
    assert torch.equal(x, ref)
    # Import: wraps torch's memory; both sides read the same bytes.
    y = et.from_dlpack(ref)
    same(y, ref)
    assert torch.from_dlpack(y).data_ptr() == ref.data_ptr()
    del x, y, t
    assert _live() == base


def test_writes_through_either_side_are_seen_by_the_other():
    base = _live()
    t = et.ones([2, 3])
    x = torch.from_dlpack(t)
    x[0, 1] = 5.0  # torch writes, the library reads
    assert t.numpy()[0, 1] == 5.0
    et.scale_grads_multi([t], 2.0)  # the library writes in place, torch reads
    assert torch.equal(x, torch.tensor([[2.0, 10.0, 2.0], [2.0, 2.0, 2.0]]))
    n = np.from_dlpack(t)
    assert n.ctypes.data == x.data_ptr()
    n[1, 2] = -1.0
    assert t.numpy()[1, 2] == -1.0 and x[1, 2].item() == -1.0

    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    e = et.from_dlpack(a)
    a[1, 1] = 100.0
    assert e.numpy()[1, 1] == 100.0
    et.scale_grads_multi([e], 0.5)
    assert a[1, 1] == 50.0 and a[0, 2] == 1.0
    del t, x, n, e
    assert _live() == base


def test_views_keep_their_strides_both_ways():
    ref = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    for view in (ref.t(), ref[1:, ::2], ref[:, 2], ref.reshape(2, 2, 6).permute(2, 0, 1)):
        e = et.from_dlpack(view)
        same(e, view)
        back = torch.from_dlpack(e)
        assert back.data_ptr() == view.data_ptr() and back.stride() == view.stride()
    t = et.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4)).transpose(0, 1)
    x = torch.from_dlpack(t)
    assert x.shape == (4, 3) and x.stride() == (1, 4)
    assert torch.equal(x, torch.arange(12, dtype=torch.float32).reshape(3, 4).t())


def test_empty_and_zero_dim_tensors():
    for ref in (torch.empty(0, 3), torch.tensor(3.5), torch.empty(2, 0, dtype=torch.int64)):
        e = et.from_dlpack(ref)
        same(e, ref)
        assert torch.equal(torch.from_dlpack(to_et(ref)), ref)


@pytest.mark.parametrize("consumer_first", [True, False])
def test_no_leak_whichever_side_drops_first(consumer_first):
    base = _live()
    t = et.randn([64, 64])
    x = torch.from_dlpack(t)
    assert _live() == base + 2  # the handle and the export
    if consumer_first:
        del x
        assert _live() == base + 1
        del t
    else:
        del t
        assert _live() == base + 1  # the export keeps the storage
        assert x.sum().isfinite()
        del x
    assert _live() == base

    a = np.ones((8, 8))
    refs = sys.getrefcount(a)
    e = et.from_dlpack(a)
    assert sys.getrefcount(a) == refs + 1  # numpy's export holds the array
    v = e.reshape(64)
    if consumer_first:
        del e, v
    else:
        del a  # the library's tensors keep numpy's memory alive
        assert v.numpy().sum() == 64.0
        del e, v
        a = None
    gc.collect()
    if a is not None:
        assert sys.getrefcount(a) == refs  # the producer's deleter ran
    assert _live() == base


def test_an_unconsumed_capsule_releases_its_tensor():
    base = _live()
    t = et.zeros([3])
    cap = t.__dlpack__(max_version=(1, 0))
    assert _live() == base + 2
    del cap
    assert _live() == base + 1
    del t
    assert _live() == base


def test_read_only_numpy_arrays_are_copied():
    a = np.arange(4.0)
    a.flags.writeable = False
    e = et.from_dlpack(a)
    assert np.array_equal(e.numpy(), a)
    assert torch.from_dlpack(e).data_ptr() != a.ctypes.data


def test_dlpack_device_and_refusals():
    t = et.zeros([2])
    assert t.__dlpack_device__() == (1, 0)
    g = et.zeros([2]).require_grad()
    with pytest.raises(et.EnkaiError) as e:
        torch.from_dlpack(g)
    assert e.value.code == "E_AUTOGRAD"
    torch.from_dlpack(g.detach())  # what torch asks for too
    with pytest.raises(BufferError):
        t.__dlpack__()  # a pre-1.0 consumer: only the versioned struct is produced
    with pytest.raises(BufferError):
        et.from_dlpack(torch.zeros(2).__dlpack__())  # a legacy capsule


def _foreign(major, released):
    """A producer written with ctypes: a 1-d float32 tensor over a ctypes array,
    its deleter counting calls."""
    data = (ctypes.c_float * 3)(1.0, 2.0, 3.0)
    shape = (ctypes.c_int64 * 1)(3)
    m = _dlpack.DLManagedTensorVersioned()
    m.version = _dlpack.DLPackVersion(major, 0)

    @_dlpack.DELETER
    def deleter(_p):
        released.append(1)

    m.deleter = deleter
    m.dl_tensor = _dlpack.DLTensor(
        ctypes.cast(data, ctypes.c_void_p), _dlpack.DLDevice(1, 0), 1, _dlpack.DLDataType(2, 32, 1),
        shape, None, 0,
    )
    keep = (data, shape, deleter, m)
    return ctypes.addressof(m), keep


def test_another_major_version_is_refused_and_only_released():
    released = []
    ptr, keep = _foreign(2, released)
    assert et.lib.enkai_tensor_from_dlpack(ptr) == 0
    assert et.lib.enkai_tensor_last_error_code() == et.lib.enkai_tensor_last_error_code()  # set
    assert et.lib.enkai_tensor_last_error().startswith(b"E_INVALID_ARG: DLPack major version 2")
    assert released == [1]
    ptr, keep = _foreign(1, released)
    h = et.lib.enkai_tensor_from_dlpack(ptr)
    assert h and released == [1]
    t = et.Tensor._from_handle(h) if hasattr(et.Tensor, "_from_handle") else et.Tensor._from_handle(h)
    assert t.numpy().tolist() == [1.0, 2.0, 3.0]
    del t
    gc.collect()
    assert released == [1, 1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_are_shared_on_the_gpu():
    ref = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3)
    e = et.from_dlpack(ref)
    assert e.device == "cuda:0"
    ref[0, 0] = 9.0
    torch.cuda.synchronize()
    assert e.numpy()[0, 0] == 9.0
    back = torch.from_dlpack(e)
    assert back.device.type == "cuda" and back.data_ptr() == ref.data_ptr()
    t = et.ones([4], dev="cuda")
    x = torch.from_dlpack(t)
    assert x.device.type == "cuda" and x.sum().item() == 4.0
    assert t.__dlpack_device__() == (2, 0)
