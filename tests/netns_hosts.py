"""Several hosts on one machine, for multi-host tests and benchmarks: network namespaces joined by veth pairs to
a bridge (its own namespace), so a job really crosses a network with separate addresses. Needs root and
iproute2; host i is SUBNET.(i+1) on its eth0, and with two NICs also SUBNETS[1].(i+1) on eth1 (a second veth
to a second bridge: another network, as a second NIC on a second switch)."""

import contextlib
import json
import os
import shutil
import signal
import subprocess

SUBNETS = ("10.77.0", "10.78.0")  # one per NIC: eth0, eth1
SUBNET = SUBNETS[0]


class HostsUnavailable(RuntimeError):
    """This machine cannot make namespace hosts (not root, no iproute2, or namespaces refused)."""


def ip(*args, ns=None):
    cmd = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def veth_ends(i, name, tag, nics=1):
    """(namespace, device) of both ends of host i's veths: its ethK and the switch's port for it, per NIC."""
    return [end for k in range(nics) for end in ((name, f"eth{k}"), (f"{tag}-sw", f"{'pq'[k]}{i}"))]


def shape_links(names, tbf, nics=1):
    """tc `tbf` (["tbf", "rate", "2gbit", ...]) on both ends of every host's veths: ethK in the host (its
    egress) and its port on the switch (its ingress, as the switch's egress)."""
    tag = names[0].rsplit("-h", 1)[0]
    for i, name in enumerate(names):
        for ns, dev in veth_ends(i, name, tag, nics):
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", *tbf], check=True,
                           capture_output=True, text=True)


def set_mtu(names, mtu, nics=1):
    """Every host's veths, both ends, at MTU `mtu` (the bridge follows its ports)."""
    tag = names[0].rsplit("-h", 1)[0]
    for i, name in enumerate(names):
        for ns, dev in veth_ends(i, name, tag, nics):
            ip("link", "set", "dev", dev, "mtu", str(mtu), ns=ns)


def link_mtu(ns, dev):
    """Device dev's MTU in namespace ns."""
    out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "dev", dev], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)[0]["mtu"]


def link_bytes(ns, dev):
    """(received, sent) bytes of device dev in namespace ns (`ip -s link`'s counters)."""
    out = subprocess.run(["ip", "-n", ns, "-j", "-s", "link", "show", "dev", dev], check=True,
                         capture_output=True, text=True).stdout
    stats = json.loads(out)[0]["stats64"]
    return stats["rx"]["bytes"], stats["tx"]["bytes"]


@contextlib.contextmanager
def namespace_hosts(n, tag=None, nics=1):
    """Yields the names of n namespace hosts (run a command on host i with ["ip", "netns", "exec", names[i]]),
    each with `nics` network interfaces (1 or 2); removes them on exit."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise HostsUnavailable("needs root and iproute2 (ip netns) to make test hosts")
    tag = tag or f"pc{os.getpid() % 100000}"
    switch, names = f"{tag}-sw", [f"{tag}-h{i}" for i in range(n)]
    try:
        ip("netns", "add", switch)
    except subprocess.CalledProcessError as exc:
        raise HostsUnavailable(f"cannot create network namespaces here: {exc.stderr.strip()}") from None
    try:
        for k in range(nics):
            ip("link", "add", f"br{k}", "type", "bridge", ns=switch)
            ip("link", "set", f"br{k}", "up", ns=switch)
        for i, name in enumerate(names):
            ip("netns", "add", name)
            ends = veth_ends(i, name, tag, nics)
            for k in range(nics):
                # One veth pair per NIC: ethK inside the host, its peer on the switch's bridge K.
                (_, dev), (_, port) = ends[2 * k], ends[2 * k + 1]
                ip("link", "add", dev, "type", "veth", "peer", "name", port, "netns", switch, ns=name)
                ip("link", "set", port, "master", f"br{k}", "up", ns=switch)
                ip("addr", "add", f"{SUBNETS[k]}.{i + 1}/24", "dev", dev, ns=name)
                ip("link", "set", dev, "up", ns=name)
            ip("link", "set", "lo", "up", ns=name)
        yield names
    finally:
        for name in [*names, switch]:
            # Whatever still runs in a host (an MPI daemon its launcher left behind) would keep its veth alive.
            pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
            for pid in map(int, pids):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
