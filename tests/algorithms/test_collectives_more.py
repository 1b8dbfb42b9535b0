"""Issue #14's collectives: all_to_all, gather, scatter, all_gather / reduce_scatter with uneven counts, and
broadcast_object / all_gather_object. Exact on integer data for N = 1..8 on the simulator (the same
pycoll_comm_* calls production makes) and over real processes (tcp and shm); async variants; bad arguments
refused before anything is sent; ranks that disagree on counts raise instead of hanging or misreading."""

import re

import numpy as np
import pytest
from multiproc import Ranks

from pycoll import MismatchError
from pycoll._bindings import abi
from pycoll.algorithms import COLL_ALGORITHMS
from pycoll.tools.simulate import simulate

NEW = ("all_to_all", "gather", "scatter", "all_gather_v", "reduce_scatter_v")


def data(rank, n, salt=0):
    return np.arange(n, dtype=np.int64) * 7 + rank * 1_000_003 + salt


def uneven(size, scale):
    return [0 if (r == 1 and size > 2) else scale * (r + 1) + r for r in range(size)]


def test_new_collectives_have_ids_after_the_old_ones_and_their_schedules():
    ids = [abi.COLLECTIVES[c] for c in NEW]
    assert ids == list(range(ids[0], ids[0] + len(NEW))) and ids[0] > abi.COLLECTIVES["barrier"]
    # all_to_all also runs as the shared-memory transport's own; gather and scatter as a tree or flat by size
    want = {"all_to_all": ("pairwise", "shm_slots"), "gather": ("binomial_tree", "flat"),
            "scatter": ("binomial_tree", "flat"), "all_gather_v": ("ring",), "reduce_scatter_v": ("ring",)}
    assert {coll: COLL_ALGORITHMS[coll] for coll in NEW} == want


# -- simulator: N = 1..8 ------------------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("k", [0, 1, 37, 9000])  # 9000 int64 a block: past the tree, flat
def test_all_to_all_gather_scatter_exact_on_the_simulator(n, k):
    inputs = [data(r, n * k) for r in range(n)]
    outs = simulate("all_to_all", inputs)
    for r in range(n):
        assert np.array_equal(outs[r], np.concatenate([inputs[i][r * k:(r + 1) * k] for i in range(n)]))
    for root in {0, n - 1, n // 2}:
        outs = simulate("gather", [data(r, k, root) for r in range(n)], root=root)
        assert np.array_equal(outs[root], np.concatenate([data(r, k, root) for r in range(n)]))
        assert all(outs[r] is None for r in range(n) if r != root)
        outs = simulate("scatter", inputs, root=root)
        for r in range(n):
            assert np.array_equal(outs[r], inputs[root][r * k:(r + 1) * k]), (root, r)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("segment_bytes", [None, 24])  # 24: three int64 per ring segment, many segments a block
def test_uneven_all_gather_and_reduce_scatter_exact_on_the_simulator(n, segment_bytes):
    for counts in (uneven(n, 5), [0] * n, [0] * (n - 1) + [9]):
        total = sum(counts)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        outs = simulate("all_gather_v", [data(r, counts[r]) for r in range(n)], counts=counts,
                        segment_bytes=segment_bytes)
        want = np.concatenate([data(r, counts[r]) for r in range(n)])
        assert all(np.array_equal(o, want) for o in outs), counts
        inputs = [data(r, total) for r in range(n)]
        for op, reduce in (("sum", np.add), ("max", np.maximum)):
            outs = simulate("reduce_scatter_v", inputs, op=op, counts=counts, segment_bytes=segment_bytes)
            full = reduce.reduce(inputs)
            for r in range(n):
                assert np.array_equal(outs[r], full[offsets[r]:offsets[r + 1]]), (op, counts, r)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [2, 5])
def test_uneven_reduce_scatter_compensated_and_avg_on_the_simulator(n):
    counts = uneven(n, 3)
    total = sum(counts)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    inputs = [data(r, total).astype(np.float32) / 8 for r in range(n)]
    exact = np.sum([x.astype(np.float64) for x in inputs], axis=0)
    outs = simulate("reduce_scatter_v", inputs, counts=counts, accuracy="compensated")
    for r in range(n):
        # compensated: rounded once, so the float32 nearest the exact sum
        assert np.array_equal(outs[r], exact[offsets[r]:offsets[r + 1]].astype(np.float32))
    outs = simulate("reduce_scatter_v", [data(r, total) * n for r in range(n)], op="avg", counts=counts)
    for r in range(n):
        assert np.array_equal(outs[r], np.sum([data(q, total) for q in range(n)], axis=0)[offsets[r]:offsets[r + 1]])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("coll", ["all_gather_v", "reduce_scatter_v"])
def test_ranks_passing_other_counts_all_raise_mismatch_on_the_simulator(coll):
    n = 4
    counts = [[2, 2, 2, 2]] * n
    counts[2] = [3, 1, 2, 2]  # the same total: only the descriptor's fingerprint tells them apart
    inputs = [data(r, counts[r][r] if coll == "all_gather_v" else 8) for r in range(n)]
    with pytest.raises(MismatchError) as info:
        simulate(coll, inputs, counts=counts, timeout=10)
    assert coll in str(info.value) and "rank 2" in str(info.value)
    # Every rank fails, none hangs or returns data: the ones that found it with MismatchError, the others hear
    # of it through the failing rank's abort (PeerFailure carrying the same message).
    assert all(e is not None and coll in str(e) for e in info.value.rank_errors), info.value.rank_errors
    assert any(isinstance(e, MismatchError) for e in info.value.rank_errors)


@pytest.mark.timeout(30)
def test_c_abi_refuses_negative_counts_before_sending():
    with pytest.raises(ValueError) as info:
        simulate("all_gather_v", [data(r, 2) for r in range(3)], counts=[2, -1, 2], timeout=10)
    for e in info.value.rank_errors:  # each rank's own check, none waiting for a peer
        assert isinstance(e, ValueError) and "counts[1] must be >= 0" in str(e), info.value.rank_errors


# -- real processes -------------------------------------------------------------------------------------------
def _run(n, scenario, backend, env=None, timeout=30):
    env = dict(env or {}, PYCOLL_BACKEND=backend)
    with Ranks(n, "more_colls_worker.py", scenario, env=env, timeout=timeout) as ranks:
        return ranks.reports(deadline_s=timeout + 30)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["tcp", "shm"])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_new_collectives_exact_over_processes(backend, n, no_segment_left):
    """Sizes 0..1000 per block, async variants, objects (one > 1 MiB); at N = 3 a 2.4 MB block too (through
    64 KiB shared-memory rings: every message streams in pieces)."""
    env = {"PYCOLL_SHM_RING_BYTES": "65536", "TEST_BIG_COUNT": "300000"} if n == 3 else {}
    for r, rep in _run(n, "exact", backend, env, timeout=60).items():
        assert rep.get("ok"), rep
        assert rep["backend"] == backend


def _expected_algorithms(backend, size):
    """What each collective must report running (the algorithm table, table.c, and its decision)."""
    shm = backend == "shm"
    want = {}
    for n in (8, 1 << 15):
        small = size * n * 4 <= 64 * 1024  # the trees' bound, on the bytes at the root
        want |= {f"broadcast {n}": "shm_slots" if shm else "binomial_tree",
                 f"reduce {n}": "shm_slots" if shm else "binomial_tree" if n * 4 <= 64 * 1024 else "scatter_gather",
                 f"all_gather {n}": "shm_slots" if shm else "ring", f"all_gather_v {n}": "ring",
                 f"reduce_scatter_v {n}": "ring",
                 f"all_to_all {n}": "shm_slots" if shm else "pairwise",
                 f"gather {n}": "binomial_tree" if small else "flat",
                 f"scatter {n}": "binomial_tree" if small else "flat",
                 f"barrier {n}": "shm_slots" if shm else "dissemination"}
        for name in COLL_ALGORITHMS["all_reduce"]:
            if name == "shm_slots" and not shm:
                continue
            want[f"all_reduce {n} {name}"] = name
            want[f"reduce_scatter {n} {name}"] = name if name in COLL_ALGORITHMS["reduce_scatter"] else "refused"
    return want


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["tcp", "shm"])
@pytest.mark.parametrize("n", [2, 3])
def test_last_algorithm_names_what_ran_for_every_collective_over_processes(backend, n, no_segment_left):
    want = _expected_algorithms(backend, n)
    for r, rep in _run(n, "last_algorithm", backend, timeout=60).items():
        assert rep.get("ok"), rep
        ran = rep["ran"]
        auto = {k: ran.pop(k) for k in list(ran) if k.endswith(" auto")}
        assert ran == want, (r, {k: (ran.get(k), want.get(k)) for k in set(ran) | set(want)
                                 if ran.get(k) != want.get(k)})
        for key, name in auto.items():  # auto reports the entry it resolved to, one the collective has
            assert name in COLL_ALGORITHMS[key.split()[0]], (key, name)


@pytest.mark.timeout(150)
def test_new_collectives_exact_over_eight_processes(no_segment_left):
    for r, rep in _run(8, "exact", "shm", timeout=90).items():
        assert rep.get("ok"), rep


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend, n", [("tcp", 1), ("tcp", 3), ("shm", 2)])
def test_bad_arguments_raise_naming_them_and_leave_the_communicator_usable(backend, n):
    for r, rep in _run(n, "bad_input", backend).items():
        assert rep.get("ok"), rep


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["tcp", "shm"])
@pytest.mark.parametrize("coll", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("zero", ["", "1"])  # "1": one rank also moves nothing, so only its next call tells
def test_ranks_passing_other_counts_all_raise_mismatch(backend, coll, zero):
    reports = _run(3, "counts_mismatch", backend, {"TEST_COLL": coll, "TEST_ZERO": zero}, timeout=20)
    for r, rep in reports.items():
        assert rep.get("error") == "MismatchError", (r, rep)
        assert rep["elapsed"] < 15, rep
    for rep in reports.values():  # each names both sides: two ranks, two different fingerprints of counts
        fingerprints = set(re.findall(rf"{coll}_v\(int64, counts #([0-9a-f]{{8}})", rep["message"]))
        assert len(fingerprints) >= 2 and len(set(re.findall(r"rank (\d)", rep["message"]))) >= 2, rep
