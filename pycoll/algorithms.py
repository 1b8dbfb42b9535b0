"""Names of the algorithms and accuracy modes and their ids, bound from the C ABI (pycoll._bindings.abi), and
which algorithms each collective has (the algorithm table, native/algorithms/table.c)."""

import os
import sys
import warnings

from pycoll import settings
from pycoll._bindings.abi import (
    ACCURACIES,
    ALGORITHMS,
    COLL_ALGORITHMS,
    DEFAULT_SEGMENT_BYTES,
    HOST_ALGORITHMS,
    NATIVE_ALGORITHMS,
)
from pycoll.errors import SettingError

__all__ = ["ALGORITHMS", "ACCURACIES", "ACCURACY_ALIASES", "ALGORITHM_ALIASES", "COLL_ALGORITHMS",
           "HOST_ALGORITHMS", "NATIVE_ONLY", "algorithm_name", "canonical_algorithm", "default_algorithm",
           "accuracy_name", "segment_bytes_from_env"]

ACCURACY_ALIASES = {"kahan": "compensated"}
# Algorithms a transport runs itself (p2p.h's native collectives), so only backends over that transport have
# them: "shm_slots", the shared-memory transport's collectives.
NATIVE_ONLY = NATIVE_ALGORITHMS
# Former algorithm names, still accepted with a DeprecationWarning: "shm" was also a backend's and a
# transport's name, so the algorithm got one of its own.
ALGORITHM_ALIASES = {"shm": "shm_slots"}


def canonical_algorithm(algorithm):
    """The current name for a former one (with a DeprecationWarning naming it); any other value unchanged. Every
    place that takes an algorithm name from a user (arguments, PYCOLL_ALGORITHM, the bench CLI) comes through
    here, so an old name means the same everywhere."""
    new = ALGORITHM_ALIASES.get(algorithm) if isinstance(algorithm, str) else None
    if new is None:
        return algorithm
    warnings.warn(f"algorithm {algorithm!r} is deprecated and will be removed in the next release; use {new!r} "
                  f"(the backend and transport 'shm' keep their name)", DeprecationWarning,
                  stacklevel=_caller_level())
    return new


def _caller_level():
    """warnings.warn's stacklevel of the first frame outside pycoll: the warning names the caller's line, and
    Python's default filters show it there (they hide DeprecationWarnings raised inside a library)."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(2), 2  # canonical_algorithm's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def algorithm_name(algorithm, default="auto") -> str:
    """Validate an algorithm name; "auto" means `default` (the communicator's PYCOLL_ALGORITHM, read once)."""
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a string, got {type(algorithm).__name__}")
    algorithm = canonical_algorithm(algorithm)
    if algorithm == "auto":
        algorithm = default
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    return algorithm


def default_algorithm() -> str:
    """What algorithm="auto" means: PYCOLL_ALGORITHM when set, else "auto" (the cost model's choice)."""
    value = canonical_algorithm(settings.get("PYCOLL_ALGORITHM"))
    if value not in ALGORITHMS:
        raise SettingError("PYCOLL_ALGORITHM", value, "one of " + ", ".join(ALGORITHMS))
    return value


def accuracy_name(accuracy) -> str:
    if not isinstance(accuracy, str):
        raise TypeError(f"accuracy must be a string, got {type(accuracy).__name__}")
    accuracy = ACCURACY_ALIASES.get(accuracy, accuracy)
    if accuracy not in ACCURACIES:
        raise ValueError(f"accuracy: unknown mode {accuracy!r}; choose 'fast', 'compensated' (alias 'kahan') "
                         f"or 'reproducible'")
    return accuracy


def segment_bytes_from_env() -> int:
    """A communicator's default ring segment size: PYCOLL_RING_SEGMENT_BYTES when set, else the C default. Read
    here, when a communicator is created, and handed to it as an option (nothing in libpycoll reads it)."""
    return settings.get("PYCOLL_RING_SEGMENT_BYTES") or DEFAULT_SEGMENT_BYTES
