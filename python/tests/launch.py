"""Starting the ranks of a multi-process test on 127.0.0.1, with bounded waits."""

import os
import socket
import subprocess
import time

import pytest


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, world, port, **extra):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def spawn(world, argv, **extra):
    port = free_port()
    return [subprocess.Popen(argv, env=rank_env(r, world, port, **extra), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for r in range(world)]


def finish(procs, timeout=60):
    """(returncode, stdout, stderr) of each; kills everything left after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            o, e = p.communicate()
            pytest.fail(f"rank did not finish within {timeout} s:\n{o}\n{e}")
        out.append((p.returncode, o, e))
    return out
