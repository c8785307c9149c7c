"""Multi-rank collectives over PyTorch's c10d process groups (Gloo).

    import enkai_tensor as et, enkai_tensor.dist as dist
    dist.init(world, rank)                 # torchrun's environment, or init_method=
    dist.broadcast(params, root=0)         # every rank starts from rank 0's weights
    ...; loss.backward(); dist.allreduce_grads(params)   # DDP's gradient mean
    dist.shutdown()
"""

from typing import TYPE_CHECKING, Sequence, Union

from . import _wrap, _check_handle, _check_status, _enc, _handles_json
from ._lib import lib

if TYPE_CHECKING:
    from . import Device, Tensor

__all__ = ["init", "shutdown", "rank", "world_size", "barrier", "all_reduce", "broadcast", "all_gather",
           "allreduce_grads", "config", "device"]


def init(world: int, rank: int, init_method: str = "", timeout_s: float = 0.0) -> None:
    """Creates the process group (init_method "" = torchrun's env://; timeout_s <= 0 = the default)."""
    _check_status(lib.enkai_dist_init_method(_enc(init_method), world, rank, timeout_s))


def config(world: int, rank: int, device: Union[int, "Device"] = -1, seed: int = 0) -> None:
    _check_status(lib.enkai_dist_config(world, rank, device if isinstance(device, int) else device.handle, seed))


def device() -> "Device":
    from . import Device
    d = Device.__new__(Device)
    d.spec, d.handle = "dist", _check_handle(lib.enkai_dist_device())
    return d


def shutdown() -> None:
    _check_status(lib.enkai_dist_shutdown())


def _int(v: int) -> int:
    if v < 0:
        from . import _raise
        _raise()
    return v


def rank() -> int:
    return _int(lib.enkai_dist_rank())


def world_size() -> int:
    return _int(lib.enkai_dist_world_size())


def barrier() -> None:
    _check_status(lib.enkai_dist_barrier())


def all_reduce(tensors: Sequence["Tensor"], op: str = "sum") -> None:
    """In place over the listed tensors: "sum", "mean", "max" or "min"."""
    _check_status(lib.enkai_dist_allreduce(_handles_json(tensors), _enc(op)))


def broadcast(tensors: Sequence["Tensor"], root: int = 0) -> None:
    _check_status(lib.enkai_dist_broadcast(_handles_json(tensors), root))


def all_gather(t: "Tensor") -> "Tensor":
    """A new tensor [world, *t.shape] whose row r is rank r's t."""
    return _wrap(lib.enkai_dist_all_gather(t.handle))


def allreduce_grads(params: Sequence["Tensor"], bucket_mb: float = 0.0) -> None:
    """Averages every param's .grad over the ranks, in DDP-style flat buckets."""
    _check_status(lib.enkai_dist_allreduce_grads(_handles_json(params), bucket_mb))
