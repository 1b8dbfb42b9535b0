"""One rank of test_shrink_race.py: `python shrink_race_worker.py SCENARIO`. Prints one JSON line.

Through the agreement's test seam (pycoll_test_agreement_hook, called before each consensus round with its
coordinator), in the first shrink one rank stalls before the last round, so the last coordinator finishes that
shrink first and goes on while the stalled rank has not yet read what it sent:
  abort   (3 ranks) rank 0 dies as its own round begins, once the others wait for it there; rank 1 stalls before
          rank 2's round. Rank 2 fails its next all-reduce (rank 0, dead, is in the shrunk communicator) and
          shrinks again meanwhile.
  revoke  (2 ranks) rank 0 stalls before rank 1's round; rank 1 revokes the shrunk communicator meanwhile.
Each survivor shrinks until an all-reduce succeeds: "shrinks" lists the members after each, "sum" the result."""

import ctypes
import json
import os
import signal
import sys
import time

import numpy as np
from worker_report import failure_reported

import pycoll

scenario = sys.argv[1]
report = {"scenario": scenario}
stalled = False


@ctypes.CFUNCTYPE(None, ctypes.c_int32)
def before_round(coordinator):
    global stalled
    if scenario == "abort" and rank == 0 and coordinator == 0:
        time.sleep(0.2)  # the others are past the first step, waiting for this round
        os.kill(os.getpid(), signal.SIGKILL)
    if coordinator == comm.size - 1 and rank == comm.size - 2 and not stalled:
        stalled = True
        time.sleep(1.0)  # the last coordinator finishes this shrink and goes on meanwhile


with failure_reported(report):
    comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "10")))
    rank = comm.rank
    ctypes.CDLL(pycoll.get_library()).pycoll_test_agreement_hook(before_round)
    members = list(range(comm.size))
    for _ in range(3):
        new = comm.shrink()
        members = [members[i] for i in new.ranks]
        report.setdefault("shrinks", []).append(members)
        if scenario == "revoke" and rank == 1 and len(report["shrinks"]) == 1:
            new.revoke()
        x = np.array([rank + 1.0])
        try:
            new.all_reduce(x)
        except (pycoll.PeerFailure, pycoll.CommunicatorRevoked):  # a rank died, or the revoke: shrink again
            comm = new
            continue
        report.update(sum=float(x[0]), ok=True)
        break
print(json.dumps(report), flush=True)
