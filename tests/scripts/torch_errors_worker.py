"""One rank of the torch error tests, started by multiproc.Ranks: a pycoll group with a 1 s timeout in which
rank 1 enters no collective, so each of rank 0's calls fails by pycoll's deadline. Rank 0 reports, per call,
what reached it: the exception's type and message, how long the call took, and whether the tensor changed.
Rank 1 waits on torch's store for rank 0 to finish, and says it heard."""

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import pycoll.torch  # noqa: F401 -- registers the "pycoll" backend

dist.init_process_group("pycoll", timeout=timedelta(seconds=1))
rank = dist.get_rank()
store = dist.distributed_c10d._get_default_store()


def outcome(call):
    start = time.monotonic()
    try:
        value = call()
    except Exception as exc:  # noqa: BLE001 -- reported for the test to judge
        return {"raised": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__],
                "message": str(exc), "seconds": time.monotonic() - start}
    return {"raised": None, "value": repr(value), "seconds": time.monotonic() - start}


if rank == 0:
    report = {"rank": 0}
    # The barrier first: alone, with a fresh communicator, it must fail by the group's deadline.
    report["barrier"] = outcome(dist.barrier)
    t = torch.ones(4)
    report["all_reduce"] = outcome(lambda: dist.all_reduce(t))
    report["unchanged"] = torch.equal(t, torch.ones(4))
    work = dist.all_reduce(torch.ones(4), async_op=True)
    report["future_wait"] = outcome(lambda: work.get_future().wait())
    report["work_wait"] = outcome(work.wait)
    report["future_then"] = outcome(lambda: work.get_future().then(lambda f: f.value()).wait())
    print(json.dumps(report), flush=True)
    store.set("done", "1")
    # Rank 0 hosts the store: it stays until rank 1 has heard, or rank 1's wait would lose its connection.
    store.wait(["heard"], timedelta(seconds=60))
else:
    store.wait(["done"], timedelta(seconds=60))
    store.set("heard", "1")
    print(json.dumps({"rank": rank}), flush=True)
os._exit(0)  # the communicator has failed; nothing more to say to the peer
