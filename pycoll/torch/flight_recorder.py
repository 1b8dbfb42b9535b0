"""The torch backend's flight-recorder dumps: every pycoll group of this process written as torch's dump of this
rank (pycoll/trace/torch_fr.py), beside pycoll's own dumps in PYCOLL_TRACE_DIR, so that
`python -m torch.distributed.flight_recorder.fr_trace $PYCOLL_TRACE_DIR` analyses the job.

Written on request (`pycoll.torch.dump_trace()`) and when a group's collective first fails. pycoll's own dumps
(on any error, on a signal) are written by the library whatever runs it; `pycoll trace DIR --torch-fr OUT`
turns those into torch's format too, for a rank that never got back to Python (stuck in a wait, or killed)."""

from __future__ import annotations

import threading
import warnings
import weakref

import torch.distributed as dist

from pycoll import settings
from pycoll.errors import CommunicatorClosed
from pycoll.trace import torch_fr

_groups = weakref.WeakSet()  # every live PycollProcessGroup of this process
_lock = threading.Lock()  # one dump at a time: two groups failing together write one file each in turn


def register(group) -> None:
    _groups.add(group)


def _global_ranks(group):
    """The group's members by their rank in the world, as torch registered it; its own ranks where torch does
    not know the group (one made outside init_process_group / new_group)."""
    try:
        return dist.get_process_group_ranks(group)
    except (RuntimeError, ValueError, KeyError):
        return list(range(group.size()))


def _this_rank(groups):
    try:
        return dist.get_rank()
    except (RuntimeError, ValueError):
        return groups[0].rank() if groups else 0


def dump_trace(directory=None) -> str:
    """Write pycoll's dumps of every pycoll group of this process, and torch's flight-recorder dump of this rank,
    into `directory` (None: PYCOLL_TRACE_DIR; ValueError when that is unset too); returns torch's file."""
    directory = directory or settings.get("PYCOLL_TRACE_DIR")
    if not directory:
        raise ValueError("dump_trace: no directory: pass one or set PYCOLL_TRACE_DIR")
    with _lock:
        groups, described = [], []
        for g in list(_groups):
            try:
                g.comm.dump_trace(directory)
                records = g.comm.trace_records()
            except CommunicatorClosed:
                continue  # shut down: nothing of it is left to record
            groups.append(g)
            described.append(torch_fr.Group(g.getGroupName() or str(len(described)), g.getGroupDesc() or "undefined",
                                            _global_ranks(g), records))
        return torch_fr.write(directory, _this_rank(groups), described)


def dump_on_error() -> None:
    """A group's collective failed: dump where PYCOLL_TRACE_DIR asks for it. Never raises: the collective's own
    error is what the caller must see."""
    if not settings.get("PYCOLL_TRACE_DIR"):
        return
    try:
        dump_trace()
    except Exception as exc:  # noqa: BLE001 -- a dump that fails must not hide the error being reported
        warnings.warn(f"pycoll.torch: the flight-recorder dump into PYCOLL_TRACE_DIR failed: {exc}", stacklevel=2)
