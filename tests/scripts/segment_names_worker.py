"""One rank of a shared-memory job whose start the test controls (test_segment_names.py): rank 0 makes the id
and writes it to <dir>/id; every rank waits for <dir>/go, joins with init_rank and all-reduces rank + 1.
With argv[2] = "SUFFIX:N" the next N draws of this process's segment names take SUFFIX (the test seam
_force_segment_draws), so the test can have those names taken before they are drawn."""

import json
import os
import sys
import time

import numpy as np

import pycoll

directory = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
if len(sys.argv) > 2 and sys.argv[2]:
    from pycoll._bindings.comm import _force_segment_draws

    suffix, n = sys.argv[2].split(":")
    _force_segment_draws(suffix, int(n))
id_path, go_path = os.path.join(directory, "id"), os.path.join(directory, "go")
if rank == 0:
    unique_id = pycoll.get_unique_id("lo")
    with open(id_path + ".tmp", "wb") as f:
        f.write(unique_id)
    os.rename(id_path + ".tmp", id_path)
end = time.monotonic() + timeout
while not os.path.exists(go_path):
    if time.monotonic() > end:
        sys.exit(f"rank {rank}: no go within {timeout} s")
    time.sleep(0.005)
with open(id_path, "rb") as f:
    unique_id = f.read()
report = {"rank": rank}
try:
    comm = pycoll.init_rank(unique_id, rank, world, backend="shm", timeout=timeout, ifname="lo")
    x = np.full(4, rank + 1, dtype=np.int64)
    comm.all_reduce(x)
    report.update(ok=True, result=x.tolist())
    comm.close()
except pycoll.PycollError as exc:
    report.update(ok=False, error=f"{type(exc).__name__}: {exc}")
print(json.dumps(report), flush=True)
