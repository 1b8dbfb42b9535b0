"""Start the jobs of a bench: N local ranks of a Python module through pycoll's launcher
(pycoll.launcher.launch_module), or a command that starts its own ranks (an MPI's mpirun). Whatever the ranks
or their libraries print (a library's warnings, say) goes to this process's stderr: its stdout holds only the
bench's tables."""

from __future__ import annotations

import subprocess
import sys


class RankFailed(RuntimeError):
    """A job's rank failed (the launcher stopped the others)."""


def run_module(n: int, module: str, args=(), *, timeout: float | None = None) -> None:
    """`python -m module args` as ranks 0..n-1; RankFailed unless every rank exits 0."""
    from pycoll.launcher import launch_module

    code = launch_module(module, n, args, timeout=timeout, stdout=sys.stderr.buffer)
    if code != 0:
        raise RankFailed(f"the job of {n} ranks exited with code {code}")


def run_command(cmd: list[str], env: dict, timeout: float | None) -> None:
    """cmd, which starts the ranks itself, with its output and theirs on stderr; RankFailed unless it exits 0."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        sink = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # sys.stderr replaced by an object with no file
        sink = 2  # the process's own
    proc = subprocess.run(cmd, env=env, timeout=timeout, stdout=sink, check=False)
    if proc.returncode != 0:
        raise RankFailed(f"{cmd[0]} exited with code {proc.returncode}")
