"""Jobs across several hosts on one machine (network namespaces, tests/netns_hosts.py). Needs root and
iproute2; only the namespaces' own addresses are used."""

import pytest

from multiproc import Ranks
from netns_hosts import SUBNET, HostsUnavailable, namespace_hosts

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]


@pytest.fixture
def hosts(request):
    try:
        with namespace_hosts(request.param) as names:
            yield names
    except HostsUnavailable as exc:
        pytest.skip(str(exc))


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
    # Ranks 0 and 3 share host 0: its local ranks 0 and 1; the job still runs over TCP (one transport per job).
    assert [(reports[r]["local_rank"], reports[r]["local_size"]) for r in range(4)] == [(0, 2), (0, 1), (0, 1),
                                                                                          (1, 2)], reports
    assert all(rep["hosts"] == 3 and rep["transport"] == "tcp" for rep in reports.values()), reports


def _hierarchical_job(hosts, placement, env=None):
    with Ranks(len(placement), "comm_worker.py", "hierarchical", master_addr=f"{SUBNET}.1", env=env,
               wrap=lambda r: ["ip", "netns", "exec", hosts[placement[r]]]) as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") for rep in reports.values()), reports
    assert len({rep["digest"] for rep in reports.values()}) == 1, "float results differ between ranks"
    assert all(rep["hosts"] == len(set(placement)) for rep in reports.values()), reports
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
