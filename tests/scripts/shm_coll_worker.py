"""One rank of the shared-memory collective tests (test_shm_collectives.py): `python shm_coll_worker.py
SCENARIO`. Prints one JSON line {"rank", "ok", "digest", ...} and exits 0; an assertion or a pycoll error is
reported in the line (the test reads it)."""

import ctypes
import errno
import hashlib
import os
import platform
import sys
import time
import warnings

import numpy as np
from shm_segments import Segments
from worker_report import report_and_close

import pycoll
from pycoll.dtypes import COMPLEX_DTYPES, DTYPES
from pycoll.tools.accuracy import make_inputs
from pycoll.tools.bench.sweep import numpy_dtype

# The shared area's boundaries in bytes (native/transport/shm_collectives.c): one slot (the largest round: as
# large as a ring, at most 4 MiB) and the one-round path's limit. Counts are placed on both sides of each.
# The real dtypes: complex ones have no min/max, and their exact sums over every algorithm, this transport's own
# included, are tests/algorithms/test_complex_collectives.py's.
REAL_DTYPES = ",".join(d for d in DTYPES if d not in COMPLEX_DTYPES)
SLOT_BYTES = min(int(os.environ.get("PYCOLL_SHM_RING_BYTES") or 4 << 20), 4 << 20)
SMALL_BYTES = min(8 << 10, SLOT_BYTES)
# From here on (bytes one rank reads from one other) a broadcast and an all-to-all read straight from the owner's
# buffer where every rank agreed to, and an all-gather at 2 ranks from the second (native/transport/shm_collectives.c).
SINGLE_COPY_MIN_BYTES = 1 << 20
ALL_GATHER_SINGLE_COPY_MIN_BYTES = 8 << 20

scenario = sys.argv[1]
report = {"scenario": scenario}
t0 = time.monotonic()
comm = None


def boundary_counts(itemsize, size):
    counts = {0, 1, size - 1, size + 1, 17}
    # TEST_ROUNDS=3 adds a message of three rounds (the first slot reused within one call).
    for edge in (SMALL_BYTES, SLOT_BYTES, 2 * SLOT_BYTES)[:int(os.environ.get("TEST_ROUNDS", "2"))]:
        counts |= {edge // itemsize - 1, edge // itemsize, edge // itemsize + 1}
    return sorted(c for c in counts if c >= 0)


def reference(values, op, size, is_float):
    """values: the per-rank inputs as int64; the exact result of op over them (avg: truncated on integers)."""
    if op in ("sum", "avg"):
        total = sum(values)
        if op == "sum":
            return total
        return total / size if is_float else total // size
    if op == "prod":
        out = np.ones_like(values[0])
        for v in values:
            out = out * v
        return out
    return np.minimum.reduce(values) if op == "min" else np.maximum.reduce(values)


def piece_counts(itemsize, size):
    """reduce_scatter's per-rank counts around its rounds (a piece of every block per slot, at 64-byte
    boundaries) and all_gather's (a slot of one block per round), and small ones not divisible by the world
    size."""
    piece = SLOT_BYTES // size // 64 * 64 // itemsize
    slot = SLOT_BYTES // itemsize
    counts = {0, 1, size - 1, size + 1, 17, piece - 1, piece, piece + 1, 2 * piece + 1, slot - 1, slot + 1}
    return sorted(c for c in counts if c >= 0)


def dtype_counts(counts_of, size):
    """(dtype, its numpy dtype, count) for every dtype of TEST_DTYPES at the counts counts_of gives for it."""
    for dtype in os.environ.get("TEST_DTYPES", REAL_DTYPES).split(","):
        np_dtype = numpy_dtype(dtype)
        for count in counts_of(np_dtype.itemsize, size):
            yield dtype, np_dtype, count


def exact_ops(dtype, size):
    """TEST_OPS whose result on inputs() is exact in dtype: avg of floats over 3 ranks is not (a third is not
    exact in binary; the sum path is the same)."""
    return [op for op in os.environ.get("TEST_OPS", "sum,prod,min,max,avg").split(",")
            if not (op == "avg" and "float" in dtype and size == 3)]


def inputs(count, rank, op):
    """Small non-negative integers, exact in every dtype whatever the op and world size (<= 4 ranks)."""
    base = np.arange(count, dtype=np.int64)
    if op == "prod":
        return (base + rank) % 2 + 1
    return (base * 7 + rank * 3) % 5


def deny_process_vm_readv():
    """A seccomp filter on this process (and the threads it starts): process_vm_readv fails with EPERM, as in a
    container whose profile forbids it."""
    number = {"x86_64": 310, "aarch64": 270}[platform.machine()]

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    # load the system call's number; if process_vm_readv: fail with EPERM; else: allow
    code = (Instruction * 4)(Instruction(0x20, 0, 0, 0), Instruction(0x15, 0, 1, number),
                             Instruction(0x06, 0, 0, 0x00050000 | errno.EPERM), Instruction(0x06, 0, 0, 0x7FFF0000))
    program = Program(len(code), code)
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) or libc.prctl(pr_set_seccomp, seccomp_mode_filter,
                                                                  ctypes.byref(program), 0, 0):
        raise OSError(ctypes.get_errno(), "cannot install the seccomp filter")


def writes_own_slots(comm, seg, call):
    """Whether call() wrote into this rank's slots. Called between collectives: once the barrier is over, every
    rank has read what it needed from them (it posted the barrier after), and no rank reads them until this
    rank posts again."""
    comm.barrier()
    for address, nbytes in seg.own_slots():
        ctypes.memset(address, 0xA5, nbytes)
    call()
    return any(ctypes.string_at(address, nbytes) != b"\xa5" * nbytes for address, nbytes in seg.own_slots())


def single_copy_cases(collective, size):
    """(dtype, count) on both sides of the collective's single-copy threshold, in bytes per transfer of count
    elements: 1 MiB, and for an all-gather at 2 ranks 8 MiB too (below it, and with more ranks, an all-gather
    must copy through the slots)."""
    per_float32 = SINGLE_COPY_MIN_BYTES // 4
    cases = [("float32", 1000), ("float32", per_float32 - 1), ("float32", per_float32), ("int8", (1 << 20) + 1),
             ("float64", 3 * per_float32 // 2 + 7)]
    if collective == "all_gather" and size == 2:
        per_float64 = ALL_GATHER_SINGLE_COPY_MIN_BYTES // 8
        cases += [("float64", per_float64 - 1), ("float64", per_float64)]
    return cases


def single_copy_expected(collective, size, nbytes, agreed):
    if not agreed:
        return False
    if collective == "all_gather":
        return size == 2 and nbytes >= ALL_GATHER_SINGLE_COPY_MIN_BYTES
    return nbytes >= SINGLE_COPY_MIN_BYTES


def inputs_of(np_dtype, count, size):
    return [((np.arange(count) * 7 + r * 13) % 101).astype(np_dtype) for r in range(size)]


def check_single_copies(comm, seg, agreed):
    """broadcast from every root, all_to_all, and all_gather (out of place and from this rank's own block) at
    single_copy_cases: exact; and each call that read this rank's buffer wrote its slots exactly when it did not
    run by single copies (`agreed`: whether every rank agreed to them)."""
    size, rank = comm.size, comm.rank
    for dtype, count in single_copy_cases("broadcast", size):
        np_dtype = np.dtype(dtype)
        single = single_copy_expected("broadcast", size, count * np_dtype.itemsize, agreed)
        blocks = inputs_of(np_dtype, count, size)
        for root in range(size):
            b = blocks[root].copy() if rank == root else np.zeros(count, dtype=np_dtype)
            wrote = writes_own_slots(comm, seg, lambda b=b, root=root: comm.broadcast(b, root=root))
            assert comm.last_algorithm == "shm_slots", comm.last_algorithm
            assert np.array_equal(b, blocks[root]), ("broadcast", dtype, count, root)
            if rank == root:
                assert wrote != single, ("broadcast wrote the slots" if wrote else "no slot written", dtype, count)
    for dtype, count in single_copy_cases("all_to_all", size):
        np_dtype = np.dtype(dtype)
        single = single_copy_expected("all_to_all", size, count * np_dtype.itemsize, agreed)
        blocks = inputs_of(np_dtype, count, size)
        sent = np.concatenate([(blocks[j] + rank) % 101 for j in range(size)]).astype(np_dtype)
        out = np.zeros(size * count, dtype=np_dtype)
        wrote = writes_own_slots(comm, seg, lambda: comm.all_to_all(sent, out))
        assert comm.last_algorithm == "shm_slots", comm.last_algorithm
        want = np.concatenate([(blocks[rank] + r) % 101 for r in range(size)]).astype(np_dtype)
        assert np.array_equal(out, want), ("all_to_all", dtype, count)
        assert wrote != single, ("all_to_all", wrote, dtype, count)
    for dtype, count in single_copy_cases("all_gather", size):
        np_dtype = np.dtype(dtype)
        single = single_copy_expected("all_gather", size, count * np_dtype.itemsize, agreed)
        blocks = inputs_of(np_dtype, count, size)
        want = np.concatenate(blocks)
        out = np.zeros(size * count, dtype=np_dtype)
        wrote = writes_own_slots(comm, seg, lambda: comm.all_gather(blocks[rank], out))
        assert comm.last_algorithm == "shm_slots", comm.last_algorithm
        assert np.array_equal(out, want), ("all_gather", dtype, count)
        assert wrote != single, ("all_gather", wrote, dtype, count)
        out = np.zeros(size * count, dtype=np_dtype)
        out[rank * count:(rank + 1) * count] = blocks[rank]
        comm.all_gather(out[rank * count:(rank + 1) * count], out)
        assert np.array_equal(out, want), ("all_gather from its own block", dtype, count)


if os.environ.get("TEST_DENY_CMA") == "1":
    deny_process_vm_readv()

try:
    comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "30")))
    rank, size = comm.rank, comm.size
    report["rank"] = rank
    if scenario == "matrix":
        # Every dtype, op and accuracy of the native all-reduce, in and out of place, at counts around every
        # boundary of the shared area: exact against the reference; float results (normal data) hashed so the
        # test can check they are bitwise identical on every rank.
        digest = hashlib.sha256()
        for dtype, np_dtype, count in dtype_counts(boundary_counts, size):
            for op in exact_ops(dtype, size):
                want = reference([inputs(count, r, op) for r in range(size)], op, size,
                                 "float" in dtype).astype(np_dtype)
                for accuracy in ("fast", "compensated"):
                    x = inputs(count, rank, op).astype(np_dtype)
                    out = np.empty_like(x)
                    comm.all_reduce(x, out=out, op=op, algorithm="shm_slots", accuracy=accuracy)
                    assert comm.last_algorithm == "shm_slots", comm.last_algorithm
                    assert np.array_equal(out.astype(np.float64), want.astype(np.float64)), \
                        (dtype, count, op, accuracy, "out of place")
                    assert np.array_equal(x, inputs(count, rank, op).astype(np_dtype)), "input changed"
                    comm.all_reduce(x, op=op, algorithm="shm_slots", accuracy=accuracy)
                    assert np.array_equal(x.astype(np.float64), want.astype(np.float64)), \
                        (dtype, count, op, accuracy, "in place")
            if "float" in dtype:
                for accuracy in ("fast", "compensated"):
                    f = np.random.default_rng(1000 * rank + count).standard_normal(count).astype(np_dtype)
                    comm.all_reduce(f, algorithm="shm_slots", accuracy=accuracy)
                    digest.update(f.tobytes())
        for dtype, np_dtype, count in dtype_counts(boundary_counts, size):
            # reduce: the all-reduce's rounds, the result on the root only, in and out of place; every root.
            root = count % size
            for op in exact_ops(dtype, size):
                want = reference([inputs(count, r, op) for r in range(size)], op, size,
                                 "float" in dtype).astype(np_dtype)
                for accuracy in ("fast", "compensated"):
                    x = inputs(count, rank, op).astype(np_dtype)
                    out = np.full_like(x, 99)
                    comm.reduce(x, root, op=op, out=out, accuracy=accuracy)
                    assert comm.last_algorithm == "shm_slots", comm.last_algorithm
                    assert np.array_equal(x, inputs(count, rank, op).astype(np_dtype)), "input changed"
                    if rank == root:
                        assert np.array_equal(out.astype(np.float64), want.astype(np.float64)), \
                            ("reduce", dtype, count, op, accuracy, "out of place")
                    else:
                        assert (out == 99).all(), ("reduce wrote off the root", dtype, count)
                    comm.reduce(x, root, op=op, accuracy=accuracy)
                    mine = want if rank == root else inputs(count, rank, op).astype(np_dtype)
                    assert np.array_equal(x.astype(np.float64), mine.astype(np.float64)), \
                        ("reduce", dtype, count, op, accuracy, "in place")
        for count in boundary_counts(8, size):
            root = count % size
            b = np.arange(count, dtype=np.float64) if rank == root else np.zeros(count)
            comm.broadcast(b, root=root)
            assert comm.last_algorithm == "shm_slots", comm.last_algorithm
            assert np.array_equal(b, np.arange(count, dtype=np.float64)), ("broadcast", count, root)
        comm.barrier()
        assert comm.last_algorithm == "shm_slots", comm.last_algorithm
        report["digest"] = digest.hexdigest()
        report["ok"] = True
    elif scenario == "scatter_gather":
        # reduce_scatter for every dtype, op and accuracy, and all_gather for every dtype (out of place and
        # from this rank's own block of the result), at counts around their rounds: exact against the
        # reference; float sums in fast mode bitwise those of numpy in rank order; all_gather's float results
        # hashed (every rank's must be the same).
        digest = hashlib.sha256()
        for dtype, np_dtype, count in dtype_counts(piece_counts, size):
            mine = slice(rank * count, (rank + 1) * count)
            for op in exact_ops(dtype, size):
                want = reference([inputs(size * count, r, op) for r in range(size)], op, size,
                                 "float" in dtype).astype(np_dtype)[mine]
                accuracies = ["fast", "compensated"]
                if "float" in dtype and op in ("sum", "avg"):
                    accuracies.append("reproducible")
                for accuracy in accuracies:
                    x = inputs(size * count, rank, op).astype(np_dtype)
                    out = np.full(count, 99, dtype=np_dtype)
                    comm.reduce_scatter(x, out, op=op, algorithm="shm_slots", accuracy=accuracy)
                    assert comm.last_algorithm == "shm_slots", comm.last_algorithm
                    assert np.array_equal(out.astype(np.float64), want.astype(np.float64)), \
                        ("reduce_scatter", dtype, count, op, accuracy)
                    assert np.array_equal(x, inputs(size * count, rank, op).astype(np_dtype)), "input changed"
            if dtype in ("float32", "float64"):
                xs = [np.random.default_rng(1000 * r + count).standard_normal(size * count).astype(np_dtype)
                      for r in range(size)]
                want = xs[0][mine].copy()
                for r in range(1, size):
                    want = want + xs[r][mine]
                out = np.empty(count, dtype=np_dtype)
                comm.reduce_scatter(xs[rank], out, algorithm="shm_slots")
                assert np.array_equal(out, want), ("reduce_scatter in rank order", dtype, count)
            x = (inputs(count, rank, "sum") + rank).astype(np_dtype)
            want = np.concatenate([(inputs(count, r, "sum") + r) for r in range(size)]).astype(np_dtype)
            out = np.full(size * count, 99, dtype=np_dtype)
            comm.all_gather(x, out)
            assert comm.last_algorithm == "shm_slots", comm.last_algorithm
            assert np.array_equal(out.astype(np.float64), want.astype(np.float64)), ("all_gather", dtype, count)
            out = np.full(size * count, 99, dtype=np_dtype)
            out[mine] = x
            comm.all_gather(out[mine], out)
            assert np.array_equal(out.astype(np.float64), want.astype(np.float64)), \
                ("all_gather from its own block", dtype, count)
            if "float" in dtype:
                f = np.random.default_rng(1000 * rank + count).standard_normal(count).astype(np_dtype)
                out = np.empty(size * count, dtype=np_dtype)
                comm.all_gather(f, out)
                digest.update(out.tobytes())
        report["digest"] = digest.hexdigest()
        report["ok"] = True
    elif scenario == "reproducible":
        # accuracy="reproducible" all_reduce through the transport's coded all-reduce (the exact mode's limbs
        # encoded into shared memory and decoded once summed): exact on integer data, in and out of place, at
        # counts around every boundary of the shared area in elements and in limbs (8 or 16 bytes each);
        # gaussian data bitwise the ring algorithm's (which sums separate limb arrays), in one limb and two.
        floats = [d for d in os.environ.get("TEST_DTYPES", REAL_DTYPES).split(",") if "float" in d]
        for dtype in floats:
            np_dtype = numpy_dtype(dtype)
            counts = sorted(set().union(*(boundary_counts(k, size) for k in (np_dtype.itemsize, 8, 16))))
            for count in counts:
                for op in [op for op in ("sum", "avg") if op in exact_ops(dtype, size)]:
                    want = reference([inputs(count, r, op) for r in range(size)], op, size, True)
                    x = inputs(count, rank, op).astype(np_dtype)
                    out = np.full_like(x, 99)
                    comm.all_reduce(x, out=out, op=op, algorithm="shm_slots", accuracy="reproducible")
                    assert comm.last_algorithm == "shm_slots", comm.last_algorithm
                    assert np.array_equal(out.astype(np.float64), want.astype(np_dtype).astype(np.float64)), \
                        (dtype, count, op, "out of place")
                    assert np.array_equal(x, inputs(count, rank, op).astype(np_dtype)), "input changed"
                    comm.all_reduce(x, op=op, algorithm="shm_slots", accuracy="reproducible")
                    assert np.array_equal(x, out), (dtype, count, op, "in place")
                # Each plan the data can draw: gaussian (one element's worth of bits, or float64's two exact
                # doubles), mixed magnitudes with cancellation (two int64 limbs), and float64 at its largest
                # binade, where partial sums of doubles would overflow early (limbs, then).
                datasets = {"gaussian": make_inputs("gaussian", size, count, dtype, seed=count)[rank],
                            "mixed": make_inputs("mixed", size, count, dtype, seed=count)[rank]}
                if dtype == "float64":
                    huge = np.full(count, [1.0, 1.0, -1.0, -0.5][rank] * 2.0 ** 1023)
                    huge[1::2] = 2.0 ** 1000  # a span of two limbs
                    datasets["huge"] = huge
                for name, g in datasets.items():
                    coded, ring = np.empty_like(g), np.empty_like(g)
                    with np.errstate(over="ignore"):
                        comm.all_reduce(g, out=coded, algorithm="shm_slots", accuracy="reproducible")
                        comm.all_reduce(g, out=ring, algorithm="ring", accuracy="reproducible")
                    assert coded.tobytes() == ring.tobytes(), (dtype, count, name, "shm and ring differ")
        report["ok"] = True
    elif scenario == "mismatch":
        # Rank 1 calls something else than the others (TEST_MISMATCH), all over the native collectives.
        kind = os.environ["TEST_MISMATCH"]
        count = int(os.environ.get("TEST_COUNT", "1000"))
        x = np.ones(count, dtype=np.float32)
        if rank == 1 and kind == "count":
            x = np.ones(count + 1, dtype=np.float32)
        if rank == 1 and kind == "dtype":
            x = np.ones(count, dtype=np.float64)
        op = "max" if rank == 1 and kind == "op" else "sum"
        algorithm = "ring" if rank == 1 and kind == "algorithm" else "shm_slots"
        collective = os.environ.get("TEST_COLLECTIVE", "all_reduce")
        if rank == 1 and kind == "collective":
            comm.broadcast(x, root=0)
        elif kind == "root":
            comm.broadcast(x, root=min(rank, 1))
        elif collective == "reduce_scatter":
            comm.reduce_scatter(np.concatenate([x] * size), np.empty_like(x), op=op, algorithm=algorithm)
        elif collective == "all_gather":
            comm.all_gather(x, np.empty(size * len(x), dtype=x.dtype))
        else:
            comm.all_reduce(x, op=op, algorithm=algorithm)
        comm.barrier()
        report["ok"] = True
    elif scenario == "single_copy":
        # TEST_SINGLE_COPY: whether the ranks are expected to have agreed on single copies.
        comm.barrier()
        comm.barrier()  # the agreement is read from round 3 on
        check_single_copies(comm, Segments(size, rank, int(os.environ.get("PYCOLL_SHM_RING_BYTES") or 4 << 20)),
                            os.environ["TEST_SINGLE_COPY"] == "1")
        report["ok"] = True
    elif scenario == "explicit_over_tcp":
        try:
            if os.environ.get("TEST_COLLECTIVE") == "reduce_scatter":
                comm.reduce_scatter(np.ones(4 * size, dtype=np.float32), np.empty(4, dtype=np.float32),
                                    algorithm="shm_slots")
            else:
                comm.all_reduce(np.ones(4, dtype=np.float32), algorithm="shm_slots")
        except ValueError as exc:
            report.update(error=type(exc).__name__, message=str(exc))
        comm.barrier()  # the refusal left the communicator usable
        report["ok"] = True
    elif scenario == "names":
        # The transport's own all-reduce by its name and by its former one ("shm", the backend's and the
        # transport's name too): what ran, whether the sum is right, and what was warned.
        runs = {}
        for name in ("shm_slots", "shm"):
            x = np.full(1000, rank + 1, dtype=np.float32)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                comm.all_reduce(x, algorithm=name)
            runs[name] = {"ran": comm.last_algorithm, "right": bool(np.all(x == size * (size + 1) // 2)),
                          "warnings": [(w.category.__name__, str(w.message)) for w in caught]}
        report.update(runs=runs, backend=comm.backend, transport=comm.transport, ok=True)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
except (pycoll.PycollError, AssertionError) as exc:
    report.update(error=type(exc).__name__, message=str(exc), failed_rank=getattr(exc, "rank", None))
report["elapsed"] = time.monotonic() - t0
report_and_close(report, comm)
