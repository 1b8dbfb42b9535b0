"""Two installed builds of pycoll side by side, and the flight recorder on and off: 2-rank blocking all-reduce
latency over shm and tcp, each configuration a `pycoll bench` job of its own, the configurations interleaved
(their order reversed every other repetition), the median over repetitions of each job's time.

    python bench/builds_side_by_side.py --before OLD/bin/python --after NEW/bin/python [--runs 9]

`--before` and `--after` are the Python interpreters of two environments with pycoll installed (not editable):
for instance the last release and a checkout. Prints a Markdown table.
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile


def bench(python, backend, env, iters):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        subprocess.run([python, "-P", "-m", "pycoll", "bench", "-n", "2", "--backend", backend, "-b", "4", "-e",
                        "16384", "-f", "64", "--iters", str(iters), "--warmup", str(iters // 10), "--json", out],
                       check=True, capture_output=True, text=True, cwd=d, env=dict(os.environ, **env), timeout=600)
        with open(out) as f:
            return {row["bytes"]: row["time_us"] for row in json.load(f)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="python of the environment with the old build")
    parser.add_argument("--after", required=True, help="python of the environment with the new build")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--iters", type=int, default=20000)
    parser.add_argument("--backends", default="shm,tcp")
    args = parser.parse_args()
    configs = [("before", args.before, {}), ("after", args.after, {}),
               ("after, recorder off", args.after, {"PYCOLL_TRACE_BUFFER": "0"})]
    times = {}
    for run in range(args.runs):
        for backend in args.backends.split(","):
            for name, python, env in configs if run % 2 == 0 else configs[::-1]:
                for size, us in bench(python, backend, env, args.iters).items():
                    times.setdefault((backend, size), {}).setdefault(name, []).append(us)
    names = [c[0] for c in configs]
    print("| backend | bytes | " + " | ".join(f"{n} (us)" for n in names) + " | after / before | recorder on / off |")
    print("|---|---:|" + "---:|" * (len(names) + 2))
    for (backend, size), by in sorted(times.items()):
        med = [statistics.median(by[n]) for n in names]
        print(f"| {backend} | {size} | " + " | ".join(f"{m:.2f}" for m in med) +
              f" | {med[1] / med[0]:.2f} | {med[1] / med[2]:.2f} |")


if __name__ == "__main__":
    main()
