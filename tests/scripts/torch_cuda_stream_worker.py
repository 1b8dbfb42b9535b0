"""One rank of tests/integrations/test_torch_cuda_fakes.py's stream test (2 ranks, the fake NCCL's libraries in the
environment, every buffer reported as device memory, each fake collective FAKE_KERNEL_US long): an all_reduce
of a CUDA tensor (tests/fakes/fake_torch_cuda.py) through the "pycoll" backend, whose Work.wait() returns while
the device still runs it, the current stream (the legacy one) ordered after it; then a coalesced batch of two.
Prints one JSON line: how long wait() took, whether the Work was still pending, how long until the stream had run
the collective, the results."""

import ctypes
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/, for fakes

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from fakes.fake_torch_cuda import cuda, enable  # noqa: E402

import pycoll.torch  # noqa: E402,F401 -- registers the "pycoll" backend


def main():
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("pycoll", rank=rank, world_size=size, timeout=datetime.timedelta(seconds=15))
    enable()
    runtime = ctypes.CDLL(os.environ["PYCOLL_CUDART_LIBRARY"])
    runtime.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
    g = dist.group.WORLD
    g.allreduce([cuda(torch.ones(1024))]).wait()  # warm: the NCCL communicator and its stream exist
    runtime.cudaStreamSynchronize(None)
    t = cuda(torch.full((1024,), rank + 1.0))
    started = time.monotonic()
    work = g.allreduce([t])
    work.wait()
    waited = time.monotonic() - started
    pending = not work.is_completed()
    runtime.cudaStreamSynchronize(None)  # the current (legacy) stream: it waits for the collective's end event
    synced = time.monotonic() - started
    right = bool(torch.equal(t.as_subclass(torch.Tensor), torch.full((1024,), size * (size + 1) / 2)))
    # A coalesced batch (torch's _coalescing_manager): its one Work's wait() orders the stream after them all.
    a, b = cuda(torch.full((1024,), rank + 1.0)), cuda(torch.full((8,), rank + 1.0))
    started = time.monotonic()
    g._start_coalescing(a.device)
    g.allreduce([a])
    g.allreduce([b])
    g._end_coalescing(a.device).wait()
    coalesced_waited = time.monotonic() - started
    runtime.cudaStreamSynchronize(None)
    coalesced_synced = time.monotonic() - started
    right = right and bool(torch.equal(b.as_subclass(torch.Tensor), torch.full((8,), size * (size + 1) / 2)))
    print(json.dumps({"waited": waited, "pending": pending, "synced": synced, "right": right,
                      "coalesced_waited": coalesced_waited, "coalesced_synced": coalesced_synced}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
