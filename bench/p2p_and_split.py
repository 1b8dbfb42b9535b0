"""Produce bench/results/p2p_split.md: send/recv ping-pong at 2 ranks -- pycoll over TCP and over shared memory
beside a raw TCP socket ping-pong between two Python processes (pycoll.tools.bench.raw_socket) and Open MPI's
Send/Recv through mpi4py (default transports: shared memory; and TCP only) -- and what comm.mesh costs: the
time to split 8 ranks into a pp=2 x dp=2 x tp=2 mesh beside one small all-reduce on the same ranks and beside
a new pycoll.init (a rendezvous, what a group cost before splits). Each command runs --runs times, interleaved;
the tables give medians of the runs.

    python bench/p2p_and_split.py [--runs 3] [--out bench/results/p2p_split.md]

Worker mode (what the driver starts): python bench/p2p_and_split.py --worker pingpong|split IMPL
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIZES = [4, 256, 4 << 10, 64 << 10, 1 << 20, 16 << 20]
SPLIT_REPEATS = 20


def iters_for(nbytes):
    return max(20, min(2000, (64 << 20) // max(nbytes, 1)))


def pingpong(rank, send, recv):
    """[{bytes, us}]: one-way time (half the round trip), the median of many, per size; send/recv(buf, peer)."""
    rows = []
    for nbytes in SIZES:
        buf = np.zeros(nbytes, dtype=np.uint8)
        n = iters_for(nbytes)
        times = []
        for k in range(n + n // 10):
            t0 = time.perf_counter()
            if rank == 0:
                send(buf, 1)
                recv(buf, 1)
            else:
                recv(buf, 0)
                send(buf, 0)
            if k >= n // 10:
                times.append((time.perf_counter() - t0) / 2)
        rows.append({"bytes": nbytes, "us": statistics.median(times) * 1e6})
    return rows


def pingpong_pycoll():
    import pycoll

    comm = pycoll.init()
    rows = pingpong(comm.rank, comm.send, comm.recv)
    comm.close()
    return rows


def pingpong_mpi():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    return pingpong(comm.Get_rank(), comm.Send, comm.Recv)


def split_cost():
    """Per repeat: the slowest rank's time for mesh(pp=2, dp=2, tp=2), and for a 4-byte all-reduce."""
    import pycoll

    t0 = time.perf_counter()
    comm = pycoll.init()
    init_s = time.perf_counter() - t0
    worst = np.zeros(1)
    mesh_us, allreduce_us = [], []
    x = np.ones(1, dtype=np.float32)
    for _ in range(3):
        comm.all_reduce(x)
    for _ in range(SPLIT_REPEATS):
        comm.barrier()
        t0 = time.perf_counter()
        mesh = comm.mesh(pp=2, dp=2, tp=comm.size // 4)
        worst[0] = time.perf_counter() - t0
        comm.all_reduce(worst, op="max")
        mesh_us.append(worst[0] * 1e6)
        mesh.close()
        comm.barrier()
        t0 = time.perf_counter()
        comm.all_reduce(x)
        worst[0] = time.perf_counter() - t0
        comm.all_reduce(worst, op="max")
        allreduce_us.append(worst[0] * 1e6)
    worst[0] = init_s
    comm.all_reduce(worst, op="max")
    comm.close()
    return {"mesh_us": statistics.median(mesh_us), "allreduce_us": statistics.median(allreduce_us),
            "init_ms": worst[0] * 1e3}


def worker(kind, impl, out):
    if kind == "pingpong":
        result = pingpong_mpi() if impl.startswith("mpi") else pingpong_pycoll()
    else:
        result = split_cost()
    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    if rank == 0:
        Path(out).write_text(json.dumps(result))


def launch(kind, impl, world, out):
    env = dict(os.environ, PYTHONSAFEPATH="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    me = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, impl, out]
    if impl.startswith("mpi"):
        mca = ["--mca", "btl", "tcp,self"] if impl == "mpi-tcp" else []
        cmd = ["mpirun", "-n", str(world), "--oversubscribe", "--bind-to", "none", *mca, *me]
    else:
        env["PYCOLL_BACKEND"] = impl
        cmd = [sys.executable, "-m", "pycoll", "run", "-n", str(world), *me[1:]]  # pycoll run starts Python
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(Path(out).read_text())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", nargs=3, metavar=("KIND", "IMPL", "OUT"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "p2p_split.md"))
    args = parser.parse_args()
    if args.worker:
        return worker(*args.worker)
    sys.path.insert(0, str(Path(__file__).parent))
    from allreduce_peers import machine

    from pycoll.tools.bench import raw_socket

    impls = ["tcp", "shm", "mpi", "mpi-tcp"]
    load, start = os.getloadavg(), time.monotonic()
    pings = {k: [] for k in [*impls, "socket"]}
    splits = {k: [] for k in ("tcp", "shm")}
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.json")
        for _ in range(args.runs):
            for impl in impls:
                pings[impl].append({r["bytes"]: r["us"] for r in launch("pingpong", impl, 2, out)})
            pings["socket"].append({r["bytes"]: r["pingpong_us"] for r in raw_socket.measure(SIZES)})
            for impl in splits:
                splits[impl].append(launch("split", impl, 8, out))
    med = {k: {b: statistics.median(run[b] for run in runs) for b in SIZES} for k, runs in pings.items()}
    lines = ["# send/recv ping-pong and the cost of a mesh", "",
             "Measured by `python bench/p2p_and_split.py --runs {}`; medians of the runs (each run: the median of "
             "many round trips, halved).".format(args.runs), "", machine(),
             f"- load average before: {load[0]:.2f}; wall time {time.monotonic() - start:.0f} s", "",
             "## Ping-pong, 2 ranks: one-way time (us)", "",
             "| size | pycoll tcp | raw socket (Python) | Open MPI (TCP) | pycoll shm | Open MPI (default: shm) "
             "| pycoll tcp / Open MPI tcp | pycoll shm / Open MPI shm |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in SIZES:
        m = {k: med[k][b] for k in med}
        lines.append(f"| {b} | {m['tcp']:.1f} | {m['socket']:.1f} | {m['mpi-tcp']:.1f} | {m['shm']:.1f} | "
                     f"{m['mpi']:.1f} | {m['tcp'] / m['mpi-tcp']:.2f} | {m['shm'] / m['mpi']:.2f} |")
    lines += ["", "## Splitting 8 ranks (on 2 cores) into pp=2 x dp=2 x tp=2", "",
              "| backend | comm.mesh (us) | one 4-byte all-reduce (us) | mesh / all-reduce | pycoll.init (ms) |",
              "|---|---:|---:|---:|---:|"]
    for impl, runs in splits.items():
        mesh = statistics.median(r["mesh_us"] for r in runs)
        ar = statistics.median(r["allreduce_us"] for r in runs)
        init = statistics.median(r["init_ms"] for r in runs)
        lines.append(f"| {impl} | {mesh:.0f} | {ar:.0f} | {mesh / ar:.1f} | {init:.0f} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
