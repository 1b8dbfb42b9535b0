"""One rank of the shared-memory fault tests (test_shm_faults.py): `python shm_fault_worker.py SCENARIO`.
Prints JSON lines {"rank", ...}; the last one is the report (the test reads it), and the process exits 0
unless it crashed.

Scenarios:
  leave  the last rank leaves (TEST_HOW: close, exit or os_exit) while the others are in an all-reduce
         (TEST_ALGORITHM) they entered before (TEST_ORDER=waiting) or after (after); every line carries
         CLOCK_MONOTONIC times (one clock for every process of the host) so the test can measure the latency
  poke   rank 1 writes one bad value (TEST_FIELD) into a shared field, then every rank runs a collective
  forge  rank 1 marks the rings it writes aborted with a status (TEST_STATUS) and failed rank
         (TEST_FAILED_RANK) of its choosing: what a rank that lies in its abort would write
  fuzz   rank 1 writes random values into every shared field of one family (TEST_FIELDS) from a thread while
         every rank runs collectives, until an error or TEST_FUZZ_S seconds
  lie    rank 1 overwrites, from a thread, the buffer address it publishes for single copies with one it does
         not have (TEST_LIE: unmapped or short) while every rank runs TEST_ITERATIONS large collectives
         (TEST_COLLECTIVE)

The shared fields are found from inside the rank (shm_segments.py)."""

import ctypes
import json
import os
import random
import sys
import threading
import time

import numpy as np
from shm_segments import FLAG_FIELDS, FLAGS_BYTES, FRAME_HEADER_BYTES, PAGE, RING_FIELDS, Segments, load, store

import pycoll

scenario = sys.argv[1]
report = {"scenario": scenario}
t0 = time.monotonic()
comm = None


def emit(**extra):
    report.update(extra)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


def random_value(rng, nbytes, current, ring_bytes):
    """A value a fuzzer writes over `current`: anything, or near what is there (inside and just outside what
    the checks accept), or an extreme."""
    if nbytes not in (4, 8):
        return bytes(rng.getrandbits(8) for _ in range(nbytes))
    choice = rng.randrange(4)
    if choice == 0:
        return rng.getrandbits(8 * nbytes)
    if choice == 1:
        return current + rng.randint(-3 * ring_bytes, 3 * ring_bytes)
    if choice == 2:
        return current + rng.choice((-2, -1, 1, 2, 3))
    return rng.choice((0, 2**(8 * nbytes) - 1, 2**(8 * nbytes - 1), 1 << 40))


def fuzz_targets(seg, family):
    """(address, nbytes) of every shared field of `family` this process maps."""
    targets = []
    if family in ("ring_index", "ring_closed"):
        names = ("head", "tail") if family == "ring_index" else ("closed", "status", "failed_rank", "desc",
                                                                    "prev", "text")
        for ctrl in seg.rings.values():
            targets += [(ctrl + RING_FIELDS[n][0], RING_FIELDS[n][1]) for n in names]
    elif family == "coll_flags":
        for area in seg.areas.values():
            for parity in (0, 1):
                targets += [(area + parity * FLAGS_BYTES + off, n) for off, n in FLAG_FIELDS.values()]
    return targets


def fuzz(seg, family, seed, stop, counter):
    """Until stop: write a random value into a random shared field of the family, about every half
    millisecond. ring_data: random bytes at a random place among the unread bytes at the front of a ring
    (frame headers and payload)."""
    rng = random.Random(seed)
    targets = fuzz_targets(seg, family)
    ring_bytes = seg.ring_bytes
    while not stop.is_set():
        if family == "ring_data":
            ctrl = rng.choice(list(seg.rings.values()))
            head, tail = load(ctrl + RING_FIELDS["head"][0], 8), load(ctrl + RING_FIELDS["tail"][0], 8)
            unread = (head - tail) % 2**64
            if 0 < unread <= ring_bytes:
                at = tail + rng.randrange(min(unread, FRAME_HEADER_BYTES))
                n = rng.randint(1, 8)
                for i in range(n):
                    ctypes.c_uint8.from_address(ctrl + PAGE + (at + i) % ring_bytes).value = rng.getrandbits(8)
                counter[0] += 1
        else:
            addr, nbytes = rng.choice(targets)
            current = load(addr, nbytes) if nbytes in (4, 8) else 0
            store(addr, nbytes, random_value(rng, nbytes, current, ring_bytes))
            counter[0] += 1
        time.sleep(rng.uniform(0, 0.001))


def fuzz_round(comm, it, checked):
    """Collectives over every shared path: one- and many-round native all-reduces, the native broadcast through
    the slots and by single copies (from 1 MiB), and ring all-reduces smaller and larger than a ring. Results
    checked exactly; wrong ones counted."""
    size, rank = comm.size, comm.rank
    for count, algorithm in ((16, "shm_slots"), (40_000, "shm_slots"), (16, "ring"), (20_000, "ring")):
        x = np.arange(count, dtype=np.float64) + rank + it
        comm.all_reduce(x, algorithm=algorithm)
        want = size * (np.arange(count, dtype=np.float64) + it) + size * (size - 1) / 2
        checked["wrong"] += int(not np.array_equal(x, want))
    for count in (9000, 1 << 17):
        b = np.full(count, float(it)) if rank == 0 else np.zeros(count)
        comm.broadcast(b, root=0)
        checked["wrong"] += int(not np.all(b == it))


def address_it_does_not_have(how):
    """An address this process does not map (unmapped), or the last page of one of its mappings followed by a
    gap (short: a read of more than a page from there stops part way)."""
    if how == "unmapped":
        return 8
    spans = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            spans.append((lo, hi, fields[1]))
    for (_, hi, perms), (next_lo, _, _) in zip(spans, spans[1:]):
        if perms == "rw-p" and next_lo > hi:  # private memory, which the kernel's copy can read
            return hi - PAGE
    raise SystemExit("no mapping followed by a gap")


def lie_about_source(seg, address, stop, counter):
    """Until stop: write `address` over the buffer address this rank publishes for single copies, in both
    parities of its flags -- after it published its own, while the others are about to read it."""
    fields = [seg.own_area() + parity * FLAGS_BYTES + FLAG_FIELDS["source"][0] for parity in (0, 1)]
    while not stop.is_set():
        for field in fields:
            store(field, 8, address)
        counter[0] += 1
        time.sleep(0.00002)


def single_copy_round(comm, collective, it):
    """One collective whose buffers the others read from rank 1 by single copies (float32, 1 MiB per transfer;
    an all-gather: 8 MiB, at 2 ranks only): whether its result is exact."""
    size, rank, count = comm.size, comm.rank, (1 << 21 if collective == "all_gather" else 1 << 18)
    base = np.arange(count, dtype=np.float32) + it
    if collective == "broadcast":
        b = base.copy() if rank == 1 else np.zeros(count, dtype=np.float32)
        comm.broadcast(b, root=1)
        return np.array_equal(b, base)
    if collective == "all_gather":
        out = np.empty(size * count, dtype=np.float32)
        comm.all_gather(base + rank, out)
        return np.array_equal(out, np.concatenate([base + r for r in range(size)]))
    out = np.empty(size * count, dtype=np.float32)
    comm.all_to_all(np.concatenate([base + 10 * rank + j for j in range(size)]), out)
    return np.array_equal(out, np.concatenate([base + 10 * r + rank for r in range(size)]))


try:
    comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "10")))
    rank, size = comm.rank, comm.size
    report["rank"] = rank
    ring_bytes = int(os.environ.get("PYCOLL_SHM_RING_BYTES") or 4 << 20)
    if scenario == "leave":
        how, algorithm = os.environ["TEST_HOW"], os.environ["TEST_ALGORITHM"]
        waiting = os.environ.get("TEST_ORDER", "waiting") == "waiting"
        victim = size - 1
        x = np.ones(1000, dtype=np.float32)
        comm.all_reduce(x, algorithm=algorithm)
        comm.barrier()
        if rank == victim:
            if waiting:
                time.sleep(0.3)  # the others are blocked in the all-reduce by now
            emit(left_at=time.monotonic())
            if how == "os_exit":
                os._exit(0)
            if how == "exit":
                sys.exit(0)  # pycoll closes the communicator at exit
            try:
                comm.close()
            except pycoll.PycollError as exc:  # the others are in a collective it never called
                report["close_error"] = type(exc).__name__
            time.sleep(2)  # alive: only the close can tell the others
            report["ok"] = True
        else:
            if not waiting:
                time.sleep(0.3)  # the victim has left by now
            called = time.monotonic()
            report["called_at"] = called
            comm.all_reduce(x, algorithm=algorithm)
            report["ok"] = True
    elif scenario == "poke":
        field = os.environ["TEST_FIELD"]
        algorithm = os.environ.get("TEST_ALGORITHM", "shm_slots")
        x = np.ones(int(os.environ.get("TEST_COUNT", "16")), dtype=np.float32)
        comm.all_reduce(x, algorithm=algorithm)
        if rank == 1:
            seg = Segments(size, rank, ring_bytes)
            if field == "ring_tail":
                # The tail rank 1 publishes for rank 0's ring into it: 2^40 past the head (rank 0 writes next).
                ctrl = seg.ring(0)
                store(ctrl + RING_FIELDS["tail"][0], 8, load(ctrl + RING_FIELDS["head"][0], 8) + (1 << 40))
            elif field == "posted":
                # Both parities' posted flags far ahead: read before rank 1 posts, they claim rounds it never
                # reached (the others would read its slot before it is written).
                for parity in (0, 1):
                    store(seg.own_area() + parity * FLAGS_BYTES + FLAG_FIELDS["posted"][0], 8, (1 << 40) + 7)
            else:
                raise SystemExit(f"unknown field {field}")
            time.sleep(0.5)  # the others read the value before rank 1 writes its own again
        comm.all_reduce(x, algorithm=algorithm)
        comm.barrier()
        report["ok"] = True
    elif scenario == "forge":
        x = np.ones(16, dtype=np.float32)
        comm.all_reduce(x, algorithm="ring")
        if rank == 1:
            seg = Segments(size, rank, ring_bytes)
            for (inode, sender), ctrl in seg.rings.items():
                if sender != rank or inode == seg.own:
                    continue  # only the rings rank 1 writes into (they live in the others' segments)
                store(ctrl + RING_FIELDS["status"][0], 4, int(os.environ["TEST_STATUS"]))
                store(ctrl + RING_FIELDS["failed_rank"][0], 4, int(os.environ["TEST_FAILED_RANK"]))
                store(ctrl + RING_FIELDS["text"][0], 32, b"forged by rank 1".ljust(32, b"\0"))
                store(ctrl + RING_FIELDS["closed"][0], 4, 2)  # RING_ABORT, last: the others read it first
            time.sleep(0.5)
        comm.all_reduce(x, algorithm="ring")
        report["ok"] = True
    elif scenario == "lie":
        # Rank 1 publishes, for its single copies, an address it does not have (TEST_LIE), from a thread, while
        # every rank runs TEST_COLLECTIVE over buffers the others read from rank 1: TEST_ITERATIONS times, or
        # until an error.
        collective = os.environ.get("TEST_COLLECTIVE", "broadcast")
        iterations = int(os.environ.get("TEST_ITERATIONS", "200"))
        report.update(iterations=0, wrong=0)
        comm.barrier()
        stop, writes, liar = threading.Event(), [0], None
        if rank == 1:
            seg = Segments(size, rank, ring_bytes)
            liar = threading.Thread(target=lie_about_source,
                                    args=(seg, address_it_does_not_have(os.environ["TEST_LIE"]), stop, writes))
            liar.start()
        try:
            while report["iterations"] < iterations:
                report["wrong"] += int(not single_copy_round(comm, collective, report["iterations"]))
                report["iterations"] += 1
            report["ok"] = True
        finally:
            stop.set()
            if liar:
                liar.join()
            report["writes"] = writes[0]
    elif scenario == "fuzz":
        family, seed = os.environ["TEST_FIELDS"], int(os.environ.get("TEST_SEED", "1"))
        until = time.monotonic() + float(os.environ.get("TEST_FUZZ_S", "1.5"))
        checked = {"wrong": 0}
        report["iterations"] = 0
        fuzz_round(comm, 0, checked)  # every path mapped and working before the fuzzing starts
        comm.barrier()
        stop, writes, fuzzer = threading.Event(), [0], None
        if rank == 1:
            fuzzer = threading.Thread(target=fuzz, args=(Segments(size, rank, ring_bytes), family, seed, stop,
                                                         writes))
            fuzzer.start()
        try:
            it = 1
            while time.monotonic() < until:
                fuzz_round(comm, it, checked)
                report["iterations"] = it
                it += 1
            report["ok"] = True
        finally:
            stop.set()
            if fuzzer:
                fuzzer.join()
            report.update(writes=writes[0], wrong=checked["wrong"])
    else:
        raise SystemExit(f"unknown scenario {scenario}")
except pycoll.PycollError as exc:
    report.update(error=type(exc).__name__, message=str(exc), failed_rank=getattr(exc, "rank", None),
                  noticed_at=time.monotonic(), typed=True)
except Exception as exc:  # noqa: BLE001 -- reported for the test to judge: an untyped error is a failure
    report.update(error=type(exc).__name__, message=str(exc), typed=False)
report["elapsed"] = time.monotonic() - t0
emit()
if comm is not None:
    try:
        comm.close()
    except pycoll.PycollError:
        pass
