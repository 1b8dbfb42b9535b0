"""One rank of a 2-rank test of arrays that pycoll reads through DLPack: `python dlpack_worker.py torch|jax`.
Prints one JSON line {"rank":..., "ok": true} or {"rank":..., "error": "..."} (the test reads it).

Values are small multiples of 1/2, so every sum is exact in every dtype (bfloat16 included) whatever the
algorithm: the result must equal the reference bit for bit."""

import json
import os
import sys
import traceback

import numpy as np
import torch

import pycoll

DTYPES = ("int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64")
COUNT = 1000


def values(rank, dtype):
    """This rank's data as float64; integers for integer dtypes, halves for float dtypes."""
    i = np.arange(COUNT)
    v = (i % 16 - 8 * (dtype != "uint8")) + rank
    return v.astype(np.float64) if dtype.startswith("int") or dtype == "uint8" else v + 0.5 * (i % 2)


def tensor(rank, dtype):
    return torch.from_numpy(values(rank, dtype)).to(getattr(torch, dtype))


def reference(size, dtype):
    return torch.from_numpy(sum(values(r, dtype) for r in range(size))).to(getattr(torch, dtype))


def check_torch(comm):
    rank, size = comm.rank, comm.size
    for dtype in DTYPES:  # every supported dtype, in place and into a torch out=
        x = tensor(rank, dtype)
        assert comm.all_reduce(x) is x
        assert torch.equal(x, reference(size, dtype)), dtype
        out = torch.zeros(COUNT, dtype=getattr(torch, dtype))
        assert comm.all_reduce(tensor(rank, dtype), out=out) is out
        assert torch.equal(out, reference(size, dtype)), dtype
    bf16 = torch.bfloat16
    x = tensor(rank, "bfloat16")
    out = torch.zeros(COUNT // size, dtype=bf16)
    comm.reduce_scatter(x, out)
    assert torch.equal(out, reference(size, "bfloat16").reshape(size, -1)[rank])
    gathered = torch.zeros(COUNT * size, dtype=bf16)
    comm.all_gather(x, gathered)
    assert torch.equal(gathered, torch.cat([tensor(r, "bfloat16") for r in range(size)]))
    for root in (torch.tensor(1), np.int64(0)):  # any integer type names the root
        out = torch.zeros(COUNT, dtype=bf16)
        comm.reduce(x, root=root, out=out)
        want = reference(size, "bfloat16") if rank == int(root) else torch.zeros(COUNT, dtype=bf16)
        assert torch.equal(out, want), int(root)
    # Integer avg truncates toward zero after a sum that wraps (docs/api.md, Communicator.all_reduce).
    x = torch.tensor([-3, 3, -1, 7] if rank == 0 else [0, 0, 0, 0], dtype=torch.int32)
    comm.all_reduce(x, op="avg")
    assert x.tolist() == [-1, 1, 0, 3], x.tolist()
    x = torch.tensor([200 if rank == 0 else 100], dtype=torch.uint8)
    comm.all_reduce(x, op="avg")
    assert x.tolist() == [22], x.tolist()  # (300 - 256) // 2


def check_jax(comm):
    import jax.numpy as jnp

    rank, size = comm.rank, comm.size
    x = jnp.asarray(values(rank, "bfloat16"), dtype=jnp.bfloat16)
    out = torch.zeros(COUNT, dtype=torch.bfloat16)
    assert comm.all_reduce(x, out=out) is out
    assert torch.equal(out, reference(size, "bfloat16"))
    assert np.array_equal(np.asarray(x, dtype=np.float64), values(rank, "bfloat16"))  # x is left alone


report = {}
try:
    with pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "30"))) as comm:
        report["rank"] = comm.rank
        {"torch": check_torch, "jax": check_jax}[sys.argv[1]](comm)
        report["ok"] = True
except Exception:
    report["error"] = traceback.format_exc()
sys.stdout.write(json.dumps(report) + "\n")
sys.stdout.flush()
