"""One rank of the torch refusal tests, started by multiproc.Ranks: in groups with a 60 s timeout, one rank
refuses its arguments (or the ranks disagree on a size) while the other enters the collective. Each rank
reports, per case, what its call raised and how long it took; the test wants every rank to fail within moments
(never the group's timeout), the others with MismatchError naming the refusing rank's reason. Last, both ranks
refuse alike: both raise at once and the group still works."""

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import pycoll.torch  # noqa: F401 -- registers the "pycoll" backend

TIMEOUT = timedelta(seconds=60)
dist.init_process_group("pycoll", timeout=TIMEOUT)
rank = dist.get_rank()


def outcome(call):
    start = time.monotonic()
    try:
        value = call()
    except Exception as exc:  # noqa: BLE001 -- reported for the test to judge
        return {"raised": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - start}
    return {"raised": None, "value": repr(value), "seconds": time.monotonic() - start}


def all_reduce_band(group):
    op = dist.ReduceOp.BAND if rank == 1 else dist.ReduceOp.SUM
    dist.all_reduce(torch.ones(4, dtype=torch.int32), op=op, group=group)


def broadcast_sizes(group):
    dist.broadcast(torch.ones(8 if rank == 0 else 4), src=0, group=group)


def all_gather_short_list(group):
    outs = [torch.empty(4) for _ in range(2 if rank == 0 else 1)]
    dist.all_gather(outs, torch.ones(4), group=group)


def all_gather_into_tensor_size(group):
    dist.all_gather_into_tensor(torch.empty(8 if rank == 0 else 6), torch.ones(4), group=group)


def async_all_reduce_bool_avg(group):
    t = torch.ones(4, dtype=torch.bool if rank == 1 else torch.float32)
    dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group, async_op=True).wait()


report = {"rank": rank}
for case in (all_reduce_band, broadcast_sizes, all_gather_short_list, all_gather_into_tensor_size,
             async_all_reduce_bool_avg):
    group = dist.new_group(timeout=TIMEOUT)  # a fresh communicator: a failed one stays failed
    report[case.__name__] = outcome(lambda case=case, group=group: case(group))

group = dist.new_group(timeout=TIMEOUT)
report["both_refuse"] = outcome(lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BXOR, group=group))
t = torch.ones(4)
report["after_both_refuse"] = outcome(lambda: dist.all_reduce(t, group=group))
report["after_value"] = t.tolist()
print(json.dumps(report), flush=True)
os._exit(0)  # the failed communicators have nothing more to say to the peer
