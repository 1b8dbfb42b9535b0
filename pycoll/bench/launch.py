"""Start N local ranks of a Python module through pycoll's launcher (pycoll.launcher.launch_module)."""

from __future__ import annotations


class RankFailed(RuntimeError):
    """A job's rank failed (the launcher stopped the others)."""


def run_module(n: int, module: str, args=(), *, timeout: float | None = None) -> None:
    """`python -m module args` as ranks 0..n-1; RankFailed unless every rank exits 0."""
    from pycoll.launcher import launch_module

    code = launch_module(module, n, args, timeout=timeout)
    if code != 0:
        raise RankFailed(f"the job of {n} ranks exited with code {code}")
