"""One rank of the overlap test: `python overlap_worker.py` under RANK/WORLD_SIZE/MASTER_* env. Every collective
is called with x and out sharing part of one array (blocking and async_op=True): each must raise ValueError
naming both before anything is sent, so the communicator stays usable; then exact aliasing (in place) must
still give the right result. Prints one JSON line: the messages, and whether the in-place results were right."""

import json
import os

import numpy as np

import pycoll

timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
comm = pycoll.init(timeout=timeout)
rank, size = comm.rank, comm.size
n, shift = 1 << 20, 1000  # 1M float64, out shifted by 1,000 elements from x
report = {"rank": rank, "transport": comm.transport, "refused": {}, "accepted": []}


def refused(name, call):
    try:
        call()
    except ValueError as exc:
        report["refused"][name] = str(exc)
    else:
        report["accepted"].append(name)


def both(name, fn, *args, **kwargs):
    """The blocking call and the async one."""
    refused(name, lambda: fn(*args, **kwargs))
    refused(name + " async", lambda: fn(*args, **kwargs, async_op=True).wait(timeout))


base = np.arange(size * n + shift, dtype=np.float64)
both("all_reduce", comm.all_reduce, base[:n], out=base[shift:shift + n])
both("all_reduce out before x", comm.all_reduce, base[shift:shift + n], out=base[:n])
both("reduce_scatter", comm.reduce_scatter, base[:size * n], base[shift:shift + n])
both("all_gather", comm.all_gather, base[shift:shift + n], base[:size * n])
both("all_to_all", comm.all_to_all, base[:size * n], base[shift:shift + size * n])
both("all_gather counts", comm.all_gather, base[shift:shift + n], base[:size * n], counts=[n] * size)
both("reduce_scatter counts", comm.reduce_scatter, base[:size * n], base[shift:shift + n], counts=[n] * size)
# Rooted collectives: only the root holds both buffers, so every rank takes a turn as the root and the others
# sit it out (their own call would be the root's partner).
for root in range(size):
    if rank == root:
        both(f"reduce root {root}", comm.reduce, base[:n], root=root, out=base[shift:shift + n])
        both(f"gather root {root}", comm.gather, base[shift:shift + n], base[:size * n], root=root)
        both(f"scatter root {root}", comm.scatter, base[:size * n], base[shift:shift + n], root=root)
    comm.barrier()
refused("GradientBuckets", lambda: pycoll.GradientBuckets(comm, [np.zeros(8), base[:10], base[5:20]]))

# Exact aliasing is in place and still right, the communicator untouched by the refusals above.
x = np.full(n, rank + 1.0)
comm.all_reduce(x, out=x)
same = x[:]  # another array object over exactly x's memory
comm.all_reduce(x, out=same)
want = float(size * (size + 1) // 2) * size
report["in_place_ok"] = bool(np.all(x == want))
y = np.full(n, rank + 1.0)
comm.all_reduce(y[:], out=y, async_op=True).wait(timeout)
root_buf = np.full(n, rank + 1.0)
comm.reduce(root_buf, root=0, out=root_buf[:] if rank == 0 else None)
# all_gather in place, as NCCL defines it and torch's FSDP uses it: x is exactly this rank's block of out.
gathered = np.zeros(size * n)
gathered[rank * n:(rank + 1) * n] = rank + 1.0
comm.all_gather(gathered[rank * n:(rank + 1) * n], gathered)
report["all_gather_in_place_ok"] = bool(np.all(gathered == np.repeat(np.arange(1.0, size + 1), n)))
report["async_in_place_ok"] = bool(np.all(y == size * (size + 1) // 2))
report["reduce_in_place_ok"] = bool(np.all(root_buf == (size * (size + 1) // 2 if rank == 0 else rank + 1.0)))
comm.close()
print(json.dumps(report), flush=True)
