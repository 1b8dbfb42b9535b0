"""A member of test_grow.py's job: `python grow_worker.py SCENARIO`. Rank 0 hands the grow's unique id to the
test through the file GROW_ID_FILE (written whole, then renamed), which gives it to the new process. Prints one
JSON line, the report.

grow: 3 ranks grow to 4; every collective kind on the grown communicator.
store: 3 ranks grow to 4 without an id (rank 0 publishes one in the rendezvous store: pycoll.join() with no
      arguments reads it).
replace: 4 ranks all-reduce in a loop until the test kills one (kill -9); the survivors shrink to 3, then grow back
      to 4 with the replacement the test starts; "done" is the wall-clock time the grown all-reduce finished.
missing: 3 ranks; rank 2 stays away from the grow (alive, then closes): the others' grow ends in a Timeout.
"""

import os
import sys
import time

from grow_check import check_collectives
from worker_report import all_reduce_until_peer_failure, failure_reported, report_and_close

import pycoll

scenario = sys.argv[1]
report = {"scenario": scenario}
comm = grown = None


def hand_over(unique_id):
    path = os.environ["GROW_ID_FILE"]
    with open(path + ".part", "wb") as f:
        f.write(unique_id)
    os.rename(path + ".part", path)


with failure_reported(report):
    timeout = float(os.environ.get("TEST_TIMEOUT", "20"))
    comm = pycoll.init(timeout=timeout)
    rank = comm.rank
    if scenario in ("grow", "store"):
        uid = None
        if scenario == "grow" and rank == 0:
            uid = pycoll.get_unique_id(toward="127.0.0.1")
            hand_over(uid)
        grown = comm.grow(4, unique_id=uid)
        report.update(rank=grown.rank, size=grown.size, transport=grown.transport,
                      sum=check_collectives(grown), ok=True)
    elif scenario == "replace":
        all_reduce_until_peer_failure(comm, report, 1 << 12)
        small = comm.shrink()
        uid = None
        if small.rank == 0:
            uid = pycoll.get_unique_id(toward="127.0.0.1")
            hand_over(uid)
        grown = small.grow(4, unique_id=uid)
        report["sum"] = check_collectives(grown)
        report.update(done=time.time(), rank=grown.rank, ranks=small.ranks, transport=grown.transport, ok=True)
    elif scenario == "missing":
        if rank == 2:
            time.sleep(6)
            report["ok"] = True
        else:
            uid = None
            if rank == 0:
                uid = pycoll.get_unique_id(toward="127.0.0.1")
                hand_over(uid)
            try:
                comm.grow(4, unique_id=uid, timeout=3)
            except pycoll.PycollError as exc:
                report.update(error=type(exc).__name__, message=str(exc), ok=True)
for c in (grown, comm):
    if c is not None:
        try:
            c.close()
        except pycoll.PycollError:
            pass
report_and_close(report, None)
