"""One rank of a test of what a job's first collective does right after init: `python first_call_worker.py
SCENARIO` under RANK/WORLD_SIZE/MASTER_* env. Prints one JSON line: where an error was raised ("init" or
"collective"), its class and message.

mismatch: rank r all-reduces 4 + 3 r elements, so the ranks disagree on the size of their first collective.
"""

import json
import os
import sys

import numpy as np

import pycoll

scenario = sys.argv[1]
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
rank = int(os.environ["RANK"])
report = {"rank": rank}
if scenario != "mismatch":
    raise SystemExit(f"unknown scenario {scenario}")
try:
    comm = pycoll.init(timeout=timeout)
except pycoll.PycollError as exc:
    report.update(where="init", error=type(exc).__name__, message=str(exc))
else:
    try:
        comm.all_reduce(np.ones(4 + 3 * rank, dtype=np.float32))
        report["where"] = None
    except pycoll.PycollError as exc:
        report.update(where="collective", error=type(exc).__name__, message=str(exc))
    comm.close()
print(json.dumps(report), flush=True)
