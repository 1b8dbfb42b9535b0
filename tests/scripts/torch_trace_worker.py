"""One rank of the torch flight-recorder test, started by multiproc.Ranks: 4 ranks of a pycoll group with a 2 s
timeout all-reduce 60 times, but rank 2 stalls in its own code before its 50th, so the others time out in it.
Every rank waits (bounded) for the 4 torch dumps in PYCOLL_TRACE_DIR before it exits -- rank 0 hosts the store
the others' dump flag goes through -- and reports what its loop raised."""

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import pycoll.torch  # noqa: F401 -- registers the "pycoll" backend

dist.init_process_group("pycoll", timeout=timedelta(seconds=2))
rank = dist.get_rank()
trace_dir = os.environ["PYCOLL_TRACE_DIR"]
t = torch.ones(16)
error = None
done = 0
try:
    for done in range(60):
        if rank == 2 and done == 49:
            break  # the stall: this rank never calls its 50th all_reduce
        dist.all_reduce(t)
except Exception as exc:  # noqa: BLE001 -- reported for the test to judge
    error = type(exc).__name__
deadline = time.monotonic() + 30
while time.monotonic() < deadline and not all(os.path.exists(os.path.join(trace_dir, f"torch_fr_rank_{r}"))
                                              for r in range(4)):
    time.sleep(0.05)
print(json.dumps({"rank": rank, "error": error, "done": done}), flush=True)
os._exit(0)  # the group is broken: nothing to close cleanly
