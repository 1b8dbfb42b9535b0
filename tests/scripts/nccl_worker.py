"""One rank of a job on backend="nccl" through pycoll.init(), against the fake libnccl (the test points
PYCOLL_NCCL_LIBRARY at it). "Device" arrays are numpy arrays exported through __cuda_array_interface__."""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fakes.vendor_harness import FakeDeviceArray  # noqa: E402

import pycoll  # noqa: E402

report = {}
with pycoll.init(backend="nccl", timeout=30) as comm:
    rank, size = comm.rank, comm.size
    report.update(rank=rank, backend=comm.backend)
    x = np.arange(1000, dtype=np.float32) + rank
    comm.all_reduce(FakeDeviceArray(x))
    report["sum_ok"] = bool(np.array_equal(x, size * np.arange(1000, dtype=np.float32) + sum(range(size))))
    y = np.full(1000, 0.1, dtype=np.float64)
    comm.all_reduce(FakeDeviceArray(y), op="avg", accuracy="compensated")
    report["compensated_ok"] = bool(np.all(y == 0.1))
    out = np.empty(4 * size, dtype=np.int32)
    comm.all_gather(FakeDeviceArray(np.full(4, rank, dtype=np.int32)), FakeDeviceArray(out))
    report["gather_ok"] = bool(np.array_equal(out, np.repeat(np.arange(size, dtype=np.int32), 4)))
    try:
        comm.all_reduce(np.ones(3, dtype=np.float32))
    except TypeError as exc:
        report["host_refused"] = str(exc)
sys.stdout.write(json.dumps(report) + "\n")
