"""One rank of test_fault_stress.py: `python fault_stress_worker.py KIND VICTIM DELAY_MS [VICTIM2 DELAY2_MS]`.

The victim dies at a random instant: SIGALRM from setitimer, whose default action ends the process in the
kernel wherever it is (inside C code too, no Python cleanup, as kill -9), DELAY_MS after the start of:
  init          pycoll.init()
  coll:NAME     a loop of one collective kind (COLLECTIVES), every result checked
  coll:all      a loop running every collective kind in turn
  buckets       a loop of GradientBuckets steps (several buckets in flight)
  async         a loop of non-blocking all-reduces, several in flight
  shrink        a loop of all-reduces; then VICTIM2, a survivor, dies DELAY2_MS after entering the shrink
The survivors catch the error, shrink and all-reduce their world rank + 1 on the shrunk communicator; they shrink
again unless all of them agree that the all-reduce succeeded (a rank lost meanwhile may fail it on some only).
Prints one JSON line: the error seen, every wrong result (none expected), the members after the shrink and the sum
there."""

import json
import os
import signal
import sys
import time

import numpy as np

import pycoll

KIND, VICTIM, DELAY_MS = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
VICTIM2, DELAY2_MS = (int(sys.argv[4]), float(sys.argv[5])) if len(sys.argv) > 5 else (-1, 0.0)
RANK = int(os.environ["RANK"])
TIMEOUT = float(os.environ.get("TEST_TIMEOUT", "10"))
C = 64  # elements per block: small, so that the loops run many calls before the death
report = {"rank": RANK, "kind": KIND, "wrong": []}


def die_in(ms):
    """Arm this process's death ms from now (SIGALRM's default action: the kernel ends the process)."""
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL, "SIGALRM is handled: it would not end the process"
    signal.setitimer(signal.ITIMER_REAL, max(ms, 0.001) / 1e3)


def check(what, got, want):
    if not np.array_equal(got, want):
        report["wrong"].append(f"{what}: got {np.unique(got)[:4].tolist()}, want {np.unique(want)[:4].tolist()}")


def blocks(values):
    """A vector of len(values) blocks of C elements, block j all values[j]."""
    return np.repeat(np.asarray(values, dtype=np.float64), C)


def run_one(comm, name, it):
    """One call of collective `name` at iteration `it`, its result checked against what the inputs give."""
    n, r, root = comm.size, comm.rank, it % comm.size
    if name == "all_reduce":
        x = np.full(C, r + 1.0 + it)
        comm.all_reduce(x)
        check(name, x, np.full(C, n * (n + 1) / 2 + n * it))
    elif name == "reduce_scatter":
        out = np.empty(C)
        comm.reduce_scatter(blocks([r + j + it for j in range(n)]), out)
        check(name, out, np.full(C, n * (n - 1) / 2 + n * (r + it)))
    elif name == "all_gather":
        out = np.empty(n * C)
        comm.all_gather(np.full(C, r + it + 0.0), out)
        check(name, out, blocks([j + it for j in range(n)]))
    elif name == "broadcast":
        x = np.full(C, r * 100.0 + it)
        comm.broadcast(x, root=root)
        check(name, x, np.full(C, root * 100.0 + it))
    elif name == "reduce":
        x = np.full(C, r + 1.0 + it)
        out = np.empty(C)
        comm.reduce(x, root=root, out=out)
        if r == root:
            check(name, out, np.full(C, n * (n + 1) / 2 + n * it))
    elif name == "barrier":
        comm.barrier()
    elif name == "all_to_all":
        out = np.empty(n * C)
        comm.all_to_all(blocks([r * 10 + j + it for j in range(n)]), out)
        check(name, out, blocks([j * 10 + r + it for j in range(n)]))
    elif name == "gather":
        out = np.empty(n * C) if r == root else None
        comm.gather(np.full(C, r + it + 0.0), out, root=root)
        if r == root:
            check(name, out, blocks([j + it for j in range(n)]))
    elif name == "scatter":
        x = blocks([j + 10 * it for j in range(n)]) if r == root else None
        out = np.empty(C)
        comm.scatter(x, out, root=root)
        check(name, out, np.full(C, r + 10.0 * it))
    elif name == "send_recv":  # a ring: each rank sends to the next and receives from the previous
        got = np.empty(C)
        work = comm.send(np.full(C, r + it + 0.0), (r + 1) % n, async_op=True)
        comm.recv(got, (r - 1) % n)
        work.wait()
        check(name, got, np.full(C, (r - 1) % n + it + 0.0))
    elif name == "all_reduce_rmsnorm":  # the fused epilogue: rows of equal values normalise to 1
        x = np.full((n, C), r + 1.0 + it)
        out = comm.all_reduce_rmsnorm(x, np.ones(C), eps=0.0)
        check(name, np.round(out, 12), np.ones((n, C)))
    elif name == "buckets":
        arrays, buckets = BUCKETS
        for a in arrays:
            a[...] = r + 1.0 + it
        for i in reversed(range(len(arrays))):
            buckets.ready(i)
        buckets.wait()
        for a in arrays:
            check(name, a, np.full(a.shape, n * (n + 1) / 2 + n * it))
    elif name == "async":
        xs = [np.full(C * (k + 1), r + 1.0 + it + k) for k in range(4)]
        pycoll.wait_all([comm.all_reduce(x, async_op=True) for x in xs])
        for k, x in enumerate(xs):
            check(name, x, np.full(x.shape, n * (n + 1) / 2 + n * (it + k)))
    else:
        raise SystemExit(f"unknown collective {name}")


COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "barrier", "all_to_all",
               "gather", "scatter", "send_recv", "all_reduce_rmsnorm")
BUCKETS = None


def loop(comm, names, deadline):
    """Run the collectives in turn until one raises (the error, as the first the rank saw)."""
    it = 0
    while time.monotonic() < deadline:
        for name in names:
            try:
                run_one(comm, name, it)
            except pycoll.PycollError as exc:
                report.update(error=type(exc).__name__, message=str(exc)[:300], failed_in=name)
                return
        it += 1
    report["error"] = "none: no failure reached this rank"


def recover(comm, members):
    """Shrink until an all-reduce on the shrunk communicator succeeds on every survivor: (members, its sum). A rank
    dying inside that all-reduce may leave some ranks with the sum and others with PeerFailure, so the survivors
    agree (the AND of "it succeeded here") before they take it; else they all shrink again."""
    for attempt in range(4):
        if KIND == "shrink" and RANK == VICTIM2 and attempt == 0:
            die_in(DELAY2_MS)
        try:
            new = comm.shrink()
        except pycoll.PycollError as exc:
            report["shrink_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            return members, None
        members = [members[i] for i in new.ranks]
        x = np.array([RANK + 1.0])
        try:
            new.all_reduce(x)
            succeeded = 1
        except pycoll.PycollError as exc:  # another rank lost after the shrink
            report.setdefault("again", []).append(type(exc).__name__)
            succeeded = 0
        try:
            if new.agree(succeeded):
                return members, float(x[0])
        except pycoll.PycollError as exc:
            report["shrink_error"] = f"agree: {type(exc).__name__}: {str(exc)[:300]}"
            return members, None
        comm = new
    return members, None


start = time.monotonic()
comm = None
if KIND == "init" and RANK == VICTIM:
    die_in(DELAY_MS)
try:
    comm = pycoll.init(timeout=TIMEOUT)
except pycoll.PycollError as exc:  # the victim died inside the rendezvous: a clear error, no communicator
    report.update(init_error=type(exc).__name__, message=str(exc)[:300])
report["init_s"] = time.monotonic() - start
if comm is not None:
    names = {"init": ("all_reduce",), "coll:all": COLLECTIVES, "buckets": ("buckets",), "async": ("async",),
             "shrink": ("all_reduce",)}.get(KIND) or (KIND.split(":", 1)[1],)
    if KIND == "buckets":
        arrays = [np.zeros(C * (k + 1)) for k in range(5)]
        BUCKETS = (arrays, pycoll.GradientBuckets(comm, arrays, bucket_bytes=C * 8 * 2, op="sum"))
    if KIND != "init" and RANK == VICTIM:
        die_in(DELAY_MS)
    loop(comm, names, start + 3 * TIMEOUT)
    report["caught"] = time.monotonic() - start
    members, report["sum"] = recover(comm, list(range(comm.size)))
    report["members"] = members
    report["recovered"] = time.monotonic() - start
print(json.dumps(report), flush=True)
if comm is not None:
    try:
        comm.close()
    except pycoll.PycollError as exc:
        print(json.dumps(dict(report, close_error=f"{type(exc).__name__}: {exc}")), flush=True)
