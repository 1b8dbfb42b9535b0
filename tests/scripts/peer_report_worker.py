"""One rank of test_peer_reports.py: `python peer_report_worker.py bad_argument`. Rank 1 calls the native
all-reduce with a NULL buffer (a bad argument the Python layer would have caught: the C algorithm finds it, and
rank 1 aborts with PYCOLL_ERR_INVALID, telling the others) while ranks 0 and 2 run the same ring all-reduce.
Prints one JSON line, the report: the error type, message and rank each rank raised."""

import os
import sys

import numpy as np
from worker_report import report_and_close

import pycoll
from pycoll._bindings.abi import ALGORITHMS, COLLECTIVES, DTYPES, OPS

report = {"scenario": sys.argv[1]}
comm = None
try:
    comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "10")))
    report["rank"] = comm.rank
    x = np.ones(16, dtype=np.float32)
    comm.all_reduce(x, algorithm="ring")  # connected and working
    if comm.rank == 1:
        # The same collective the others call (pycoll_call_t: all_reduce of 16 float32, sum, ring), with no
        # buffer.
        native = comm._engine.native
        native.run(COLLECTIVES["all_reduce"], 0, 0, 16, 16, DTYPES["float32"], op=OPS["sum"],
                   algorithm=ALGORITHMS["ring"])
    else:
        comm.all_reduce(x, algorithm="ring")
    report["ok"] = True
except Exception as exc:  # noqa: BLE001 -- the test judges the type
    report.update(error=type(exc).__name__, message=str(exc), failed_rank=getattr(exc, "rank", None))
report_and_close(report, comm)
