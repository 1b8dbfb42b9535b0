"""A PNG timeline of the merged dumps: one row per rank and communicator, a bar per call coloured by collective
(hatched where it failed or was still running at the dump), and markers where a rank hung, where ranks
disagreed and at the worst stragglers."""

from __future__ import annotations

from pycoll.tools.bench.plot import require_matplotlib
from pycoll.trace import perfetto
from pycoll.trace.analysis import call_end

_MARKS = {"hang": ("X", "red"), "mismatch": ("D", "darkorange"), "straggler": ("v", "black")}


def _rows(comms, reports):
    """(label, comm uid, rank in it, dump or None) per row, by rank in the world, a rank's communicators
    together."""
    rows = []
    for i, report in enumerate(reports):
        dumps = comms[report.uid]
        parents = dumps[0].data["parent_ranks"]
        rows += [(d.global_rank, i, d.rank, d) for d in dumps]
        rows += [(parents[r] if parents else r, i, r, None) for r in report.missing]  # no dump: marks only
    rows.sort(key=lambda r: r[:2])
    return [(f"rank {g}" + ("" if d else " (no dump)")
             + (f" · {(reports[i].name or reports[i].uid)[:12]}" if len(reports) > 1 else ""), reports[i].uid, r, d)
            for g, i, r, d in rows]


def plot(path, comms, reports, title=None) -> None:
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    origin = perfetto.origin_ns(comms)
    rows = _rows(comms, reports)
    names = sorted({c["collective"] for *_, d in rows if d for c in d.calls})
    colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(13, 1.2 + 0.45 * len(rows)))
    y_of = {}
    for y, (_, uid, rank, dump) in enumerate(rows):
        y_of[uid, rank] = y
        bars = {}
        for c in dump.calls if dump else ():
            start = c["start_unix_ns"]
            key = (c["collective"], c["state"] != "completed")
            bars.setdefault(key, []).append(((start - origin) / 1e6, max(call_end(c, dump) - start, 0) / 1e6))
        for (name, unfinished), spans in bars.items():
            ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colours[name], edgecolor="red" if unfinished else "none",
                           hatch="//" if unfinished else None, linewidth=0.8 if unfinished else 0)
    _mark(ax, reports, y_of, origin)
    for name in names:
        ax.bar(0, 0, color=colours[name], label=name)  # a legend entry per collective
    ax.set_yticks(range(len(rows)), [row[0] for row in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time since the first recorded call (ms)")
    ax.set_title(title or "pycoll trace")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mark(ax, reports, y_of, origin):
    points = {k: ([], []) for k in _MARKS}

    def add(kind, uid, rank, ns):
        points[kind][0].append((ns - origin) / 1e6)
        points[kind][1].append(y_of[uid, rank])

    for report in reports:
        for h in report.hangs:
            add("hang", report.uid, h.rank, h.since_ns)
        for m in report.mismatches:
            for rank, ns in m.starts.items():
                add("mismatch", report.uid, rank, ns)
        for s in sorted(report.stragglers, key=lambda s: -s.lag_ns)[:perfetto.STRAGGLER_MARKS]:
            add("straggler", report.uid, s.rank, s.start_ns)
    for kind, (xs, ys) in points.items():
        if xs:
            marker, colour = _MARKS[kind]
            ax.scatter(xs, ys, marker=marker, color=colour, s=60, zorder=3, label=kind)
