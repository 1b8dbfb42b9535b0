"""One rank of the compensated special-value process tests (test_compensated_specials.py):
`python specials_worker.py`. Inputs place infinities, NaN, sums past the largest value, the largest value
itself and -0.0 on every rank and at every position (block and segment tails included); every all_reduce
algorithm (sum and avg) and reduce run them in fast and in compensated mode, and the rank reports where the two
differ. Prints one JSON line and exits 0."""

import os

import ml_dtypes
import numpy as np
from worker_report import report_and_close

import pycoll

DTYPES = ("float16", "bfloat16", "float32", "float64")
COUNTS = (37, 4099, 40961)  # a few elements, uneven blocks and segments, past reduce's 64 KiB tree limit
SMALL = 12  # finite values are multiples of 12 below 100: every sum, and every mean at 2-4 ranks, is exact


def case_values(case, i, size, rank, big):
    """This rank's value at position i for a case, and whether the case overflows. r1 and r2 are two
    different ranks that move with i, so specials reach every rank and every position."""
    r1 = i % size
    r2 = (r1 + 1 + (i // size) % (size - 1)) % size
    plain = SMALL * ((i * 7 + rank * 5) % 9 - 4)
    at = {r1: 0, r2: 1}.get(rank)
    table = {
        "inf": ([np.inf, plain], False), "-inf": ([-np.inf, plain], False), "nan": ([np.nan, plain], False),
        "inf-inf": ([np.inf, -np.inf], False), "inf+inf": ([np.inf, np.inf], False),
        "nan+inf": ([np.nan, -np.inf], False), "inf+big": ([np.inf, big], False),
        "-inf-big": ([-np.inf, -big], False), "inf-big": ([np.inf, -big], False),
        "big+big": ([big, big], True), "-big-big": ([-big, -big], True),
        "big-big": ([big, -big], False), "big": ([big, 0.0], False), "-big": ([-big, 0.0], False),
    }
    if case == "all 3/4 big":
        return 0.75 * big, True
    if case == "all -0.0":
        return -0.0, False
    if case == "-0.0 and 0.0":
        return (-0.0 if rank != r1 else 0.0), False
    if case == "plain":
        return float(plain), False
    values, overflows = table[case]
    return (values[at] if at is not None else 0.0), overflows


CASES = ("inf", "-inf", "nan", "inf-inf", "inf+inf", "nan+inf", "inf+big", "-inf-big", "inf-big", "big+big",
         "-big-big", "big-big", "big", "-big", "all 3/4 big", "all -0.0", "-0.0 and 0.0", "plain")


def inputs(rank, size, dtype, count):
    dt = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    big = float(ml_dtypes.finfo(dt).max)
    cells = [case_values(CASES[(i * 5 + i // 97) % len(CASES)], i, size, rank, big) for i in range(count)]
    x = np.array([v for v, _ in cells], np.float64).astype(dt)
    return x, np.array([o for _, o in cells])


def differences(got, want):
    """Positions where got is not fast mode's want: NaN against NaN, else the same bits."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.itemsize]
    nan = np.isnan(w)
    return np.flatnonzero((np.isnan(g) != nan) | (~nan & (got.view(uint) != want.view(uint))))


def note(report, name, got, want, where):
    bad = differences(got[where], want[where])
    if bad.size:
        idx = np.flatnonzero(where)[bad]
        report["mismatches"].append(f"{name}: {idx.size} positions, first {idx[0]}: compensated "
                                    f"{got[idx[0]]!r}, fast {want[idx[0]]!r}")
    report["specials"] += int((~np.isfinite(want[where].astype(np.float64))).sum())


report = {"mismatches": [], "specials": 0, "ran": []}
comm = None
try:
    comm = pycoll.init(timeout=60.0)
    rank, size = comm.rank, comm.size
    algorithms = ["ring", "halving_doubling", "mesh", "recursive_doubling", "hierarchical"]
    if os.environ.get("PYCOLL_BACKEND") == "shm":
        algorithms.append("shm_slots")
    ran = set()
    for dtype in DTYPES:
        for count in COUNTS:
            x, overflows = inputs(rank, size, dtype, count)
            everywhere = np.ones(count, bool)
            for algorithm in algorithms:
                for op in ("sum", "avg"):
                    fast = comm.all_reduce(x.copy(), op=op, algorithm=algorithm, accuracy="fast")
                    comp = comm.all_reduce(x.copy(), op=op, algorithm=algorithm, accuracy="compensated")
                    ran.add(comm.last_algorithm)
                    # float16's compensated sums are float32: a mean of values near 65504 stays finite where
                    # fast mode's float16 sum overflows (docs/accuracy.md); everything else is fast mode's.
                    where = ~overflows if (dtype, op) == ("float16", "avg") else everywhere
                    note(report, f"{dtype} n={count} all_reduce {algorithm} {op}", comp, fast, where)
                    if not where.all():
                        assert np.isfinite(comp[~where].astype(np.float64)).all(), (dtype, algorithm)
            root = size - 1
            fast = comm.reduce(x.copy(), root, accuracy="fast")
            comp = comm.reduce(x.copy(), root, accuracy="compensated")
            ran.add(f"reduce {comm.last_algorithm}")
            if rank == root:
                note(report, f"{dtype} n={count} reduce", comp, fast, everywhere)
    report["ran"] = sorted(ran)
    report["ok"] = True
except (pycoll.PycollError, AssertionError) as exc:
    report.update(error=type(exc).__name__, message=str(exc))
report["rank"] = comm.rank if comm is not None else -1
report_and_close(report, comm)
