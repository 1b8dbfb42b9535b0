"""One rank of a rendezvous test: `python rdv_worker.py SCENARIO` under RANK/WORLD_SIZE/MASTER_* env.

cycles: TEST_CYCLES rounds of init -> all_reduce -> close on the same MASTER_PORT, stopping at the first
        failure; prints {"cycles": succeeded, "times": [...], "error": ..., "message": ...}.
late:   prints {"ready": true} just before init (rank TEST_LATE first sleeps TEST_LATE_DELAY s, or waits for
        the file TEST_GO_FILE to exist), then one JSON line with the error class, its message, its rank and
        the wall-clock time it was raised and how long init ran, or "ok" and how long init took (the job then
        stays open TEST_HOLD s).
file_store: opens FileStore(TEST_STORE), prints {"ready": true}, waits for the file TEST_GO_FILE, then inits on
        that store and all-reduces rank + 1; prints {"sum": ..., "ok": true} or the error.
"""

import json
import os
import sys
import time

import numpy as np

import pycoll

scenario = sys.argv[1]
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
rank = int(os.environ["RANK"])
report = {"rank": rank}


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def failure(exc):
    return {"error": type(exc).__name__, "message": str(exc), "failed_rank": getattr(exc, "rank", None),
            "raised_at": time.time()}


if scenario == "cycles":
    report.update(cycles=0, times=[])
    for _ in range(int(os.environ.get("TEST_CYCLES", "20"))):
        start = time.monotonic()
        try:
            with pycoll.init(timeout=timeout) as comm:
                x = np.ones(4, dtype=np.float32)
                comm.all_reduce(x)
                assert np.all(x == comm.size), x
        except pycoll.PycollError as exc:
            report.update(failure(exc))
            break
        report["times"].append(time.monotonic() - start)
        report["cycles"] += 1
elif scenario == "late":
    if rank == int(os.environ.get("TEST_LATE", "-1")):
        time.sleep(float(os.environ.get("TEST_LATE_DELAY", "0")))
        go_file, give_up = os.environ.get("TEST_GO_FILE"), time.monotonic() + timeout
        while go_file and not os.path.exists(go_file) and time.monotonic() < give_up:
            time.sleep(0.02)
    emit({"rank": rank, "ready": True})
    start = time.monotonic()
    try:
        with pycoll.init(timeout=timeout) as comm:
            report["init_s"] = time.monotonic() - start
            comm.barrier()
            time.sleep(float(os.environ.get("TEST_HOLD", "0")))  # a job that runs a while before it closes
            report["ok"] = True
    except pycoll.PycollError as exc:
        report.update(failure(exc), init_s=time.monotonic() - start)
elif scenario == "file_store":
    from pycoll.rendezvous.store import FileStore

    store = FileStore(os.environ["TEST_STORE"], timeout=timeout)
    emit({"rank": rank, "ready": True})
    give_up = time.monotonic() + timeout
    while not os.path.exists(os.environ["TEST_GO_FILE"]) and time.monotonic() < give_up:
        time.sleep(0.02)
    try:
        with pycoll.init(store=store, timeout=timeout) as comm:
            x = np.full(4, rank + 1, dtype=np.float32)
            comm.all_reduce(x)
            report.update(sum=float(x[0]), ok=True)
    except pycoll.PycollError as exc:
        report.update(failure(exc))
else:
    raise SystemExit(f"unknown scenario {scenario}")
emit(report)
