"""One rank of a flight-recorder test: `python trace_worker.py SCENARIO` under RANK/WORLD_SIZE/MASTER_* env (and
PYCOLL_TRACE_* as the test sets them). Prints one JSON line (the last line of stdout) that the test checks."""

import json
import os
import sys
import time

import numpy as np

import pycoll

scenario = sys.argv[1]
comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "30")))
rank = comm.rank
report = {"rank": rank}
x = np.ones(4, np.float32)

if scenario == "stall":
    # Rank 2 stalls before its 50th all-reduce (seq 50): the others wait in it until the test kills the job.
    for i in range(60):
        if rank == 2 and i == 49:
            print(json.dumps({"stalling": True}), flush=True)
            time.sleep(600)
        comm.all_reduce(x)
elif scenario == "many":
    for _ in range(int(os.environ["TRACE_CALLS"])):
        comm.all_reduce(x)
elif scenario == "mismatch":
    for _ in range(3):
        comm.all_reduce(x)
    try:
        comm.all_reduce(x) if rank == 0 else comm.broadcast(x, root=0)
    except pycoll.PycollError as exc:
        report["outcome"] = type(exc).__name__
elif scenario == "ring":
    for _ in range(20):
        comm.all_reduce(x)
    report["seqs"] = [r["seq"] for r in comm.trace_records()]
elif scenario == "async":
    if rank == 1:
        time.sleep(0.5)
        comm.all_reduce(x)
    else:
        work = comm.all_reduce(x, async_op=True)
        report["queued"] = comm.trace_records()[-1]
        work.wait()
        report["done"] = comm.trace_records()[-1]
    try:
        comm.dump_trace()
    except ValueError as exc:
        report["no_dir"] = str(exc)
comm.close()
print(json.dumps(report), flush=True)
