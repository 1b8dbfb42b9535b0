"""The text `pycoll trace` prints: per communicator its hangs, mismatches, failed calls and worst stragglers, then
per rank where its time went."""

from __future__ import annotations

import collections

# The stragglers listed one by one (the worst); the rest are summed per rank.
WORST = 5
# Findings of one kind listed before "... and N more".
LISTED = 10


def duration(ns) -> str:
    """`ns` in the unit that reads best: ns, us, ms or s."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns} ns"


def _listed(lines, items, describe):
    for item in items[:LISTED]:
        lines.append("  " + describe(item))
    if len(items) > LISTED:
        lines.append(f"  ... and {len(items) - LISTED} more")


def _call(seq, collective):
    return f"{collective} #{seq}"


def comm_text(report) -> list[str]:
    name = f" ({report.name})" if report.name else ""
    lines = [f"communicator {report.uid}{name}: {report.world} ranks, dumps from {len(report.ranks)}"]
    if report.missing:
        lines.append(f"  NO DUMP from rank(s) {', '.join(map(str, report.missing))}: dead, or never dumped")
    _listed(lines, report.hangs, lambda h: (
        f"HANG: rank {h.rank} never entered {_call(h.seq, h.collective)}, which rank(s) "
        f"{', '.join(map(str, h.entered))} entered; its last call was "
        + ("unknown (no dump from it)" if not h.dumped else "none recorded" if h.last_seq is None else f"#{h.last_seq}"
           + (" (still running)" if h.last_end_ns is None else ""))))
    _listed(lines, report.mismatches, lambda m: "MISMATCH at #{}: {}".format(m.seq, "; ".join(
        f"rank(s) {', '.join(map(str, ranks))} called {describe(sig)}" for sig, ranks in m.sides.items())))
    failed = collections.defaultdict(list)  # one line per call, however many ranks it failed on
    for f in report.failures:
        failed[f.seq, f.collective].append(f)
    _listed(lines, list(failed.values()), lambda fs: (
        f"FAILED: {_call(fs[0].seq, fs[0].collective)} on rank(s) {', '.join(str(f.rank) for f in fs)}: "
        f"{min(fs, key=lambda f: f.rank).error}"))
    if report.stragglers:
        lines.append(f"  stragglers ({len(report.stragglers)} collectives every rank entered):")
        last = collections.Counter(s.rank for s in report.stragglers)
        held = collections.Counter()
        for s in report.stragglers:
            held[s.rank] += s.lag_ns
        for rank, n in last.most_common():
            lines.append(f"    rank {rank} entered last {n} time(s), {duration(held[rank])} after the first in all")
        for s in sorted(report.stragglers, key=lambda s: -s.lag_ns)[:WORST]:
            lines.append(f"    {_call(s.seq, s.collective)}: rank {s.rank} last, {duration(s.lag_ns)} after "
                         f"the first")
    return lines


def describe(sig):
    collective, dtype, count, op, root = sig
    parts = [collective] + [f"{k}={v}" for k, v in (("dtype", dtype), ("count", count), ("op", op),
                                                    ("root", root)) if v is not None]
    return " ".join(parts)


def rank_text(times) -> list[str]:
    lines = ["time per rank (between its first recorded call and its last):",
             f"  {'rank':>4}  {'calls':>7}  {'span':>10}  {'compute':>16}  {'in calls':>16}  {'waiting':>16}  "
             f"mostly on"]
    for t in times:
        def share(ns, span=t.span_ns):
            return f"{duration(ns)} {100 * ns / span:3.0f}%" if span else duration(ns)
        peers = [p for p in sorted(t.waiting_on, key=lambda p: -t.waiting_on[p]) if p is not None]
        lines.append(f"  {t.rank:>4}  {t.calls:>7}  {duration(t.span_ns):>10}  {share(t.gap_ns):>16}  "
                     f"{share(t.in_collectives_ns):>16}  {share(t.waiting_ns):>16}  "
                     f"{'rank ' + str(peers[0]) if peers else '-'}")
    return lines


def text(reports, times) -> str:
    lines = []
    for report in reports:
        lines += comm_text(report) + [""]
    lines += rank_text(times)
    found = sum(r.findings for r in reports)
    lines.append("")
    lines.append(f"{found} finding(s)" if found else "no hang, mismatch, failed call or missing dump")
    return "\n".join(lines)
