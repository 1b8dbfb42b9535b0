"""The flight recorder from Python: each communicator's record of its last calls (PYCOLL_TRACE_BUFFER of them,
kept in C by native/comm/flight_recorder.c), as dicts with the keys of a dump's "calls" (docs/api.md), and the
dump written to a file."""

from __future__ import annotations

import json
import os

from pycoll._bindings import comm as _comm


def _native(engine, what):
    if engine.native is None:
        raise NotImplementedError(f"{what}: backend {getattr(engine, 'name', type(engine).__name__)} has no flight "
                                  "recorder yet (the host-memory backends cpu, shm and tcp have)")
    return engine.native


def records(engine):
    """The engine's recorded calls, oldest first."""
    return json.loads(_comm.trace_json(_native(engine, "trace_records")))["calls"]


def dump(engine, path=None):
    """Write the engine's dump to `path` (a file, or a directory for pycoll-trace-<comm_uid>-rank<R>.json; None:
    that file in PYCOLL_TRACE_DIR) and return the file written."""
    return _comm.dump_trace(_native(engine, "dump_trace"), None if path is None else os.fspath(path))
