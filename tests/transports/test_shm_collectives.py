"""The shared-memory transport's native collectives (algorithm "shm_slots": native/transport/shm_collectives.c) with
real processes: exact on integer data for every dtype, op and accuracy at sizes around every boundary of the
shared area, bitwise identical on every rank, disagreements as MismatchError, faults as over the rings, and
the refusal of algorithm="shm_slots" where there is no shared memory -- for all_reduce, broadcast and barrier, and
for reduce_scatter and all_gather."""

import pytest
import transport_faults as faults
from multiproc import Ranks, assert_all_ok


def _run(n, scenario, env=None, timeout=30, backend="shm"):
    with Ranks(n, "shm_coll_worker.py", scenario, env=dict(env or {}, PYCOLL_BACKEND=backend),
               timeout=timeout) as ranks:
        return ranks.reports(deadline_s=max(60.0, timeout))  # the matrices take a while under the sanitizers


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [1, 2, 3, pytest.param(4, marks=pytest.mark.stress)])
def test_all_reduce_broadcast_and_barrier_are_exact_and_identical_on_every_rank(n, no_segment_left):
    """64 KiB rings make 64 KiB slots: messages of one, two and three rounds stay small."""
    env = {"PYCOLL_SHM_RING_BYTES": "65536", "TEST_ROUNDS": "3"}
    reports = _run(n, "matrix", env=env, timeout=120)
    assert_all_ok(reports)
    assert len({rep["digest"] for rep in reports.values()}) == 1, reports


@pytest.mark.stress
@pytest.mark.timeout(600)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_every_op_of_every_dtype_with_the_default_slots(n):
    reports = _run(n, "matrix", env={"TEST_OPS": "sum,prod,min,max,avg", "TEST_ROUNDS": "3"}, timeout=500)
    assert all(rep.get("ok") for rep in reports.values()), reports


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [1, 2, 3, pytest.param(4, marks=pytest.mark.stress)])
def test_reproducible_all_reduce_is_exact_and_the_ring_algorithms_bits(n, no_segment_left):
    """The exact mode's limbs encoded into the slots and decoded once summed: 64 KiB slots put messages of one,
    two and three rounds within reach."""
    reports = _run(n, "reproducible", env={"PYCOLL_SHM_RING_BYTES": "65536", "TEST_ROUNDS": "3"}, timeout=200)
    assert_all_ok(reports)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("scenario", ["matrix", "scatter_gather"])
@pytest.mark.parametrize("n", [2, 3])
def test_streaming_copies_into_the_slots_give_the_same_bytes(n, scenario, no_segment_left):
    """PYCOLL_SHM_STREAMING=on: every copy-in from 32 KiB on uses streaming stores (native/transport/
    shm_slot_copy.c), whose heads, bodies and tails the counts around the boundaries of 64 KiB slots reach at
    every alignment. A copy-in moves a buffer's bytes whatever the op: sum alone reaches every dtype, count and
    accuracy here, and the tests above combine every op."""
    env = {"PYCOLL_SHM_RING_BYTES": "65536", "PYCOLL_SHM_STREAMING": "on", "TEST_ROUNDS": "3", "TEST_OPS": "sum"}
    reports = _run(n, scenario, env=env, timeout=120)
    assert_all_ok(reports)
    assert len({rep["digest"] for rep in reports.values()}) == 1, reports


@pytest.mark.timeout(60)
# 1000: the one-round path, 300,000: the two-phase rounds (transport_faults.covering: each kind on one of them).
@pytest.mark.parametrize("kind, count", faults.covering([(kind,) for kind in ["count", "dtype", "op", "algorithm",
                                                                               "collective", "root"]],
                                                        [1000, 300_000]))
def test_disagreement_is_a_mismatch_on_every_rank(kind, count):
    reports = _run(3, "mismatch", env={"TEST_MISMATCH": kind, "TEST_COUNT": str(count)}, timeout=20)
    for r, rep in reports.items():
        assert rep.get("error") == "MismatchError", (r, rep)
        assert rep["elapsed"] < 15, rep  # found at once, not at the 20 s deadline
    # The rank that called something else is named: rank 1, except for "root", where rank 0 (root 0) is the one
    # the others (root 1) disagree with, and whichever of them found it first may be the other rank named.
    odd = 0 if kind == "root" else 1
    assert any(f"rank {odd} " in rep["message"] for rep in reports.values()), reports


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [1, 2, 3, pytest.param(4, marks=pytest.mark.stress)])
def test_reduce_scatter_and_all_gather_are_exact_on_every_rank(n, no_segment_left):
    """64 KiB rings make 64 KiB slots, so the counts reach the many-round paths. As for all_reduce above, 4 ranks
    run with the stress tests: 3 already has several peers per block and blocks of unequal alignment."""
    reports = _run(n, "scatter_gather", env={"PYCOLL_SHM_RING_BYTES": "65536"}, timeout=120)
    for rep in reports.values():
        assert rep.get("ok"), rep
    assert len({rep["digest"] for rep in reports.values()}) == 1, reports


@pytest.mark.timeout(60)
@pytest.mark.parametrize("collective, kind, count", faults.covering(
    [*(("reduce_scatter", kind) for kind in ("count", "dtype", "op", "algorithm", "collective")),
     *(("all_gather", kind) for kind in ("count", "dtype", "collective"))], [1000, 300_000]))  # one round, several
def test_reduce_scatter_and_all_gather_disagreement_is_a_mismatch_on_every_rank(collective, kind, count):
    reports = _run(3, "mismatch", env={"TEST_MISMATCH": kind, "TEST_COUNT": str(count),
                                       "TEST_COLLECTIVE": collective}, timeout=20)
    for r, rep in reports.items():
        assert rep.get("error") == "MismatchError", (r, rep)
        assert rep["elapsed"] < 15, rep
    assert any("rank 1" in rep["message"] for rep in reports.values()), reports


@pytest.mark.timeout(60)
@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter"])
def test_explicit_shm_over_tcp_is_refused_naming_the_backend(collective):
    reports = _run(2, "explicit_over_tcp", env={"TEST_COLLECTIVE": collective}, backend="tcp")
    for rep in reports.values():
        assert rep.get("ok") and rep.get("error") == "ValueError", rep
        assert "'tcp'" in rep["message"] and "'shm_slots'" in rep["message"], rep


@pytest.mark.timeout(60)
def test_the_algorithm_is_shm_slots_and_its_former_name_still_runs_it_with_a_warning(no_segment_left):
    """Backend "shm", transport "shm", algorithm "shm_slots": three names for three things. The former
    algorithm name runs the same collectives and says which name to use."""
    reports = _run(2, "names")
    assert_all_ok(reports)
    for rep in reports.values():
        assert (rep["backend"], rep["transport"]) == ("shm", "shm"), rep
        new, old = rep["runs"]["shm_slots"], rep["runs"]["shm"]
        assert new == {"ran": "shm_slots", "right": True, "warnings": []}, rep
        assert old["ran"] == "shm_slots" and old["right"], rep
        assert [category for category, _ in old["warnings"]] == ["DeprecationWarning"], rep
        assert "'shm' is deprecated" in old["warnings"][0][1] and "use 'shm_slots'" in old["warnings"][0][1], rep


@pytest.mark.timeout(60)
@pytest.mark.parametrize("count", ["16", "1000000"])  # the one-round path and the two-phase rounds
def test_killed_peer_is_reported_by_every_rank_within_2s_and_leaves_no_segment(count, monkeypatch,
                                                                                no_segment_left):
    monkeypatch.setenv("PYCOLL_BACKEND", "shm")
    monkeypatch.setenv("TEST_COUNT", count)
    faults.check_killed_peer_is_reported_by_every_rank_within_2s(2, 4, env={"TEST_ALGORITHM": "shm_slots"})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("count", ["16", "1000000"])  # one round and several
def test_killed_peer_in_reduce_scatter_or_all_gather_is_reported_within_2s(collective, count, monkeypatch,
                                                                          no_segment_left):
    monkeypatch.setenv("PYCOLL_BACKEND", "shm")
    monkeypatch.setenv("TEST_COUNT", count)
    monkeypatch.setenv("TEST_COLLECTIVE", collective)
    faults.check_killed_peer_is_reported_by_every_rank_within_2s(2, 4, env={"TEST_ALGORITHM": "shm_slots"})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter", "all_gather"])
def test_stopped_peer_makes_the_others_time_out_at_the_deadline(collective, monkeypatch):
    monkeypatch.setenv("PYCOLL_BACKEND", "shm")
    monkeypatch.setenv("TEST_ALGORITHM", "shm_slots")
    monkeypatch.setenv("TEST_COLLECTIVE", collective)
    faults.check_stopped_peer_makes_the_others_time_out_at_the_deadline()
