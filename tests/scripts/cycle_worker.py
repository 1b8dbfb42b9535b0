"""One rank of the cycle and label tests: `python cycle_worker.py SCENARIO` under RANK/WORLD_SIZE/MASTER_* env.
Prints one JSON line: the outcome (exception type or "no error"), its message and how long the call took."""

import json
import os
import sys
import time

import numpy as np

import pycoll

scenario = sys.argv[1]
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
comm = pycoll.init(timeout=timeout)
rank, size = comm.rank, comm.size
report = {"rank": rank, "outcome": "no error", "message": ""}
start = time.monotonic()
try:
    if scenario == "recv_first":
        # Both ranks receive from the other before sending: neither can ever send.
        comm.recv(np.empty(4, dtype=np.int64), 1 - rank)
        comm.send(np.zeros(4, dtype=np.int64), 1 - rank)
    elif scenario == "ping_pong_slow":
        # Receives that wait past the probe time on a peer that is busy elsewhere (sleeping, then sending):
        # stuck for a while, but no cycle, in either direction and after earlier messages.
        for step in range(4):
            got = np.empty(3, dtype=np.int64)
            if (rank + step) % 2 == 0:
                time.sleep(0.15)
                comm.send(np.full(3, step, dtype=np.int64), 1 - rank)
                comm.recv(got, 1 - rank)
            else:
                comm.recv(got, 1 - rank)
                time.sleep(0.15)
                comm.send(got, 1 - rank)
            assert np.all(got == step), (step, got)
        report["ok"] = True
    elif scenario == "first_collective_mismatch":
        # The user's very first collective disagrees: it is #1 in the message, whatever init ran before it.
        comm.broadcast(np.zeros(3 + rank, dtype=np.float64), root=0)
    elif scenario == "group_order":
        # Ranks 0 and 2 share a split and call it and the parent in opposite orders; rank 1 is in no split.
        sub = comm.split(0 if rank != 1 else None)
        order = {0: [sub, comm], 1: [comm], 2: [comm, sub]}[rank]
        for g in order:
            g.all_reduce(np.ones(1000, dtype=np.float32))
except pycoll.PycollError as exc:
    report["outcome"] = type(exc).__name__
    report["message"] = str(exc)
report["seconds"] = time.monotonic() - start
try:
    comm.close()
except pycoll.PycollError:
    pass
print(json.dumps(report), flush=True)
