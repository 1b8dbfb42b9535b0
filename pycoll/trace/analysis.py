"""What the merged dumps say: per communicator, who entered each collective last (straggler), who never entered
the collective the others are in (hang), where ranks called different things at one sequence number (mismatch),
which calls failed; per rank, where its time went (compute between calls, in collectives, waiting on a peer).

Collectives are matched across ranks by their sequence number on the communicator. Point-to-point calls have no
such number in common, so they count in the time breakdown only."""

from __future__ import annotations

import collections
import dataclasses

POINT_TO_POINT = ("send", "recv")
# What every rank must agree on at one sequence number; the _v collectives' counts are each rank's own.
_SIGNATURE = ("collective", "dtype", "count", "op", "root")
_OWN_COUNT = ("all_gather_v", "reduce_scatter_v")


@dataclasses.dataclass
class Straggler:
    seq: int
    collective: str
    rank: int  # the rank that entered last
    lag_ns: int  # by how much after the first rank
    start_ns: int  # when it entered


@dataclasses.dataclass
class Hang:
    seq: int
    collective: str
    rank: int  # the rank that never entered seq
    entered: list  # the ranks that did
    last_seq: int | None  # the rank's last recorded collective, None where it recorded none
    last_end_ns: int | None  # when that call ended (None: it never did)
    since_ns: int  # when the first of the others entered seq
    dumped: bool = True  # False: the rank left no dump (what it last did is unknown)


@dataclasses.dataclass
class Mismatch:
    seq: int
    sides: dict  # (collective, dtype, count, op, root) -> [ranks]
    starts: dict  # rank -> when it entered


@dataclasses.dataclass
class Failure:
    seq: int
    collective: str
    rank: int
    error: str | None
    start_ns: int


@dataclasses.dataclass
class CommReport:
    uid: str
    name: str
    world: int
    ranks: list  # the ranks that dumped
    missing: list  # the ranks that did not
    stragglers: list
    hangs: list
    mismatches: list
    failures: list

    @property
    def findings(self) -> int:
        """Problems found: hangs, mismatches, calls that failed (on one rank or more) and missing dumps (a
        straggler is not one: some rank is always last)."""
        failed_calls = {f.seq for f in self.failures}
        return len(self.hangs) + len(self.mismatches) + len(failed_calls) + len(self.missing)


@dataclasses.dataclass
class RankTime:
    rank: int  # in the world (parent_ranks), else in its communicator
    calls: int
    span_ns: int  # from its first recorded call's start to its last's end (or its dump, for one still running)
    in_collectives_ns: int  # the union of its calls' intervals
    waiting_ns: int
    waiting_on: dict  # peer -> ns waited on it

    @property
    def gap_ns(self) -> int:
        """Outside every call: computing (or anything else the program did between calls)."""
        return self.span_ns - self.in_collectives_ns


def call_end(call, dump):
    """When `call` ended; for one still running, when its rank dumped (the last moment it is known running)."""
    return call["end_unix_ns"] if call["end_unix_ns"] is not None else dump.data["dumped_unix_ns"]


def _signature(call):
    sig = tuple(call[k] for k in _SIGNATURE)
    return sig[:2] + (None,) + sig[3:] if call["collective"] in _OWN_COUNT else sig


def analyze_comm(uid, dumps) -> CommReport:
    """Merge one communicator's dumps (one per rank that dumped) into its findings."""
    first = dumps[0].data
    world = first["world"]
    by_rank = {d.rank: {c["seq"]: c for c in d.calls if c["collective"] not in POINT_TO_POINT} for d in dumps}
    ranks = sorted(by_rank)
    # A rank's ring drops its oldest calls: only the sequence numbers every rank still holds can be compared.
    firsts = [min(calls) for calls in by_rank.values() if calls]
    start = max(firsts) if firsts else 0
    by_seq: dict[int, dict[int, dict]] = collections.defaultdict(dict)
    for rank, calls in by_rank.items():
        for seq, call in calls.items():
            if seq >= start:
                by_seq[seq][rank] = call
    report = CommReport(uid, first.get("comm_name") or "", world, ranks, sorted(set(range(world)) - set(ranks)),
                        [], [], [], [])
    for seq in sorted(by_seq):
        entered = by_seq[seq]
        sides = collections.defaultdict(list)
        for rank, call in entered.items():
            sides[_signature(call)].append(rank)
            if call["state"] == "failed":
                report.failures.append(Failure(seq, call["collective"], rank, call["error"], call["start_unix_ns"]))
        if len(sides) > 1:
            starts = {r: c["start_unix_ns"] for r, c in entered.items()}
            report.mismatches.append(Mismatch(seq, dict(sides), starts))
        if len(entered) == len(ranks) and len(entered) > 1:
            starts = sorted((c["start_unix_ns"], r) for r, c in entered.items())
            last_ns, last = starts[-1]
            report.stragglers.append(Straggler(seq, entered[last]["collective"], last, last_ns - starts[0][0],
                                               last_ns))
    report.hangs = _hangs(by_rank, by_seq, start) + _silent(report.missing, by_seq)
    return report


def _hangs(by_rank, by_seq, start):
    """The ranks that stopped before a collective the others entered and have not finished: their first such
    collective each."""
    hangs = []
    for rank, calls in by_rank.items():
        last = max((s for s in calls if s >= start), default=None)
        later = [s for s in by_seq if last is None or s > last]
        if not later:
            continue
        seq = min(later)
        others = by_seq[seq]
        if all(c["state"] == "completed" for c in others.values()):
            continue  # they finished it without this rank: its dump was written before then, not a hang
        hangs.append(Hang(seq, next(iter(others.values()))["collective"], rank, sorted(others), last,
                          calls[last]["end_unix_ns"] if last is not None else None,
                          min(c["start_unix_ns"] for c in others.values())))
    return sorted(hangs, key=lambda h: (h.seq, h.rank))


def _silent(missing, by_seq):
    """The ranks without a dump, where the others are stuck: each never entered the first collective some
    dumped rank has not finished (a dead rank never did; a hung one, blocked before it, could not dump)."""
    stuck = [seq for seq, entered in by_seq.items() if any(c["state"] != "completed" for c in entered.values())]
    if not stuck or not missing:
        return []
    seq = min(stuck)
    others = by_seq[seq]
    return [Hang(seq, next(iter(others.values()))["collective"], rank, sorted(others), None, None,
                 min(c["start_unix_ns"] for c in others.values()), dumped=False) for rank in missing]


def rank_times(comms) -> list[RankTime]:
    """Per rank of the world (communicators of one process merged by the rank in their parent), where its time
    went between its first recorded call and its last."""
    spans = collections.defaultdict(list)
    waits = collections.defaultdict(collections.Counter)
    counts = collections.Counter()
    for dumps in comms.values():
        for dump in dumps:
            rank = dump.global_rank
            parents = dump.data["parent_ranks"]
            for call in dump.calls:
                spans[rank].append((call["start_unix_ns"], call_end(call, dump)))
                counts[rank] += 1
                if call["wait_ns"] and call["wait_peer"] is not None:
                    peer = parents[call["wait_peer"]] if parents else call["wait_peer"]
                    waits[rank][peer] += call["wait_ns"]
                elif call["wait_ns"]:
                    waits[rank][None] += call["wait_ns"]
    times = []
    for rank in sorted(spans):
        intervals = sorted(spans[rank])
        busy, cur_start, cur_end = 0, intervals[0][0], intervals[0][1]
        for s, e in intervals[1:]:
            if s > cur_end:
                busy += cur_end - cur_start
                cur_start, cur_end = s, e
            else:
                cur_end = max(cur_end, e)
        busy += cur_end - cur_start
        span = max(e for _, e in intervals) - intervals[0][0]
        times.append(RankTime(rank, counts[rank], span, busy, sum(waits[rank].values()), dict(waits[rank])))
    return times


def analyze(comms) -> list[CommReport]:
    """Every communicator's report, the world's (the largest) first."""
    return [analyze_comm(uid, dumps) for uid, dumps in sorted(comms.items(), key=lambda kv: -kv[1][0].data["world"])]
