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

The shared fields are found from inside the rank: /proc/self/maps lists this process's mappings of the
segments (unlinked, so they can be opened nowhere else), and native/transport/shm_layout.h gives the layout,
mirrored below."""

import ctypes
import json
import os
import random
import sys
import threading
import time

import numpy as np

import pycoll

# native/transport/shm_layout.h (its _Static_asserts pin these offsets).
PAGE = 4096
MAX_SLOT_BYTES = 4 << 20
RING_FIELDS = {"head": (0, 8), "tail": (128, 8), "closed": (256, 4), "status": (260, 4), "failed_rank": (264, 4),
               "desc": (272, 40), "prev": (312, 40), "text": (352, 512)}
FLAG_FIELDS = {"posted": (0, 8), "desc": (8, 40), "prev": (48, 40), "reduced": (128, 8)}
FLAGS_BYTES = 256  # one parity
FRAME_HEADER_BYTES = 104  # native/common/frame.h: pycoll_frame_header_t

scenario = sys.argv[1]
report = {"scenario": scenario}
t0 = time.monotonic()
comm = None


def emit(**extra):
    report.update(extra)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


class Segments:
    """Where this process mapped the job's shared-memory segments: rings[(inode, sender)] and areas[inode]
    are addresses of a ring's control page and of a collective area."""

    def __init__(self, size, rank, ring_bytes):
        self.ring_bytes, self.rank = ring_bytes, rank
        unit = PAGE + ring_bytes
        self.rings, self.areas = {}, {}
        starts = {s * unit: ("ring", s) for s in range(size)}
        starts[size * unit] = ("area", None)
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) < 6 or not fields[5].startswith("/dev/shm/"):
                    continue
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                offset, inode = int(fields[2], 16), int(fields[4])
                # The kernel may merge adjacent mappings of one file: look for every unit inside this one.
                for at, (kind, sender) in starts.items():
                    if offset <= at < offset + (hi - lo):
                        if kind == "ring":
                            self.rings[(inode, sender)] = lo + at - offset
                        else:
                            self.areas[inode] = lo + at - offset
        # This rank's own segment holds the rings of the other senders.
        own = {inode for (inode, sender) in self.rings if sender != rank}
        assert len(own) == 1 and len(self.areas) == size, (own, self.rings, self.areas)
        self.own = own.pop()

    def ring(self, sender):
        """The control page of the ring sender -> this rank."""
        return self.rings[(self.own, sender)]

    def own_area(self):
        return self.areas[self.own]


def load(addr, nbytes):
    return int.from_bytes(ctypes.string_at(addr, nbytes), "little")


def store(addr, nbytes, value):
    if nbytes == 8:
        ctypes.c_uint64.from_address(addr).value = value & (2**64 - 1)
    elif nbytes == 4:
        ctypes.c_uint32.from_address(addr).value = value & (2**32 - 1)
    else:
        ctypes.memmove(addr, value, nbytes)


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
    """Collectives over every shared path: one- and many-round native all-reduces, the native broadcast, and
    ring all-reduces smaller and larger than a ring. Results checked exactly; wrong ones counted."""
    size, rank = comm.size, comm.rank
    for count, algorithm in ((16, "shm"), (40_000, "shm"), (16, "ring"), (20_000, "ring")):
        x = np.arange(count, dtype=np.float64) + rank + it
        comm.all_reduce(x, algorithm=algorithm)
        want = size * (np.arange(count, dtype=np.float64) + it) + size * (size - 1) / 2
        checked["wrong"] += int(not np.array_equal(x, want))
    b = np.full(9000, float(it)) if rank == 0 else np.zeros(9000)
    comm.broadcast(b, root=0)
    checked["wrong"] += int(not np.all(b == it))


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
        algorithm = os.environ.get("TEST_ALGORITHM", "shm")
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
