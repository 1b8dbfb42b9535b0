"""What a small collective costs in Python: each call on a world of one rank, where the collective itself is a
4-byte copy, so the time is the call path (argument checks, buffer lookup, releasing the GIL, the C entry).

Measured side by side in one process: pycoll's fast path (pycoll/_bindings/fast_path.pxi), pycoll's general
path (the same communicator with the fast path switched off), and, where installed, mpi4py (Allreduce on
COMM_SELF, buffer given as a NumPy array) and torch.distributed's gloo (a one-rank group).

    python bench/call_path.py [--calls 20000] [--repeats 7]

Prints a Markdown table: the median over repeats of the mean time per call, in microseconds.
"""

import argparse
import os
import socket
import statistics
import time
import warnings

import numpy as np


def per_call_us(fn, calls, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pycoll_rows(calls, repeats):
    import pycoll

    warnings.simplefilter("ignore")  # init() of a world of one warns that it is one
    comm = pycoll.init(rank=0, world_size=1, master_addr="127.0.0.1", master_port=free_port())
    x, y = np.ones(1, np.float32), np.ones(1, np.float32)
    cases = {
        "all_reduce(x)": lambda: comm.all_reduce(x),
        "all_reduce(x, out=y)": lambda: comm.all_reduce(x, out=y),
        "broadcast(x, 0)": lambda: comm.broadcast(x, 0),
        "reduce(x, 0)": lambda: comm.reduce(x, 0),
        "all_gather(x, y)": lambda: comm.all_gather(x, y),
        "reduce_scatter(x, y)": lambda: comm.reduce_scatter(x, y),
        "barrier()": comm.barrier,
    }
    fast = {name: per_call_us(fn, calls, repeats) for name, fn in cases.items()}
    comm._fast = None  # the general path alone, as before the fast path existed
    general = {name: per_call_us(fn, calls, repeats) for name, fn in cases.items()}
    comm.close()
    return cases, fast, general


def mpi4py_rows(calls, repeats):
    try:
        from mpi4py import MPI
    except ImportError:
        return {}
    x = np.ones(1, np.float32)
    comm = MPI.COMM_SELF
    return {"all_reduce(x)": per_call_us(lambda: comm.Allreduce(MPI.IN_PLACE, x), calls, repeats),
            "broadcast(x, 0)": per_call_us(lambda: comm.Bcast(x, 0), calls, repeats),
            "barrier()": per_call_us(comm.Barrier, calls, repeats)}


def gloo_rows(calls, repeats):
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return {}
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    t = torch.ones(1)
    rows = {"all_reduce(x)": per_call_us(lambda: dist.all_reduce(t), calls // 4, repeats),
            "broadcast(x, 0)": per_call_us(lambda: dist.broadcast(t, 0), calls // 4, repeats),
            "barrier()": per_call_us(dist.barrier, calls // 20, repeats)}
    dist.destroy_process_group()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    cases, fast, general = pycoll_rows(args.calls, args.repeats)
    mpi = mpi4py_rows(args.calls, args.repeats)
    gloo = gloo_rows(args.calls, args.repeats)
    print("| call | pycoll fast path (us) | pycoll general path (us) | mpi4py (us) | gloo (us) |")
    print("|---|---:|---:|---:|---:|")
    for name in cases:
        cells = [f"{fast[name]:.2f}", f"{general[name]:.2f}",
                 f"{mpi[name]:.2f}" if name in mpi else "-", f"{gloo[name]:.2f}" if name in gloo else "-"]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
