"""The new process of test_grow.py: `python grow_joiner.py ID_FILE RANK WORLD_SIZE` waits for the members'
unique id in ID_FILE and joins with it; `python grow_joiner.py - ` joins with pycoll.join() alone (the launcher's
variables and the rendezvous store). Runs every collective kind on the grown communicator (grow_worker.py's
check) and prints one JSON line: "join_s", how long pycoll.join took, and the sum of its all-reduce."""

import json
import os
import sys
import time

from grow_check import check_collectives

import pycoll

report = {}
timeout = float(os.environ.get("TEST_TIMEOUT", "20"))
comm = None
try:
    if sys.argv[1] == "-":
        started = time.monotonic()
        comm = pycoll.join(timeout=timeout)
    else:
        path, rank, world_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        deadline = time.monotonic() + timeout
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.005)
        with open(path, "rb") as f:
            unique_id = f.read()
        started = time.monotonic()
        comm = pycoll.join(unique_id, rank, world_size, timeout=timeout)
    report.update(join_s=time.monotonic() - started, rank=comm.rank, size=comm.size, transport=comm.transport)
    report.update(sum=check_collectives(comm), ok=True)
except pycoll.PycollError as exc:
    report.update(ok=False, error=type(exc).__name__, message=str(exc))
finally:
    print(json.dumps(report), flush=True)
    if comm is not None:
        comm.close()
