"""One rank of a point-to-point test: `python p2p_worker.py SCENARIO` under RANK/WORLD_SIZE/MASTER_* env. Prints
one JSON line (the last line of stdout) that the test checks; exits 0 unless the script itself broke."""

import os
import sys
import time

import numpy as np
from worker_report import outcome, peer_failure, scenario_report

import pycoll

scenario = sys.argv[1]
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
report = {"scenario": scenario}
comm = pycoll.init(timeout=timeout)
rank, size = comm.rank, comm.size
report["rank"] = rank
nxt, prv = (rank + 1) % size, (rank - 1) % size


def payload(n, src, step):
    return (np.arange(n, dtype=np.int64) * 31 + src * 7 + step) % 100003


with scenario_report(report):
    if scenario == "exchange":
        # Every rank sends to the next and receives from the previous: async (posted together, any size) and
        # blocking (even ranks send first); several messages in a row keep their order; collectives between.
        for step, n in enumerate([1, 1000, 1 << 20, 3 << 20]):
            got = np.empty(n, dtype=np.int64)
            works = [comm.recv(got, prv, tag=step, async_op=True),
                     comm.send(payload(n, rank, step), nxt, tag=step, async_op=True)]
            pycoll.wait_all(works)
            assert np.array_equal(got, payload(n, prv, step)), (step, n)
            x = np.full(3, rank, dtype=np.int64)
            comm.all_reduce(x)
            assert np.all(x == size * (size - 1) // 2)
        for step in range(5):
            n = 100 * (step + 1)
            got = np.empty(n, dtype=np.int64)
            if rank % 2 == 0:
                comm.send(payload(n, rank, step), nxt, tag=7)
                comm.recv(got, prv, tag=7)
            else:
                comm.recv(got, prv, tag=7)
                comm.send(payload(n, rank, step), nxt, tag=7)
            assert np.array_equal(got, payload(n, prv, step)), step
        if size > 1:
            # Receives posted first, then the sends: all non-blocking, so posted together.
            burst = [np.empty(10, dtype=np.float32) for _ in range(6)]
            works = [comm.recv(b, prv, tag=1, async_op=True) for b in burst]
            sends = [comm.send(np.full(10, rank * 10 + i, dtype=np.float32), nxt, tag=1, async_op=True)
                     for i in range(6)]
            for i, w in enumerate(works):
                assert np.all(w.wait(timeout) == prv * 10 + i), i
            pycoll.wait_all(sends)
            # The same with blocking sends: they join the receives in flight instead of waiting for them.
            works = [comm.recv(b, prv, tag=2, async_op=True) for b in burst]
            for i in range(6):
                comm.send(np.full(10, rank * 10 + i, dtype=np.float32), nxt, tag=2)
            for i, w in enumerate(works):
                assert np.all(w.wait(timeout) == prv * 10 + i), i
        report["ok"] = True
    elif scenario == "late_recv":
        # Rank 1 receives on the progress thread what rank 0 sends TEST_LATE_S late.
        x = np.zeros(4, dtype=np.float32)
        if rank == 0:
            time.sleep(float(os.environ["TEST_LATE_S"]))
            comm.send(x + 1, 1)
        elif rank == 1:
            comm.recv(x, 0, async_op=True).wait()
            assert (x == 1).all(), x
        report["ok"] = True
    elif scenario == "pipeline":
        # Stages 0..size-1: activations forward, gradients backward, micro-batches in flight (1F1B-like).
        micro, width = 4, 50_000
        acts = {}
        for m in range(micro):
            a = np.full(width, float(m), dtype=np.float32) if rank == 0 else \
                comm.recv(np.empty(width, dtype=np.float32), rank - 1, tag=m)
            acts[m] = a + 1  # this stage's "layer"
            if rank < size - 1:
                comm.send(acts[m], rank + 1, tag=m, async_op=True)
        for m in reversed(range(micro)):
            g = np.ones(width, dtype=np.float32) * (m + 1) if rank == size - 1 else \
                comm.recv(np.empty(width, dtype=np.float32), rank + 1, tag=100 + m)
            assert np.all(acts[m] == m + rank + 1), m
            if rank > 0:
                comm.send(g * 2, rank - 1, tag=100 + m, async_op=True)
            else:
                assert np.all(g == (m + 1) * 2 ** (size - 1)), (m, g[:2])
        comm.barrier()
        report["ok"] = True
    elif scenario in ("wrong_tag", "wrong_length"):
        if rank == 0:
            comm.send(np.arange(4, dtype=np.int32), 1, tag=5)
        if rank == 1:
            with outcome(report):
                if scenario == "wrong_tag":
                    comm.recv(np.empty(4, dtype=np.int32), 0, tag=6)
                else:
                    comm.recv(np.empty(5, dtype=np.int32), 0, tag=5)
    elif scenario == "collective_meets_message":
        # Rank 0 sends, rank 1 enters a collective instead of receiving: named as an order disagreement.
        with outcome(report):
            if rank == 0:
                comm.send(np.arange(4, dtype=np.int32), 1)
            comm.all_reduce(np.ones(4, dtype=np.float32))
    elif scenario == "bad_input":
        errors = {}
        for name, call in [("dst self", lambda: comm.send(np.ones(2), rank)),
                           ("dst range", lambda: comm.send(np.ones(2), size)),
                           ("src range", lambda: comm.recv(np.ones(2), -1)),
                           ("tag", lambda: comm.send(np.ones(2), nxt, tag=-1)),
                           ("dst type", lambda: comm.send(np.ones(2), "1")),
                           ("read-only", lambda: comm.recv(np.ones(2)[::1].view().setflags(write=False)
                                                           or np.frombuffer(b"12345678"), prv))]:
            try:
                call()
                errors[name] = "no error"
            except (TypeError, ValueError) as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
        report["errors"] = errors
        x = np.ones(2, dtype=np.float64)
        comm.all_reduce(x)  # still usable
        report["ok"] = bool(x[0] == size)
    elif scenario == "dead_sender":
        comm.barrier()
        if rank == 1:
            time.sleep(0.3)
            os._exit(0)
        with peer_failure(report):
            comm.recv(np.empty(8, dtype=np.float32), 1)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    comm.close()
