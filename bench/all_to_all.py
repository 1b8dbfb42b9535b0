"""Produce bench/results/all_to_all.md: pycoll's all_to_all (pairwise exchange, native/algorithms/all_to_all.c)
over shared memory and over TCP beside Open MPI's MPI_Alltoall through mpi4py (its default transports, shared
memory on one host, and TCP only), 4 ranks, 4 KiB - 16 MiB per rank's buffer; each configuration run --runs
times, alternating, and the median of the runs reported.

    python bench/all_to_all.py [--world 4] [--runs 3] [--mpi-python .venv-mpi/bin/python] [--out ...]

Per size: --warmup calls, then `iters` timed calls, each after a barrier; a rank's median; the slowest rank's
median is the run's value (all_to_all finishes when the slowest rank has its data).
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

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
COLUMNS = (("shm", "pycoll shm"), ("tcp", "pycoll tcp"), ("mpi", "Open MPI (default: shm)"),
           ("mpi-tcp", "Open MPI (TCP)"))
MPI_TCP = ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]


def iterations(nbytes):
    return max(5, min(200, (32 << 20) // nbytes))


def timed(run, barrier, nbytes, warmup=3):
    for _ in range(warmup):
        run()
    times = []
    for _ in range(iterations(nbytes)):
        barrier()
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def check(out, rank, size, per):
    """Block i of out came from rank i: its values say so (the sender wrote its rank and the receiver's)."""
    want = np.repeat(np.arange(size, dtype=np.int32) * 1000 + rank, per)
    return int(not np.array_equal(out, want))


def payload(rank, size, per):
    return (rank * 1000 + np.repeat(np.arange(size, dtype=np.int32), per)).astype(np.int32)


def sweep(rank, size, all_to_all, barrier):
    """Every size's row: this rank's median time and whether its output was wrong."""
    rows = []
    for nbytes in SIZES:
        per = nbytes // 4 // size
        x, out = payload(rank, size, per), np.empty(size * per, dtype=np.int32)
        median = timed(lambda: all_to_all(x, out), barrier, nbytes)
        rows.append({"bytes": nbytes, "median_s": median, "wrong": check(out, rank, size, per)})
    return rows


def pycoll_worker():
    import pycoll

    comm = pycoll.init(timeout=120)
    everyone = comm.all_gather_object(sweep(comm.rank, comm.size, comm.all_to_all, comm.barrier))
    if comm.rank == 0:
        print(json.dumps(everyone), flush=True)
    comm.close()


def mpi_worker():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    everyone = comm.gather(sweep(comm.Get_rank(), comm.Get_size(), comm.Alltoall, comm.Barrier), root=0)
    if comm.Get_rank() == 0:
        print(json.dumps(everyone), flush=True)


def slowest(everyone):
    """{bytes: (slowest rank's median in s, wrong ranks)} of one run."""
    return {row["bytes"]: (max(r[i]["median_s"] for r in everyone), sum(r[i]["wrong"] for r in everyone))
            for i, row in enumerate(everyone[0])}


def run_pycoll(backend, world):
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--pycoll-worker"], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PYCOLL_BACKEND=backend))
             for r in range(world)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"pycoll {backend}: a rank exited with {[p.returncode for p in procs]}")
    return slowest(json.loads(outs[0].strip().splitlines()[-1]))


def run_mpi(python, world, mca):
    cmd = ["mpirun", "-n", str(world), "--oversubscribe", "--bind-to", "none", *mca, python, __file__,
           "--mpi-worker"]
    # As pycoll.tools.bench.peers does: the bench machines are containers that run as root.
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=600, env=env)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} exited with {proc.returncode}")
    return slowest(json.loads(proc.stdout.strip().splitlines()[-1]))


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fmt_size(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mpi-python", default=str(Path(__file__).resolve().parent.parent / ".venv-mpi/bin/python"),
                        help="a Python with mpi4py (and numpy), e.g. a separate venv")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "all_to_all.md"))
    parser.add_argument("--pycoll-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pycoll_worker:
        return pycoll_worker()
    if args.mpi_worker:
        return mpi_worker()

    sys.path.insert(0, str(Path(__file__).parent))
    from allreduce_peers import machine

    start, load = time.monotonic(), os.getloadavg()
    runners = {"shm": lambda: run_pycoll("shm", args.world), "tcp": lambda: run_pycoll("tcp", args.world),
               "mpi": lambda: run_mpi(args.mpi_python, args.world, []),
               "mpi-tcp": lambda: run_mpi(args.mpi_python, args.world, MPI_TCP)}
    results = {key: [] for key in runners}
    for i in range(args.runs):  # alternating, so that a burst of load from elsewhere hits every column alike
        for key, run in runners.items():
            results[key].append(run())
            print(f"run {i + 1}/{args.runs} {key}: " + ", ".join(
                f"{fmt_size(b)} {t * 1e6:.0f} us" for b, (t, _) in results[key][-1].items()), flush=True)
    mpi4py_version = subprocess.run([args.mpi_python, "-c", "import mpi4py; print(mpi4py.__version__)"],
                                    capture_output=True, text=True).stdout.strip() or "?"
    lines = ["# all_to_all on one host: pycoll (shm, tcp) vs Open MPI's MPI_Alltoall (mpi4py)", "",
             f"Produced by `python bench/all_to_all.py --world {args.world} --runs {args.runs}` in "
             f"{time.monotonic() - start:.0f} s.", "",
             machine() + f" (mpi4py {mpi4py_version} in the --mpi-python venv, beside numpy)",
             f"- Load: 1/5/15-minute load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it started "
             f"(other engineers' builds and tests share the cores), {os.getloadavg()[0]:.1f} at the end.", "",
             f"Method: {args.world} ranks, int32, size = one rank's whole send buffer ({args.world} blocks of "
             "size / world bytes). Per size 3 warm-up calls, then max(5, min(200, 32 MiB / size)) calls, each "
             "after a barrier; a rank's median; the slowest rank's; the median of the runs. Every output is "
             "checked (block i from rank i). Open MPI (default) is mpirun without transport settings (shared "
             "memory on one host); Open MPI (TCP) is `--mca pml ob1 --mca btl tcp,self`; both "
             "`--oversubscribe --bind-to none`. The ranks share the machine's cores, so they are oversubscribed.",
             "", "| size | " + " | ".join(label for _, label in COLUMNS) + " | MPI shm / pycoll shm | "
             "MPI TCP / pycoll tcp |", "|---:|" + "---:|" * (len(COLUMNS) + 2)]
    wrong = 0
    for nbytes in SIZES:
        med = {key: statistics.median(run[nbytes][0] for run in results[key]) * 1e6 for key, _ in COLUMNS}
        wrong += sum(run[nbytes][1] for key in results for run in results[key])
        lines.append(f"| {fmt_size(nbytes)} | " + " | ".join(f"{med[key]:.0f} us" for key, _ in COLUMNS)
                     + f" | {med['mpi'] / med['shm']:.2f} | {med['mpi-tcp'] / med['tcp']:.2f} |")
    lines += ["", f"Wrong outputs over every size, rank and run: {wrong}.",
              "Ratios above 1: pycoll is faster."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
