"""The C schedules touch collective data only through the transport's memory table (native/kernels/
memory_kernels.h): every copy, every kernel and every data scratch buffer. Checked on the simulated transport with the
guarded test table (tests/fakes/guarded_memory.c: the host kernels behind counters, allocations poisoned with
all-ones bits and fenced by canaries) standing in for a device one, for every collective, algorithm and accuracy:
the bits equal the host table's, every block the table handed out is returned intact, no kernel or copy runs past
a block, and the table was used. (tests/vendors/test_nccl_compensated.py does the same over the vendor transport.)"""

import re

import numpy as np
import pytest
from fakes.guarded_memory import ENTRIES, run_guarded
from repo_paths import ROOT

from pycoll.tools.accuracy import make_inputs

ALL_REDUCE = ("ring", "halving_doubling", "mesh", "recursive_doubling")
REDUCE_SCATTER = ("ring", "halving_doubling", "mesh")


@pytest.mark.parametrize("world", [3, 4])
@pytest.mark.parametrize("accuracy", ["fast", "compensated"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_all_reduce_and_reduce_scatter_every_algorithm(world, accuracy, dtype):
    inputs = make_inputs("mixed", world, 1001, dtype, seed=11)
    for algorithm in ALL_REDUCE:
        for op in ("sum", "avg", "max"):
            calls = run_guarded("all_reduce", inputs, op=op, algorithm=algorithm, accuracy=accuracy)
            if algorithm == "mesh" and accuracy == "fast":
                assert calls["copy"] >= world, calls  # each rank's first contribution into its accumulator
            kernels = sum(calls[k] for k in ENTRIES if k not in ("copy", "alloc", "free", "live", "corrupt"))
            assert kernels > 0, (algorithm, op, calls)
            if accuracy == "compensated" and op != "max":
                assert calls["compensated_store"] > 0 and calls["alloc"] > 0, (algorithm, op, calls)
    full = [np.concatenate([x] * world) for x in inputs]
    for algorithm in REDUCE_SCATTER:
        calls = run_guarded("reduce_scatter", full, op="sum", algorithm=algorithm, accuracy=accuracy)
        assert calls["alloc"] > 0, (algorithm, calls)  # the partials live in table memory


@pytest.mark.parametrize("accuracy", ["fast", "compensated"])
@pytest.mark.parametrize("count", [1001, 40_000])  # reduce: the binomial tree, then (past 64 KiB) scatter-gather
def test_reduce_all_gather_broadcast(accuracy, count):
    inputs = make_inputs("mixed", 4, count, "float32", seed=12)
    for root in (0, 3):
        calls = run_guarded("reduce", inputs, op="sum", root=root, accuracy=accuracy, algorithm="auto")
        assert calls["alloc"] > 0, calls
    calls = run_guarded("all_gather", inputs, algorithm="auto")
    assert calls["copy"] >= 4, calls  # each rank's own block into the result
    run_guarded("broadcast", inputs, root=2, algorithm="auto")


def test_empty_and_single_rank():
    run_guarded("all_reduce", make_inputs("mixed", 1, 7, "float32", seed=1), accuracy="compensated")
    run_guarded("all_reduce", [np.zeros(0, np.float32)] * 3, accuracy="compensated")


def test_no_schedule_copies_data_behind_the_tables_back():
    """The counters above see only calls that reach the table; a plain memcpy would not show. So: no memcpy or
    memmove in the communicator, the algorithms or the helpers they share (the reduction helpers, group views)
    outside memory_kernels.c's host table, and malloc only there
    (host_alloc), in schedule.c's scratch_alloc, which holds bookkeeping (data scratch is data_alloc's), in
    communicator.c's copy of the host map, and for a split's rank lists and host map (split.c: the (color, key)
    pairs, the members, the host renumbering, the host map, the root's ranks; group_view.c: the members). The
    fault-tolerant agreement (agree.c) builds and reads its own small messages (epoch, flag, the lost ranks) and
    allocates its bookkeeping: it never touches a collective's data. The flight recorder (flight_recorder.c)
    copies one of its own entries and its error text out for a dump, and trace_dump.c grows the dump's JSON text:
    call metadata, never data."""
    allocations = {"memory_kernels.c": 1, "schedule.c": 1, "communicator.c": 1, "split.c": 5, "group_view.c": 1,
                   "agree.c": 5, "trace_dump.c": 1}
    # memory_kernels.c: host_copy's memmove
    message_copies = {"memory_kernels.c": 1, "agree.c": 9, "flight_recorder.c": 2}
    root = ROOT / "native"
    shared = [root / "kernels" / "memory_kernels.c", root / "kernels" / "reduction.c",
              root / "transport" / "group_view.c"]
    for path in sorted((root / "algorithms").glob("*.c")) + sorted((root / "comm").glob("*.c")) + shared:
        text = path.read_text()
        copies = re.findall(r"\bmem(?:cpy|move)\s*\(", text)
        assert len(copies) == message_copies.get(path.name, 0), path.name
        allocs = re.findall(r"\b(?:malloc|realloc)\s*\(", text)
        assert len(allocs) == allocations.get(path.name, 0), path.name
