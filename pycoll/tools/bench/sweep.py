"""What a sweep runs: sizes from -b to -e by -f, the cases (collective x dtype x op x algorithm x accuracy x
in-place or out-of-place), and how many warm-up and timed iterations each size gets."""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from pycoll._bindings import abi
from pycoll.dtypes import REAL_DTYPES

# The collectives a sweep times and checks (worker.run_collective), of the C ABI's: the rooted-vector, uneven and
# message ones need per-rank layouts this sweep does not build.
COLLECTIVES = tuple(name for name in abi.COLLECTIVES
                    if name in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all",
                                "barrier"))
# Not the complex dtypes: check.py's exact references and error measures are real numbers.
DTYPES = REAL_DTYPES
OPS = tuple(abi.OPS)
ACCURACIES = tuple(abi.ACCURACIES)
# Collectives that take an algorithm argument; the others run what auto picks (the algorithm table's size rule).
TAKES_ALGORITHM = ("all_reduce", "reduce_scatter")
TAKES_OP = ("all_reduce", "reduce_scatter", "reduce")
TAKES_ACCURACY = ("all_reduce", "reduce_scatter", "reduce")
# Collectives that move no data: no size, dtype or op applies, so their sweep is one case of 0 bytes, timed and
# checked only for returning.
NO_DATA = ("barrier",)
# The forms each collective has in the Communicator API, as nccl-tests times its out-of-place and in-place
# column groups: out of place (separate x and out) and in place (all_reduce and reduce with out=None, all_gather
# with x this rank's block of out). Broadcast has one buffer, reduce_scatter and all_to_all take separate memory
# only, and the barrier moves no data (None: neither form).
FORMS = {"all_reduce": (False, True), "reduce": (False, True), "all_gather": (False, True), "broadcast": (True,),
         "reduce_scatter": (False,), "all_to_all": (False,), "barrier": (None,)}

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)

# Iterations adapt to the size so that every size costs about the same time: many for small messages (whose
# time is mostly latency, and noisy), few for large ones (whose time is stable and long).
_BYTES_PER_SIZE = 32 << 20
MIN_ITERS, MAX_ITERS = 5, 200


def parse_size(text: str, name: str = "size") -> int:
    """'4096', '4K', '1M', '64MiB', '2G' -> bytes (binary multiples, as nccl-tests)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"{name}: cannot read {text!r} as a size; use bytes with an optional K, M or G suffix "
                         f"(e.g. 8, 4K, 64M)")
    return int(m.group(1)) * _SUFFIX[m.group(2).upper()]


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min, min*factor, ... up to max inclusive."""
    if min_bytes < 1:
        raise ValueError(f"min bytes (-b) must be at least 1, got {min_bytes}")
    if max_bytes < min_bytes:
        raise ValueError(f"max bytes (-e) {max_bytes} is smaller than min bytes (-b) {min_bytes}")
    if factor < 2:
        raise ValueError(f"factor (-f) must be at least 2, got {factor}")
    out, b = [], min_bytes
    while b <= max_bytes:
        out.append(b)
        b *= factor
    return out


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes  # numpy has no bfloat16; ml_dtypes is pycoll's test/bench extra

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def parse_list(text: str, choices, name: str) -> list[str]:
    """A comma list, each item one of choices ('all' = every choice)."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if items == ["all"]:
        return list(choices)
    bad = [t for t in items if t not in choices]
    if bad or not items:
        raise ValueError(f"{name}: unknown {', '.join(map(repr, bad)) or 'empty list'}; "
                         f"choose from {', '.join(choices)} (comma-separated)")
    return items


def count_for(collective: str, nbytes: int, itemsize: int, world: int) -> int:
    """Elements of the size-defining buffer: the whole input of reduce_scatter and all_to_all and the whole output
    of all_gather (as nccl-tests), so they hold a multiple of the world size."""
    count = nbytes // itemsize
    if collective in ("reduce_scatter", "all_gather", "all_to_all"):
        count -= count % world
    return count


def iterations(nbytes: int, iters: int | None = None, warmup: int | None = None) -> tuple[int, int]:
    """(warm-up, timed) iterations for a size; explicit values win."""
    timed = iters if iters is not None else max(MIN_ITERS, min(MAX_ITERS, _BYTES_PER_SIZE // max(nbytes, 1)))
    warm = warmup if warmup is not None else max(2, timed // 10)
    return warm, timed


def forms(collective: str, wanted=(False, True)) -> list:
    """The forms of the collective among those wanted (in_place values: False, True), out of place first;
    ValueError naming the flag where it has none of them. The barrier's one case has neither (None)."""
    have = FORMS[collective]
    if have == (None,):
        return [None]
    got = [f for f in have if f in wanted]
    if not got:
        flag = "--in-place" if True in wanted else "--out-of-place"
        raise ValueError(f"{flag}: {collective} has no {'in-place' if True in wanted else 'out-of-place'} form "
                         f"(it runs {'in place' if have == (True,) else 'out of place'} only)")
    return got


@dataclasses.dataclass(frozen=True)
class Case:
    collective: str
    dtype: str
    op: str
    algorithm: str
    accuracy: str
    nbytes: int
    in_place: bool | None = None  # None: the barrier's, which has no form


def cases(*, collective, dtypes, ops, algorithms, accuracies, size_list, in_place=(False, True)):
    """Every combination that means something: collectives without an op/algorithm/accuracy get one case, and
    one that moves no data one case in all (dtype "-", 0 bytes); each size in every form of in_place the
    collective has (out of place first, as nccl-tests' column groups)."""
    if collective in NO_DATA:
        dtypes, size_list = ["-"], [0]
    ops = ops if collective in TAKES_OP else ["-"]
    # Of pycoll's algorithm names, only those this collective has (the algorithm table): a sweep over "all" skips
    # the others' schedules. A peer's own label ("default") is not pycoll's and stays.
    algorithms = [a for a in algorithms if a not in abi.ALGORITHMS or a == "auto" or
                  a in abi.COLL_ALGORITHMS[collective]] if collective in TAKES_ALGORITHM else ["auto"]
    accuracies = accuracies if collective in TAKES_ACCURACY else ["fast"]
    out = []
    for dtype in dtypes:
        for op in ops:
            for algorithm in algorithms:
                for accuracy in accuracies:
                    for nbytes in size_list:
                        out.extend(Case(collective, dtype, op, algorithm, accuracy, nbytes, form)
                                   for form in forms(collective, in_place))
    return out
