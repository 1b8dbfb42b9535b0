"""The merged dumps as a Chrome / Perfetto trace (the Trace Event Format's JSON object form): one process per
rank of the world, one track (thread) per communicator, a complete event ("X") per call with its details as
args, and instant events ("i") where a rank hung, where ranks disagreed and at the worst stragglers. Times are
microseconds since the earliest recorded call, whose wall-clock time is in otherData."""

from __future__ import annotations

import json
import os

from pycoll.trace import report as text
from pycoll.trace.analysis import call_end

# Instant events for the worst stragglers: the rest would bury the timeline in markers.
STRAGGLER_MARKS = 20
_ARGS = ("seq", "dtype", "count", "op", "root", "peer", "algorithm", "transport", "accuracy", "async", "bytes",
         "wait_ns", "wait_peer", "state", "error")


def origin_ns(comms) -> int:
    starts = [d.calls[0]["start_unix_ns"] for dumps in comms.values() for d in dumps if d.calls]
    return min(starts) if starts else 0


def _us(ns, origin):
    return (ns - origin) / 1e3


def events(comms, reports) -> list[dict]:
    origin = origin_ns(comms)
    out = []
    tracks = {uid: i + 1 for i, uid in enumerate(r.uid for r in reports)}
    named = set()
    where = {}  # (uid, rank in the communicator) -> (pid, tid)
    for report in reports:
        uid, tid = report.uid, tracks[report.uid]
        for dump in comms[uid]:
            pid = dump.global_rank
            where[uid, dump.rank] = (pid, tid)
            if pid not in named:
                named.add(pid)
                out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "ts": 0,
                            "args": {"name": f"rank {pid} ({dump.data['host']}, pid {dump.data['pid']})"}})
                out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "ts": 0,
                            "args": {"sort_index": pid}})
            label = f"{report.name or uid} (rank {dump.rank} of {report.world})"
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": {"name": label}})
            for call in dump.calls:
                end = call_end(call, dump)
                out.append({"name": call["collective"], "cat": call["state"], "ph": "X", "pid": pid, "tid": tid,
                            "ts": _us(call["start_unix_ns"], origin),
                            "dur": max(0.0, (end - call["start_unix_ns"]) / 1e3),
                            "args": {k: call[k] for k in _ARGS}})
        parents = comms[uid][0].data["parent_ranks"]
        for rank in report.missing:  # a row of its own, for the marks of a rank that left no dump
            pid = parents[rank] if parents else rank
            where[uid, rank] = (pid, tid)
            if pid not in named:
                named.add(pid)
                out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "ts": 0,
                            "args": {"name": f"rank {pid} (no dump)"}})
    out += _marks(reports, where, origin)
    return out


def _instant(name, pid, tid, ns, origin, args):
    return {"name": name, "cat": "finding", "ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": _us(ns, origin),
            "args": args}


def _marks(reports, where, origin):
    out = []
    for report in reports:
        uid = report.uid
        for h in report.hangs:
            pid, tid = where[uid, h.rank]
            out.append(_instant(f"hang: never entered {h.collective} #{h.seq}", pid, tid, h.since_ns, origin,
                                {"seq": h.seq, "entered": h.entered, "last_seq": h.last_seq}))
        for m in report.mismatches:
            for sig, ranks in m.sides.items():
                for rank in ranks:
                    pid, tid = where[uid, rank]
                    out.append(_instant(f"mismatch at #{m.seq}", pid, tid, m.starts[rank], origin,
                                        {"seq": m.seq, "called": text.describe(sig),
                                         "others": [text.describe(s) for s in m.sides if s != sig]}))
        for s in sorted(report.stragglers, key=lambda s: -s.lag_ns)[:STRAGGLER_MARKS]:
            pid, tid = where[uid, s.rank]
            out.append(_instant(f"straggler: {s.collective} #{s.seq} +{text.duration(s.lag_ns)}", pid, tid,
                                s.start_ns, origin, {"seq": s.seq, "lag_ns": s.lag_ns}))
    return out


def write(path, comms, reports) -> None:
    """Write the trace to `path` (a temporary file renamed into place, so a reader never sees half of it)."""
    doc = {"traceEvents": events(comms, reports), "displayTimeUnit": "ms",
           "otherData": {"generator": "pycoll trace", "origin_unix_ns": origin_ns(comms)}}
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)
