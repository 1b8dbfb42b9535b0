"""PyTorch's own DistributedDataParallel (or FSDP2, `fully_shard`) over pycoll (import pycoll.torch) against over
gloo: the same model (an MLP of 24 layers, 48 parameter tensors, about 6 MiB of float32 gradients), the same
launch (torchrun), CPU, side by side: every repetition runs each backend once, alternating.

    python bench/ddp.py [--mode ddp|fsdp2] [--worlds 2,4] [--repeats 3] [--steps 20]

A step is forward, backward (DDP: its bucketed all-reduces; FSDP2: each layer's parameters all-gathered
before use, its gradients reduce-scattered after) and the optimizer step. Its time is the slowest rank's:
each rank times every step, the element-wise maximum over ranks is taken after the run. Prints a Markdown
table: per world size and backend, the median over repetitions of each run's median step time, and
pycoll / gloo.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

LAYERS, WIDTH, BATCH = 24, 256, 64


def rank_main(backend, steps, mode):
    import torch
    import torch.distributed as dist

    if backend == "pycoll":
        import pycoll.torch  # noqa: F401
    dist.init_process_group(backend)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())
                                  for _ in range(LAYERS)])
    if mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            fully_shard(layer)
        ddp = fully_shard(model)
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(BATCH, WIDTH)
    times = []
    for step in range(steps + 3):
        start = time.perf_counter()
        opt.zero_grad()
        ddp(x).square().mean().backward()
        opt.step()
        if step >= 3:  # warm-up
            times.append(time.perf_counter() - start)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # each step as long as its slowest rank took
    if dist.get_rank() == 0:
        print(json.dumps({"step_ms": statistics.median(slowest.tolist()) * 1e3}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def run(backend, world, steps, mode):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}", __file__,
           "--rank-of", backend, "--steps", str(steps), "--mode", mode]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not reports:
        raise SystemExit(f"{backend} at {world} ranks failed:\n{done.stderr[-3000:]}")
    if done.returncode != 0:  # gloo at times aborts in its teardown ("terminate called ..."), after the steps
        print(f"({backend} at {world} ranks exited {done.returncode} after reporting)", file=sys.stderr)
    return reports[0]["step_ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("ddp", "fsdp2"), default="ddp")
    parser.add_argument("--worlds", default="2,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rank-of", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_of:
        return rank_main(args.rank_of, args.steps, args.mode)
    what = "DDP" if args.mode == "ddp" else "FSDP2"
    print(f"| ranks | {what} over gloo: step (ms) | {what} over pycoll: step (ms) | pycoll / gloo |")
    print("|---:|---:|---:|---:|")
    for world in map(int, args.worlds.split(",")):
        samples = {"gloo": [], "pycoll": []}
        for _ in range(args.repeats):
            for backend in samples:
                samples[backend].append(run(backend, world, args.steps, args.mode))
        gloo, ours = statistics.median(samples["gloo"]), statistics.median(samples["pycoll"])
        print(f"| {world} | {gloo:.1f} | {ours:.1f} | {ours / gloo:.2f} |", flush=True)


if __name__ == "__main__":
    main()
