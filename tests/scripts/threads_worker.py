"""One rank of the threads test: `python threads_worker.py "ORDER ROUNDS [async]"` under RANK/WORLD_SIZE/MASTER_*
env. Two threads named "A" and "B" take turns on one communicator, each all-reducing its own value (A: 1,
B: 1000), on a schedule fixed per rank: "same" (A, B, A, B, ... on every rank) or "opposite" (rank 0 A first,
rank 1 B first). Prints one JSON line: how many results were right, wrong, or errors (by exception type) and
the first error."""

import json
import os
import sys
import threading

import numpy as np

import pycoll

order, rounds, *mode = sys.argv[1].split()
rounds, async_op = int(rounds), mode == ["async"]
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
comm = pycoll.init(timeout=timeout)
rank, size = comm.rank, comm.size
value = {"A": 1, "B": 1000}
first = "B" if order == "opposite" and rank == 1 else "A"
schedule = [first, "B" if first == "A" else "A"] * rounds
turn = [0]
cv = threading.Condition()
report = {"rank": rank, "right": 0, "wrong": 0, "errors": {}, "message": None}


def worker(name):
    while True:
        with cv:
            cv.wait_for(lambda: turn[0] >= len(schedule) or schedule[turn[0]] == name)
            if turn[0] >= len(schedule):
                return
        x = np.full(4, value[name], dtype=np.int64)
        try:
            if async_op:
                comm.all_reduce(x, async_op=True).wait(timeout)
            else:
                comm.all_reduce(x)
            report["right" if np.all(x == size * value[name]) else "wrong"] += 1
        except Exception as exc:  # noqa: BLE001 -- counted and reported
            kind = type(exc).__name__
            report["errors"][kind] = report["errors"].get(kind, 0) + 1
            report["message"] = report["message"] or str(exc)
        with cv:
            turn[0] += 1
            cv.notify_all()


threads = [threading.Thread(target=worker, args=(n,), name=n) for n in ("A", "B")]
for t in threads:
    t.start()
for t in threads:
    t.join()
# The main thread, used by no collective until now, still runs the communicator's collectives (same order).
if not report["errors"]:
    y = np.ones(2, dtype=np.int64)
    comm.all_reduce(y)
    report["main_ok"] = bool(np.all(y == size))
try:
    comm.close()
except Exception as exc:  # noqa: BLE001 -- a broken communicator may also report at close
    report["close"] = type(exc).__name__
print(json.dumps(report), flush=True)
