"""One rank of tests/transports/test_tcp_streams.py and test_tcp_nics_netns.py: `python stripe_worker.py SCENARIO`
under RANK/WORLD_SIZE/MASTER_* env, with PYCOLL_TCP_STREAMS (and the backend or the interfaces) set by the test.
Prints one JSON line: the scenario's outcome and this process's established TCP connections (so that the test
counts those between the two ranks)."""

import json
import os
import signal
import sys

import numpy as np
from worker_report import outcome, peer_failure

import pycoll

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/, for proc_sockets
from proc_sockets import ESTABLISHED, tcp_sockets  # noqa: E402

# The split threshold of native/transport/tcp_stripes.h (TCP_STRIPE_MIN_BYTES): sizes around it and odd ones.
STRIPE_MIN = 256 * 1024
SIZES = (STRIPE_MIN - 1, STRIPE_MIN, STRIPE_MIN + 1, STRIPE_MIN + 4, 1_000_003, 4 * STRIPE_MIN + 13)


def connections():
    """[local, remote] of every established TCP connection of this process."""
    return [[local, remote] for state, local, remote in tcp_sockets() if state == ESTABLISHED]


scenario = sys.argv[1]
report = {"scenario": scenario}
if scenario == "refused":  # the ranks disagree on the connections per pair: set-up's outcome is the report
    with outcome(report, (pycoll.PycollError, ValueError)):
        pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "30"))).close()
    print(json.dumps(report), flush=True)
    sys.exit(0)
comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "30")))
rank = report["rank"] = comm.rank
report["connections"] = connections()
if scenario == "sizes":
    for nbytes in SIZES:
        # uint8 sum of two ranks: every byte position differs, so a part put at a wrong offset shows.
        base = np.arange(nbytes, dtype=np.int64) * 7 % 251
        x = (base + rank).astype(np.uint8)
        want = (base * 2 + 1).astype(np.uint8)
        comm.all_reduce(x)
        assert np.array_equal(x, want), nbytes
        f = np.arange(nbytes // 4 + 3, dtype=np.float32) + rank
        comm.all_reduce(f)
        assert np.array_equal(f, 2 * np.arange(nbytes // 4 + 3, dtype=np.float32) + 1), nbytes
        b = np.arange(nbytes, dtype=np.int64).astype(np.uint8) if rank == 0 else np.zeros(nbytes, np.uint8)
        comm.broadcast(b, root=0)
        assert np.array_equal(b, np.arange(nbytes, dtype=np.int64).astype(np.uint8)), nbytes
    report["ok"] = True
elif scenario == "shaped":
    # float32 sums of integers below 2^24: exact, and every element differs from its neighbours. Back to back:
    # on a slow link one direction's parts are still midway when the other direction's next frame starts.
    report["ok"] = True
    for count in (1 << 20, 4 << 20):
        base = (np.arange(count) % 251).astype(np.float32)
        x, outs = base + rank, [np.full(count, -1, np.float32) for _ in range(3)]
        for out in outs:
            comm.all_reduce(x, out=out)
        report["ok"] &= all(np.array_equal(out, base * comm.size + comm.size * (comm.size - 1) // 2) for out in outs)
    report["transport"] = comm.transport
elif scenario == "mismatch":
    # Both messages are striped; their lengths differ by one element.
    with outcome(report):
        comm.all_reduce(np.ones(STRIPE_MIN + rank, dtype=np.float32), algorithm="ring")
elif scenario == "killed":
    x = np.ones(16 << 20, dtype=np.float32)
    if rank == 1:
        comm.all_reduce(x)  # both sides striping before the kill
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGKILL))
    with peer_failure(report):
        for _ in range(200):
            comm.all_reduce(x)
print(json.dumps(report), flush=True)
if scenario != "killed":
    comm.close()
