"""The memory kinds a rank of a backend="auto" job may bring, and the backend each kind's island runs."""

from __future__ import annotations

from pycoll import settings

# memory kind -> the backend that runs an island of it. Host memory runs pycoll's own (shared memory on one host).
ISLAND_BACKENDS = {"host": "cpu", "cuda": "nccl", "npu": "hccl"}
KINDS = tuple(ISLAND_BACKENDS)


def memory_kind(device=None):
    """This rank's memory kind: `device` (init's argument) when given, else PYCOLL_DEVICE (default host)."""
    if device is None:
        return settings.get("PYCOLL_DEVICE")
    if not isinstance(device, str):
        raise TypeError(f"device must be a string ({', '.join(KINDS)}), got {type(device).__name__}")
    if device not in ISLAND_BACKENDS:
        raise ValueError(f"device must be one of {', '.join(KINDS)}, got {device!r}")
    return device
