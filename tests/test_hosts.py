"""Host detection at rendezvous: ranks share a host when they share boot id, IPC and network namespace."""

import os

import pytest

from pycoll.plugins.cpu import CpuBackend
from pycoll.plugins.shm import ShmBackend
from pycoll.rendezvous.hosts import Hosts, host_identity


def test_identity_is_boot_id_and_the_ipc_and_network_namespaces():
    boot, ipc, net = host_identity().split(":")
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert boot == f.read().strip()
    assert int(ipc) == os.stat("/proc/self/ns/ipc").st_ino and int(net) == os.stat("/proc/self/ns/net").st_ino


def test_hosts_are_numbered_by_lowest_rank_and_local_ranks_follow_rank_order():
    idents = ["b:1:9", "a:1:1", "b:1:9", "b:1:8", "a:1:1"]  # another netns on host b counts as another host
    hosts = [Hosts.from_identities(idents, r) for r in range(5)]
    assert hosts[0].host_of == (0, 1, 0, 2, 1) and hosts[0].count == 3
    assert [(h.local_rank, h.local_size) for h in hosts] == [(0, 2), (0, 2), (1, 2), (0, 1), (1, 2)]


def test_cpu_picks_shared_memory_within_a_host_and_tcp_between_hosts():
    cpu = CpuBackend()
    assert cpu.transport(Hosts.from_identities(["h"] * 4, 0)) == "shm"
    assert cpu.transport(Hosts.from_identities(["h", "h", "g"], 0)) == "shm+tcp"
    assert cpu.transport(Hosts.from_identities(["h", "g", "f"], 0)) == "tcp"  # no two ranks share a host


def test_shm_across_hosts_is_a_clear_error_naming_the_ranks_elsewhere():
    hosts = Hosts.from_identities(["h", "g", "h", "g"], 0)
    with pytest.raises(ValueError, match=r"ranks 1, 3 are on another host.*backend='cpu' or 'tcp'"):
        ShmBackend().create(rank=0, world_size=4, store=None, timeout=1.0, options={"hosts": hosts})


def test_single_rank_communicator_knows_its_host():
    import pycoll

    with pycoll.init(rank=0, world_size=1, master_addr="127.0.0.1", master_port=1) as comm:
        assert (comm.backend, comm.hosts, comm.local_rank, comm.local_size) == ("cpu", 1, 0, 1)
