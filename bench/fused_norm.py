"""Produce bench/results/fused_norm.md: the fused all_reduce_layernorm beside all_reduce followed by the
residual add and a NumPy LayerNorm, and beside all_reduce alone, at (rows x hidden) float32 and bfloat16, on 2
and 4 ranks of the default backend. Every repetition runs the three one after the other (interleaved); each
time is the slowest rank's (the max over ranks of its own time, each call started after a barrier), and the
table gives the medians.

    python bench/fused_norm.py [--worlds 2,4] [--rows 4096] [--hidden 4096] [--reps 7] [--out FILE]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from allreduce_peers import machine  # noqa: E402  -- one copy of the machine description

VARIANTS = ("fused", "unfused", "all_reduce")


def numpy_layernorm(v, weight, bias, eps):
    """LayerNorm in NumPy the way a framework-free program writes it: float32 math, 16-bit types widened."""
    w = v.astype(np.float32, copy=False)
    mean = w.mean(axis=1, keepdims=True)
    centred = w - mean
    var = (centred * centred).mean(axis=1, keepdims=True)
    return (centred / np.sqrt(var + eps) * weight.astype(np.float32) + bias.astype(np.float32)).astype(v.dtype)


def rank_main(args):
    import pycoll

    comm = pycoll.init(timeout=600)
    results = {}
    for dtype_name in args.dtypes.split(","):
        if dtype_name == "bfloat16":
            import ml_dtypes
            dtype = np.dtype(ml_dtypes.bfloat16)
        else:
            dtype = np.dtype(dtype_name)
        rng = np.random.default_rng(comm.rank)
        x = rng.standard_normal((args.rows, args.hidden), dtype=np.float32).astype(dtype)
        shared = np.random.default_rng(0)
        residual = shared.standard_normal((args.rows, args.hidden), dtype=np.float32).astype(dtype)
        weight = (1 + 0.1 * shared.standard_normal(args.hidden)).astype(dtype)
        bias = (0.1 * shared.standard_normal(args.hidden)).astype(dtype)
        out, reduced = np.empty_like(x), np.empty_like(x)

        def fused():
            comm.all_reduce_layernorm(x, weight, bias, residual=residual, out=out)

        def unfused():
            comm.all_reduce(x, out=reduced)
            numpy_layernorm(reduced + residual, weight, bias, 1e-5)

        def all_reduce():
            comm.all_reduce(x, out=reduced)
            ran["all_reduce"] = comm.last_algorithm

        ran = {}

        calls = {"fused": fused, "unfused": unfused, "all_reduce": all_reduce}
        times = {v: [] for v in VARIANTS}
        for rep in range(args.warmup + args.reps):
            for variant in VARIANTS:
                comm.barrier()
                t0 = time.perf_counter()
                calls[variant]()
                elapsed = np.array([time.perf_counter() - t0])
                comm.all_reduce(elapsed, op="max")  # the slowest rank's time
                if rep >= args.warmup:
                    times[variant].append(float(elapsed[0]))
        results[dtype_name] = {v: statistics.median(t) for v, t in times.items()}
        results[dtype_name]["algorithm"] = ran["all_reduce"]
    if comm.rank == 0:
        print("RESULT " + json.dumps(results), flush=True)
    comm.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", default="2,4")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "fused_norm.md"))
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        return rank_main(args)
    load = os.getloadavg()
    rows = []
    for world in (int(w) for w in args.worlds.split(",")):
        cmd = [sys.executable, "-m", "pycoll", "run", "-n", str(world), __file__, "--rank", "--rows",
               str(args.rows), "--hidden", str(args.hidden), "--dtypes", args.dtypes, "--reps", str(args.reps),
               "--warmup", str(args.warmup)]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONSAFEPATH="1"))
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited with {proc.returncode}")
        line = next(ln for ln in proc.stdout.splitlines() if "RESULT " in ln)  # after run's "[rank 0] "
        for dtype, r in json.loads(line.split("RESULT ", 1)[1]).items():
            rows.append(f"| {world} | {dtype} | {r['fused'] * 1e3:.1f} | {r['unfused'] * 1e3:.1f} | "
                        f"{r['all_reduce'] * 1e3:.1f} | {r['fused'] / r['unfused']:.2f} | "
                        f"{r['fused'] / r['all_reduce']:.2f} | {r['algorithm']} |")
            print(rows[-1], flush=True)
    text = "\n".join([
        "# Fused all-reduce + LayerNorm",
        "",
        f"`python bench/fused_norm.py --worlds {args.worlds} --rows {args.rows} --hidden {args.hidden} "
        f"--dtypes {args.dtypes} --reps {args.reps} --warmup {args.warmup}`",
        "",
        machine(),
        f"- load average before the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (shared machine)",
        "",
        f"x: ({args.rows} x {args.hidden}) per rank, with a residual, weight and bias; default backend. Each "
        "repetition runs the three variants one after the other after a barrier; a time is the slowest rank's; "
        f"medians of {args.reps} repetitions after {args.warmup} warm-up ones. fused: "
        "`all_reduce_layernorm(x, w, b, residual=r, out=out)`; unfused: `all_reduce(x, out=buf)` then "
        "`buf + r` and a float32 NumPy LayerNorm; all_reduce: `all_reduce(x, out=buf)` alone. Targets: "
        "fused / unfused <= 0.8, fused / all_reduce <= 1.1.",
        "",
        "| ranks | dtype | fused (ms) | unfused (ms) | all_reduce (ms) | fused / unfused | fused / all_reduce "
        "| all_reduce ran |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
