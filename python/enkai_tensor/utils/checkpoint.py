"""Gradient checkpointing, as `torch.utils.checkpoint`: a span's activations
are dropped after the forward pass and recomputed in the backward pass
(`enkai_grad_checkpoint`)."""

import ctypes
import itertools
import threading
from typing import Any, Callable, Dict

from .. import Tensor, _callback_failure, _raise, lib
from .._lib import CHECKPOINT_FN, RELEASE_FN

__all__ = ["checkpoint"]

# The span callbacks the library may still call, by context id; the
# library's release callback removes them.
_live: Dict[int, Any] = {}
_ids = itertools.count(1)
_lock = threading.Lock()


@RELEASE_FN
def _release(ctx: Any) -> None:
    with _lock:
        _live.pop(ctx or 0, None)


def _trampoline(function: Callable[..., Any], args: tuple, kwargs: Dict[str, Any]) -> Any:
    def call(_ctx: Any, inputs: Any, n: int, out: Any, cap: int) -> int:
        try:
            given = iter([Tensor.borrow(inputs[i]) for i in range(n)])
            full = [next(given) if isinstance(a, Tensor) else a for a in args]
            result = function(*full, **kwargs)
            outs = result if isinstance(result, (tuple, list)) else (result,)
            if len(outs) > cap:
                raise ValueError(f"checkpoint: the function returned {len(outs)} outputs, more than {cap}")
            for o in outs:
                if not isinstance(o, Tensor):
                    raise TypeError(f"checkpoint: the function must return Tensors, got {type(o).__name__}")
            for i, o in enumerate(outs):
                lib.enkai_tensor_retain(o.handle)  # the library takes this reference
                out[i] = o.handle
            return len(outs)
        except BaseException as e:  # noqa: BLE001 - reported by the caller, never across C
            _callback_failure.exc = e
            return -1

    return CHECKPOINT_FN(call)


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: Any = None,
               preserve_rng_state: bool = True, **kwargs: Any) -> Any:
    """`torch.utils.checkpoint.checkpoint(function, *args, **kwargs)`: returns
    `function(*args, **kwargs)` (a Tensor, or a tuple of them) without keeping
    the activations inside it; the backward pass runs `function` once more,
    with the generator state and autocast settings of the first run.
    Tensors among `args` are the span's inputs; other arguments pass through.
    Weights the function reaches by closure get gradients too, as with
    PyTorch's `use_reentrant=False` (`use_reentrant` is accepted and
    ignored). An exception raised by `function` in the forward pass is raised
    here; one raised while it is recomputed makes `backward` fail with
    E_AUTOGRAD, raised from it."""
    if not preserve_rng_state:
        raise ValueError("checkpoint: the generator state is always preserved (preserve_rng_state=False is not supported)")
    cb = _trampoline(function, args, kwargs)
    with _lock:
        ctx = next(_ids)
        _live[ctx] = cb
    tensors = [a.handle for a in args if isinstance(a, Tensor)]
    inputs = (ctypes.c_int64 * max(len(tensors), 1))(*tensors)
    cap = 64
    out = (ctypes.c_int64 * cap)()
    _callback_failure.exc = None
    n = lib.enkai_grad_checkpoint(cb, _release, ctx, inputs, len(tensors), out, cap)
    if n < 0:
        # The function's own exception, as torch raises it; else the library's error.
        failure, _callback_failure.exc = _callback_failure.exc, None
        if failure is not None:
            raise failure
        _raise()
    outs = [Tensor._from_handle(out[i]) for i in range(n)]
    return outs[0] if n == 1 else tuple(outs)

