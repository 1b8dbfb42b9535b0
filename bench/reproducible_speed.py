"""Time of accuracy="reproducible" against "fast" and "compensated" all-reduce, 1 KiB to 64 MiB, over real
ranks (the launcher's default backend: shared memory on one host; --backend tcp for TCP loopback).

    python bench/reproducible_speed.py                   # 2 and 4 ranks; writes bench/results/reproducible.md
    python bench/reproducible_speed.py -n 2 --sizes-kib 1024 --iters 3 --out /tmp/repro.md

The three modes run side by side in one job, alternating call by call on the same data, so they share whatever
the machine is doing; each time is the median over iterations of rank 0's wall time from a barrier to the end
of its all-reduce. Target: reproducible <= 2x fast from 1 MiB up.
"""

import json
import os
import sys
import time

from compensated_speed import job_parser, machine, median_times, rank_rows, run_job

MODES = ("fast", "compensated", "reproducible")
DTYPES = ("float32", "float64")
TARGET = 2.0
WHERE_THE_TIME_GOES = (
    "Where the time goes: on this data (gaussian, no infinity or NaN) reproducible runs its exact mode: one "
    "12-byte internal all_reduce max of each rank's summary (a vectorised pass over the data), then, over shared "
    "memory, the transport's coded all-reduce, which encodes each piece on its way into shared memory and sums "
    "each element once there. float32's span fits 53 bits with the ranks' headroom, so its elements travel as "
    "they are and sum exactly in double: fast's bytes, plus the summary pass and a widening sum. float64's span "
    "needs two exact doubles per element: twice fast's bytes, which is the floor of its ratio wherever copying "
    "dominates. Data with an infinity or NaN, or spanning more than two limbs, runs the general mode (a "
    "per-element exponent pass, then 2-3 limbs of 46 bits).")


def rank_main(plan):
    def rows_of(comm, kib, dtype, x):
        ms = {mode: s * 1e3 for mode, s in median_times(comm, x, MODES, plan["algorithm"], plan).items()}
        return [{"world": comm.size, "kib": kib, "dtype": dtype, "ms": ms, "ratio": ms["reproducible"] / ms["fast"]}]

    rank_rows(plan, {kib: kib << 10 for kib in plan["sizes_kib"]}, rows_of)


def size_name(kib):
    return f"{kib >> 10} MiB" if kib >= 1024 else f"{kib} KiB"


def main(argv=None):
    parser = job_parser(__doc__, iters=5, warmup=1, out="bench/results/reproducible.md")
    parser.add_argument("--sizes-kib", type=int, nargs="*", default=[1, 64, 1024, 4096, 16384, 65536])
    parser.add_argument("--backend", default="shm")
    parser.add_argument("--algorithm", default="auto")
    args = parser.parse_args(argv)
    if args.rank:
        return rank_main(json.loads(args.rank))

    plan = {"sizes_kib": args.sizes_kib, "dtypes": list(DTYPES), "algorithm": args.algorithm,
            "iters": args.iters, "warmup": args.warmup}
    load = os.getloadavg()[0]
    start = time.monotonic()
    os.environ["PYCOLL_BACKEND"] = args.backend
    rows = [row for world in args.n for row in run_job(__file__, world, plan, timeout=1800)]
    command = "python bench/reproducible_speed.py " + " ".join(argv if argv is not None else sys.argv[1:])
    over = [r for r in rows if r["kib"] >= 1024 and r["ratio"] > TARGET]
    lines = [
        "# Reproducible vs fast and compensated all-reduce time\n",
        f"Machine: {machine()}. Backend {args.backend}, algorithm {args.algorithm}, one process per rank. "
        f"Took {time.monotonic() - start:.0f} s; 1-minute load average {load:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end.\n",
        f"Command: `{command.strip()}`\n",
        f"Median of {args.iters} calls per mode after {args.warmup} warm-up calls, the modes alternating on the "
        f"same data. ratio = reproducible / fast; target <= {TARGET} from 1 MiB up. Rows over target: "
        f"{len(over)} of {len([r for r in rows if r['kib'] >= 1024])}.\n",
        WHERE_THE_TIME_GOES + "\n",
        "| ranks | size | dtype | fast ms | compensated ms | reproducible ms | ratio |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        ms = r["ms"]
        lines.append(f"| {r['world']} | {size_name(r['kib'])} | {r['dtype']} | {ms['fast']:.3f} | "
                     f"{ms['compensated']:.3f} | {ms['reproducible']:.3f} | {r['ratio']:.2f} |")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
