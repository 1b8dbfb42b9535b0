"""One rank of the fork test: rank 0 forks after init. The child tries the communicator (a blocking and a
non-blocking all-reduce, a gradient bucket, the store, close), reports through a pipe what each raised, and exits
normally (atexit and the garbage collector run). Then rank 0 and rank 1 run all-reduces whose results must be
exact. Prints one JSON line."""

import gc
import json
import os
import sys

import numpy as np

import pycoll

comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "30")))
rank, size = comm.rank, comm.size
report = {"rank": rank, "pid": os.getpid()}
# One collective before the fork: the connections are in use when the child inherits them.
x = np.full(4, rank + 1, dtype=np.int64)
comm.all_reduce(x)
report["before"] = x.tolist()


def attempt(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 -- what the child saw goes to the parent
        return {"error": type(exc).__name__, "message": str(exc), "owner_pid": getattr(exc, "owner_pid", None)}
    return {"error": None}


def shm_names():
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"pycoll-{os.getpid()}-"))


if rank == 0:
    report["segments_before"] = shm_names()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        y = np.full(4, 100, dtype=np.int64)  # values the parent's peers must never see
        buckets = pycoll.GradientBuckets(comm, [np.ones(3, dtype=np.float32)])
        seen = {"all_reduce": attempt(lambda: comm.all_reduce(y)),
                "async": attempt(lambda: comm.all_reduce(y, async_op=True).wait()),
                "buckets": attempt(lambda: buckets.ready(0)),
                "store": attempt(lambda: comm._store.check(["anything"])) if comm._store is not None else None,
                "close": attempt(comm.close), "child_pid": os.getpid()}
        with os.fdopen(write_end, "w") as pipe:
            pipe.write(json.dumps(seen))
        del comm, buckets
        gc.collect()
        sys.exit(0)  # a normal exit: atexit handlers and finalizers run
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        report["child"] = json.loads(pipe.read() or "null")
    report["child_exit"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    report["segments_after_child"] = shm_names()
results = []
for i in range(5):
    z = np.full(4, 10 * i + rank, dtype=np.int64)
    comm.all_reduce(z)
    results.append(bool(np.all(z == sum(10 * i + r for r in range(size)))))
report["after"] = results
comm.close()
report["ok"] = True
print(json.dumps(report), flush=True)
