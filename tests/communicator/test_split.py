"""Subgroups (comm.split, split_by_host, mesh) across real processes over both message transports and the
per-pair default: membership and numbering, every collective and algorithm on a split, groups used
interleaved (blocking and async) as hybrid parallelism does, disagreements inside a group and between groups
named instead of hanging, a dead rank reaching every group, closing, and threads."""

import pytest
from multiproc import assert_all_ok, scenario_module

backend, run = scenario_module("split_worker.py", ["tcp", "shm", "cpu"])


def skip_cpu(backend):
    """cpu is shm on one host: a test whose groups the per-pair choice cannot change runs over shm alone. The
    groups and the mesh of 4 keep the cpu case, so that splits of the default backend are covered."""
    if backend == "cpu":
        pytest.skip("cpu is shm on one host: covered by the shm case")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [2, 3, 5])
def test_splits_number_their_members_and_run_every_collective_exactly(backend, n):
    assert_all_ok(run(n, "groups"))


@pytest.mark.timeout(180)
def test_a_pp_dp_tp_mesh_of_8_ranks_has_the_right_groups_and_they_interleave_with_the_parent(backend):
    skip_cpu(backend)
    assert_all_ok(run(8, "mesh", timeout=60))


@pytest.mark.timeout(90)
def test_a_mesh_of_4_ranks_interleaves_its_groups_with_the_parent(backend):
    assert_all_ok(run(4, "mesh"))


@pytest.mark.timeout(90)
def test_members_of_a_split_that_disagree_get_mismatch_error_naming_both(backend):
    skip_cpu(backend)
    reports = run(4, "mismatch")
    # Ranks 0 and 2 form a group and disagree (6 vs 5 elements); 1 and 3 agree, but share the family's
    # connections with the ranks that failed, so they may hear of it (the first error is announced).
    for r in (0, 2):
        assert reports[r]["outcome"] == "MismatchError", reports[r]
        assert "int64 x 6" in reports[r]["message"] and "int64 x 5" in reports[r]["message"], reports[r]
    for r in (1, 3):  # in their all-reduce, in the split before it, or at close
        assert reports[r].get("outcome") in (None, "no error", "MismatchError"), reports[r]
        assert reports[r].get("error", "MismatchError").startswith("MismatchError"), reports[r]


@pytest.mark.timeout(60)
def test_ranks_calling_two_communicators_in_opposite_orders_get_an_order_mismatch_not_a_hang(backend):
    skip_cpu(backend)
    reports = run(2, "order", timeout=5)
    if backend == "shm":
        # The parent's all-reduce is the shared-memory transport's own (native/transport/shm_collectives.c),
        # which waits on flags, not on the rings that carry the split's messages and the probes: there the
        # disagreement ends at the deadline, as a Timeout naming the rank waited for.
        for rep in reports.values():
            assert rep["outcome"] in ("Timeout", "MismatchError"), rep
        return
    for rep in reports.values():
        assert rep["outcome"] == "MismatchError", rep
    assert any("order" in rep["message"] for rep in reports.values()), reports


@pytest.mark.timeout(90)
def test_a_dead_rank_fails_every_group_it_belongs_to_within_2_s(backend):
    # A 30 s collective deadline: only detection, not the deadline, can be this fast.
    skip_cpu(backend)
    reports = run(4, "death", timeout=30, ranks=[0, 1, 2])
    for rep in reports.values():
        assert rep["outcome"] == "PeerFailure" and rep["seconds"] < 2.0, rep
        assert rep["failed_rank"] == 3, rep
        assert all(v != "no error" for v in rep["later"].values()), rep


@pytest.mark.timeout(60)
def test_closing_a_split_keeps_the_family_and_closing_the_parent_closes_its_splits(backend):
    skip_cpu(backend)
    for rep in run(2, "close").values():
        assert rep.get("ok"), rep
        assert rep["after_parent_close"] == ["CommunicatorClosed", "CommunicatorClosed"], rep


@pytest.mark.timeout(60)
def test_a_split_keeps_the_communicator_it_came_from_alive(backend):
    skip_cpu(backend)
    assert_all_ok(run(2, "orphan"))


@pytest.mark.timeout(60)
def test_a_second_thread_on_a_split_waits_for_the_parents_collective_then_runs():
    reports = run(2, "threads")
    # Rank 1 joins the parent's all-reduce 1 s late: rank 0's split call waited for it, then ran after it.
    assert reports[0]["parent_done_first"] and reports[0]["waited"] > 0.4, reports[0]
    for rep in reports.values():
        assert rep["parent_done"] and rep.get("ok"), rep
        assert rep["split_result"] == [2.0] * 4, rep
