"""One rank of a close() test: `python close_worker.py SCENARIO` under RANK/WORLD_SIZE/MASTER_* env; every rank
all-reduces once, then:

alone:  rank 0 closes (after starting an all-reduce nobody else joins when TEST_IN_FLIGHT=1) while the other
        ranks never close: they sleep until killed.
first:  rank 0 closes and exits at once; the others close TEST_LATER seconds later.

Each rank that closes prints {"rank": r, "close_s": seconds close took, "error": class name or null}.
"""

import json
import os
import sys
import time

import numpy as np

import pycoll

scenario = sys.argv[1]
rank = int(os.environ["RANK"])
comm = pycoll.init(timeout=float(os.environ["TEST_TIMEOUT"]))
x = np.ones(1024, dtype=np.float32)
comm.all_reduce(x)
assert np.all(x == comm.size), x


def timed_close():
    start, error = time.monotonic(), None
    try:
        comm.close()
    except pycoll.PycollError as exc:
        error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"rank": rank, "close_s": time.monotonic() - start, "error": error}), flush=True)


if scenario == "alone":
    if rank == 0:
        if os.environ.get("TEST_IN_FLIGHT") == "1":
            work = comm.all_reduce(np.ones(1024, dtype=np.float32), async_op=True)
            time.sleep(0.2)  # it is running, waiting for the others
        timed_close()
    else:
        time.sleep(120)
elif scenario == "first":
    if rank != 0:
        time.sleep(float(os.environ.get("TEST_LATER", "2")))
    timed_close()
else:
    raise SystemExit(f"unknown scenario {scenario}")
