"""Rows out: an nccl-tests style table, JSON (a list of rows) and CSV, and the pycoll/peer ratio table."""

from __future__ import annotations

import csv
import json

# The keys of ../shared/API.md ("Command line"), then the extras a row carries.
JSON_KEYS = ("bytes", "count", "dtype", "op", "algorithm", "accuracy", "backend", "world", "time_us", "algbw",
             "busbw", "wrong", "max_rel_err")
EXTRA_KEYS = ("collective", "picked", "time_min_us", "time_median_us")

_COLUMNS = (  # header, key, width, format
    ("size(B)", "bytes", 12, "d"), ("count", "count", 11, "d"), ("type", "dtype", 8, "s"),
    ("redop", "op", 5, "s"), ("algorithm", "algorithm", 18, "s"), ("picked", "picked", 18, "s"),
    ("accuracy", "accuracy", 11, "s"), ("time(us)", "time_us", 10, ".1f"), ("algbw(GB/s)", "algbw", 11, ".3f"),
    ("busbw(GB/s)", "busbw", 11, ".3f"), ("#wrong", "wrong", 6, "d"), ("max_rel_err", "max_rel_err", 11, ".2e"),
)


def table(rows) -> str:
    """One line per row, grouped under a comment line per (collective, backend, world), nccl-tests style;
    `picked` is the algorithm that ran (what "auto" chose); a footer sums up #wrong and the mean busbw."""
    lines, group = [], None
    header = "  ".join(f"{h:>{w}}" for h, _, w, _ in _COLUMNS)
    for row in rows:
        key = (row.get("collective", "all_reduce"), row["backend"], row["world"])
        if key != group:
            group = key
            ranks = f"{key[2]} rank{'' if key[2] == 1 else 's'}"
            lines.append(f"# {key[0]}  backend {key[1]}  {ranks}  (time: slowest rank's median; "
                         f"busbw = algbw x bus factor)")
            lines.append("#" + header[1:])
        lines.append("  ".join(f"{row.get(k) or '-':>{w}}" if k == "picked" else f"{row[k]:>{w}{fmt}}"
                               for _, k, w, fmt in _COLUMNS))
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
    """Per (world, dtype, op, size): pycoll's fastest time, each peer's time, and peer/pycoll (> 1: pycoll
    is faster)."""
    peers = sorted({r["backend"] for r in peer_rows})
    best = {}
    for r in rows:
        key = (r["world"], r["dtype"], r["op"], r["bytes"])
        if key not in best or r["time_us"] < best[key]["time_us"]:
            best[key] = r
    peer_time = {(r["backend"], r["world"], r["dtype"], r["op"], r["bytes"]): r["time_us"] for r in peer_rows}
    head = f"{'ranks':>6}  {'type':>8}  {'redop':>5}  {'size(B)':>12}  {'pycoll(us)':>10}  {'picked':>18}" + \
        "".join(f"  {p + '(us)':>12}  {p + '/pycoll':>12}" for p in peers)
    lines = ["# time ratio peer/pycoll (> 1: pycoll is faster); pycoll = its fastest algorithm at the size, "
             "picked = the algorithm that ran",
             "#" + head[1:]]
    for key, r in sorted(best.items()):
        world, dtype, op, nbytes = key
        picked = r.get("picked") or r["algorithm"]
        line = f"{world:>6}  {dtype:>8}  {op:>5}  {nbytes:>12d}  {r['time_us']:>10.1f}  {picked:>18}"
        for p in peers:
            t = peer_time.get((p, *key))
            line += f"  {t:>12.1f}  {t / r['time_us']:>12.2f}" if t else f"  {'-':>12}  {'-':>12}"
        lines.append(line)
    return "\n".join(lines)
