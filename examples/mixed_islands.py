"""One job across CUDA, NPU and host ranks (backend="auto"): ranks of one kind form an island, collectives run
inside each island with its vendor's library and between islands over pycoll's host transports.

    pycoll run -n 6 examples/mixed_islands.py

Ranks 0-1 bring CUDA arrays (NCCL), 2-3 NPU arrays (HCCL), 4-5 host arrays. On a machine without GPUs and NPUs
the fake libraries of tests/fakes stand in for both (docs/heterogeneous.md): their
"device" memory is host memory, so the arrays are NumPy arrays presented as device arrays.
"""

import os
import sys
from pathlib import Path

import numpy as np

import pycoll

KINDS = ("cuda", "cuda", "npu", "npu", "host", "host")
rank = int(os.environ["RANK"])
kind = KINDS[rank % len(KINDS)]
FAKES = "libfake_" in os.environ.get("PYCOLL_NCCL_LIBRARY", "") + os.environ.get("PYCOLL_HCCL_LIBRARY", "")


def on_my_device(values):
    """values (NumPy) as an array of this rank's kind."""
    if kind == "host":
        return values
    if FAKES:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from fakes.vendor_harness import device_array
        return device_array(kind, values)
    import torch
    if kind == "npu":
        import torch_npu  # noqa: F401 -- registers the "npu" device
    return torch.from_numpy(values).to(f"{kind}:{int(os.environ.get('LOCAL_RANK', 0)) % 8}")


with pycoll.init(backend="auto", device=kind) as comm:
    if comm.rank == 0:
        print(f"{comm.size} ranks formed {len(comm.islands)} islands:\n{comm.islands}")
    values = np.full(4, comm.rank + 1, dtype=np.float32)
    x = on_my_device(values)
    comm.all_reduce(x)  # in place, on every rank's own kind of memory
    result = values if FAKES or kind == "host" else x.cpu().numpy()
    print(f"rank {comm.rank} ({kind}, {comm.island.backend}): all_reduce -> {result.tolist()}")
