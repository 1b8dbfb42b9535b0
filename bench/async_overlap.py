"""Overlap of a non-blocking all-reduce with work that leaves the CPU free (time.sleep, as a GPU kernel would):
one 32 MiB float32 all-reduce and a wait of the same length, serial (blocking all_reduce, then the wait)
against overlapped (all_reduce(async_op=True), the wait, Work.wait()), side by side in every repetition.

    pycoll run -n 2 bench/async_overlap.py [--mib 32] [--repeats 15]

Rank 0 prints a Markdown table of medians: the all-reduce alone, the wait alone (time.sleep overshoots on a
busy machine), serial, overlapped, their ratio, the best ratio possible (max(all-reduce, wait) / serial), and
how long issuing the async call took.
"""

import statistics
import time

import numpy as np
from rank_timing import job_line, repeats_parser, timed

import pycoll


def main():
    parser = repeats_parser(__doc__)
    parser.add_argument("--mib", type=int, default=32)
    args = parser.parse_args()
    with pycoll.init() as comm:
        x = np.ones(args.mib << 18, np.float32)
        for _ in range(3):
            comm.all_reduce(x)
        # The wait lasts as long as the all-reduce alone (rank 0's median, so every rank waits alike).
        calibration = np.array([statistics.median(timed(lambda: comm.all_reduce(x)) for _ in range(5))])
        comm.broadcast(calibration, root=0)
        wait_s = float(calibration[0])
        alone, slept, serial, overlapped, issue = [], [], [], [], []

        def blocking():
            comm.all_reduce(x)
            time.sleep(wait_s)

        def overlapping():
            start = time.perf_counter()
            work = comm.all_reduce(x, async_op=True)
            issue.append(time.perf_counter() - start)
            time.sleep(wait_s)
            work.wait()

        for _ in range(args.repeats):
            comm.barrier()
            alone.append(timed(lambda: comm.all_reduce(x)))
            slept.append(timed(lambda: time.sleep(wait_s)))
            comm.barrier()
            serial.append(timed(blocking))
            comm.barrier()
            overlapped.append(timed(overlapping))
        if comm.rank == 0:
            med = {k: statistics.median(v) * 1e3 for k, v in
                   (("alone", alone), ("slept", slept), ("serial", serial), ("overlapped", overlapped))}
            print(f"{job_line(comm)}, {args.mib} MiB float32 sum, wait {wait_s * 1e3:.1f} ms, median of {args.repeats}")
            print("| all_reduce alone (ms) | wait alone (ms) | serial: all_reduce + wait (ms) | "
                  "overlapped: async + wait (ms) | overlapped / serial | best possible | issuing async_op=True (us) |")
            print("|---:|---:|---:|---:|---:|---:|---:|")
            print(f"| {med['alone']:.1f} | {med['slept']:.1f} | {med['serial']:.1f} | {med['overlapped']:.1f} | "
                  f"{med['overlapped'] / med['serial']:.2f} | {max(med['alone'], med['slept']) / med['serial']:.2f} | "
                  f"{statistics.median(issue) * 1e6:.1f} |")


if __name__ == "__main__":
    main()
