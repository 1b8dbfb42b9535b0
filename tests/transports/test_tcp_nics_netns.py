"""Several interfaces per host (PYCOLL_SOCKET_IFNAME=eth0,eth1): a pair's connections spread over both links,
across network-namespace hosts (tests/netns_hosts.py; needs root and iproute2, skips saying why without), and a
bad list is refused naming the interface."""

import pytest
from multiproc import Ranks
from netns_hosts import SUBNET, HostsUnavailable, link_bytes, namespace_hosts, shape_links

import pycoll

NICS = ("eth0", "eth1")


def shaped_job(nics, streams):
    """Two hosts of one rank with `nics` links each, shaped as bench/multihost.py's (a striped part then moves
    in many pieces, both ways at once), `streams` connections per pair over those links (None: the default):
    the ranks' reports and each host's bytes sent per link."""
    try:
        with namespace_hosts(2, nics=nics) as hosts:
            shape_links(hosts, ["tbf", "rate", "2gbit", "burst", "1mb", "latency", "50ms"], nics=nics)
            env = {"PYCOLL_SOCKET_IFNAME": ",".join(NICS[:nics])}
            env.update({"PYCOLL_TCP_STREAMS": streams} if streams else {})
            with Ranks(2, "stripe_worker.py", "shaped", env=env, master_addr=f"{SUBNET}.1",
                       wrap=lambda r: ["ip", "netns", "exec", hosts[r]]) as ranks:
                reports = ranks.reports(deadline_s=60)
            return reports, {(host, dev): link_bytes(host, dev)[1] for host in hosts for dev in NICS[:nics]}
    except HostsUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_two_interfaces_named_are_both_used_by_default():
    """One rank per host, both interfaces named and PYCOLL_TCP_STREAMS unset (a connection per interface):
    back-to-back 4 and 16 MiB all-reduces are exact and each host sends megabytes on each of its two links (its
    half of each striped frame), not on the first alone."""
    reports, sent = shaped_job(2, None)
    assert all(rep.get("ok") for rep in reports.values()), reports
    assert all(rep["transport"] == "tcp" for rep in reports.values()), reports
    # Each rank sends at least 30 MiB (half of each vector, in frames that are striped): half on each link.
    assert all(n > 8 << 20 for n in sent.values()), sent


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_two_streams_sharing_one_shaped_link_stay_exact():
    """Both connections of the pair on one slow link: one direction's parts are midway when the other
    direction's next frame starts, and neither disturbs the other's progress."""
    reports, _ = shaped_job(1, "2")
    assert all(rep.get("ok") for rep in reports.values()), reports


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
