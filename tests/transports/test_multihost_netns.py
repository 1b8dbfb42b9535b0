"""Jobs across several hosts on one machine (network namespaces, tests/netns_hosts.py). Needs root and
iproute2; only the namespaces' own addresses are used."""

import os
import shutil

import pytest
import transport_faults as faults
from multiproc import Ranks
from netns_hosts import SUBNET

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]


@pytest.mark.parametrize("hosts", [2, 4], indirect=True)
def test_job_across_hosts(hosts):
    """One rank per host; rank 0's host is MASTER_ADDR; every collective checked exactly."""
    with Ranks(len(hosts), "comm_worker.py", "collectives", master_addr=f"{SUBNET}.1",
               wrap=lambda r: ["ip", "netns", "exec", hosts[r]]) as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") for rep in reports.values()), reports
    # The default backend ("cpu") finds the ranks on separate hosts and runs over TCP.
    for rep in reports.values():
        assert (rep["backend"], rep["transport"], rep["hosts"], rep["local_size"]) == ("cpu", "tcp", len(hosts), 1)


@pytest.mark.parametrize("hosts", [3], indirect=True)
def test_interface_chosen_by_name_and_two_ranks_per_host(hosts):
    """PYCOLL_SOCKET_IFNAME picks eth0; ranks 0-2 on three hosts plus a second rank on host 0."""
    placement = [0, 1, 2, 0]
    with Ranks(4, "comm_worker.py", "collectives", master_addr=f"{SUBNET}.1",
               env={"PYCOLL_SOCKET_IFNAME": "eth0"},
               wrap=lambda r: ["ip", "netns", "exec", hosts[placement[r]]]) as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") for rep in reports.values()), reports
    # Ranks 0 and 3 share host 0: its local ranks 0 and 1, joined by shared memory, TCP to the other hosts.
    assert [(reports[r]["local_rank"], reports[r]["local_size"]) for r in range(4)] == [(0, 2), (0, 1), (0, 1),
                                                                                          (1, 2)], reports
    assert all(rep["hosts"] == 3 and rep["transport"] == "shm+tcp" for rep in reports.values()), reports


@pytest.mark.parametrize("hosts", [2], indirect=True)
def test_two_hosts_of_two_ranks_run_shared_memory_within_and_tcp_between(hosts, no_segment_left):
    """The default backend's per-pair transports: every collective and algorithm exact."""
    placement = [0, 0, 1, 1]
    with Ranks(4, "comm_worker.py", "collectives", master_addr=f"{SUBNET}.1",
               wrap=lambda r: ["ip", "netns", "exec", hosts[placement[r]]]) as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") for rep in reports.values()), reports
    for rep in reports.values():
        assert (rep["backend"], rep["transport"], rep["hosts"], rep["local_size"]) == ("cpu", "shm+tcp", 2, 2)


@pytest.mark.parametrize("hosts", [2], indirect=True)
@pytest.mark.parametrize("victim", [1, 2])
def test_killed_rank_is_named_on_its_host_and_across_the_network(hosts, victim, no_segment_left):
    """Ranks 0, 1 on host 0 and 2, 3 on host 1: each survivor, local to the victim or not, raises PeerFailure
    naming it within 2 s."""
    placement = [0, 0, 1, 1]
    faults.check_killed_peer_is_reported_by_every_rank_within_2s(
        victim, 4, master_addr=f"{SUBNET}.1", wrap=lambda r: ["ip", "netns", "exec", hosts[placement[r]]])


def _hierarchical_job(hosts, placement, env=None):
    with Ranks(len(placement), "comm_worker.py", "hierarchical", master_addr=f"{SUBNET}.1", env=env,
               wrap=lambda r: ["ip", "netns", "exec", hosts[placement[r]]]) as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") for rep in reports.values()), reports
    assert len({rep["digest"] for rep in reports.values()}) == 1, "float results differ between ranks"
    assert all(rep["hosts"] == len(set(placement)) for rep in reports.values()), reports
    assert all(rep["transport"] == "shm+tcp" for rep in reports.values()), reports  # host phases: shared memory
    return reports


@pytest.mark.parametrize("hosts", [2], indirect=True)
def test_hierarchical_two_hosts_of_two_ranks(hosts):
    """Ranks 0, 2 on host 0 and 1, 3 on host 1 (not consecutive): each host's pair reduces, then both pairs'
    counterparts all-reduce across the network at once. Rank values 2^24, 1, -2^24, 1 in fast float32 sum to 2
    only when each host sums first (2^24 - 2^24, then 1 + 1): the host map found at rendezvous reached the
    schedule (a ring over the four ranks gives 0 on a quarter of the elements)."""
    reports = _hierarchical_job(hosts, [0, 1, 0, 1], env={"TEST_ORDER_SUM": "2"})
    assert [reports[r]["local_size"] for r in range(4)] == [2, 2, 2, 2], reports


@pytest.mark.parametrize("hosts", [2], indirect=True)
def test_hierarchical_uneven_hosts_of_two_and_one(hosts):
    reports = _hierarchical_job(hosts, [0, 0, 1])
    assert [reports[r]["local_size"] for r in range(3)] == [2, 2, 1], reports


def _spin_ns_on_cores(hosts, cores):
    """Each rank's default spin, one rank per namespace host, every rank's affinity `cores` (taskset -c)."""
    with Ranks(len(hosts), "comm_worker.py", "collectives", master_addr=f"{SUBNET}.1",
               wrap=lambda r: ["ip", "netns", "exec", hosts[r], "taskset", "-c", cores]) as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") and rep["hosts"] == len(hosts) for rep in reports.values()), reports
    return [reports[r]["options"]["spin_ns"] for r in range(len(hosts))]


@pytest.mark.parametrize("hosts", [2], indirect=True)
def test_spin_default_counts_every_rank_on_the_machine_not_only_the_host(hosts, monkeypatch):
    """Two namespace hosts of one rank each are two hosts, but one machine: pinned to one core, the two ranks
    crowd it (twice as many ranks as cores), so each polls the shortest default (50 us), not the 2 ms of a rank
    with a core of its own."""
    if shutil.which("taskset") is None:
        pytest.skip("needs taskset (util-linux)")
    monkeypatch.delenv("PYCOLL_SPIN_US", raising=False)
    assert _spin_ns_on_cores(hosts, "0") == [50_000, 50_000]
    if len(os.sched_getaffinity(0)) >= 2:  # a core each: the long spin
        cores = ",".join(map(str, sorted(os.sched_getaffinity(0))[:2]))
        assert _spin_ns_on_cores(hosts, cores) == [2_000_000, 2_000_000]


@pytest.mark.parametrize("hosts", [3], indirect=True)
def test_spin_default_between_a_core_each_and_twice_the_ranks_is_200_us(hosts, monkeypatch):
    """Three ranks on two cores share them without crowding them: each polls 200 us (a short poll often catches
    a peer running on the other core), the crowded 50 us only from four ranks on two cores."""
    if shutil.which("taskset") is None:
        pytest.skip("needs taskset (util-linux)")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    monkeypatch.delenv("PYCOLL_SPIN_US", raising=False)
    cores = ",".join(map(str, sorted(os.sched_getaffinity(0))[:2]))
    assert _spin_ns_on_cores(hosts, cores) == [200_000] * 3
