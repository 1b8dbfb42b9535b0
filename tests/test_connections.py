"""pycoll.rendezvous.connections: all-pairs connections among real processes and threads,
junk and impostors on the listeners,
and the choice of bind address."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import pycoll
from pycoll.rendezvous import handshake
from pycoll.errors import PycollError, Timeout
from pycoll.rendezvous.connections import SOCKET_BUFFER_BYTES, choose_bind_address, connect_mesh
from pycoll.rendezvous.store import TCPStore

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"
SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")


@pytest.fixture
def server():
    store = TCPStore(HOST, 0, is_server=True, timeout=10.0)
    yield store
    store.close()


def _mesh_in_threads(port, world, *, job_ids=None, secrets=None, timeout=10.0, prefix="m", reaches=None):
    """Runs connect_mesh on one thread per rank (reaches[rank]: its reach); returns (per-rank socket lists,
    per-rank exceptions)."""
    results, errors = [None] * world, [None] * world

    def rank_body(rank):
        try:
            with TCPStore(HOST, port, is_server=False, timeout=timeout) as store:
                results[rank] = connect_mesh(
                    store, rank, world, job_id=(job_ids or ["job"] * world)[rank],
                    secret=(secrets or [b"key"] * world)[rank], timeout=timeout, bind_addr=HOST, prefix=prefix,
                    reach=reaches[rank] if reaches else None)
        except Exception as exc:  # noqa: BLE001 -- inspected by the test
            errors[rank] = exc

    threads = [threading.Thread(target=rank_body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def _close(results):
    for socks in results:
        for sock in socks or ():
            if sock is not None:
                sock.close()


def test_mesh_of_four_processes_carries_data_between_every_pair(server):
    world = 4
    procs = [subprocess.Popen([sys.executable, os.path.join(SCRIPTS, "connect_rank.py"), str(server.port), str(r),
                               str(world)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        reports.append(json.loads(out))
    for rank, report in enumerate(reports):
        assert report["received"] == {str(p): f"{p}->{rank}" for p in range(world) if p != rank}
        assert report["nodelay"] and report["none_at_own_rank"]
        assert report["rcvbuf"] >= SOCKET_BUFFER_BYTES


def test_mesh_of_threads_and_socket_options(server):
    world = 4
    results, errors = _mesh_in_threads(server.port, world)
    assert errors == [None] * world
    try:
        for rank, socks in enumerate(results):
            assert len(socks) == world and socks[rank] is None
            for peer, sock in enumerate(socks):
                if sock is not None:
                    assert sock.gettimeout() is None  # blocking
                    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                    sock.sendall(bytes([rank, peer]))
        for rank, socks in enumerate(results):
            for peer, sock in enumerate(socks):
                if sock is not None:
                    assert sock.recv(2) == bytes([peer, rank])
    finally:
        _close(results)


def test_mesh_between_hosts_connects_only_ranks_of_different_hosts(server):
    """The cpu backend's TCP part: ranks 0, 1 on one host and 2, 3 on another connect across only."""
    host_of = [0, 0, 1, 1]
    reaches = [[p for p in range(4) if host_of[p] != host_of[r]] for r in range(4)]
    results, errors = _mesh_in_threads(server.port, 4, reaches=reaches)
    assert errors == [None] * 4
    try:
        for rank, socks in enumerate(results):
            assert [p for p, sock in enumerate(socks) if sock is not None] == reaches[rank]
            for peer in reaches[rank]:
                socks[peer].sendall(bytes([rank, peer]))
        for rank, socks in enumerate(results):
            for peer in reaches[rank]:
                assert socks[peer].recv(2) == bytes([peer, rank])
    finally:
        _close(results)


def test_single_rank_mesh(server):
    assert connect_mesh(server, 0, 1, job_id="j", secret=None, timeout=1.0, bind_addr=HOST) == [None]


def test_timeout_names_the_ranks_that_never_connected(server):
    start = time.monotonic()
    message = r"^ranks 1, 2 did not connect to rank 0 within 0.5 s; connected: none$"
    with pytest.raises(Timeout, match=message) as caught:
        connect_mesh(server, 0, 3, job_id="j", secret=None, timeout=0.5, bind_addr=HOST)
    assert caught.value.rank == 1
    assert time.monotonic() - start < 5.0


def _closed_by_peer(sock):
    try:
        return sock.recv(64) == b""
    except ConnectionResetError:  # closed with our junk still unread
        return True


def _listener_address(store, rank, prefix="m"):
    host, _, port = store.get(f"{prefix}/{rank}", timeout=10.0).decode().rpartition(":")
    return host, int(port)


def _impostor(address, *, rank, world, job_id, secret):
    """Connects like a peer would; returns the exception the handshake ended with (None if admitted)."""
    with socket.create_connection(address, timeout=5.0) as sock:
        hello = handshake.new_hello(handshake.KIND_PEER, rank, world, job_id, secret)
        try:
            handshake.client_handshake(sock, hello, secret, time.monotonic() + 5.0)
        except PycollError as exc:
            return exc
    return None


def test_junk_and_impostors_are_rejected_while_the_mesh_completes(server, caplog):
    world = 2
    results = {}
    thread = threading.Thread(target=lambda: results.update(
        rank0=connect_mesh(server, 0, world, job_id="job", secret=b"key", timeout=20.0, bind_addr=HOST,
                           prefix="m")))
    thread.start()
    address = _listener_address(server, 0)
    silent = socket.create_connection(address)  # half-open: must not block the others
    for junk in (os.urandom(512), b"GET / HTTP/1.0\r\n\r\n"):
        with socket.create_connection(address, timeout=5.0) as sock:
            sock.sendall(junk)
            assert _closed_by_peer(sock)
    with socket.create_connection(address):
        pass  # connect and close
    assert isinstance(_impostor(address, rank=1, world=world, job_id="other-job", secret=b"key"),
                      handshake.HandshakeError)
    assert "proof is wrong" in str(_impostor(address, rank=1, world=world, job_id="job", secret=b"wrong"))
    assert "uses a secret" in str(_impostor(address, rank=1, world=world, job_id="job", secret=None))
    assert isinstance(_impostor(address, rank=5, world=world, job_id="job", secret=b"key"),
                      handshake.HandshakeError)
    with TCPStore(HOST, server.port, is_server=False, timeout=10.0) as store:
        rank1 = connect_mesh(store, 1, world, job_id="job", secret=b"key", timeout=10.0, bind_addr=HOST,
                             prefix="m")
    thread.join()
    silent.close()
    rank0 = results["rank0"]
    try:
        rank1[0].sendall(b"ok")
        assert rank0[1].recv(2) == b"ok"
        # A second "rank 1" is refused now: the listener is closed once the mesh is complete.
        with pytest.raises(OSError):
            socket.create_connection(address, timeout=2.0)
    finally:
        _close([rank0, rank1])
    assert "bad magic" in caplog.text and "job id 'other-job'" in caplog.text
    assert "unexpected rank 5" in caplog.text


def test_duplicate_rank_is_rejected(server, caplog):
    world = 3
    results = {}
    thread = threading.Thread(target=lambda: results.update(
        rank0=connect_mesh(server, 0, world, job_id="job", secret=None, timeout=20.0, bind_addr=HOST)))
    thread.start()
    address = _listener_address(server, 0, prefix="pycoll/mesh/job")
    first = socket.create_connection(address, timeout=5.0)
    hello = handshake.new_hello(handshake.KIND_PEER, 1, world, "job", None)
    handshake.client_handshake(first, hello, None, time.monotonic() + 5.0)
    assert isinstance(_impostor(address, rank=1, world=world, job_id="job", secret=None), handshake.HandshakeError)
    assert "rank 1 is already connected" in caplog.text
    second = socket.create_connection(address, timeout=5.0)
    handshake.client_handshake(second, handshake.new_hello(handshake.KIND_PEER, 2, world, "job", None), None,
                               time.monotonic() + 5.0)
    thread.join()
    _close([results["rank0"], [first, second]])


def test_wrong_secret_between_real_ranks_fails_clearly(server):
    start = time.monotonic()
    _, errors = _mesh_in_threads(server.port, 2, secrets=[b"a", b"b"], timeout=10.0)
    assert isinstance(errors[1], handshake.AuthenticationError)
    # Both sides learn it at once, not at the deadline, and are told which rank failed.
    assert isinstance(errors[0], pycoll.AuthenticationError) and "rank 1 failed" in str(errors[0]), errors[0]
    assert time.monotonic() - start < 3.0


def test_wrong_job_id_between_real_ranks_fails_clearly(server):
    _, errors = _mesh_in_threads(server.port, 2, job_ids=["a", "b"], timeout=1.0)
    assert "job id" in str(errors[1])
    assert isinstance(errors[0], Timeout)


def test_choose_bind_address_for_loopback(monkeypatch):
    monkeypatch.delenv("PYCOLL_SOCKET_IFNAME", raising=False)
    assert choose_bind_address("127.0.0.1") == "127.0.0.1"
    assert choose_bind_address("localhost") == "127.0.0.1"
    assert choose_bind_address("10.0.0.1", ifname="lo") == "127.0.0.1"
    monkeypatch.setenv("PYCOLL_SOCKET_IFNAME", "lo")
    assert choose_bind_address("10.0.0.1") == "127.0.0.1"


def test_choose_bind_address_rejects_unknown_interfaces(monkeypatch):
    with pytest.raises(ValueError, match="no-such-if0"):
        choose_bind_address("127.0.0.1", ifname="no-such-if0")
    monkeypatch.setenv("PYCOLL_SOCKET_IFNAME", "nosuch1")
    with pytest.raises(ValueError, match="PYCOLL_SOCKET_IFNAME"):
        choose_bind_address("127.0.0.1")


def test_connect_mesh_never_binds_the_wildcard(server):
    with pytest.raises(ValueError, match="wildcard"):
        connect_mesh(server, 0, 2, job_id="j", secret=None, timeout=1.0, bind_addr="0.0.0.0")
