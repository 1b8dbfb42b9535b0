"""Several hosts on one machine, for multi-host tests and benchmarks: network namespaces joined by veth pairs to
a bridge (its own namespace), so a job really crosses a network with separate addresses. Needs root and
iproute2; host i is SUBNET.(i+1) on its eth0."""

import contextlib
import os
import shutil
import subprocess

SUBNET = "10.77.0"


class HostsUnavailable(RuntimeError):
    """This machine cannot make namespace hosts (not root, no iproute2, or namespaces refused)."""


def ip(*args, ns=None):
    cmd = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@contextlib.contextmanager
def namespace_hosts(n, tag=None):
    """Yields the names of n namespace hosts (run a command on host i with ["ip", "netns", "exec", names[i]]);
    removes them on exit."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise HostsUnavailable("needs root and iproute2 (ip netns) to make test hosts")
    tag = tag or f"pc{os.getpid() % 100000}"
    switch, names = f"{tag}-sw", [f"{tag}-h{i}" for i in range(n)]
    try:
        ip("netns", "add", switch)
    except subprocess.CalledProcessError as exc:
        raise HostsUnavailable(f"cannot create network namespaces here: {exc.stderr.strip()}") from None
    try:
        ip("link", "add", "br0", "type", "bridge", ns=switch)
        ip("link", "set", "br0", "up", ns=switch)
        for i, name in enumerate(names):
            ip("netns", "add", name)
            # One veth pair per host: eth0 inside the host, its peer on the switch's bridge.
            ip("link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", switch, ns=name)
            ip("link", "set", f"p{i}", "master", "br0", "up", ns=switch)
            ip("addr", "add", f"{SUBNET}.{i + 1}/24", "dev", "eth0", ns=name)
            ip("link", "set", "eth0", "up", ns=name)
            ip("link", "set", "lo", "up", ns=name)
        yield names
    finally:
        for name in [*names, switch]:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
