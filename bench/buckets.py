"""Gradient fusion: 120 arrays of mixed small shapes all-reduced (avg) once per step, four ways side by side in
every repetition: one blocking all_reduce per array, one async all_reduce per array (then wait_all),
pycoll.GradientBuckets (ready() per array in reverse order, then wait()) and pycoll.reduce_tree (the functional
form JAX uses: a list of arrays in, a new list out). Integer-valued data, so every way must give bitwise
identical results (checked every step).

    pycoll run -n 4 bench/buckets.py [--repeats 15] [--bucket-mib 25]

Rank 0 prints a Markdown table of median step times and the ratios to per-array all-reduces.
"""

import statistics

import numpy as np
from rank_timing import job_line, repeats_parser, timed

import pycoll

SHAPES = [(64,), (256, 4), (17,), (32, 32), (1,), (512,), (8, 8, 8), (1000,), (3, 3), (128, 16)] * 12  # 120


def main():
    parser = repeats_parser(__doc__)
    parser.add_argument("--bucket-mib", type=float, default=25)
    args = parser.parse_args()
    with pycoll.init() as comm:
        data = [(np.arange(int(np.prod(s))).reshape(s) % 13 + comm.rank).astype(np.float32) for s in SHAPES]
        per_array = [d.copy() for d in data]
        async_arrays = [d.copy() for d in data]
        bucketed = [d.copy() for d in data]
        buckets = pycoll.GradientBuckets(comm, bucketed, bucket_bytes=int(args.bucket_mib * (1 << 20)))

        def blocking_step():
            for a, d in zip(per_array, data):
                a[...] = d
            for a in reversed(per_array):
                comm.all_reduce(a, "avg")

        def async_step():
            for a, d in zip(async_arrays, data):
                a[...] = d
            pycoll.wait_all([comm.all_reduce(a, "avg", async_op=True) for a in reversed(async_arrays)])

        def bucket_step():
            for a, d in zip(bucketed, data):
                a[...] = d
            for i in reversed(range(len(bucketed))):
                buckets.ready(i)
            buckets.wait()

        tree_out = []

        def tree_step():
            tree_out[:] = pycoll.reduce_tree(comm, data, "avg", bucket_bytes=int(args.bucket_mib * (1 << 20)))

        steps = {"per-array all_reduce": blocking_step, "per-array async_op=True": async_step,
                 "GradientBuckets": bucket_step, "reduce_tree": tree_step}
        times = {name: [] for name in steps}
        for repeat in range(args.repeats + 2):
            for name, step in steps.items():
                comm.barrier()
                elapsed = timed(step)
                if repeat >= 2:  # the first two are warm-up
                    times[name].append(elapsed)
            for a, b, c, d in zip(per_array, async_arrays, bucketed, tree_out):
                assert np.array_equal(a, b) and np.array_equal(a, c) and np.array_equal(a, d), "results differ"
        if comm.rank == 0:
            base = statistics.median(times["per-array all_reduce"])
            nbytes = sum(d.nbytes for d in data)
            print(f"{job_line(comm)}, {len(data)} float32 arrays, {nbytes / 1024:.0f} KiB in all, "
                  f"{buckets.bucket_count} bucket(s), median of {args.repeats} steps; results identical in every step")
            print("| method | step (ms) | / per-array all_reduce |")
            print("|---|---:|---:|")
            for name, samples in times.items():
                med = statistics.median(samples)
                print(f"| {name} | {med * 1e3:.2f} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
