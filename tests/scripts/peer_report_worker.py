"""One rank of test_peer_reports.py: `python peer_report_worker.py bad_argument`. Rank 1 calls the native
pairwise all-to-all with its send and receive buffer the same memory (a bad argument the Python layer would have
caught: the schedule finds it once the collective has begun, and rank 1 aborts with PYCOLL_ERR_INVALID, telling
the others) while ranks 0 and 2 run the same all-to-all with separate buffers.
Prints one JSON line, the report: the error type, message and rank each rank raised."""

import os
import sys

import numpy as np
from worker_report import report_and_close

import pycoll
from pycoll.buffers import as_buffer
from pycoll.plugins import Call

report = {"scenario": sys.argv[1]}
comm = None
try:
    comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "10")))
    report["rank"] = comm.rank
    x = np.ones(16, dtype=np.float32)
    comm.all_reduce(x, algorithm="ring")  # connected and working
    blocks = np.ones(3 * 4, dtype=np.float32)
    # The same collective on every rank (pycoll_call_t: all_to_all of 12 float32, pairwise); rank 1's in place.
    out = blocks if comm.rank == 1 else np.empty_like(blocks)
    comm._engine.native.run(Call("all_to_all", as_buffer(blocks), as_buffer(out), algorithm="pairwise"))
    report["ok"] = True
except Exception as exc:  # noqa: BLE001 -- the test judges the type
    report.update(error=type(exc).__name__, message=str(exc), failed_rank=getattr(exc, "rank", None))
report_and_close(report, comm)
