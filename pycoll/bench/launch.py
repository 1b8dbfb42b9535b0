"""Start N ranks of a Python module on this host, the way `pycoll run` and torchrun do: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT in each one's environment."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time


class RankFailed(RuntimeError):
    """A rank exited with a non-zero code; the others were stopped."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, extra=None) -> dict:
    return dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                PYTHONUNBUFFERED="1", **(extra or {}))


def run_module(n: int, module: str, args=(), *, timeout: float = 3600.0, env=None) -> None:
    """Run `python -m module args` as ranks 0..n-1 and wait for all; stop every rank as soon as one fails
    or the timeout passes (a rank waiting on a dead peer would otherwise hang until its own deadline)."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", module, *args], env=rank_env(r, n, port, env),
                              stdout=None if r == 0 else subprocess.DEVNULL) for r in range(n)]
    end = time.monotonic() + timeout
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                raise RankFailed(", ".join(f"rank {r} exited with code {c}" for r, c in failed))
            if all(c == 0 for c in codes):
                return
            if time.monotonic() > end:
                raise RankFailed(f"ranks still running after {timeout:.0f} s")
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
