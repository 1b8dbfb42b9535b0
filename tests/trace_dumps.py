"""Synthetic flight-recorder dumps in the recorder's format, for the tests of pycoll trace and its outputs."""

import json
import os

T0 = 1_700_000_000_000_000_000  # ns since the epoch
STEP = 1_000_000  # ns between collectives
LATE = 300_000  # ns by which the straggler enters late


def call(seq, start, end, *, collective="all_reduce", count=1024, dtype="float32", state=None, wait_ns=0,
         wait_peer=None, error=None):
    return {"seq": seq, "collective": collective, "dtype": dtype, "count": count, "op": "sum", "root": None,
            "peer": None, "algorithm": "ring", "transport": "shm", "accuracy": "fast", "async": False,
            "bytes": count * 8, "start_unix_ns": start, "end_unix_ns": end, "wait_ns": wait_ns,
            "wait_peer": wait_peer, "state": state or ("completed" if end is not None else "running"),
            "error": error}


def dump(rank, world, calls, *, uid="c0ffee", name="world", reason="error", dumped=None, parent_ranks=None):
    return {"format": "pycoll-trace", "version": 1, "rank": rank, "world": world, "comm_uid": uid,
            "comm_name": name, "parent_ranks": parent_ranks, "host": "host0", "pid": 1000 + rank, "reason": reason,
            "dumped_unix_ns": dumped if dumped is not None else T0 + (len(calls) + 100) * STEP,
            "capacity": 2048, "dropped": 0, "calls": calls}


def job(world=4, n=60, *, hang_rank=None, hang_before=None, straggler=None, mismatch=None, uid="c0ffee"):
    """Every rank's dump of `n` all-reduces: `straggler` enters each late; `hang_rank` stops before seq
    `hang_before`, which the others are still running; `mismatch=(rank, seq)` passes another count there."""
    dumps = []
    for r in range(world):
        calls = []
        for s in range(n):
            if r == hang_rank and s >= hang_before:
                break
            start = T0 + s * STEP + (LATE if r == straggler else 10_000 * r)
            hung = hang_rank is not None and s == hang_before
            end = None if hung else T0 + s * STEP + LATE + 50_000
            wait = 0 if r == straggler else LATE - 10_000 * r
            count = 7 if (r, s) == mismatch else 1024
            calls.append(call(s, start, end, count=count, wait_ns=wait,
                              wait_peer=straggler if straggler is not None and r != straggler else None))
            if hung:
                break
        dumps.append(dump(r, world, calls, uid=uid))
    return dumps


def write(directory, dumps):
    os.makedirs(directory, exist_ok=True)
    for d in dumps:
        path = os.path.join(directory, f"pycoll-trace-{d['comm_uid']}-rank{d['rank']}.json")
        with open(path, "w") as f:
            json.dump(d, f)
    return directory


_PHASES = {"X", "i", "M"}


def check_trace_event_schema(doc):
    """The Trace Event Format's JSON object form, as Perfetto and chrome://tracing read it: the keys each event
    phase requires, with their types."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns")
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in _PHASES, e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        assert isinstance(e.get("args", {}), dict), e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        elif e["ph"] == "i":
            assert e["s"] in ("g", "p", "t"), e
        else:
            assert e["name"] in ("process_name", "thread_name", "process_sort_index"), e
            assert set(e["args"]) <= {"name", "sort_index"}, e
    json.dumps(doc, allow_nan=False)  # no NaN or infinity, which the viewers reject
