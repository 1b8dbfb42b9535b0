"""Single copies in the shared-memory transport's native collectives (native/transport/shm_single_copy.c): a large
broadcast, all_to_all and 2-rank all_gather read straight from the owner's buffer (process_vm_readv) where every
rank agreed to, with real processes. Exact results on both sides of the thresholds (1 MiB per transfer; 8 MiB
for an all_gather), and which path ran, seen from inside each rank: a single copy never writes the rank's slots,
the path through the slots always does. The fallback when any rank turns them off (PYCOLL_SHM_SINGLE_COPY=off)
or cannot read the others (a seccomp filter, as a container's profile may have); an address a rank does not
have; killed and stopped peers while the owners wait for their readers."""

import platform

import pytest
import transport_faults as faults
from multiproc import Ranks

DEADLINE_S = 10  # each collective's timeout: a detection must come long before it


def _single_copy(n, expected, env=None, rank_env=None):
    """The single_copy scenario of shm_coll_worker.py; `expected`: whether large calls must run by single copies.
    64 KiB rings make 64 KiB slots, so the paths through the slots take many rounds at these sizes."""
    env = dict(env or {}, PYCOLL_BACKEND="shm", PYCOLL_SHM_RING_BYTES="65536", TEST_SINGLE_COPY=str(int(expected)))
    with Ranks(n, "shm_coll_worker.py", "single_copy", env=env, rank_env=rank_env, timeout=60) as ranks:
        reports = ranks.reports()
    for r, rep in reports.items():
        assert rep.get("ok"), (r, rep)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_large_calls_read_straight_from_the_owner_and_are_exact(n, no_segment_left):
    _single_copy(n, expected=True)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3])
def test_off_copies_through_the_slots(n):
    _single_copy(n, expected=False, env={"PYCOLL_SHM_SINGLE_COPY": "off"})


@pytest.mark.timeout(120)
def test_one_rank_that_turns_them_off_turns_them_off_everywhere():
    _single_copy(3, expected=False, rank_env=lambda r: {"PYCOLL_SHM_SINGLE_COPY": "off"} if r == 2 else {})


@pytest.mark.timeout(120)
@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="the filter names the system call")
def test_one_rank_that_cannot_read_the_others_turns_them_off_everywhere():
    """Rank 1's process_vm_readv fails with EPERM (a seccomp filter): its probe of the others fails, so no rank
    uses single copies -- though the others could read rank 1."""
    _single_copy(3, expected=False, rank_env=lambda r: {"TEST_DENY_CMA": "1"} if r == 1 else {})


def _lie(n, collective, lie, env=None):
    env = dict(env or {}, PYCOLL_BACKEND="shm", TEST_COLLECTIVE=collective, TEST_LIE=lie)
    with Ranks(n, "shm_fault_worker.py", "lie", env=env, timeout=DEADLINE_S) as ranks:
        return ranks.reports()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n, collective, lie", [(2, "all_gather", "short"), (2, "broadcast", "unmapped"),
                                                (3, "broadcast", "short"), (3, "all_to_all", "unmapped")])
def test_an_address_a_rank_does_not_have_is_a_peer_failure_naming_it(n, collective, lie):
    """Rank 1 overwrites the buffer address it publishes with one it does not map (unmapped), or with the last
    page of a mapping before a gap (short: a read from the address stops after that page; an all-to-all would
    read from further on). The readers get no crash, but PeerFailure naming rank 1, told to every rank, long
    before the deadline."""
    reports = _lie(n, collective, lie)
    for r, rep in reports.items():
        assert rep.get("error") == "PeerFailure" and rep["failed_rank"] == 1, (r, rep)
        assert "rank 1 published the address of a buffer it does not have" in rep["message"], rep
        assert rep["elapsed"] < DEADLINE_S, rep
    read = "read 0 of" if lie == "unmapped" else "read 4096 of"
    assert any(read in rep["message"] for rep in reports.values()), reports


@pytest.mark.timeout(60)
def test_with_single_copies_off_no_rank_reads_the_address_published():
    reports = _lie(3, "broadcast", "unmapped", env={"PYCOLL_SHM_SINGLE_COPY": "off"})
    for r, rep in reports.items():
        assert rep.get("ok") and rep["wrong"] == 0 and rep["iterations"] > 0, (r, rep)
    assert reports[1]["writes"] > 0, reports[1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("collective, world, victim, count", [("broadcast", 4, 2, 1 << 20),
                                                              ("all_to_all", 4, 2, 1 << 20),
                                                              ("all_gather", 2, 1, 1 << 21)])
def test_killed_peer_is_reported_by_every_rank_within_2s(collective, world, victim, count, no_segment_left):
    """Single-copy collectives (float32: 4 MiB per transfer, an all-gather's 8 MiB) in a loop: the victim dies
    while reading or while others read from it; an owner waiting for its readers names it as any wait does."""
    faults.check_killed_peer_is_reported_by_every_rank_within_2s(
        victim, world, env={"PYCOLL_BACKEND": "shm", "TEST_COLLECTIVE": collective, "TEST_COUNT": str(count)})


@pytest.mark.timeout(60)
def test_stopped_reader_makes_the_root_time_out_naming_it(monkeypatch):
    """The root of a 4 MiB broadcast waits for rank 1 to finish reading its buffer; rank 1 is stopped."""
    monkeypatch.setenv("PYCOLL_BACKEND", "shm")
    monkeypatch.setenv("TEST_COLLECTIVE", "broadcast")
    monkeypatch.setenv("TEST_COUNT", str(1 << 20))
    faults.check_stopped_peer_makes_the_others_time_out_at_the_deadline()
