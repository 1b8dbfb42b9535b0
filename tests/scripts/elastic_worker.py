"""One rank of test_elastic.py: `python elastic_worker.py SCENARIO`. Prints one JSON line, the report.

kill: all-reduces in a loop until the test kills a rank (kill -9); the survivors catch PeerFailure, shrink and
      all-reduce their old rank + 1 on the new communicator; "sum" is its result, "done" the wall-clock time then.
      Where the shrunk communicator spans hosts, "hier_sums" are the distinct values of a hierarchical
      all-reduce of a vector of old rank + 1 on it, "hier_ran" the algorithm that ran.
revoke: every rank all-reduces once, then rank 1 revokes while the others wait in an all-reduce for it (they
      raise CommunicatorRevoked); then all shrink and all-reduce.
agree: a healthy agreement, then the old communicator still runs; rank 2 kills itself while the others agree; they
      shrink.
exclude: ranks 0..2 shrink with exclude=[3] while rank 3 waits in an all-reduce (it is cut off).
forge_epoch: (shared memory) rank 1 claims, in the rings it writes, to have started epoch 7 at a head 2^40 bytes
      ahead, then every rank runs a ring all-reduce: the others must not skip that far, but name rank 1.
"""

import os
import signal
import sys
import time

import numpy as np
from worker_report import all_reduce_until_peer_failure, failure_reported

import pycoll

scenario = sys.argv[1]
report = {"scenario": scenario}
comm = None
with failure_reported(report):
    comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "20")))
    rank, size = comm.rank, comm.size
    report.update(rank=rank, transport=comm.transport)

    def all_reduce_ranks(c):
        """The sum of (old rank + 1) over c's members."""
        x = np.array([rank + 1.0], dtype=np.float64)
        c.all_reduce(x)
        return float(x[0])

    def revoked_then_shrunk(c):
        """An all-reduce that c's revoke ends (its message under "revoked", the wall-clock time under
        "raised_at"), then c shrunk."""
        try:
            all_reduce_ranks(c)
        except pycoll.CommunicatorRevoked as exc:
            report["revoked"] = str(exc)
            report["raised_at"] = time.time()
        return c.shrink()

    if scenario == "kill":
        big = all_reduce_until_peer_failure(comm, report, 1 << 14)
        new = comm.shrink()
        report["sum"] = all_reduce_ranks(new)
        report["done"] = time.time()
        if new.hosts > 1:  # the host-aware algorithm on the survivors' (now uneven) hosts
            v = np.full(4099, rank + 1.0)
            new.all_reduce(v, algorithm="hierarchical")
            report.update(hier_sums=sorted(set(v.tolist())), hier_ran=new.last_algorithm)
        report.update(ranks=new.ranks, new_rank=new.rank, failed_ranks=comm.failed_ranks, ok=True)
        try:
            comm.all_reduce(big)
        except pycoll.CommunicatorClosed as exc:
            report["old"] = str(exc)
    elif scenario == "train":
        # docs/fault_tolerance.md's loop, as written there, until the test kills a rank in the middle of it.
        weights = np.zeros(1000, dtype=np.float64)
        before = weights.copy()
        step, shrinks = 0, 0
        print('{"ready": true}', flush=True)
        die_at = int(os.environ.get("TEST_DIE_AT_STEP", "-1"))  # the rank that dies, at this step: mid-loop
        while step < 1500:
            if rank == 2 and step == die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            grad = np.random.default_rng(step).standard_normal(weights.size) * (comm.rank + 1)
            try:
                comm.all_reduce(grad, op="avg")
            except (pycoll.PeerFailure, pycoll.Timeout, pycoll.CommunicatorRevoked):
                comm = comm.shrink()
                shrinks += 1
                agreed = int(comm.all_reduce(np.array([step]), op="min")[0])
                if agreed < step:
                    weights, step = before, agreed
                continue
            before = weights.copy()
            weights = weights - 0.01 * grad
            step += 1
        report.update(step=step, shrinks=shrinks, size=comm.size, checksum=weights.tobytes().hex()[:64],
                      total=float(weights.sum()), ok=True)
    elif scenario == "revoke":
        all_reduce_ranks(comm)
        if rank == 1:
            time.sleep(0.5)  # the others are waiting in the next all-reduce by now
            report["revoked_at"] = time.time()
            comm.revoke()
        new = revoked_then_shrunk(comm)
        report.update(sum=all_reduce_ranks(new), ranks=new.ranks, failed_ranks=comm.failed_ranks, ok=True)
        # The shrunk communicator is a full one: non-blocking calls and splits of it.
        y = np.array([rank + 1.0])
        new.all_reduce(y, async_op=True).wait()
        half = new.split(rank % 2)
        report.update(async_sum=float(y[0]), split_sum=all_reduce_ranks(half))
    elif scenario == "revoke_thread":
        # Rank 1's watchdog thread revokes while rank 1's main thread waits in an all-reduce (rank 3 is late).
        all_reduce_ranks(comm)
        if rank == 1:
            def watchdog():
                time.sleep(0.3)
                report["revoked_at"] = time.time()
                comm.revoke()
            import threading
            threading.Thread(target=watchdog).start()
        if rank == 3:
            time.sleep(1.0)
        new = revoked_then_shrunk(comm)
        report.update(sum=all_reduce_ranks(new), ranks=new.ranks, ok=True)
    elif scenario == "agree":
        report["healthy"] = comm.agree(0b1111 & ~(1 << rank))
        report["still"] = all_reduce_ranks(comm)  # a healthy agreement leaves the communicator usable
        if rank == 2:
            time.sleep(0.3)  # the others are in the agreement by now, waiting for this rank too
            os.kill(os.getpid(), signal.SIGKILL)
        report["flag"] = comm.agree(0b1111 ^ (1 << rank) if rank == 0 else 0b1111)
        report["failed_ranks"] = comm.failed_ranks
        new = comm.shrink()
        report.update(sum=all_reduce_ranks(new), ranks=new.ranks, ok=True)
    elif scenario == "exclude":
        all_reduce_ranks(comm)
        if rank == 3:
            # Late, so that the others have finished the all-reduce above: a rank that finds itself cut off aborts,
            # and an abort fails whatever collective its peers are still in.
            time.sleep(0.3)
            try:
                all_reduce_ranks(comm)
            except pycoll.PeerFailure as exc:
                report["cut"] = str(exc)
            report["ok"] = True
        else:
            new = comm.shrink(exclude=[3])
            report.update(sum=all_reduce_ranks(new), ranks=new.ranks, failed_ranks=comm.failed_ranks, ok=True)
            try:
                all_reduce_ranks(comm)
            except pycoll.CommunicatorClosed as exc:
                report["old"] = str(exc)
    elif scenario == "forge_epoch":
        from shm_segments import RING_FIELDS, Segments, load, store

        # native/transport/shm_layout.h: the epoch words after the ring control page's text.
        EPOCH, EPOCH_HEAD = 864, 872
        x = np.ones(16, dtype=np.float32)
        try:  # the others may still be reading rank 1's last message of this one when it forges
            comm.all_reduce(x, algorithm="ring")
            if rank == 1:
                seg = Segments(size, rank, int(os.environ.get("PYCOLL_SHM_RING_BYTES") or 4 << 20))
                for (inode, sender), ctrl in seg.rings.items():
                    if sender == rank and inode != seg.own:  # the rings rank 1 writes (in the others' segments)
                        store(ctrl + EPOCH_HEAD, 8, load(ctrl + RING_FIELDS["head"][0], 8) + (1 << 40))
                        store(ctrl + EPOCH, 4, 7)
                time.sleep(0.3)
            comm.all_reduce(x, algorithm="ring")
        except pycoll.PeerFailure as exc:
            report.update(error="PeerFailure", message=str(exc), failed_rank=exc.rank)
        report["ok"] = True
    else:
        raise SystemExit(f"unknown scenario {scenario}")
import json  # noqa: E402

print(json.dumps(report), flush=True)
if comm is not None:
    try:
        comm.close()
    except pycoll.PycollError:
        pass
