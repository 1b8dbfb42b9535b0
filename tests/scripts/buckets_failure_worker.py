"""One rank of the GradientBuckets failure test: a step runs on both ranks, then rank 1 exits without closing
(as a crashed rank does). Rank 0's next step fails in wait(); after that, ready() raises the same error at once
(before, it started an all-reduce on the broken communicator and returned). Prints one JSON line."""

import json
import os

import numpy as np

import pycoll

comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "30")))
rank = comm.rank
arrays = [np.ones(5, dtype=np.float32), np.ones(300, dtype=np.float64)]
buckets = pycoll.GradientBuckets(comm, arrays, bucket_bytes=64)
buckets.wait()  # a first step on both ranks
if rank == 1:
    os._exit(0)
report = {"rank": rank, "step0": [a.tolist()[:1] for a in arrays]}


def outcome(fn):
    try:
        fn()
    except pycoll.PycollError as exc:
        return {"error": type(exc).__name__, "rank": getattr(exc, "rank", None), "message": str(exc)}
    return {"error": None}


report["wait"] = outcome(buckets.wait)
report["ready"] = outcome(lambda: buckets.ready(0))
report["ready_again"] = outcome(lambda: buckets.ready(1))
report["ok"] = True
print(json.dumps(report), flush=True)
