"""One rank of a multi-process test: `python comm_worker.py SCENARIO` under RANK/WORLD_SIZE/MASTER_* env.
Prints one JSON line {"rank":..., "ok":..., "error": class name, "message":..., "elapsed":...} and exits 0
when the scenario behaved as the test expects it to be checked (the test reads the JSON)."""

import json
import os
import sys
import time

import numpy as np

import pycoll
from pycoll.algorithms import COLL_ALGORITHMS

if "TEST_RANKS_PER_FAKE_HOST" in os.environ:
    # Hosts faked on one machine (tests/transports/test_comm_routed.py): consecutive ranks share a "host", so the
    # default backend runs over shared memory within each and TCP between them -- without network namespaces.
    _fake_host = int(os.environ["RANK"]) // int(os.environ["TEST_RANKS_PER_FAKE_HOST"])
    os.environ["PYCOLL_HOSTID"] = f"fake-host-{_fake_host}"

scenario = sys.argv[1]
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
report = {"scenario": scenario}
t0 = time.monotonic()
comm = None
try:
    comm = pycoll.init(timeout=timeout)
    rank, size = comm.rank, comm.size
    report["rank"] = rank
    report.update(backend=comm.backend, transport=comm.transport,
                  hosts=comm.hosts, local_rank=comm.local_rank, local_size=comm.local_size)
    if scenario == "collectives":
        for algorithm in ("ring", "halving_doubling", "mesh", "recursive_doubling", "hierarchical", "auto"):
            for count in (0, 1, size - 1, 1009, 100003):
                x = (np.arange(count, dtype=np.int64) % 97 + rank).astype(np.int32)
                want = sum((np.arange(count, dtype=np.int64) % 97 + r) for r in range(size)).astype(np.int32)
                comm.all_reduce(x, algorithm=algorithm)
                assert np.array_equal(x, want), (algorithm, count)
        out = np.empty(7 * size, dtype=np.float64)
        comm.all_gather(np.full(7, rank, dtype=np.float64), out)
        assert np.array_equal(out, np.repeat(np.arange(size, dtype=np.float64), 7))
        b = np.arange(10, dtype=np.float32) * (rank == 1)
        comm.broadcast(b, root=1 % size)
        assert np.array_equal(b, np.arange(10, dtype=np.float32) * (size > 1))
        rs = np.empty(5, dtype=np.int64)
        comm.reduce_scatter(np.arange(5 * size, dtype=np.int64), rs)
        assert np.array_equal(rs, size * np.arange(5 * rank, 5 * rank + 5))
        red = np.full(3, rank + 1, dtype=np.int64)
        comm.reduce(red, root=0)
        assert rank != 0 or np.array_equal(red, np.full(3, size * (size + 1) // 2))
        comm.barrier()
        report["options"] = comm._engine.native.options
        report["ok"] = True
    elif scenario == "matrix":
        # Every collective, algorithm and accuracy, in and out of place: exact on integer data, and a digest
        # of float results that must be bitwise identical on every rank. TEST_BIG_COUNT adds a large message.
        import hashlib

        digest = hashlib.sha256()
        counts = (0, 1, size + 1, 4099) + ((int(os.environ["TEST_BIG_COUNT"]),) if "TEST_BIG_COUNT" in os.environ
                                          else ())
        root = size - 1
        for accuracy in ("fast", "compensated"):
            for algorithm in ("ring", "halving_doubling", "mesh", "recursive_doubling", "hierarchical", "auto"):
                for count in counts:
                    base = np.arange(count, dtype=np.int64) % 101
                    want = sum(base + r for r in range(size))
                    x = base + rank
                    out = np.empty_like(x)
                    comm.all_reduce(x, out=out, algorithm=algorithm, accuracy=accuracy)
                    assert np.array_equal(out, want) and np.array_equal(x, base + rank), (algorithm, count)
                    comm.all_reduce(x, algorithm=algorithm, accuracy=accuracy)
                    assert np.array_equal(x, want), (algorithm, accuracy, count)
                    f = np.random.default_rng(1000 * rank + count).standard_normal(count).astype(np.float32)
                    comm.all_reduce(f, algorithm=algorithm, accuracy=accuracy)
                    digest.update(f.tobytes())
                    rs_in = np.arange(count * size, dtype=np.int64) % 7 + rank
                    rs = np.empty(count, dtype=np.int64)
                    # an all-reduce-only algorithm is refused by reduce_scatter: its table's first, the ring
                    has = algorithm in ("auto", *COLL_ALGORITHMS["reduce_scatter"])
                    comm.reduce_scatter(rs_in, rs, algorithm=algorithm if has else "ring", accuracy=accuracy)
                    full = np.arange(count * size, dtype=np.int64) % 7 * size + size * (size - 1) // 2
                    assert np.array_equal(rs, full[rank * count:(rank + 1) * count]), (algorithm, count)
                    red = base * (rank + 1)
                    red_out = np.empty_like(red)
                    comm.reduce(red, root=root, out=red_out, accuracy=accuracy)
                    assert rank != root or np.array_equal(red_out, base * (size * (size + 1) // 2)), count
            count = counts[-1]
            gathered = np.empty(count * size, dtype=np.int32)
            comm.all_gather(np.full(count, rank, dtype=np.int32), gathered)
            assert np.array_equal(gathered, np.repeat(np.arange(size, dtype=np.int32), count))
            b = np.arange(count, dtype=np.float64) if rank == root else np.zeros(count)
            comm.broadcast(b, root=root)
            assert np.array_equal(b, np.arange(count, dtype=np.float64))
            comm.barrier()
        report["digest"] = digest.hexdigest()
        report["ok"] = True
    elif scenario == "hierarchical":
        # The hierarchical all-reduce (and auto) across the job's hosts: exact on integer data, compensated
        # float32 within one ulp of the exact sum (a float64 sum of a few float32 normals is exact), and a
        # digest of every float result that must be bitwise identical on every rank.
        import hashlib

        digest = hashlib.sha256()
        ran = set()
        for accuracy in ("fast", "compensated"):
            for algorithm in ("hierarchical", "auto"):
                for count in (0, 1, size + 1, 4099, 100003):
                    base = np.arange(count, dtype=np.int64) % 101
                    x = (base + rank).astype(np.int32)
                    comm.all_reduce(x, algorithm=algorithm, accuracy=accuracy)
                    assert np.array_equal(x, sum(base + r for r in range(size))), (algorithm, accuracy, count)
                    ran.add(comm.last_algorithm)
                    inputs = [np.random.default_rng(1000 * r + count).standard_normal(count).astype(np.float32)
                              for r in range(size)]
                    f = inputs[rank].copy()
                    comm.all_reduce(f, op="sum", algorithm=algorithm, accuracy=accuracy)
                    digest.update(f.tobytes())
                    if accuracy == "compensated":
                        exact = np.sum([v.astype(np.float64) for v in inputs], axis=0)
                        ulp = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
                        assert (np.abs(f - exact) <= ulp).all(), (algorithm, count)
        if "TEST_ORDER_SUM" in os.environ:
            # Fast float32 shows the order of the sums (tests/transports/test_multihost_netns.py says what to expect).
            order = np.full(4096, (2.0 ** 24, 1.0, -2.0 ** 24, 1.0)[rank], dtype=np.float32)
            comm.all_reduce(order, algorithm="hierarchical")
            assert (order == float(os.environ["TEST_ORDER_SUM"])).all(), np.unique(order)
        report["ran"] = sorted(ran)
        report["digest"] = digest.hexdigest()
        report["ok"] = True
    elif scenario == "loop":
        # Collectives until something fails (a peer is killed or stopped by the test).
        x = np.ones(int(os.environ.get("TEST_COUNT", 1 << 16)), dtype=np.float32)
        algorithm = os.environ.get("TEST_ALGORITHM", "ring")
        collective = os.environ.get("TEST_COLLECTIVE", "all_reduce")
        blocks = np.ones(size * len(x), dtype=np.float32)
        print(json.dumps({"rank": rank, "ready": True}), flush=True)
        while True:
            if collective == "reduce_scatter":
                comm.reduce_scatter(blocks, x, algorithm=algorithm)
            elif collective == "all_gather":
                comm.all_gather(x, blocks)
            elif collective == "broadcast":
                comm.broadcast(x, root=0)
            elif collective == "all_to_all":
                comm.all_to_all(blocks, np.empty_like(blocks))
            else:
                comm.all_reduce(x, algorithm=algorithm)
            x[:] = 1
            if rank == int(os.environ.get("TEST_VICTIM", "-1")):
                time.sleep(0.01)
    elif scenario == "auto":
        x = np.ones(int(os.environ.get("TEST_COUNT", "262144")), dtype=np.float32)
        comm.all_reduce(x)
        assert np.all(x == size)
        report["algorithm"] = comm.last_algorithm
        report["options"] = comm._engine.native.options
        report["ok"] = True
    elif scenario == "late":
        # Rank 0 comes TEST_LATE_S late to a barrier: the others wait that long for it.
        if rank == 0:
            time.sleep(float(os.environ["TEST_LATE_S"]))
        comm.barrier()
        report["ok"] = True
    elif scenario == "closer":
        # The victim closes its communicator (and stays alive); the others' next collective must fail fast.
        x = np.ones(1 << 16, dtype=np.float32)
        comm.all_reduce(x, algorithm="ring")
        if rank == int(os.environ["TEST_VICTIM"]):
            comm.close()
            time.sleep(5)
            report["ok"] = True
        else:
            comm.all_reduce(x, algorithm="ring")
            report["ok"] = True
    elif scenario == "interrupt":
        # Rank 0 blocks in a collective that rank 1 joins only much later; the test sends rank 0 SIGINT.
        x = np.ones(16, dtype=np.float32)
        if rank == 0:
            print(json.dumps({"rank": rank, "ready": True}), flush=True)
            try:
                comm.all_reduce(x)
            except KeyboardInterrupt:
                report["error"] = "KeyboardInterrupt"
        else:
            time.sleep(20)
    elif scenario == "mismatch":
        kind = os.environ["TEST_MISMATCH"]
        x = np.ones(1000, dtype=np.float32)
        if kind == "count" and rank == 1:
            x = np.ones(999, dtype=np.float32)
        if kind == "dtype" and rank == 1:
            x = np.ones(1000, dtype=np.float64)
        op = "max" if kind == "op" and rank == 1 else "sum"
        algorithm = "mesh" if kind == "algorithm" and rank == 1 else "ring"
        if kind == "collective" and rank == 1:
            comm.broadcast(x, root=0)
        else:
            comm.all_reduce(x, op=op, algorithm=algorithm)
        report["ok"] = True
    elif scenario == "roots":
        # Ranks disagree on the root of a rooted collective (TEST_ROOTS: one root per rank). The disagreement
        # must surface as MismatchError on every rank: at the call, the next collective, or close().
        roots = [int(r) for r in os.environ["TEST_ROOTS"].split(",")]
        then = os.environ.get("TEST_THEN", "next")
        x = np.full(int(os.environ.get("TEST_COUNT", "4")), rank + 1, dtype=np.float32)
        report["phase"] = "call"
        if os.environ.get("TEST_COLL", "broadcast") == "broadcast":
            comm.broadcast(x, root=roots[rank])
        else:
            comm.reduce(x, root=roots[rank])
        report["phase"] = then
        if then == "next":
            comm.all_reduce(x)
        closing, comm = comm, None  # close() below, inside the try, so its error is reported
        closing.close()
        report["ok"] = True
    elif scenario == "slow_close":
        # TEST_VICTIM closes 3 s after the others; their close() must stop waiting for it after its linger.
        comm.all_reduce(np.ones(4, dtype=np.float32))
        if rank == int(os.environ["TEST_VICTIM"]):
            time.sleep(3)
        closing, comm = comm, None
        started = time.monotonic()
        closing.close()
        report["close_s"] = time.monotonic() - started
        report["ok"] = True
    elif scenario == "sleeps":
        # Small all-reduces and p2p ping-pongs (run with PYCOLL_SPIN_US=0: every wait sleeps at once); reports
        # how this process's shared-memory sleeps ended (pycoll_test_shm_sleeps).
        import ctypes
        x, y = np.ones(4, dtype=np.float32), np.empty(4, dtype=np.float32)
        for _ in range(200):
            comm.all_reduce(x, out=y, algorithm=os.environ.get("TEST_ALGORITHM", "auto"))
            assert np.all(y == size), y
        peer = rank ^ 1
        if peer < size:
            for i in range(100):
                if rank & 1:
                    comm.recv(x, peer)
                    comm.send(x, peer)
                else:
                    comm.send(x, peer)
                    comm.recv(x, peer)
        lib = ctypes.CDLL(pycoll.get_library())
        total, rung = ctypes.c_int64(), ctypes.c_int64()
        lib.pycoll_test_shm_sleeps(ctypes.byref(total), ctypes.byref(rung))
        report.update(sleeps=total.value, rung=rung.value, algorithm=comm.last_algorithm, ok=True)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
except pycoll.PycollError as exc:
    report.update(error=type(exc).__name__, message=str(exc), failed_rank=getattr(exc, "rank", None))
    # After an error the communicator must refuse further collectives with a clear message.
    if comm is not None:
        try:
            comm.barrier()
            report["after"] = "no error"
        except pycoll.PycollError as again:
            report["after"] = f"{type(again).__name__}: {again}"
report["elapsed"] = time.monotonic() - t0
# One write per line: ranks of mpirun/torchrun share a pipe, and print() may write the newline separately.
sys.stdout.write(json.dumps(report) + "\n")
sys.stdout.flush()
if comm is not None:
    comm.close()
