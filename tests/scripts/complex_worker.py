"""One rank of tests/algorithms/test_complex_collectives.py: `python complex_worker.py` under RANK/WORLD_SIZE/
MASTER_* env.
Every collective on complex64 and complex128, every algorithm of the backend, compared exactly against NumPy,
then the refusals (min, max, a reproducible product). Prints one JSON line {"rank", "ok", "cases", "algorithms",
"refusals", ...}; any failure is reported under "error" with its traceback.

The inputs make "exact" meaningful for any order of the operations: sums of small integers, and products of
1, -1, 1j, -1j, 2 and 1+1j (whose parts stay small integers), are exact in floating point.
"""

import json
import os
import sys
import time

import numpy as np
from worker_report import failure_reported

import pycoll
from pycoll.algorithms import COLL_ALGORITHMS

DTYPES = (np.complex64, np.complex128)
FACTORS = np.array([1, -1, 1j, -1j, 2, 1 + 1j])


def summands(rank, n, dtype, salt=0):
    """Small integers in both parts, different on each rank and element."""
    i = np.arange(n)
    return (((i * 7 + rank * 3 + salt) % 11 - 5) + 1j * ((i * 5 + rank + salt) % 9 - 4)).astype(dtype)


def factors(rank, n, dtype):
    return FACTORS[(np.arange(n) * 5 + rank) % len(FACTORS)].astype(dtype)


def inputs(op, rank, n, dtype):
    return factors(rank, n, dtype) if op == "prod" else summands(rank, n, dtype)


def reduced(op, arrays, size):
    """NumPy's reduction of the ranks' arrays; avg divides each part by the world size, once, at the end."""
    if op == "prod":
        return np.prod(arrays, axis=0).astype(arrays[0].dtype)
    total = np.sum(arrays, axis=0).astype(arrays[0].dtype)
    if op == "sum":
        return total
    part = total.real.dtype.type(size)
    return (total.real / part + 1j * (total.imag / part)).astype(total.dtype)


def same(got, want, what):
    assert got.dtype == want.dtype and np.array_equal(got, want), (what, got[:8], want[:8])


def reductions(comm, counts, report):
    """all_reduce, reduce_scatter (even and with counts) and reduce: every algorithm, op and accuracy."""
    rank, size = comm.rank, comm.size
    mine = {"all_reduce", "reduce_scatter"}
    algorithms = {c: [a for a in COLL_ALGORITHMS[c] if a != "shm_slots" or comm.transport == "shm"] + ["auto"]
                  for c in mine}
    ran = set()
    for dtype in DTYPES:
        for op in ("sum", "avg", "prod"):
            for accuracy in ("fast", "compensated", "reproducible") if op != "prod" else ("fast",):
                kw = {"accuracy": accuracy}
                for n in counts:
                    every = [inputs(op, r, n, dtype) for r in range(size)]
                    want = reduced(op, every, size)
                    for algorithm in algorithms["all_reduce"]:
                        x = every[rank].copy()
                        out = np.empty_like(x)
                        comm.all_reduce(x, op, out=out, algorithm=algorithm, **kw)
                        same(out, want, ("all_reduce out", dtype, op, accuracy, algorithm, n))
                        comm.all_reduce(x, op, algorithm=algorithm, **kw)
                        same(x, want, ("all_reduce", dtype, op, accuracy, algorithm, n))
                        ran.add(comm.last_algorithm)
                        report["cases"] += 2
                    blocks = [inputs(op, r, n * size, dtype) for r in range(size)]
                    block_want = reduced(op, blocks, size)[rank * n:(rank + 1) * n]
                    for algorithm in algorithms["reduce_scatter"]:
                        out = np.empty(n, dtype)
                        comm.reduce_scatter(blocks[rank], out, op, algorithm=algorithm, **kw)
                        same(out, block_want, ("reduce_scatter", dtype, op, accuracy, algorithm, n))
                        report["cases"] += 1
                    counts_v = [n + r for r in range(size)]
                    whole = [inputs(op, r, sum(counts_v), dtype) for r in range(size)]
                    first = sum(counts_v[:rank])
                    out = np.empty(counts_v[rank], dtype)
                    if accuracy != "reproducible":  # which reproducible does not cover, for any dtype
                        comm.reduce_scatter(whole[rank], out, op, counts=counts_v, **kw)
                        same(out, reduced(op, whole, size)[first:first + counts_v[rank]],
                             ("reduce_scatter_v", dtype, op, accuracy, n))
                    root = n % size  # reduce takes no algorithm: auto's choice by size, reported
                    x = every[rank].copy()
                    comm.reduce(x, root, op, **kw)
                    if rank == root:
                        same(x, want, ("reduce", dtype, op, accuracy, n))
                    ran.add("reduce " + comm.last_algorithm)
                    report["cases"] += 2
    report["algorithms"] = sorted(ran)


def reproducible_parts(comm, report):
    """Reproducible complex sums on data whose span needs the general mode (and an infinity, which forces it)
    are, bit for bit, the reproducible sums of the parts as a real array, whatever the algorithm."""
    rng = np.random.default_rng(comm.rank)
    for dtype in DTYPES:
        part = np.dtype(dtype).char.lower()
        spread = 30 if part == "f" else 200
        values = rng.standard_normal(2 * 333) * 10.0 ** rng.uniform(-spread, spread / 10, 2 * 333)
        for special in (None, np.inf):
            if special is not None:
                values[7] = special
            real = values.astype(part)
            comm.all_reduce(real, accuracy="reproducible")
            for algorithm in ("ring", "halving_doubling", "auto"):
                x = values.astype(part).view(dtype)
                comm.all_reduce(x, accuracy="reproducible", algorithm=algorithm)
                assert np.array_equal(x.view(part), real, equal_nan=True), (dtype, special, algorithm)
                report["cases"] += 1


def data_movement(comm, counts, report):
    """broadcast, all_gather (even and with counts), gather, scatter, all_to_all and send/recv: bytes moved
    whole, so each element's two parts arrive together."""
    rank, size = comm.rank, comm.size
    for dtype in DTYPES:
        for n in counts:
            every = [summands(r, n * size, dtype, salt=1) for r in range(size)]
            root = (n + 1) % size
            b = every[rank].copy()
            comm.broadcast(b, root=root)
            same(b, every[root], ("broadcast", dtype, n))
            out = np.empty(n * size, dtype)
            comm.all_gather(every[rank][:n], out)
            same(out, np.concatenate([e[:n] for e in every]), ("all_gather", dtype, n))
            counts_v = [n + r for r in range(size)]
            out = np.empty(sum(counts_v), dtype)
            comm.all_gather(summands(rank, counts_v[rank], dtype), out, counts=counts_v)
            same(out, np.concatenate([summands(r, counts_v[r], dtype) for r in range(size)]),
                 ("all_gather_v", dtype, n))
            g = np.empty(n * size, dtype) if rank == root else None
            comm.gather(every[rank][:n], g, root=root)
            if rank == root:
                same(g, np.concatenate([e[:n] for e in every]), ("gather", dtype, n))
            s = np.empty(n, dtype)
            comm.scatter(every[root] if rank == root else None, s, root=root)
            same(s, every[root][rank * n:(rank + 1) * n], ("scatter", dtype, n))
            out = np.empty(n * size, dtype)
            comm.all_to_all(every[rank], out)
            same(out, np.concatenate([e[rank * n:(rank + 1) * n] for e in every]), ("all_to_all", dtype, n))
            got = np.empty(n, dtype)
            right, left = (rank + 1) % size, (rank - 1) % size
            sent = comm.send(every[rank][:n], right, async_op=True)
            comm.recv(got, left)
            sent.wait()
            same(got, every[left][:n], ("send/recv", dtype, n))
            report["cases"] += 8


def refusals(comm, report):
    """min and max have no meaning on complex numbers, and reproducible covers sums only: every rank refuses
    before anything is sent, and the communicator still works afterwards."""
    size = comm.size
    x = np.ones(5, np.complex64)
    blocks, block = np.ones(2 * size, np.complex128), np.ones(2, np.complex128)
    seen = []
    for name, call, error, words in (
            ("all_reduce max", lambda: comm.all_reduce(x, "max"), ValueError, ("max", "complex64")),
            ("reduce_scatter min", lambda: comm.reduce_scatter(blocks, block, "min"),
             ValueError, ("min", "complex128")),
            ("reduce min", lambda: comm.reduce(x, 0, "min"), ValueError, ("min", "complex64")),
            ("all_reduce reproducible prod", lambda: comm.all_reduce(x, "prod", accuracy="reproducible"),
             pycoll.PycollError, ("reproducible", "prod"))):
        try:
            call()
        except error as exc:
            assert all(w in str(exc) for w in words), (name, str(exc))
            seen.append(name)
        else:
            raise AssertionError(f"{name}: no {error.__name__}")
    y = np.full(3, 1 + 1j, np.complex128)
    comm.all_reduce(y)
    same(y, np.full(3, size * (1 + 1j), np.complex128), "sum after the refusals")
    report["refusals"] = seen


def dtype_mismatch(comm, report):
    """Rank 0 sums complex64, the others float32 of the same bytes: the descriptors carry the dtype, so every rank
    raises MismatchError naming both sides instead of mixing parts with reals. Last: it breaks the communicator."""
    if comm.size == 1:
        return
    x = np.ones(8, np.complex64) if comm.rank == 0 else np.ones(16, np.float32)
    try:
        # Every rank has finished the collectives before once any leaves the barrier; a rank may still be in the
        # barrier when a peer's report of the mismatch arrives, and raise it there.
        comm.barrier()
        comm.all_reduce(x)
    except pycoll.MismatchError as exc:
        assert "complex64" in str(exc) and "float32" in str(exc), str(exc)
        report["mismatch"] = "MismatchError"
    else:
        raise AssertionError("complex64 against float32: no MismatchError")


def main():
    report = {"ok": False, "cases": 0}
    t0 = time.monotonic()
    comm = None
    with failure_reported(report):
        comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "60")))
        report.update(rank=comm.rank, backend=comm.backend, transport=comm.transport)
        counts = (0, 1, 7, int(os.environ.get("TEST_BIG_COUNT", "3001")))
        reductions(comm, counts, report)
        reproducible_parts(comm, report)
        data_movement(comm, counts, report)
        refusals(comm, report)
        dtype_mismatch(comm, report)
        report["ok"] = True
    if comm is not None:
        comm.close()
    report["elapsed"] = time.monotonic() - t0
    print(json.dumps(report, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
