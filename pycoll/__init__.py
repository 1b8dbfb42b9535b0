"""pycoll: one all-reduce API for CPUs, NVIDIA GPUs and Ascend NPUs.

    import pycoll
    with pycoll.init() as comm:          # rank and world size from pycoll run / torchrun / mpirun / srun
        comm.all_reduce(x)               # in place, every rank gets the sum
"""


def _check_compiled_modules():
    """A clear error, not "No module named 'pycoll._bindings.abi'", where Python finds the source folder of
    pycoll (the repository root is the current directory or on sys.path) instead of the installed package."""
    import os

    try:
        import pycoll._bindings.abi  # noqa: F401
    except ModuleNotFoundError as exc:
        here = os.path.dirname(os.path.abspath(__file__))
        root = os.path.dirname(here)
        in_source_tree = all(os.path.exists(os.path.join(root, name)) for name in ("pyproject.toml", "native"))
        if not (in_source_tree and (exc.name or "").startswith("pycoll._bindings")):
            raise
        raise ImportError(
            f"you are importing pycoll from its source tree ({here}), which has no compiled modules "
            f"(pycoll._bindings); Python looks in the current directory first. Run from another directory "
            f"(or with python -P) to use the installed pycoll, or install in editable mode "
            f"(pip install --no-build-isolation -e .) to use this tree") from None


_check_compiled_modules()
del _check_compiled_modules

from pycoll.bootstrap import get_unique_id
from pycoll.buckets import GradientBuckets
from pycoll.comm import Communicator, backends, init, init_rank, join
from pycoll.errors import (
    AuthenticationError,
    BackendUnavailable,
    CommunicatorClosed,
    CommunicatorRevoked,
    DuplicateRank,
    MismatchError,
    PeerFailure,
    PycollError,
    SettingError,
    Timeout,
    WrongProcess,
)
from pycoll.mesh import Mesh
from pycoll.paths import get_include, get_library
from pycoll.tree import reduce_tree
from pycoll.work import Work, wait_all

__version__ = "0.1.0"

SUM, PROD, MIN, MAX, AVG = "sum", "prod", "min", "max", "avg"

__all__ = ["init", "init_rank", "join", "get_unique_id", "get_include", "get_library", "backends", "Communicator",
           "Mesh", "Work", "wait_all", "GradientBuckets", "reduce_tree",
           "PycollError", "Timeout", "PeerFailure", "MismatchError", "BackendUnavailable", "CommunicatorClosed",
           "CommunicatorRevoked", "AuthenticationError", "DuplicateRank", "SettingError", "WrongProcess", "SUM",
           "PROD", "MIN", "MAX", "AVG"]
