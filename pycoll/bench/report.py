"""Rows out: an nccl-tests style table, JSON (a list of rows) and CSV, and the pycoll/peer ratio table."""

from __future__ import annotations

import csv
import json

# The keys of ../shared/API.md ("Command line"), then the extras a row carries.
JSON_KEYS = ("bytes", "count", "dtype", "op", "algorithm", "accuracy", "backend", "world", "time_us", "algbw",
             "busbw", "wrong", "max_rel_err")
EXTRA_KEYS = ("collective", "ran", "time_min_us", "time_median_us")

_COLUMNS = (  # header, key, width, format
    ("size(B)", "bytes", 12, "d"), ("count", "count", 11, "d"), ("type", "dtype", 8, "s"),
    ("redop", "op", 5, "s"), ("algorithm", "algorithm", 24, "s"), ("accuracy", "accuracy", 11, "s"),
    ("time(us)", "time_us", 10, ".1f"), ("algbw(GB/s)", "algbw", 11, ".3f"), ("busbw(GB/s)", "busbw", 11, ".3f"),
    ("#wrong", "wrong", 6, "d"), ("max_rel_err", "max_rel_err", 11, ".2e"),
)


def _algorithm_label(row) -> str:
    ran = row.get("ran")
    return f"{row['algorithm']}:{ran}" if row["algorithm"] == "auto" and ran and ran != "auto" else row["algorithm"]


def table(rows) -> str:
    """One line per row, grouped under a comment line per (collective, backend, world)."""
    lines, group = [], None
    header = "  ".join(f"{h:>{w}}" for h, _, w, _ in _COLUMNS)
    for row in rows:
        key = (row.get("collective", "all_reduce"), row["backend"], row["world"])
        if key != group:
            group = key
            lines.append(f"# {key[0]}  backend {key[1]}  {key[2]} ranks  (time: slowest rank's median; "
                         f"busbw = algbw x bus factor)")
            lines.append("#" + header[1:])
        cells = []
        for _, k, w, fmt in _COLUMNS:
            value = _algorithm_label(row) if k == "algorithm" else row[k]
            cells.append(f"{value:>{w}{fmt}}")
        lines.append("  ".join(cells))
    return "\n".join(lines)


def to_json(rows, path) -> None:
    with open(path, "w") as f:
        json.dump([{k: row[k] for k in JSON_KEYS + EXTRA_KEYS if k in row} for row in rows], f, indent=1)


def to_csv(rows, path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(JSON_KEYS + EXTRA_KEYS), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def ratio_table(rows, peer_rows) -> str:
    """Per (world, dtype, op, size): pycoll's fastest time, each peer's time, and peer/pycoll (> 1: pycoll
    is faster)."""
    peers = sorted({r["backend"] for r in peer_rows})
    best = {}
    for r in rows:
        key = (r["world"], r["dtype"], r["op"], r["bytes"])
        if key not in best or r["time_us"] < best[key]["time_us"]:
            best[key] = r
    peer_time = {(r["backend"], r["world"], r["dtype"], r["op"], r["bytes"]): r["time_us"] for r in peer_rows}
    head = f"{'ranks':>6}  {'type':>8}  {'redop':>5}  {'size(B)':>12}  {'pycoll(us)':>10}  {'algorithm':>24}" + \
        "".join(f"  {p + '(us)':>12}  {p + '/pycoll':>12}" for p in peers)
    lines = ["# time ratio peer/pycoll (> 1: pycoll is faster); pycoll = its fastest algorithm at the size",
             "#" + head[1:]]
    for key, r in sorted(best.items()):
        world, dtype, op, nbytes = key
        line = f"{world:>6}  {dtype:>8}  {op:>5}  {nbytes:>12d}  {r['time_us']:>10.1f}  {_algorithm_label(r):>24}"
        for p in peers:
            t = peer_time.get((p, *key))
            line += f"  {t:>12.1f}  {t / r['time_us']:>12.2f}" if t else f"  {'-':>12}  {'-':>12}"
        lines.append(line)
    return "\n".join(lines)
