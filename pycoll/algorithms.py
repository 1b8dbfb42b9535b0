"""Names of the algorithms and accuracy modes, and their ids in the C ABI (native/include/pycoll/p2p.h)."""

import os

ALGORITHMS = {"auto": 0, "ring": 1, "halving_doubling": 2, "mesh": 3, "recursive_doubling": 4}
ACCURACIES = {"fast": 0, "compensated": 1}
ACCURACY_ALIASES = {"kahan": "compensated"}


def algorithm_name(algorithm, default="auto") -> str:
    """Validate an algorithm name; "auto" means `default` (the communicator's PYCOLL_ALGORITHM, read once)."""
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a string, got {type(algorithm).__name__}")
    if algorithm == "auto":
        algorithm = default
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    return algorithm


def default_algorithm() -> str:
    """What algorithm="auto" means: PYCOLL_ALGORITHM when set, else "auto" (the cost model's choice)."""
    value = os.environ.get("PYCOLL_ALGORITHM") or "auto"
    if value not in ALGORITHMS:
        raise ValueError(f"PYCOLL_ALGORITHM: unknown algorithm {value!r}; choose one of {', '.join(ALGORITHMS)}")
    return value


def accuracy_name(accuracy) -> str:
    if not isinstance(accuracy, str):
        raise TypeError(f"accuracy must be a string, got {type(accuracy).__name__}")
    accuracy = ACCURACY_ALIASES.get(accuracy, accuracy)
    if accuracy not in ACCURACIES:
        raise ValueError(f"accuracy: unknown mode {accuracy!r}; choose 'fast' or 'compensated' (alias 'kahan')")
    return accuracy
