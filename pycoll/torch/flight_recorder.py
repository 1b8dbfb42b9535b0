"""The torch backend's flight-recorder dumps: every pycoll group of this process written as torch's dump of this
rank (pycoll/trace/torch_fr.py), beside pycoll's own dumps in PYCOLL_TRACE_DIR, so that
`python -m torch.distributed.flight_recorder.fr_trace $PYCOLL_TRACE_DIR` analyses the job.

Written on request (`pycoll.torch.dump_trace()`), and with PYCOLL_TRACE_DIR set, when a group's collective first
fails: that rank writes its own and raises a flag in the group's store, which a watcher thread of every other
rank's group polls (as torch's watchdogs tell each other to dump), so that a rank hung outside pycoll -- stuck
in its own code, never reaching the collective the others wait in -- dumps too, from that thread. pycoll's own
dumps on a signal reach torch's format through `pycoll trace DIR --torch-fr OUT`."""

from __future__ import annotations

import threading
import warnings
import weakref

import torch.distributed as dist

from pycoll import settings
from pycoll.errors import CommunicatorClosed
from pycoll.trace import torch_fr

# The store key a failing rank sets, and how often the other ranks look for it (a check() round trip each).
DUMP_KEY = "pycoll-trace-dump"
POLL_S = 0.5

_groups = weakref.WeakSet()  # every live PycollProcessGroup of this process
_lock = threading.Lock()  # one dump at a time: two groups failing together write one file each in turn


def register(group) -> None:
    """Count `group` among this process's; with PYCOLL_TRACE_DIR set, watch its store for a peer's dump flag
    until stop_watching(group)."""
    _groups.add(group)
    group._trace_watch = threading.Event()
    if settings.get("PYCOLL_TRACE_DIR") and group._store is not None:
        threading.Thread(target=_watch, args=(weakref.ref(group), group._store, group._trace_watch),
                         name="pycoll-torch-trace-watch", daemon=True).start()


def stop_watching(group) -> None:
    group._trace_watch.set()


def _watch(ref, store, stop):
    while not stop.wait(POLL_S):
        try:
            raised = store.check([DUMP_KEY])
        except Exception:  # noqa: BLE001 -- the store is gone (the job is ending): nothing left to watch
            return
        group = ref()
        if group is None:
            return
        if raised:
            _dump_quietly(pycoll_too=True)
            return


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


def dump_trace(directory=None, *, pycoll_too=True) -> str:
    """Write pycoll's dumps of every pycoll group of this process (`pycoll_too`), and torch's flight-recorder
    dump of this rank, into `directory` (None: PYCOLL_TRACE_DIR; ValueError when that is unset too); returns
    torch's file."""
    directory = directory or settings.get("PYCOLL_TRACE_DIR")
    if not directory:
        raise ValueError("dump_trace: no directory: pass one or set PYCOLL_TRACE_DIR")
    with _lock:
        groups, described = [], []
        for g in list(_groups):
            try:
                if pycoll_too:
                    g.comm.dump_trace(directory)
                records = g.comm.trace_records()
            except CommunicatorClosed:
                continue  # shut down: nothing of it is left to record
            groups.append(g)
            described.append(torch_fr.Group(g.getGroupName() or str(len(described)), g.getGroupDesc() or "undefined",
                                            _global_ranks(g), records))
        return torch_fr.write(directory, _this_rank(groups), described)


def _dump_quietly(pycoll_too):
    try:
        dump_trace(pycoll_too=pycoll_too)
    except Exception as exc:  # noqa: BLE001 -- a dump that fails must not hide the error being reported
        warnings.warn(f"pycoll.torch: the flight-recorder dump into PYCOLL_TRACE_DIR failed: {exc}", stacklevel=3)


def dump_on_error(group) -> None:
    """`group`'s collective failed: with PYCOLL_TRACE_DIR set, write torch's dump (pycoll's own the library
    wrote at the error) and tell the group's other ranks to dump. Never raises: the collective's own error is
    what the caller must see."""
    if not settings.get("PYCOLL_TRACE_DIR"):
        return
    stop_watching(group)
    _dump_quietly(pycoll_too=False)
    try:
        group._store.set(DUMP_KEY, str(group.rank()))
    except Exception:  # noqa: BLE001 -- no store (or it is gone): the others dump on their own errors
        pass
