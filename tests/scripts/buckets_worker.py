"""One rank of the GradientBuckets test: mixed shapes and dtypes, ready() in a different order on every rank,
some arrays moved into their buckets with view(i); after each step the arrays must equal per-array all-reduces
of the same data, exactly (integer-valued data: every summation order gives the same bits). Prints one JSON
line."""

import json
import os
import sys

import numpy as np

import pycoll

comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "30")))
rank, size = comm.rank, comm.size
bucket_bytes = int(os.environ.get("TEST_BUCKET_BYTES", str(4096)))
shapes = [(7,), (3, 5), (128,), (1,), (33, 2), (0,), (1000,), (4, 4, 4)] * 6
dtypes = [np.float32, np.float64, np.int64, np.float32]
arrays = [np.zeros(shape, dtype=dtypes[i % len(dtypes)]) for i, shape in enumerate(shapes)]
registered = arrays
if os.environ.get("TEST_ARRAY_KIND") == "torch":
    import torch

    # PyTorch CPU tensors over the same memory: the buckets take them (through DLPack), the checks below read
    # the NumPy arrays that share it.
    registered = [torch.from_numpy(a) for a in arrays]
buckets = pycoll.GradientBuckets(comm, registered, bucket_bytes=bucket_bytes)
viewed = {i: buckets.view(i) for i in range(0, len(arrays), 5)}
report = {"rank": rank, "buckets": buckets.bucket_count}
rng = np.random.default_rng(rank)
for step in range(3):
    values = [(np.arange(a.size).reshape(a.shape) % 17 + rank * 3 + step).astype(a.dtype) for a in arrays]
    for i, v in enumerate(values):
        (viewed[i] if i in viewed else arrays[i])[...] = v
    order = rng.permutation(len(arrays)) if step < 2 else []  # the last step: wait() alone takes every array
    for i in order:
        buckets.ready(int(i))
    buckets.wait()
    for i, v in enumerate(values):
        want = comm.all_reduce(v.copy(), "avg")
        got = viewed[i] if i in viewed else arrays[i]
        assert got.dtype == want.dtype and np.array_equal(got, want), (step, i, got, want)
report["ok"] = True
sys.stdout.write(json.dumps(report) + "\n")
comm.close()
