"""PyTorch's own DistributedDataParallel over pycoll (import pycoll.torch) against over gloo: the same model (an
MLP of 24 layers, 48 parameter tensors, about 6 MiB of float32 gradients), the same launch (torchrun), CPU,
side by side: every repetition runs each backend once, alternating.

    python bench/ddp.py [--worlds 2,4] [--repeats 3] [--steps 20]

Prints a Markdown table: per world size and backend, the median over repetitions of each run's median step
time (forward, backward with DDP's bucketed all-reduces, optimizer step), and pycoll / gloo.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

LAYERS, WIDTH, BATCH = 24, 256, 64


def rank_main(backend, steps):
    import torch
    import torch.distributed as dist

    if backend == "pycoll":
        import pycoll.torch  # noqa: F401
    dist.init_process_group(backend)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())
                                  for _ in range(LAYERS)])
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
    if dist.get_rank() == 0:
        print(json.dumps({"step_ms": statistics.median(times) * 1e3}))
    dist.destroy_process_group()


def run(backend, world, steps):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}", __file__,
           "--rank-of", backend, "--steps", str(steps)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode != 0:
        raise SystemExit(f"{backend} at {world} ranks failed:\n{done.stderr[-3000:]}")
    return next(json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))["step_ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", default="2,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rank-of", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_of:
        return rank_main(args.rank_of, args.steps)
    print("| ranks | DDP over gloo: step (ms) | DDP over pycoll: step (ms) | pycoll / gloo |")
    print("|---:|---:|---:|---:|")
    for world in map(int, args.worlds.split(",")):
        samples = {"gloo": [], "pycoll": []}
        for _ in range(args.repeats):
            for backend in samples:
                samples[backend].append(run(backend, world, args.steps))
        gloo, ours = statistics.median(samples["gloo"]), statistics.median(samples["pycoll"])
        print(f"| {world} | {gloo:.1f} | {ours:.1f} | {ours / gloo:.2f} |", flush=True)


if __name__ == "__main__":
    main()
