"""How close auto comes to the best algorithm, measured in one run: for each backend and world size, every
algorithm the backend has (auto among them) at every size, float32 sum; then, per size, auto's time against the
fastest algorithm's. Issue #12's target: within 1.15x at every size from 4 B to 64 MiB at 2 and 4 ranks.

    python bench/auto_vs_best.py [--backends shm,tcp] [--worlds 2,4] [--runs 3] [-b 4] [-e 64M] [-f 4]
                                 [--out bench/results/auto_choice.md]

Each run is one `pycoll bench --algorithm all` job per (backend, world); a cell is the median over runs of the
slowest rank's median time. Auto and the algorithm it picked are separate measurements of the same schedule
(cases run algorithm by algorithm, so they are minutes apart), so auto / best above 1 can be the machine's drift;
"pick / best" compares the picked algorithm's own row with the best row -- the decision alone.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from allreduce_peers import _fmt_size, machine, sweep_arguments  # noqa: E402  -- one copy of the machine description

TARGET = 1.15


def run_once(backend, world, args, json_path):
    cmd = [sys.executable, "-m", "pycoll", "bench", "-n", str(world), "--backend", backend, "--algorithm", "all",
           "-b", args.b, "-e", args.e, "-f", str(args.f), "-d", "float32", "-o", "sum", "--out-of-place",
           "--json", str(json_path)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONSAFEPATH="1"))
    if proc.returncode != 0:
        print(proc.stdout)
        raise SystemExit(f"pycoll bench exited with {proc.returncode}")
    return json.loads(Path(json_path).read_text()), "python -m pycoll " + " ".join(cmd[3:-2])


def table(backend, world, runs):
    """Markdown rows for one (backend, world), and the worst auto/best ratio."""
    times, picked = {}, {}
    for rows in runs:
        for r in rows:
            times.setdefault((r["bytes"], r["algorithm"]), []).append(r["time_us"])
            if r["algorithm"] == "auto":
                picked.setdefault(r["bytes"], set()).add(r.get("picked") or "?")
    lines = [f"### backend {backend}, {world} ranks (us, median of {len(runs)} runs)", "",
             "| size | best | best (us) | auto ran | auto (us) | auto / best | auto's pick (us) | pick / best |",
             "|---:|---|---:|---|---:|---:|---:|---:|"]
    worst = worst_pick = 0.0
    for nbytes in sorted({b for b, _ in times}):
        med = {a: statistics.median(t) for (b, a), t in times.items() if b == nbytes}
        auto = med.pop("auto")
        best = min(med, key=med.get)
        ratio = auto / med[best]
        ran = sorted(picked[nbytes])
        # The algorithm auto picked, measured under its own name: the decision alone, without the noise of
        # measuring the same schedule twice.
        pick = med.get(ran[0]) if len(ran) == 1 else None
        pick_ratio = pick / med[best] if pick else float("nan")
        worst, worst_pick = max(worst, ratio), max(worst_pick, pick_ratio if pick else 0.0)
        mark = "" if ratio <= TARGET else " **over**"
        pick_cells = "- | -" if not pick else \
            f"{pick:.1f} | {pick_ratio:.2f}{'' if pick_ratio <= TARGET else ' **over**'}"
        lines.append(f"| {_fmt_size(nbytes)} | {best} | {med[best]:.1f} | {'/'.join(ran)} | {auto:.1f} | "
                     f"{ratio:.2f}{mark} | {pick_cells} |")
    return lines, worst, worst_pick


def main():
    p = sweep_arguments(__doc__, "auto_choice.md", runs=True)
    p.add_argument("--backends", default="shm,tcp")
    args = p.parse_args()
    load_before = os.getloadavg()
    started = time.time()
    sections, summary, commands = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            for world in map(int, args.worlds.split(",")):
                runs = []
                for i in range(args.runs):
                    rows, cmd = run_once(backend, world, args, Path(tmp) / f"{backend}{world}-{i}.json")
                    runs.append(rows)
                commands.append(cmd)
                lines, worst, worst_pick = table(backend, world, runs)
                sections += lines + [""]
                summary.append(f"- {backend}, {world} ranks: worst auto / best {worst:.2f} "
                               f"({'within' if worst <= TARGET else 'over'} {TARGET}x); worst pick / best "
                               f"{worst_pick:.2f}")
                print(summary[-1], flush=True)
    load_after = os.getloadavg()
    text = "\n".join([
        "# auto against the best algorithm, one host", "",
        f"Produced by `python bench/auto_vs_best.py --backends {args.backends} --worlds {args.worlds} "
        f"--runs {args.runs} -b {args.b} -e {args.e} -f {args.f}` in {time.time() - started:.0f} s; each job:", "",
        *[f"    {c}" for c in commands], "",
        machine(), f"- Load average (1/5/15 min): {load_before[0]:.1f} / {load_before[1]:.1f} / "
        f"{load_before[2]:.1f} before, {load_after[0]:.1f} after.", "",
        *summary, "", *sections])
    Path(args.out).write_text(text + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
