"""All-reduce through ray.util.collective: pycoll's backend ("PYCOLL") vs Ray's own "GLOO" (torch.distributed's
gloo; needs torch), and pycoll's communicator called directly from the same actors (the Ray layer's cost).

    python bench/ray_collective.py [--ranks 2] [--sizes 4,16777216] [--json]

Starts a local Ray cluster (2 CPUs), puts `--ranks` actors in one group per backend, and times each all-reduce
of float32 in every actor (perf_counter around the call, after a barrier and warm-up); an iteration's time is
the slowest rank's; the backends take turns (--rounds). Prints the median (and p10/p90) per backend and size,
and the mean cost of a call in a back-to-back loop of as many calls (the slowest rank's; median of the rounds).
Results: bench/results/ray.md.
"""

import argparse
import json
import platform
import statistics
import time

import numpy as np
import ray


@ray.remote(num_cpus=0)
class Bench:
    def __init__(self, rank, world):
        import pycoll.ray

        self.rank, self.world = rank, world
        self.pycoll_group = pycoll.ray.init_collective_group(world, rank, group_name="bench-pycoll", timeout=120)
        self.gloo = None

    def join_gloo(self):
        from ray.util import collective as col

        try:
            col.init_collective_group(self.world, self.rank, backend="GLOO", group_name="bench-gloo",
                                      gloo_timeout=120_000)
            self.gloo = "bench-gloo"
            return None
        except Exception as exc:  # noqa: BLE001 -- reported: Ray's gloo needs torch
            return f"{type(exc).__name__}: {exc}"

    def run(self, how, nbytes, iters, warmup):
        from ray.util import collective as col

        x = np.ones(max(nbytes // 4, 1), dtype=np.float32)
        if how == "pycoll-direct":
            comm = self.pycoll_group.communicator
            call, barrier = (lambda: comm.all_reduce(x)), comm.barrier
        else:
            group = "bench-pycoll" if how == "ray+pycoll" else self.gloo
            call, barrier = (lambda: col.allreduce(x, group_name=group)), (lambda: col.barrier(group_name=group))
        for _ in range(warmup):
            call()
        barrier()
        start = time.perf_counter()
        for _ in range(iters):  # back to back: the mean cost of a call, the Ray layer's included
            call()
        loop_s = (time.perf_counter() - start) / iters
        barrier()
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        x[:] = 1
        call()
        assert float(x[0]) == self.world, (how, float(x[0]))  # the backend really summed
        return times, loop_s


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sizes", default="4,16777216", help="bytes per all-reduce, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="each backend runs once per round, interleaved")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        actors = [Bench.remote(r, args.ranks) for r in range(args.ranks)]
        errors = [e for e in ray.get([a.join_gloo.remote() for a in actors], timeout=300) if e]
        backends = ["ray+pycoll", "pycoll-direct"] + ([] if errors else ["ray+gloo"])
        rows = []
        for nbytes in sizes:
            iters, warmup = (1000, 100) if nbytes <= 65536 else (20, 3)
            slowest, loops = {how: [] for how in backends}, {how: [] for how in backends}
            for _ in range(args.rounds):  # interleaved, so that a burst of load elsewhere hits every backend
                for how in backends:
                    per_rank = ray.get([a.run.remote(how, nbytes, iters, warmup) for a in actors], timeout=600)
                    slowest[how] += [max(ts) for ts in zip(*[times for times, _ in per_rank])]
                    loops[how].append(max(loop for _, loop in per_rank))
            for how in backends:
                q = statistics.quantiles(slowest[how], n=10)
                rows.append({"backend": how, "bytes": nbytes, "iters": len(slowest[how]),
                             "median_us": statistics.median(slowest[how]) * 1e6, "p10_us": q[0] * 1e6,
                             "p90_us": q[-1] * 1e6,
                             "loop_us": statistics.median(loops[how]) * 1e6})
    finally:
        ray.shutdown()

    import torch  # noqa: F401 -- only for the versions line (Ray's gloo needs it)
    info = {"ray": ray.__version__, "python": platform.python_version(), "torch": torch.__version__,
            "gloo_error": errors[0] if errors else None, "ranks": args.ranks}
    if args.json:
        print(json.dumps({"info": info, "rows": rows}))
        return
    print(f"# {info}")
    print("| backend | bytes | iterations | median (us) | p10 (us) | p90 (us) | back to back (us/call) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['backend']} | {r['bytes']} | {r['iters']} | {r['median_us']:.1f} | {r['p10_us']:.1f} | "
              f"{r['p90_us']:.1f} | {r['loop_us']:.1f} |")
    if errors:
        print(f"Ray's GLOO backend did not start: {errors[0]}")


if __name__ == "__main__":
    main()
