"""busbw and latency against size, one line per (backend, algorithm, world, dtype, op, accuracy, form)."""

from __future__ import annotations

import importlib.util

from pycoll.tools.bench import report


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _label(row, varies):
    parts = [row["backend"], row["algorithm"]]
    parts += [f"{row[k]}{suffix}" for k, suffix in (("world", " ranks"), ("dtype", ""), ("op", ""),
                                                     ("accuracy", "")) if k in varies]
    if "in_place" in varies:  # out-of-place and in-place rows of one size: a line each
        parts.append(report.form_name(row.get("in_place")))
    return " ".join(parts)


def title(rows) -> str:
    """What the plot measured: the collective(s), world size(s), dtype(s) and backends."""
    worlds = report.distinct(r["world"] for r in rows)
    dtypes = report.distinct(r["dtype"] for r in rows if r["dtype"] != "-")  # "-": a barrier's, which has none
    return (f"{report.distinct(r.get('collective', 'all_reduce') for r in rows)}: {worlds} "
            f"rank{'' if worlds == '1' else 's'}{', ' + dtypes if dtypes else ''}; "
            f"backend {report.distinct(report.measured(r) for r in rows)}")


def require_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'pycoll-collectives[plot]' "
                              "(or pip install matplotlib)")


def plot(rows, path) -> None:
    """Write a PNG with two panels: busbw (GB/s) and time (us), both against size (B), log scales (the size's
    linear where every row is 0 bytes)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    varies = {k for k in ("world", "dtype", "op", "accuracy", "in_place") if len({r.get(k) for r in rows}) > 1}
    lines = {}
    for r in rows:
        lines.setdefault(_label(r, varies), []).append(r)
    fig, (bw_ax, t_ax) = plt.subplots(1, 2, figsize=(13, 5))
    for label, pts in lines.items():
        pts = sorted(pts, key=lambda r: r["bytes"])
        x = [r["bytes"] for r in pts]
        bw_ax.plot(x, [r["busbw"] for r in pts], marker="o", markersize=3, label=label)
        t_ax.plot(x, [r["time_us"] for r in pts], marker="o", markersize=3, label=label)
    sized = any(r["bytes"] > 0 for r in rows)  # a barrier's rows are all 0 bytes: no log scale of those
    for ax, ylabel in ((bw_ax, "busbw (GB/s)"), (t_ax, "time (us)")):
        if sized:
            ax.set_xscale("log", base=2)
        ax.set_xlabel("size (B)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    t_ax.set_yscale("log")
    bw_ax.legend(fontsize=7)
    fig.suptitle(title(rows))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
