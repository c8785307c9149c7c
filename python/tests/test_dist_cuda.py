"""Collectives on CUDA tensors go through c10d's NCCL process group. NCCL
needs a GPU per rank, so these run only where two or more are present and
are skipped otherwise (this file's tests never run on a CPU-only machine)."""

import sys
from pathlib import Path

import pytest
import torch

from launch import finish, spawn

HERE = Path(__file__).resolve().parent

needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs a GPU per rank (2+ GPUs)")


@needs_two_gpus
def test_collectives_on_cuda_tensors_through_nccl():
    out = finish(spawn(2, [sys.executable, str(HERE / "dist_worker.py"), "collectives"], CUDA=1), timeout=180)
    for rank, (rc, o, e) in enumerate(out):
        assert rc == 0, f"rank {rank}:\n{o}\n{e}"
