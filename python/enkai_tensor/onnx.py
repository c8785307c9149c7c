"""ONNX export of a traced forward pass:

    with et.onnx.trace():
        y = model(x)
    et.onnx.export("model.onnx", [x], [y], {"fc.weight": w, ...}, dynamic_batch=True)

`trace()` records every op run on this thread while it is active; `export`
writes the graph that made `outputs` from `inputs` (onnxruntime runs it), the
`params` as initializers under their names. Ops with no ONNX form raise
`EnkaiError` with code `E_UNSUPPORTED`, naming the op.
"""

import json
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence
from contextlib import contextmanager

from . import PathLike, Tensor, _check_status, _path
from ._lib import lib

__all__ = ["trace", "export", "clear"]


@contextmanager
def trace() -> Iterator[None]:
    """Records the ops this thread runs inside the block (a fresh trace)."""
    _check_status(lib.enkai_onnx_trace_begin())
    try:
        yield
    finally:
        _check_status(lib.enkai_onnx_trace_end())


def clear() -> None:
    """Drops this thread's trace and the tensor references it holds."""
    _check_status(lib.enkai_onnx_trace_clear())


def _ports(ts: Sequence[Tensor], names: Optional[Sequence[str]], batch_dim: Optional[int]) -> bytes:
    items: List[Dict[str, Any]] = []
    for i, t in enumerate(ts):
        item: Dict[str, Any] = {"handle": t.handle}
        if names is not None:
            item["name"] = names[i]
        if batch_dim is not None:
            item["batch_dim"] = batch_dim
        items.append(item)
    return json.dumps(items).encode()


def export(path: PathLike, inputs: Sequence[Tensor], outputs: Sequence[Tensor], params: Mapping[str, Tensor],
           opset: int = 17, dynamic_batch: bool = False, input_names: Optional[Sequence[str]] = None,
           output_names: Optional[Sequence[str]] = None) -> None:
    """Writes the ONNX model of `outputs` computed from `inputs` by the last
    trace on this thread. `dynamic_batch`: dim 0 of every input is the
    symbolic `batch` (the trace needs a batch of at least 2)."""
    names = json.dumps({k: v.handle for k, v in params.items()}).encode()
    _check_status(lib.enkai_onnx_export(_path(path), _ports(inputs, input_names, 0 if dynamic_batch else None),
                                        _ports(outputs, output_names, None), names, opset))
