"""Reading the flight recorder's dumps: one JSON file per rank per communicator,
``pycoll-trace-<comm_uid>-rank<R>.json`` (the format is described in docs/tracing.md). Every check names the file
it failed on, so a garbled or foreign file is found at once."""

from __future__ import annotations

import dataclasses
import json
import os
import re

from pycoll.errors import PycollError

FORMAT = "pycoll-trace"
VERSION = 1
FILE_PATTERN = re.compile(r"^pycoll-trace-([0-9A-Za-z]+)-rank(\d+)\.json$")
STATES = ("running", "completed", "failed")

# The keys a dump and each of its calls must have, with the types each may take.
_INT = (int,)
_OPT_INT = (int, type(None))
_STR = (str,)
_OPT_STR = (str, type(None))
DUMP_KEYS = {"format": _STR, "version": _INT, "rank": _INT, "world": _INT, "comm_uid": _STR, "comm_name": _OPT_STR,
             "parent_ranks": (list, type(None)), "host": _STR, "pid": _INT, "reason": _STR,
             "dumped_unix_ns": _INT, "capacity": _INT, "dropped": _INT, "calls": (list,)}
CALL_KEYS = {"seq": _INT, "collective": _STR, "dtype": _OPT_STR, "count": _OPT_INT, "op": _OPT_STR,
             "root": _OPT_INT, "peer": _OPT_INT, "algorithm": _OPT_STR, "transport": _OPT_STR,
             "accuracy": _OPT_STR, "async": (bool,), "bytes": _OPT_INT, "start_unix_ns": _INT,
             "end_unix_ns": _OPT_INT, "wait_ns": _INT, "wait_peer": _OPT_INT, "state": _STR, "error": _OPT_STR}


class TraceFormatError(PycollError, ValueError):
    """A trace directory or dump cannot be read; ``path`` names the file (or directory) and the message what is
    wrong with it."""

    def __init__(self, path, problem):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)


@dataclasses.dataclass
class Dump:
    """One rank's dump of one communicator, as read from `path` (the JSON object's keys, calls oldest first)."""

    path: str
    data: dict

    @property
    def rank(self) -> int:
        return self.data["rank"]

    @property
    def calls(self) -> list:
        return self.data["calls"]

    @property
    def global_rank(self) -> int:
        """This rank's rank in the parent (world) communicator, where the dump says; else its own rank."""
        parents = self.data.get("parent_ranks")
        return parents[self.rank] if parents else self.rank


def _check_keys(obj, keys, path, where):
    if not isinstance(obj, dict):
        raise TraceFormatError(path, f"{where} is not a JSON object")
    for key, types in keys.items():
        if key not in obj:
            raise TraceFormatError(path, f"{where} has no {key!r}")
        value = obj[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise TraceFormatError(path, f"{where}: {key!r} is {value!r}, expected "
                                         f"{' or '.join('null' if t is type(None) else t.__name__ for t in types)}")


def validate(data, path) -> None:
    """Raise TraceFormatError naming `path` unless `data` is a dump of this format and version."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TraceFormatError(path, f"not a pycoll trace dump (its \"format\" is not {FORMAT!r})")
    if data.get("version") != VERSION:
        raise TraceFormatError(path, f"dump version {data.get('version')!r}; this pycoll reads version {VERSION}")
    _check_keys(data, DUMP_KEYS, path, "the dump")
    if not 0 <= data["rank"] < data["world"]:
        raise TraceFormatError(path, f"rank {data['rank']} is not in a world of {data['world']}")
    parents = data["parent_ranks"]
    if parents is not None and len(parents) != data["world"]:
        raise TraceFormatError(path, f"parent_ranks has {len(parents)} ranks for a world of {data['world']}")
    for i, call in enumerate(data["calls"]):
        _check_keys(call, CALL_KEYS, path, f"call {i}")
        if call["state"] not in STATES:
            raise TraceFormatError(path, f"call {i}: state {call['state']!r} is not one of {', '.join(STATES)}")


def read_dump(path) -> Dump:
    """The dump in file `path`, checked."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise TraceFormatError(path, f"cannot read it ({e.strerror or e})") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceFormatError(path, f"not valid JSON ({e})") from e
    validate(data, path)
    return Dump(str(path), data)


def read_dir(directory) -> dict[str, list[Dump]]:
    """Every dump in `directory`, by communicator (comm_uid), each list by rank. TraceFormatError when the
    directory is missing, holds no dump, or two files claim the same rank of one communicator."""
    if not os.path.isdir(directory):
        raise TraceFormatError(directory, "no such directory")
    names = sorted(n for n in os.listdir(directory) if FILE_PATTERN.match(n))
    if not names:
        raise TraceFormatError(directory, "holds no pycoll trace dump (pycoll-trace-<comm>-rank<R>.json); set "
                                          "PYCOLL_TRACE_DIR for the job, or call comm.dump_trace()")
    comms: dict[str, dict[int, Dump]] = {}
    for name in names:
        dump = read_dump(os.path.join(directory, name))
        seen = comms.setdefault(dump.data["comm_uid"], {})
        if dump.rank in seen:
            raise TraceFormatError(dump.path, f"rank {dump.rank} of communicator {dump.data['comm_uid']} was "
                                              f"already read from {seen[dump.rank].path}")
        seen[dump.rank] = dump
    return {uid: [ranks[r] for r in sorted(ranks)] for uid, ranks in comms.items()}
