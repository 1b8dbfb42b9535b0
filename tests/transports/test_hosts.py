"""Host detection at rendezvous: ranks share a host when they share boot id, IPC and network namespace."""

import os

import pytest
from multiproc import close_at_once

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


def _init_threads(n, backend, timeout=20.0):
    """pycoll.init_rank on n threads of this process (so on one host): each rank's communicator or exception."""
    import threading

    import pycoll

    unique_id = pycoll.get_unique_id("lo")
    results = [None] * n

    def run(rank):
        try:
            results[rank] = pycoll.init_rank(unique_id, rank, n, backend=backend, timeout=timeout, ifname="lo")
        except Exception as exc:  # noqa: BLE001 (reported to the test)
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("backend, transport", [("cpu", "shm"), ("tcp", "tcp"), ("shm", "shm")])
def test_the_bootstrap_picks_the_transport_the_backend_asks_for_on_one_host(backend, transport):
    """Across hosts the default backend picks shm+tcp or tcp: test_comm_routed.py (PYCOLL_HOSTID) and
    test_multihost_netns.py (network namespaces) check it."""
    comms = _init_threads(3, backend)
    try:
        assert all(not isinstance(c, Exception) for c in comms), comms
        assert [c.transport for c in comms] == [transport] * 3
        assert [(c.hosts, c.local_rank, c.local_size) for c in comms] == [(1, r, 3) for r in range(3)]
    finally:
        close_at_once(comms)



def test_shm_across_hosts_is_a_clear_error_naming_the_ranks_elsewhere(tmp_path):
    """Ranks 1 and 3 on another host (PYCOLL_HOSTID): every rank refuses the shm backend, naming them."""
    import subprocess
    import sys

    import pycoll

    unique_id = tmp_path / "id"
    script = (
        "import os, sys, time, pathlib, pycoll\n"
        "rank = int(sys.argv[1]); path = pathlib.Path(sys.argv[2])\n"
        "if rank == 0:\n"
        "    path.with_suffix('.tmp').write_bytes(pycoll.get_unique_id('lo')); path.with_suffix('.tmp').rename(path)\n"
        "while not path.exists(): time.sleep(0.01)\n"
        "try:\n"
        "    pycoll.init_rank(path.read_bytes(), rank, 4, backend='shm', timeout=20, ifname='lo')\n"
        "except ValueError as exc:\n"
        "    print(exc)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r), str(unique_id)], text=True, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=dict(os.environ, PYCOLL_HOSTID=f"host-{r % 2}")) for r in range(4)]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert pycoll  # imported above so that a broken install fails here, not in the children
    for out in outputs:
        assert "ranks 1, 3 are on another host than rank 0" in out, outputs


def test_single_rank_communicator_knows_its_host():
    import pycoll

    with pycoll.init(rank=0, world_size=1, master_addr="127.0.0.1", master_port=1) as comm:
        assert (comm.backend, comm.hosts, comm.local_rank, comm.local_size) == ("cpu", 1, 0, 1)
