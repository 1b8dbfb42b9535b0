"""The TCP backend: host memory, any number of hosts, pycoll's own algorithms over a full mesh of sockets."""

from __future__ import annotations

from pycoll import plugins
from pycoll.algorithms import ALGORITHMS, NATIVE_ONLY
from pycoll.plugins.host import HostBackend


class TcpBackend(HostBackend):
    name = "tcp"
    algorithms = tuple(name for name in ALGORITHMS if name not in NATIVE_ONLY)
    transport_choice = "tcp"


plugins.register(TcpBackend())
