"""One rank of tests/algorithms/test_collectives_more.py: `python more_colls_worker.py SCENARIO` under RANK/WORLD_SIZE/
MASTER_* env. Prints one JSON line {"rank", "ok", "error", "message", "elapsed", ...}; exits 0 when the scenario
ran to its report (the test reads the JSON).

exact      all_to_all, gather, scatter, all_gather / reduce_scatter with counts, their async_op variants and the
           objects, exact on integer data; TEST_BIG_COUNT adds a large message.
bad_input  every argument error raises before anything is sent, and the communicator still works afterwards.
last_algorithm  every collective reports the algorithm table's entry that ran (auto's choice by size, each name
           all_reduce and reduce_scatter claim); a name a collective lacks raises ValueError. Reports "ran".
counts_mismatch  rank 1 passes other counts (of the same total) than the rest: every rank raises (with
           TEST_ZERO the last rank passes all zeros too).
"""

import os
import sys
import time

import numpy as np
from worker_report import close_and_print, expect, failure_reported, refusal

import pycoll

scenario = sys.argv[1]
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
report = {"scenario": scenario}
t0 = time.monotonic()
comm = None


def values(rank, n, salt=0):
    """Rank-specific integers that wrap nowhere: each element says who sent it and where it came from."""
    return (np.arange(n, dtype=np.int64) * 7 + rank * 1_000_003 + salt).astype(np.int64)


def uneven_counts(size, scale):
    """Counts that differ per rank, with a zero among them from 3 ranks on."""
    return [0 if (r == 1 and size > 2) else scale * (r + 1) + r for r in range(size)]


def check_exact(comm, k, big=False):
    rank, size = comm.rank, comm.size
    # all_to_all: block j of x (k elements) goes to rank j; block i of out comes from rank i.
    x = values(rank, size * k)
    out = np.full(size * k, -1, dtype=np.int64)
    comm.all_to_all(x, out)
    want = np.concatenate([values(i, size * k)[rank * k:(rank + 1) * k] for i in range(size)])
    assert np.array_equal(out, want), ("all_to_all", k)
    # Over shared memory auto runs the transport's own all-to-all (slots, in rounds); elsewhere the pairwise one.
    want = "shm_slots" if comm.backend == "shm" else "pairwise"
    assert size == 1 or comm.last_algorithm == want, comm.last_algorithm
    # gather / scatter on every root
    for root in range(size):
        mine = values(rank, k, salt=root).astype(np.int32)
        g = np.full(size * k, -1, dtype=np.int32) if rank == root else None
        comm.gather(mine, g, root=root)
        if rank == root:
            assert np.array_equal(g, np.concatenate([values(i, k, salt=root).astype(np.int32)
                                                     for i in range(size)])), ("gather", k, root)
        src = values(root, size * k, salt=5).astype(np.int32) if rank == root else None
        s = np.full(k, -1, dtype=np.int32)
        comm.scatter(src, s, root=root)
        assert np.array_equal(s, values(root, size * k, salt=5).astype(np.int32)[rank * k:(rank + 1) * k]), \
            ("scatter", k, root)
    # uneven all_gather / reduce_scatter
    counts = uneven_counts(size, k)
    total = sum(counts)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    ag = np.full(total, -1, dtype=np.int64)
    comm.all_gather(values(rank, counts[rank]), ag, counts=counts)
    assert np.array_equal(ag, np.concatenate([values(r, counts[r]) for r in range(size)])), ("all_gather_v", k)
    rs = np.full(counts[rank], -1, dtype=np.int64)
    comm.reduce_scatter(values(rank, total), rs, counts=counts)
    want = sum(values(r, total) for r in range(size))[offsets[rank]:offsets[rank + 1]]
    assert np.array_equal(rs, want), ("reduce_scatter_v", k)
    if not big:
        for op in ("max", "min"):
            comm.reduce_scatter(values(rank, total), rs, op, counts=counts)
            red = np.maximum if op == "max" else np.minimum
            reduced = red.reduce([values(r, total) for r in range(size)])
            assert np.array_equal(rs, reduced[offsets[rank]:offsets[rank + 1]])
        # compensated on floats: integers well inside float64's exact range stay exact
        fx = values(rank, total).astype(np.float64)
        fr = np.full(counts[rank], np.nan)
        comm.reduce_scatter(fx, fr, counts=counts, accuracy="compensated")
        assert np.array_equal(fr, want.astype(np.float64)), ("reduce_scatter_v compensated", k)


def check_async(comm):
    rank, size = comm.rank, comm.size
    k = 3
    x = values(rank, size * k)
    out = np.empty(size * k, dtype=np.int64)
    counts = uneven_counts(size, 2)
    ag = np.empty(sum(counts), dtype=np.int64)
    rs = np.empty(counts[rank], dtype=np.int64)
    g = np.empty(size * k, dtype=np.int64) if rank == 0 else None
    s = np.empty(k, dtype=np.int64)
    works = [comm.all_to_all(x, out, async_op=True),
             comm.gather(x[:k], g, root=0, async_op=True),
             comm.scatter(x if rank == size - 1 else None, s, root=size - 1, async_op=True),
             comm.all_gather(values(rank, counts[rank]), ag, counts=list(counts), async_op=True),
             comm.reduce_scatter(values(rank, sum(counts)), rs, counts=tuple(counts), async_op=True)]
    results = [w.wait() for w in works]
    assert results[0] is out and results[3] is ag and results[4] is rs
    assert np.array_equal(out, np.concatenate([values(i, size * k)[rank * k:(rank + 1) * k] for i in range(size)]))
    assert rank != 0 or np.array_equal(g, np.concatenate([values(i, size * k)[:k] for i in range(size)]))
    assert np.array_equal(s, values(size - 1, size * k)[rank * k:(rank + 1) * k])
    assert np.array_equal(ag, np.concatenate([values(r, counts[r]) for r in range(size)]))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    assert np.array_equal(rs, sum(values(r, sum(counts)) for r in range(size))[offsets[rank]:offsets[rank + 1]])


def check_objects(comm):
    rank, size = comm.rank, comm.size
    obj = {"from": 0, "array": np.arange(5, dtype=np.float32), "nested": [None, (1, "two")]}
    got = comm.broadcast_object(obj if rank == 0 else None, root=0)
    assert got["from"] == 0 and np.array_equal(got["array"], obj["array"]) and got["nested"] == obj["nested"]
    assert comm.broadcast_object(None, root=size - 1) is None
    mine = {"rank": rank, "data": np.full(rank + 1, rank, dtype=np.int16)} if rank % 2 == 0 else None
    gathered = comm.all_gather_object(mine)
    assert len(gathered) == size
    for r, item in enumerate(gathered):
        if r % 2:
            assert item is None
        else:
            assert item["rank"] == r and np.array_equal(item["data"], np.full(r + 1, r, dtype=np.int16))
    # More than 1 MiB, and of a different size on every rank.
    big = np.random.default_rng(rank).integers(0, 1 << 30, size=(1 << 18) + 1000 * rank, dtype=np.int64)
    gathered = comm.all_gather_object(big)
    assert all(np.array_equal(g, np.random.default_rng(r).integers(0, 1 << 30, size=(1 << 18) + 1000 * r,
                                                                    dtype=np.int64)) for r, g in enumerate(gathered))
    assert np.array_equal(comm.broadcast_object(big, root=size - 1), gathered[size - 1])


def check_bad_input(comm):
    rank, size = comm.rank, comm.size
    x, out = np.zeros(size * 2, np.int32), np.zeros(size * 2, np.int32)
    if size > 1:  # every length is a multiple of 1
        expect(ValueError, ["send_count", "size * k"], comm.all_to_all, np.zeros(size * 2 + 1, np.int32), out)
    expect(ValueError, ["recv_count must be send_count"], comm.all_to_all, x, np.zeros(size * 2 + 2, np.int32))
    expect(TypeError, ["out", "dtype"], comm.all_to_all, x, np.zeros(size * 2, np.int64))
    expect(ValueError, ["overlap"], comm.all_to_all, x, x)
    expect(TypeError, ["async_op"], comm.all_to_all, x, out, async_op=1)
    for fn in (comm.gather, comm.scatter):
        expect(ValueError, ["root"], fn, x[:2], out, root=size)
        expect(ValueError, ["root"], fn, x[:2], out, root=-1)
        expect(TypeError, ["root"], fn, x[:2], out, root="0")
    if rank == 0:
        expect(ValueError, ["out"], comm.gather, x[:2], None, root=0)
        expect(ValueError, ["gather: recv_count"], comm.gather, x[:2], np.zeros(size * 2 + 1, np.int32), root=0)
        expect(ValueError, ["x"], comm.scatter, None, out[:2], root=0)
        expect(ValueError, ["scatter: send_count"], comm.scatter, np.zeros(size * 2 + 1, np.int32), out[:2],
               root=0)
    counts = list(range(1, size + 1))
    total = sum(counts)
    mine, whole = np.zeros(counts[rank], np.int64), np.zeros(total, np.int64)
    expect(ValueError, ["counts", "one entry per rank"], comm.all_gather, mine, whole, counts=counts + [1])
    expect(ValueError, ["counts[0]", ">= 0"], comm.all_gather, mine, whole, counts=[-1] + counts[1:])
    expect(TypeError, ["counts[0]"], comm.all_gather, mine, whole, counts=[1.5] + counts[1:])
    expect(TypeError, ["counts"], comm.all_gather, mine, whole, counts=5)
    expect(TypeError, ["counts"], comm.all_gather, mine, whole, counts="12")
    # Their values against the buffers: the library's rule (native/comm/call.c), naming its fields.
    one_more, whole_more = np.zeros(counts[rank] + 1, np.int64), np.zeros(total + 1, np.int64)
    expect(ValueError, ["send_count", f"counts[{rank}]"], comm.all_gather, one_more, whole, counts=counts)
    expect(ValueError, ["recv_count", "sum(counts)"], comm.all_gather, mine, whole_more, counts=counts)
    expect(ValueError, ["send_count", "sum(counts)"], comm.reduce_scatter, whole[1:], mine, counts=counts)
    expect(ValueError, ["recv_count", f"counts[{rank}]"], comm.reduce_scatter, whole, one_more, counts=counts)
    expect(ValueError, ["algorithm", "ring"], comm.reduce_scatter, whole, mine, counts=counts, algorithm="mesh")
    expect(ValueError, ["op"], comm.reduce_scatter, whole, mine, "nope", counts=counts)
    # The communicator is intact: a collective after all of these works.
    comm.all_gather(np.full(counts[rank], rank, np.int64), whole, counts=counts)
    assert np.array_equal(whole, np.repeat(np.arange(size), counts))

def check_last_algorithm(comm):
    """Run each collective at a small and a large size (int32: 32 B and 128 KiB a block) and each algorithm
    all_reduce has on both collectives that take one; return what last_algorithm said for each ("refused" where
    reduce_scatter raised ValueError, which it must do exactly for the names its table entry lacks)."""
    from pycoll.algorithms import COLL_ALGORITHMS, NATIVE_ONLY

    rank, size = comm.rank, comm.size
    ran = {}
    for n in (8, 1 << 15):
        x = np.ones(n, np.int32)
        out = np.zeros(size * n, np.int32)
        for coll, call in (("broadcast", lambda: comm.broadcast(x.copy(), root=size - 1)),
                           ("reduce", lambda: comm.reduce(x, root=0, out=np.zeros(n, np.int32))),
                           ("all_gather", lambda: comm.all_gather(x, out)),
                           ("all_gather_v", lambda: comm.all_gather(x, out, counts=[n] * size)),
                           ("reduce_scatter_v", lambda: comm.reduce_scatter(out.copy(), x.copy(), counts=[n] * size)),
                           ("all_to_all", lambda: comm.all_to_all(np.ones(size * n, np.int32), out)),
                           ("gather", lambda: comm.gather(x, out if rank == 0 else None, root=0)),
                           ("scatter", lambda: comm.scatter(out if rank == 0 else None, x.copy(), root=0)),
                           ("barrier", comm.barrier)):
            comm.last_algorithm = None
            call()
            ran[f"{coll} {n}"] = comm.last_algorithm
        for name in ("auto", *COLL_ALGORITHMS["all_reduce"]):
            if name in NATIVE_ONLY and comm.backend != "shm":
                continue
            comm.all_reduce(x.copy(), algorithm=name)
            ran[f"all_reduce {n} {name}"] = comm.last_algorithm
            try:
                comm.reduce_scatter(np.ones(size * n, np.int32), x.copy(), algorithm=name)
                ran[f"reduce_scatter {n} {name}"] = comm.last_algorithm
            except ValueError as exc:  # every rank alike, before anything was sent: the communicator goes on
                assert f"{name} has no reduce_scatter" in str(exc), exc
                ran[f"reduce_scatter {n} {name}"] = "refused"
    return ran


with failure_reported(report):
    comm = pycoll.init(timeout=timeout)
    rank, size = comm.rank, comm.size
    report["rank"] = rank
    report["backend"] = comm.backend
    if scenario == "exact":
        for k in (0, 1, 5, 1000):
            check_exact(comm, k)
        big = int(os.environ.get("TEST_BIG_COUNT", "0"))
        if big:
            check_exact(comm, big, big=True)
        check_async(comm)
        check_objects(comm)
        report["ok"] = True
    elif scenario == "last_algorithm":
        report["ran"] = check_last_algorithm(comm)
        report["ok"] = True
    elif scenario == "bad_input":
        check_bad_input(comm)
        report["ok"] = True
    elif scenario == "counts_mismatch":
        # Same total, other split on rank 1: without the counts in the descriptor this would misread data.
        counts = [2] * size
        if rank == 1:
            counts[0], counts[1] = 3, 1
        if os.environ.get("TEST_ZERO") and rank == size - 1:
            # This rank moves nothing, so it cannot find out in the call: its next collective (or its close)
            # tells the others, which must not wait for their deadline.
            counts = [0] * size
        whole = np.zeros(sum(counts), np.int64)
        kind = os.environ.get("TEST_COLL", "all_gather")
        with refusal(report):
            if kind == "all_gather":
                comm.all_gather(np.zeros(counts[rank], np.int64), whole, counts=counts)
            else:
                comm.reduce_scatter(whole, np.zeros(counts[rank], np.int64), counts=counts)
            comm.barrier()
            comm.close()
    else:
        raise SystemExit(f"unknown scenario {scenario}")
close_and_print(report, comm, t0)
