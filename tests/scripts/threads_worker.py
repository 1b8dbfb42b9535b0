"""One rank of the threads test: `python threads_worker.py "ORDER ROUNDS [async]"` under RANK/WORLD_SIZE/MASTER_*
env. Two threads named "A" and "B" take turns on one communicator, each all-reducing its own value (A: 1,
B: 1000), on a schedule fixed per rank: "same" (A, B, A, B, ... on every rank) or "opposite" (rank 0 A first,
rank 1 B first). ORDER "free": two threads with the default names ("Thread-1 (run)", ...), each ROUNDS
all-reduces of its own values (they identify the thread and the iteration) as fast as it can, with no schedule:
the communicator serialises them, in whatever order each rank's threads come. Prints one JSON line: how many
results were right, wrong, or errors (by exception type) and the first error."""

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
report = {"rank": rank, "right": 0, "wrong": 0, "errors": {}, "message": None}


def count_error(exc):
    kind = type(exc).__name__
    report["errors"][kind] = report["errors"].get(kind, 0) + 1
    report["message"] = report["message"] or f"{kind}: {exc}"


if order == "free":
    def run():
        number = int(threading.current_thread().name.split("-")[1].split()[0])
        for i in range(rounds):
            mine = number * 100_000 + i
            x = np.full(8, mine, dtype=np.int64)
            try:
                comm.all_reduce(x)
            except Exception as exc:  # noqa: BLE001 -- counted and reported
                count_error(exc)
                continue
            report["right" if np.all(x == size * mine) else "wrong"] += 1

    threads = [threading.Thread(target=run) for _ in range(2)]
    report["names"] = [t.name for t in threads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        comm.close()
    except Exception as exc:  # noqa: BLE001 -- a broken communicator may also report at close
        report["close"] = type(exc).__name__
    print(json.dumps(report), flush=True)
    sys.exit(0)

value = {"A": 1, "B": 1000}
first = "B" if order == "opposite" and rank == 1 else "A"
schedule = [first, "B" if first == "A" else "A"] * rounds
turn = [0]
cv = threading.Condition()


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
            count_error(exc)
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
