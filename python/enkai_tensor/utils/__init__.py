"""Utilities named as `torch.utils`'s: `enkai_tensor.utils.checkpoint`."""

from . import checkpoint

__all__ = ["checkpoint"]
