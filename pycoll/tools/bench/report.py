"""Rows out: an nccl-tests style table, JSON (a list of rows) and CSV, and the pycoll/peer ratio table."""

from __future__ import annotations

import csv
import json

# The keys docs/api.md ("Command line") lists, then the extras a row carries.
JSON_KEYS = ("bytes", "count", "dtype", "op", "algorithm", "accuracy", "backend", "world", "time_us", "algbw",
             "busbw", "wrong", "max_rel_err")
EXTRA_KEYS = ("collective", "transport", "picked", "time_min_us", "time_median_us", "time_p50_us", "time_p99_us",
              "in_place")

_CASE_COLUMNS = (  # header, key, width, format: what a line is about, once per line
    ("size(B)", "bytes", 12, "d"), ("count", "count", 11, "d"), ("type", "dtype", 8, "s"),
    ("redop", "op", 5, "s"), ("algorithm", "algorithm", 18, "s"), ("picked", "picked", 18, "s"),
    ("accuracy", "accuracy", 11, "s"),
)
_FORM_COLUMNS = (  # what was measured, once per form (out-of-place, in-place), side by side as nccl-tests does
    ("time(us)", "time_us", 10, ".1f"), ("p50(us)", "time_p50_us", 10, ".1f"), ("p99(us)", "time_p99_us", 10, ".1f"),
    ("algbw(GB/s)", "algbw", 11, ".3f"), ("busbw(GB/s)", "busbw", 11, ".3f"), ("#wrong", "wrong", 6, "d"),
    ("max_rel_err", "max_rel_err", 11, ".2e"),
)
_FORM_NAMES = {False: "out-of-place", True: "in-place"}


def form_name(in_place) -> str:
    """A row's form, by its in_place: out-of-place, in-place, or "" for the barrier's (None), which has none."""
    return _FORM_NAMES.get(in_place, "")


def measured(row) -> str:
    """What a row measured, for headers and legends: the backend, and the transport under it where that is
    something else (pycoll's host backends: "cpu over shm"; a peer's rows have none)."""
    transport = row.get("transport")
    return row["backend"] if not transport or transport == row["backend"] else f"{row['backend']} over {transport}"


def _groups(rows):
    """Runs of consecutive rows of one (collective, backend, transport, world, dtype)."""
    groups, key = [], None
    for row in rows:
        k = (row.get("collective", "all_reduce"), row["backend"], row.get("transport"), row["world"], row["dtype"])
        if k != key:
            key = k
            groups.append([])
        groups[-1].append(row)
    return groups


def distinct(values) -> str:
    """The values, each once, in first-seen order, comma-separated."""
    return ", ".join(dict.fromkeys(map(str, values)))


def _cells(columns, row) -> list[str]:
    # "-": a form not run for the line's case, a picked unknown, or a key a row (a peer's, an older file's) lacks
    row = row or {}
    return [f"{row[k]:>{w}{fmt}}" if row.get(k) is not None and (row[k] or k != "picked") else f"{'-':>{w}}"
            for _, k, w, fmt in columns]


def _lines(group):
    """The group's rows paired by case, nccl-tests style: (the forms in the group, out of place first; per
    case, its row of each form or None)."""
    forms = sorted({r.get("in_place") for r in group}, key=lambda f: (f is None, bool(f)))
    cases = {}
    for row in group:
        key = (row["bytes"], row["count"], row["op"], row["algorithm"], row["accuracy"])
        cases.setdefault(key, {})[row.get("in_place")] = row
    return forms, [[by_form.get(f) for f in forms] for by_form in cases.values()]


def table(rows) -> str:
    """One line per case, under a comment line per (collective, backend, transport, world, dtype) that says what
    was measured (with the algorithms asked for), nccl-tests style: the case's columns, then one group of
    measured columns per form it was run in (out-of-place, then in-place, each labelled above its group);
    `picked` is the algorithm that ran (what "auto" chose); a footer sums up #wrong and the mean busbw."""
    lines = []
    case_header = "  ".join(f"{h:>{w}}" for h, _, w, _ in _CASE_COLUMNS)
    form_header = "".join(f"  {h:>{w}}" for h, _, w, _ in _FORM_COLUMNS)
    for group in _groups(rows):
        first = group[0]
        ranks = f"{first['world']} rank{'' if first['world'] == 1 else 's'}"
        dtype = "" if first["dtype"] == "-" else f"{first['dtype']}  "  # "-": a barrier's, which has none
        lines.append(f"# {first.get('collective', 'all_reduce')}  backend {measured(first)}  {ranks}  "
                     f"{dtype}algorithm {distinct(r['algorithm'] for r in group)}  "
                     f"(time: slowest rank's median; p50/p99: of the slowest rank per iteration; "
                     f"busbw = algbw x bus factor)")
        forms, cases = _lines(group)
        if forms != [None]:
            lines.append("#" + " " * (len(case_header) - 1) +
                         "".join(f"  {form_name(f):<{len(form_header) - 2}}" for f in forms).rstrip())
        lines.append("#" + (case_header + form_header * len(forms))[1:])
        for by_form in cases:
            first = next(r for r in by_form if r is not None)
            picked = dict(first, picked=distinct(r.get("picked") or "-" for r in by_form if r is not None))
            lines.append("  ".join(_cells(_CASE_COLUMNS, picked) +
                                   [c for r in by_form for c in _cells(_FORM_COLUMNS, r)]))
    if rows:
        wrong = sum(r["wrong"] for r in rows)
        lines.append(f"# #wrong: {wrong} {'OK' if wrong == 0 else 'FAILED'}  "
                     f"avg busbw: {sum(r['busbw'] for r in rows) / len(rows):.3f} GB/s over {len(rows)} rows")
    return "\n".join(lines)


def to_json(rows, path) -> None:
    with open(path, "w") as f:
        json.dump([{k: row[k] for k in JSON_KEYS + EXTRA_KEYS if k in row} for row in rows], f, indent=1)


def to_csv(rows, path, fields=JSON_KEYS + EXTRA_KEYS) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(fields), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def ratio_table(rows, peer_rows) -> str:
    """Per form (out-of-place, in-place), one table comparing like with like: per (world, dtype, op, size),
    pycoll's fastest time, the backend and algorithm that made it, each peer's time, and peer/pycoll (> 1:
    pycoll is faster)."""
    forms = sorted({r.get("in_place") for r in rows}, key=lambda f: (f is None, bool(f)))
    return "\n".join(_ratio_table([r for r in rows if r.get("in_place") == f],
                                   [r for r in peer_rows if r.get("in_place") == f], form_name(f))
                      for f in forms)


def _ratio_table(rows, peer_rows, form) -> str:
    peers = sorted({r["backend"] for r in peer_rows})
    best = {}
    for r in rows:
        key = (r["world"], r["dtype"], r["op"], r["bytes"])
        if key not in best or r["time_us"] < best[key]["time_us"]:
            best[key] = r
    peer_time = {(r["backend"], r["world"], r["dtype"], r["op"], r["bytes"]): r["time_us"] for r in peer_rows}
    head = f"{'ranks':>6}  {'type':>8}  {'redop':>5}  {'size(B)':>12}  {'pycoll(us)':>10}  {'backend':>14}  " \
           f"{'picked':>18}" + "".join(f"  {p + '(us)':>12}  {p + '/pycoll':>12}" for p in peers)
    backends = distinct(measured(r) for r in rows)
    lines = [f"# time ratio peer/pycoll (> 1: pycoll is faster){', ' + form if form else ''}; pycoll = the "
             f"fastest of its rows at the size (backend {backends}): backend = the pycoll backend that made it, "
             f"picked = the algorithm that ran",
             "#" + head[1:]]
    for key, r in sorted(best.items()):
        world, dtype, op, nbytes = key
        picked = r.get("picked") or r["algorithm"]
        line = (f"{world:>6}  {dtype:>8}  {op:>5}  {nbytes:>12d}  {r['time_us']:>10.1f}  {measured(r):>14}  "
                f"{picked:>18}")
        for p in peers:
            t = peer_time.get((p, *key))
            line += f"  {t:>12.1f}  {t / r['time_us']:>12.2f}" if t else f"  {'-':>12}  {'-':>12}"
        lines.append(line)
    return "\n".join(lines)
