"""One rank of the reproducible-mode process tests (test_reproducible_procs.py): `python reproducible_worker.py`.
The job's contributions are two seeded arrays placed on ranks by world size (the others contribute zeros);
every reproducible result (all_reduce by each algorithm, blocking, async and through the fast path,
reduce_scatter, reduce) is reported as the hex digest of its bytes. Prints one JSON line and exits 0."""

import hashlib
import json
import os
import sys

import numpy as np

import pycoll
from pycoll.tools.accuracy import float_dtype, make_inputs

COUNT = 12 * 257  # whole blocks at 2, 3 and 4 ranks
PLACES = {2: (0, 1), 3: (2, 1), 4: (3, 0)}  # where contributions a and b go, by world size
report = {}
comm = None


def contribution(rank, size, dtype):
    a, b = make_inputs("mixed", 2, COUNT, dtype, seed=11)
    return {PLACES[size][0]: a, PLACES[size][1]: b}.get(rank, np.zeros(COUNT, float_dtype(dtype)))


def digest(x):
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


try:
    comm = pycoll.init(timeout=60.0)
    rank, size = comm.rank, comm.size
    algorithms = ["ring", "halving_doubling", "mesh", "recursive_doubling"]
    if os.environ.get("PYCOLL_BACKEND") == "shm":
        algorithms.append("shm_slots")
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        x = contribution(rank, size, dtype)
        for algorithm in algorithms:
            out = np.empty_like(x)
            comm.all_reduce(x, out=out, algorithm=algorithm, accuracy="reproducible")
            report[f"{dtype} {algorithm}"] = digest(out)
        work = comm.all_reduce(x.copy(), algorithm="ring", accuracy="reproducible", async_op=True)
        report[f"{dtype} async"] = digest(work.wait())
        block = np.empty(COUNT // size, x.dtype)
        comm.reduce_scatter(x, block, accuracy="reproducible")
        full = np.empty_like(x)
        comm.all_gather(block, full)
        report[f"{dtype} reduce_scatter"] = digest(full)
        root = size - 1
        out = np.empty_like(x)
        comm.reduce(x, root, out=out, accuracy="reproducible")
        if rank == root:
            report[f"{dtype} reduce"] = digest(out)
    try:
        comm.all_reduce(np.ones(4, np.float32), op="max", accuracy="reproducible")
    except pycoll.PycollError as exc:
        report["refusal"] = str(exc)
    comm.barrier()  # the refusal left the communicator usable
    report["ok"] = True
except (pycoll.PycollError, AssertionError) as exc:
    report.update(error=type(exc).__name__, message=str(exc))
report["rank"] = comm.rank if comm is not None else -1
sys.stdout.write(json.dumps(report) + "\n")
sys.stdout.flush()
if comm is not None:
    comm.close()
