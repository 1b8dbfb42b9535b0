"""pycoll: one all-reduce API for CPUs, NVIDIA GPUs and Ascend NPUs."""

from pycoll.errors import (BackendUnavailable, CommunicatorClosed, MismatchError, PeerFailure, PycollError,
                           Timeout)

__version__ = "0.1.0"

__all__ = ["PycollError", "Timeout", "PeerFailure", "MismatchError", "BackendUnavailable", "CommunicatorClosed"]
