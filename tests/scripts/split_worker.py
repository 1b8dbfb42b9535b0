"""One rank of a subgroup test: `python split_worker.py SCENARIO` under RANK/WORLD_SIZE/MASTER_* env. Prints one
JSON line (the last line of stdout) that the test checks; exits 0 unless the script itself broke."""

import os
import sys
import threading
import time

import numpy as np
from worker_report import outcome, peer_failure, scenario_report

import pycoll

scenario = sys.argv[1]
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
report = {"scenario": scenario}

if scenario == "orphan":
    # The communicator made by init has no reference but its split's: the split must keep it working.
    comm = pycoll.init(timeout=timeout).split(0)
    import gc
    gc.collect()
else:
    comm = pycoll.init(timeout=timeout)
rank, size = comm.rank, comm.size
report["rank"] = rank


def ints(n, seed):
    return (np.arange(n, dtype=np.int64) * 7 + seed * 1000003) % 1000


def parent_in_flight(comm, timeout):
    """Returns once this rank's latest call on comm is an all_reduce still running (its flight record says so):
    a fixed sleep for the other thread to get there is not enough on loaded cores."""
    deadline = time.monotonic() + timeout
    while True:
        latest = comm.trace_records()[-1:]
        if latest and latest[0]["collective"] == "all_reduce" and latest[0]["end_unix_ns"] is None:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the parent's all_reduce did not start within {timeout} s")
        time.sleep(0.002)


def check_collectives(c, tag):
    """Every collective on c, exact on integer data; c.ranks (parent numbering) seeds each member's data."""
    seeds = c.ranks
    me = seeds[c.rank]
    n = 1000 + 3 * len(seeds)
    want = sum(ints(n, s) for s in seeds)
    for algorithm in ("ring", "halving_doubling", "mesh", "recursive_doubling", "hierarchical", "auto"):
        x = ints(n, me)
        c.all_reduce(x, algorithm=algorithm)
        assert np.array_equal(x, want), (tag, algorithm)
    f = ints(n, me).astype(np.float64) / 8
    c.all_reduce(f, accuracy="compensated")
    assert np.array_equal(f, want.astype(np.float64) / 8), (tag, "compensated")
    k = 7
    out = np.empty(k, dtype=np.int64)
    x = ints(k * len(seeds), me)
    c.reduce_scatter(x, out)
    assert np.array_equal(out, sum(ints(k * len(seeds), s) for s in seeds)[c.rank * k:(c.rank + 1) * k]), tag
    gathered = np.empty(5 * len(seeds), dtype=np.int64)
    c.all_gather(np.full(5, me, dtype=np.int64), gathered)
    assert np.array_equal(gathered, np.repeat(np.array(seeds, dtype=np.int64), 5)), tag
    root = len(seeds) - 1
    b = np.full(33, me, dtype=np.int32)
    c.broadcast(b, root=root)
    assert np.all(b == seeds[root]), tag
    r = ints(17, me)
    c.reduce(r, root=root)
    if c.rank == root:
        assert np.array_equal(r, sum(ints(17, s) for s in seeds)), tag
    c.barrier()
    w = c.all_reduce(ints(64, me), async_op=True)
    assert np.array_equal(w.wait(timeout), sum(ints(64, s) for s in seeds)), tag


with scenario_report(report):
    if scenario == "groups":
        # Parity groups numbered by descending rank; a split where rank 0 joins nothing; nesting; by host.
        c = comm.split(rank % 2, key=-rank)
        members = sorted((r for r in range(size) if r % 2 == rank % 2), reverse=True)
        assert c.ranks == members and c.size == len(members) and c.rank == members.index(rank), c.ranks
        check_collectives(c, "parity")
        none = comm.split(None if rank == 0 else 7)
        assert (none is None) == (rank == 0)
        if none is not None:
            assert none.ranks == list(range(1, size)) and none.rank == rank - 1
            check_collectives(none, "all but 0")
        if c.size >= 2:
            nested = c.split(c.rank // 2)
            assert nested.ranks == [i for i in range(c.size) if i // 2 == c.rank // 2]
            x = np.array([rank], dtype=np.int64)
            nested.all_reduce(x)
            assert x[0] == sum(c.ranks[i] for i in nested.ranks), x
        local = comm.split_by_host()
        assert local.size == comm.local_size and local.ranks == list(range(size)), local.ranks
        check_collectives(comm, "parent after splits")
        report["ok"] = True
    elif scenario == "mesh":
        # pp x dp x tp over 8 ranks: membership, coordinates, and every group used interleaved with the
        # parent, blocking and async, as hybrid-parallel training does.
        mesh = comm.mesh(pp=2, dp=2, tp=size // 4)
        pp, dp, tp = mesh.coords["pp"], mesh.coords["dp"], mesh.coords["tp"]
        assert rank == (pp * 2 + dp) * (size // 4) + tp, mesh.coords
        groups = {"tp": [(pp * 2 + dp) * (size // 4) + t for t in range(size // 4)],
                  "dp": [(pp * 2 + d) * (size // 4) + tp for d in range(2)],
                  "pp": [(p * 2 + dp) * (size // 4) + tp for p in range(2)]}
        for name, ranks in groups.items():
            assert mesh[name].ranks == ranks and mesh[name].rank == mesh.coords[name], (name, mesh[name].ranks)
        works = []
        for step in range(12):
            for name in ("tp", "dp", "pp"):
                g = mesh[name]
                x = ints(100 + step, rank + step)
                want = sum(ints(100 + step, r + step) for r in groups[name])
                if (step + len(name)) % 3 == 0:
                    works.append((g.all_reduce(x, async_op=True), want))
                else:
                    g.all_reduce(x)
                    assert np.array_equal(x, want), (name, step)
            y = np.full(10, rank, dtype=np.int64)
            comm.all_reduce(y)
            assert np.all(y == size * (size - 1) // 2)
        for work, want in works:
            assert np.array_equal(work.wait(timeout), want)
        check_collectives(mesh["dp"], "dp")
        report["ok"] = True
    elif scenario == "mismatch":
        # Members of one group disagree about a count: both sides named, no hang.
        c = comm.split(rank % 2)
        with outcome(report):
            c.all_reduce(np.zeros(5 + (rank == 0), dtype=np.int64))
    elif scenario == "order":
        # Ranks sharing two communicators call them in opposite orders: named, not a hang.
        c = comm.split(0)
        order = [c, comm] if rank == 0 else [comm, c]
        with outcome(report):
            for g in order:
                g.all_reduce(np.ones(1000, dtype=np.float32))
    elif scenario == "death":
        # The last rank dies; every member of every communicator it belongs to hears of it within 2 s.
        mesh = comm.mesh(dp=2, tp=size // 2)
        comm.barrier()
        if rank == size - 1:
            time.sleep(0.5)  # every other rank is past the barrier and waiting for this one
            os._exit(0)
        mine = [name for name in ("tp", "dp") if size - 1 in mesh[name].ranks]
        g = mesh[mine[0]] if mine else comm
        with peer_failure(report):
            g.all_reduce(np.ones(1 << 16, dtype=np.float32))
        report["later"] = {}
        for name, g in (("parent", comm), ("tp", mesh["tp"]), ("dp", mesh["dp"])):
            try:
                g.all_reduce(np.ones(4, dtype=np.float32))
                report["later"][name] = "no error"
            except pycoll.PycollError as exc:
                report["later"][name] = type(exc).__name__
    elif scenario == "close":
        c = comm.split(0)
        d = comm.split(rank % 2)
        d.close()
        x = np.ones(8, dtype=np.int64)
        c.all_reduce(x)
        comm.all_reduce(x)  # closing a split leaves the parent and its other splits working
        assert np.all(x == size * size), x
        work = c.all_reduce(np.ones(1 << 20, dtype=np.float32), async_op=True)
        work.wait(timeout)
        comm.close()
        outcomes = []
        for call in (lambda: c.all_reduce(x), lambda: c.barrier(async_op=True).wait(timeout)):
            try:
                call()
                outcomes.append("no error")
            except pycoll.CommunicatorClosed:
                outcomes.append("CommunicatorClosed")
        report["after_parent_close"] = outcomes
        report["ok"] = True
    elif scenario == "orphan":
        y = np.ones(2, dtype=np.int64)
        comm.all_reduce(y)
        report["ok"] = bool(np.all(y == size))
    elif scenario == "threads":
        # A second thread calling a split while the first runs a collective on the parent (they share
        # connections) waits for its turn, then runs: the same calls in the same order on both ranks.
        c = comm.split(0)
        if rank == 1:
            time.sleep(1.0)
        done = threading.Event()
        t = threading.Thread(target=lambda: (comm.all_reduce(np.ones(16, dtype=np.float64)), done.set()))
        t.start()
        if rank == 0:
            parent_in_flight(comm, timeout)
            started = time.monotonic()
            report["split_result"] = c.all_reduce(np.ones(4, dtype=np.float64)).tolist()
            report["waited"] = time.monotonic() - started
            t.join(timeout)
            # When each call ended, as the library stamped it (not when each Python thread got the GIL back):
            # the parent's collective before the split's.
            parent, split = comm.trace_records()[-1], c.trace_records()[-1]
            report["parent_done_first"] = parent["end_unix_ns"] <= split["end_unix_ns"]
        t.join(timeout)
        report["parent_done"] = done.is_set()
        if rank == 1:
            report["split_result"] = c.all_reduce(np.ones(4, dtype=np.float64)).tolist()
        report["ok"] = True
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    comm.close()
