"""pycoll: one all-reduce API for CPUs, NVIDIA GPUs and Ascend NPUs.

    import pycoll
    with pycoll.init() as comm:          # rank and world size from pycoll run / torchrun / mpirun / srun
        comm.all_reduce(x)               # in place, every rank gets the sum
"""

from pycoll.errors import (AuthenticationError, BackendUnavailable, CommunicatorClosed, MismatchError,
                           PeerFailure, PycollError, Timeout)
from pycoll.comm import Communicator, backends, init, init_rank
from pycoll.bootstrap import get_unique_id
from pycoll.paths import get_include, get_library
from pycoll.work import Work, wait_all
from pycoll.buckets import GradientBuckets
from pycoll.mesh import Mesh
from pycoll.tree import reduce_tree

__version__ = "0.1.0"

SUM, PROD, MIN, MAX, AVG = "sum", "prod", "min", "max", "avg"

__all__ = ["init", "init_rank", "get_unique_id", "get_include", "get_library", "backends", "Communicator", "Mesh", "Work", "wait_all", "GradientBuckets", "reduce_tree",
           "PycollError", "Timeout", "PeerFailure", "MismatchError", "BackendUnavailable", "CommunicatorClosed",
           "AuthenticationError", "SUM", "PROD", "MIN", "MAX", "AVG"]
