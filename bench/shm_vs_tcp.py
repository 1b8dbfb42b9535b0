"""Produce bench/results/shm.md: pycoll's all-reduce (auto) over shared memory and over TCP, beside Open MPI
with its default transports (shared memory) and over TCP only, measured side by side in one run; each
command repeated and the median of the runs reported; plus this machine's memcpy bandwidth.

    python bench/shm_vs_tcp.py [--worlds 2,4] [--runs 3] [-b 4] [-e 64M] [-f 4] [--out bench/results/shm.md]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from allreduce_peers import _fmt_size, machine, sweep_arguments  # noqa: E402  -- one copy of the machine description

COLUMNS = (("shm", "pycoll shm"), ("tcp", "pycoll tcp"), ("mpi", "Open MPI (default: shm)"),
           ("mpi-tcp", "Open MPI (TCP)"))


def run_once(world, args, json_path):
    cmd = [sys.executable, "-m", "pycoll", "bench", "-n", str(world), "--backend", "shm,tcp", "-b", args.b, "-e",
           args.e, "-f", str(args.f), "-d", "float32", "-o", "sum", "--out-of-place", "--compare",
           "mpi,mpi-tcp", "--json",
           str(json_path)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONSAFEPATH="1"))
    print(proc.stdout, flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"pycoll bench exited with {proc.returncode}")
    return json.loads(Path(json_path).read_text()), "python -m pycoll " + " ".join(cmd[3:-2])


def memcpy_gbps(nbytes=64 << 20, repeats=20):
    src, dst = np.ones(nbytes, dtype=np.uint8), np.empty(nbytes, dtype=np.uint8)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t)
    return nbytes / statistics.median(times) / 1e9


def table(runs, world):
    """Median over runs of each (size, backend) row's time; busbw from that median."""
    cells = {}
    for rows in runs:
        for r in rows:
            if r["world"] == world:
                cells.setdefault((r["bytes"], r["backend"]), []).append(r)
    lines = [f"### {world} ranks: time (us, median of {len(runs)} runs of the slowest rank's median) / busbw (GB/s)",
             "", "| size | " + " | ".join(label for _, label in COLUMNS)
             + " | tcp / shm | Open MPI (shm) / pycoll shm | shm: auto ran |",
             "|---:|" + "---:|" * (len(COLUMNS) + 2) + "---|"]
    for nbytes in sorted({b for b, _ in cells}):
        med = {k: statistics.median(r["time_us"] for r in cells[(nbytes, k)]) for k, _ in COLUMNS
               if (nbytes, k) in cells}
        row = [_fmt_size(nbytes)]
        for key, _ in COLUMNS:
            t = med.get(key)
            row.append(f"{t:.1f} / {nbytes / t / 1e3 * 2 * (world - 1) / world:.3f}" if t else "-")
        shm = med.get("shm")
        row += [f"{med['tcp'] / shm:.2f}" if shm and "tcp" in med else "-",
                f"{med['mpi'] / shm:.2f}" if shm and "mpi" in med else "-",
                ", ".join(sorted({r.get("picked") or "-" for r in cells.get((nbytes, "shm"), [])}))]
        lines.append("| " + " | ".join(row) + " |")
    wrong = sum(r["wrong"] for rows in runs for r in rows if r["world"] == world)
    return "\n".join(lines + ["", f"#wrong over every row of every run: {wrong}."])


def main():
    args = sweep_arguments(__doc__, "shm.md", runs=True).parse_args()
    start, load = time.monotonic(), os.getloadavg()
    worlds = [int(w) for w in args.worlds.split(",")]
    runs, commands = {w: [] for w in worlds}, []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for world in worlds:
                rows, command = run_once(world, args, Path(tmp) / f"w{world}-{i}.json")
                runs[world].append(rows)
                if i == 0:
                    commands.append(command)
    gbps = memcpy_gbps()
    elapsed = time.monotonic() - start
    doc = ["# All-reduce on one host: shared memory vs TCP, pycoll and Open MPI", "",
           f"Produced by `python bench/shm_vs_tcp.py --worlds {args.worlds} --runs {args.runs} -b {args.b} "
           f"-e {args.e} -f {args.f}` in {elapsed:.0f} s; each of these ran {args.runs} times, alternating:", "",
           *[f"    {c}" for c in commands], "", machine(),
           f"- Load: 1/5/15-minute load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it started "
           f"(other sessions' builds and tests share the 2 cores), {os.getloadavg()[0]:.1f} at the end.",
           f"- memcpy bandwidth (numpy copy of 64 MiB, median of 20): {gbps:.2f} GB/s.", "",
           "Method: pycoll bench's (float32 sum, auto, out of place; iterations each after a barrier; a rank's "
           "median; the slowest rank's), then the median of the runs. busbw = size / time x 2(n-1)/n. Open MPI "
           "(default) is mpirun without transport settings (its shared-memory btl on one host); Open MPI (TCP) "
           "is `--mca pml ob1 --mca btl tcp,self`. Ranks share 2 cores, so 4 ranks are oversubscribed.", ""]
    for world in worlds:
        doc += [table(runs[world], world), ""]
    Path(args.out).write_text("\n".join(doc))
    print(f"wrote {args.out} ({elapsed:.0f} s)")


if __name__ == "__main__":
    main()
