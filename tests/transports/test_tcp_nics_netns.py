"""Several interfaces per host (PYCOLL_SOCKET_IFNAME=eth0,eth1): a pair's connections spread over both links,
across network-namespace hosts (tests/netns_hosts.py; needs root and iproute2, skips saying why without), and a
bad list is refused naming the interface."""

import pytest
from multiproc import Ranks
from netns_hosts import SUBNET, HostsUnavailable, link_bytes, namespace_hosts

import pycoll

NICS = ("eth0", "eth1")


@pytest.fixture
def two_nic_hosts():
    try:
        with namespace_hosts(2, nics=2) as names:
            yield names
    except HostsUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_two_streams_over_two_interfaces_use_both_links(two_nic_hosts):
    """One rank per host, 2 streams, both interfaces named: a 16 MiB all-reduce is exact and each host sends
    megabytes on each of its two links (its half of each striped frame), not on the first alone."""
    hosts = two_nic_hosts
    env = {"PYCOLL_TCP_STREAMS": "2", "PYCOLL_SOCKET_IFNAME": ",".join(NICS)}
    with Ranks(2, "stripe_worker.py", "16mib", env=env, master_addr=f"{SUBNET}.1",
               wrap=lambda r: ["ip", "netns", "exec", hosts[r]]) as ranks:
        reports = ranks.reports(deadline_s=60)
    assert all(rep.get("ok") for rep in reports.values()), reports
    assert all(rep["transport"] == "tcp" for rep in reports.values()), reports
    sent = {(host, dev): link_bytes(host, dev)[1] for host in hosts for dev in NICS}
    # Each rank sends at least 8 MiB (half the vector, in frames that are striped): half of it on each link.
    assert all(n > 2 << 20 for n in sent.values()), sent


@pytest.mark.parametrize("ifnames, match", [
    ("lo,nosuch1", r"network interface 'nosuch1' \(ifname\) has no IP address"),
    ("lo,lo", r"ifname='lo,lo' names interface 'lo' twice"),
    ("lo,", r"ifname='lo,': each interface name must be 1 to 15 bytes, got ''"),
    ("lo," + "x" * 16, r"got 'x{16}'"),
    ("a,b,c,d,e", r"ifname='a,b,c,d,e' names more than 4 interfaces"),
])
def test_a_bad_interface_list_names_what_is_wrong(ifnames, match):
    with pytest.raises(ValueError, match=match):
        pycoll.get_unique_id(ifnames)


def test_the_setting_names_itself(monkeypatch):
    monkeypatch.setenv("PYCOLL_SOCKET_IFNAME", "lo,nosuch2")
    with pytest.raises(ValueError, match=r"'nosuch2' \(PYCOLL_SOCKET_IFNAME\)"):
        pycoll.get_unique_id()
