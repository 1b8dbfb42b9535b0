"""PYCOLL_TCP_STREAMS: several TCP connections per pair of ranks, a large message split across them
(native/transport/tcp_stripes.c), over real processes on 127.0.0.1."""

import pytest
from multiproc import Ranks

STREAMS = 4


def between(reports):
    """The TCP connections that join rank 0's process to rank 1's."""
    ends = {tuple(c) for c in reports[1]["connections"]}
    return sum((remote, local) in ends for local, remote in reports[0]["connections"])


def run(scenario, streams, timeout=20.0):
    env = {"PYCOLL_BACKEND": "tcp", "PYCOLL_TCP_STREAMS": str(streams)}
    with Ranks(2, "stripe_worker.py", scenario, env=env, timeout=timeout) as job:
        return job.reports(ranks=[0] if scenario == "killed" else None, deadline_s=60)


@pytest.mark.timeout(120)
def test_striped_messages_are_exact_around_the_split_size():
    """The two ranks are joined by STREAMS - 1 more connections than with one stream; results stay exact for
    sizes just below, at and above the split threshold and for odd sizes (parts of unequal length)."""
    one, striped = run("sizes", 1), run("sizes", STREAMS)
    assert all(rep.get("ok") for rep in [*one.values(), *striped.values()]), (one, striped)
    assert between(striped) == between(one) + STREAMS - 1, (between(one), between(striped))


@pytest.mark.timeout(60)
def test_lengths_that_differ_are_still_a_mismatch():
    reports = run("mismatch", STREAMS)
    assert between(reports) >= STREAMS, reports
    for rep in reports.values():
        assert rep["outcome"] == "MismatchError", rep
        assert "262145" in rep["message"], rep


@pytest.mark.timeout(60)
def test_a_peer_killed_mid_transfer_is_reported():
    """Rank 1 is killed while 64 MiB messages move over every connection: rank 0 names it at once, not at its
    deadline."""
    rep = run("killed", STREAMS, timeout=30)[0]
    assert len(rep["connections"]) >= STREAMS, rep
    assert rep["outcome"] == "PeerFailure" and rep["failed_rank"] == 1, rep
    assert rep["seconds"] < 10, rep


@pytest.mark.timeout(60)
def test_ranks_that_open_different_numbers_of_connections_are_refused_naming_both():
    """Rank 1 sets PYCOLL_TCP_STREAMS=3; rank 0 leaves it unset with one interface, so it opens one connection
    per pair: both hear why at set-up instead of a job that hangs on the connection that never comes."""
    with Ranks(2, "stripe_worker.py", "refused", env={"PYCOLL_BACKEND": "tcp"}, timeout=10,
               rank_env=lambda r: {"PYCOLL_TCP_STREAMS": "3"} if r == 1 else {}) as job:
        reports = job.reports(deadline_s=40)
    for rep in reports.values():
        assert rep["outcome"] != "no error", rep
        assert "rank 1 opens 3 TCP connections per pair of ranks, rank 0 1" in rep["message"], rep
