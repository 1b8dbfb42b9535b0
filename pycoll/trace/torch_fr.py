"""pycoll's records in the dump format of torch's flight recorder (torch 2.13, format version "2.10": a pickled
dict with version, pg_config, pg_status and entries; torch/csrc/distributed/c10d/FlightRecorderDetail.hpp), one
file per process named `<prefix><global rank>` as TORCH_FR_DUMP_TEMP_FILE names them, so that
`python -m torch.distributed.flight_recorder.fr_trace DIR` analyses a pycoll job.

Only collectives are written: torch matches point-to-point entries by a numbering of its own that pycoll's
records do not carry, and a guessed one would make fr_trace pair unrelated calls. `pycoll trace` shows them."""

from __future__ import annotations

import collections
import dataclasses
import os
import pickle

import pycoll
from pycoll.trace.analysis import POINT_TO_POINT

VERSION = "2.10"
FILE_PREFIX = "torch_fr_rank_"
# fr_trace accepts entries only from the backends it knows by name ("<backend>:<collective>"): a host
# communicator's calls are named as gloo's (torch's CPU backend), a vendor library's by that library.
_BACKEND_NAME = {"nccl": "nccl", "hccl": "hccl"}
_HOST_NAME = "gloo"
# numpy-style dtype names -> c10::toString's, which fr_trace compares across ranks.
_DTYPES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int8": "Char",
           "uint8": "Byte", "int16": "Short", "int32": "Int", "int64": "Long", "bool": "Bool", "uint16": "UInt16",
           "uint32": "UInt32", "uint64": "UInt64", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}
# (input, output) elements from the record's count (one rank's block; all-to-all's: the block per peer) and
# the group size, per collective.
_SIZES = {"all_gather": lambda n, w: (n, n * w), "gather": lambda n, w: (n, n * w),
          "reduce_scatter": lambda n, w: (n * w, n), "scatter": lambda n, w: (n * w, n),
          "all_to_all": lambda n, w: (n * w, n * w)}
# No sizes: the barrier moves nothing; the _v ones' count is a fingerprint of every rank's count.
_UNSIZED = ("barrier", "all_gather_v", "reduce_scatter_v")


@dataclasses.dataclass
class Group:
    """One process group (communicator) of a process, as torch describes it."""

    name: str
    desc: str
    ranks: list  # its members' global ranks
    calls: list  # pycoll's records (trace_records() / a dump's "calls"), oldest first


def group_of(dump) -> Group:
    """The group a pycoll dump (pycoll.trace.dumps.Dump) describes."""
    d = dump.data
    return Group(d["comm_name"] or d["comm_uid"], d["comm_name"] or "undefined",
                 list(d["parent_ranks"] or range(d["world"])), d["calls"])


def _sizes(call, world):
    name, n = call["collective"], call["count"] or 0
    if name in _UNSIZED:
        return [], []
    given, taken = _SIZES.get(name, lambda n, w: (n, n))(n, world)
    return [[given]], [[taken]]


def _entry(call, pg_id, group):
    inputs, outputs = _sizes(call, len(group.ranks))
    dtypes = [] if call["collective"] == "barrier" else [_DTYPES.get(call["dtype"], call["dtype"])]
    done = call["state"] == "completed"
    entry = {"pg_id": pg_id, "process_group": (group.name, group.desc), "collective_seq_id": call["seq"],
             "p2p_seq_id": 0, "op_id": call["seq"], "is_p2p": False,
             "profiling_name": f"{_BACKEND_NAME.get(call['transport'], _HOST_NAME)}:{call['collective']}",
             "time_created_ns": call["start_unix_ns"], "input_sizes": inputs, "input_dtypes": dtypes,
             "output_sizes": outputs, "output_dtypes": dtypes,
             # a failed collective never completed: torch leaves such an entry "started", as a timed-out one
             "state": "completed" if done else "started", "time_discovered_started_ns": call["start_unix_ns"],
             "time_discovered_completed_ns": call["end_unix_ns"] if done else None, "retired": done,
             "timeout_ms": 0, "frames": [], "thread_name": "", "thread_id": "0"}
    if done:
        entry["duration_ms"] = (call["end_unix_ns"] - call["start_unix_ns"]) / 1e6
    return entry


def fr_dump(groups) -> dict:
    """torch's dump dict for one process's groups."""
    kept = [[c for c in g.calls if c["collective"] not in POINT_TO_POINT] for g in groups]
    tagged = sorted((c["start_unix_ns"], pg_id, c["seq"], c) for pg_id, calls in enumerate(kept) for c in calls)
    # fr_trace aligns ranks by record id, counting every call since the start: the calls each ring dropped
    # (its first recorded seq) come before the first one here.
    first = sum(min((c["seq"] for c in calls), default=0) for calls in kept)
    entries = []
    for i, (_, pg_id, _, call) in enumerate(tagged):
        entry = _entry(call, pg_id, groups[pg_id])
        entry["record_id"] = first + i
        entries.append(entry)
    status = {}
    for pg_id, g in enumerate(groups):
        seqs = collections.defaultdict(lambda: -1)
        for c in g.calls:
            seqs["last_enqueued_collective"] = max(seqs["last_enqueued_collective"], c["seq"])
            seqs["last_started_collective"] = max(seqs["last_started_collective"], c["seq"])
            if c["state"] == "completed":
                seqs["last_completed_collective"] = max(seqs["last_completed_collective"], c["seq"])
        status[str(pg_id)] = {k: seqs[k] for k in ("last_enqueued_collective", "last_started_collective",
                                                   "last_completed_collective")}
    return {"version": VERSION, "comm_lib_version": pycoll.__version__,
            "pg_config": {g.name: {"name": g.name, "desc": g.desc, "ranks": "[" + ", ".join(map(str, g.ranks)) + "]"}
                          for g in groups},
            "pg_status": status, "entries": entries}


def write(directory, global_rank, groups) -> str:
    """Write this process's groups as torch's dump of `global_rank` into `directory`; returns the path. The
    temporary file's name ends in a letter: fr_trace infers the file prefix from every name ending in digits."""
    path = os.path.join(directory, f"{FILE_PREFIX}{global_rank}")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(fr_dump(groups), f)
    os.replace(tmp, path)
    return path


def convert(comms, directory) -> list[str]:
    """Write torch's dumps of every process whose pycoll dumps `comms` (pycoll.trace.dumps.read_dir) holds."""
    by_process = collections.defaultdict(list)
    for dumps in comms.values():
        for dump in dumps:
            by_process[dump.data["host"], dump.data["pid"]].append(dump)
    paths = []
    for dumps in by_process.values():
        world = max(dumps, key=lambda d: d.data["world"])  # the process's rank in its largest communicator
        paths.append(write(directory, world.global_rank, [group_of(d) for d in dumps]))
    return sorted(paths)
