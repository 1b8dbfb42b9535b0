"""pycoll.rendezvous.store: TCPStore and FileStore operations, junk on the store's port, authentication, gather()."""

import dataclasses
import os
import socket
import struct
import sys
import threading
import time

import pytest

from pycoll.errors import PeerFailure, PycollError, Timeout
from pycoll.rendezvous import handshake, user_secret
from pycoll.rendezvous.launch_env import LaunchEnv, detect, resolve
from pycoll.rendezvous.store import AUTH_FAILURE_KEY, FileStore, TCPStore, create_store, gather, store_port

pytestmark = pytest.mark.timeout(30)

HOST = "127.0.0.1"


@pytest.fixture
def server():
    store = TCPStore(HOST, 0, is_server=True, timeout=10.0, handshake_timeout=1.0)
    yield store
    store.close()


@pytest.fixture
def client(server):
    store = TCPStore(HOST, server.port, is_server=False, timeout=10.0)
    yield store
    store.close()


@pytest.fixture(params=["tcp", "file"])
def any_store(request, tmp_path):
    if request.param == "file":
        yield FileStore(tmp_path / "store", timeout=10.0)
        return
    store = TCPStore(HOST, 0, is_server=True, timeout=10.0)
    yield store
    store.close()


def test_set_get_add_check(any_store):
    any_store.set("a", b"\x00value")
    assert any_store.get("a") == b"\x00value"
    assert any_store.add("counter", 5) == 5
    assert any_store.add("counter", -2) == 3
    assert any_store.get("counter") == b"3"
    assert any_store.check(["a", "counter"])
    assert not any_store.check(["a", "missing"])
    assert any_store.check("a")


def test_get_waits_for_a_later_set(any_store):
    setter = threading.Timer(0.2, any_store.set, args=("late", b"x"))
    setter.start()
    start = time.monotonic()
    assert any_store.get("late", timeout=5.0) == b"x"
    assert 0.15 < time.monotonic() - start < 3.0
    setter.join()


def test_get_times_out_naming_the_key(any_store):
    start = time.monotonic()
    with pytest.raises(Timeout, match="'never' was not set within 0.3 s"):
        any_store.get("never", timeout=0.3)
    assert time.monotonic() - start < 3.0


@pytest.mark.parametrize("call, error", [
    (lambda s: s.set(1, b"x"), TypeError),
    (lambda s: s.set("k", "text"), TypeError),
    (lambda s: s.set("", b"x"), ValueError),
    (lambda s: s.get("k", timeout=-1), ValueError),
    (lambda s: s.add("k", 1.5), TypeError),
])
def test_bad_arguments(any_store, call, error):
    with pytest.raises(error):
        call(any_store)


def test_add_on_a_non_integer_value_is_an_error(any_store):
    any_store.set("text", b"abc")
    with pytest.raises(PycollError, match="not an integer"):
        any_store.add("text", 1)


def test_many_clients_concurrently(server):
    n = 16
    errors = []

    def client_body(i):
        try:
            with TCPStore(HOST, server.port, is_server=False, timeout=10.0) as store:
                store.set(f"k{i}", str(i).encode())
                store.add("total", i)
                assert store.get(f"k{(i + 1) % n}") == str((i + 1) % n).encode()
        except Exception as exc:  # noqa: BLE001 -- reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=client_body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert server.get("total") == str(sum(range(n))).encode()


def test_client_started_before_the_server(unused_port):
    result = {}

    def client_body():
        with TCPStore(HOST, unused_port, is_server=False, timeout=10.0) as store:
            result["value"] = store.get("ready")

    thread = threading.Thread(target=client_body)
    thread.start()
    time.sleep(0.3)
    with TCPStore(HOST, unused_port, is_server=True, timeout=10.0) as server:
        server.set("ready", b"yes")
        thread.join()
    assert result["value"] == b"yes"


def test_client_gives_up_when_no_server_comes(unused_port):
    with pytest.raises(Timeout, match="cannot reach the rendezvous store"):
        TCPStore(HOST, unused_port, is_server=False, timeout=0.5)


def _raw(port, payload=b"", linger=0.0):
    with socket.create_connection((HOST, port), timeout=5.0) as sock:
        sock.sendall(payload)
        time.sleep(linger)
        sock.settimeout(3.0)
        try:
            return sock.recv(4096)
        except (socket.timeout, ConnectionResetError):
            return None


def _authenticated_raw_client(port):
    sock = socket.create_connection((HOST, port), timeout=5.0)
    handshake.client_handshake(sock, None, -1, handshake.NO_INSTANCE, time.monotonic() + 5.0)
    return sock


def test_junk_on_the_port_is_dropped_and_the_store_keeps_working(server, client, caplog):
    client.set("before", b"1")
    assert _raw(server.port, os.urandom(4096)) == b""
    assert _raw(server.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") == b""
    assert _raw(server.port) is not None  # connect and close: a port scan
    huge_job_id = struct.pack("!4sHBBiiH", b"PYCL", 1, 1, 0, 0, 1, 65535)  # the former store HELLO's header
    assert _raw(server.port, huge_job_id) == b""
    assert _raw(server.port, b"PYCL\x00\x63" + bytes(12)) == b""  # unknown protocol version
    with _authenticated_raw_client(server.port) as sock:
        sock.sendall(b"\xff\xff\xff\xff")  # a 4 GiB frame must be refused, not allocated
        assert sock.recv(16) == b""
    with _authenticated_raw_client(server.port) as sock:
        sock.sendall(struct.pack("!IB", 1, 99))  # unknown operation
        assert sock.recv(16) == b""
    assert client.get("before") == b"1"
    with TCPStore(HOST, server.port, is_server=False, timeout=5.0) as late:
        late.set("after", b"2")
    assert client.get("after") == b"2"
    assert "bad magic" in caplog.text


def test_the_store_opens_connections_with_the_c_bootstrap_handshake(server):
    # One implementation of the authentication: a store client's HELLO is native/bootstrap/handshake.h's (kind 3,
    # no instance yet, flagged as having no secret), answered with the server's HELLO, its instance and a proof.
    hello = b"PYCB" + struct.pack("!HBBii", 1, 3, 2, -1, 0) + bytes(16) + os.urandom(32)
    with socket.create_connection((HOST, server.port), timeout=5.0) as sock:
        sock.sendall(hello)
        reply = b""
        while len(reply) < 96 and (chunk := sock.recv(96 - len(reply))):
            reply += chunk
    assert len(reply) == 96 and reply[:8] == b"PYCB" + struct.pack("!HBB", 1, 3, 2), reply
    assert reply[16:32] != bytes(16)  # the store's instance, for the client's later connections


def test_half_open_connection_is_dropped_after_the_handshake_timeout(server, client):
    with socket.create_connection((HOST, server.port), timeout=5.0) as silent:
        client.set("during", b"ok")  # the silent connection does not block others
        assert client.get("during") == b"ok"
        start = time.monotonic()
        assert silent.recv(16) == b""  # closed by the server (handshake_timeout=1 s)
        assert time.monotonic() - start < 4.0


def test_a_slowloris_is_dropped_at_the_handshake_deadline(server, client):
    # A HELLO dribbled out a byte at a time keeps the connection busy, not alive: the deadline runs from accept.
    with socket.create_connection((HOST, server.port), timeout=5.0) as slow:
        start = time.monotonic()
        with pytest.raises(OSError):  # once the server has closed it, a send fails (reset, broken pipe)
            while time.monotonic() - start < 4.0:
                slow.send(b"P")
                client.set("during", b"ok")  # the others are served meanwhile
                time.sleep(0.2)
        assert time.monotonic() - start < 3.0  # handshake_timeout=1 s
    assert client.get("during") == b"ok"


def test_a_store_client_is_not_fooled_by_another_service(unused_port):
    listener = socket.create_server((HOST, unused_port))

    def answer_junk():
        conn, _ = listener.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(64))

    thread = threading.Thread(target=answer_junk)
    thread.start()
    try:
        with pytest.raises(handshake.HandshakeError, match="not a usable pycoll store.*bad magic"):
            TCPStore(HOST, unused_port, is_server=False, timeout=5.0)
    finally:
        thread.join()
        listener.close()


def test_authentication():
    with TCPStore(HOST, 0, is_server=True, timeout=5.0, secret=b"s3cret") as server:
        with TCPStore(HOST, server.port, is_server=False, timeout=5.0, secret=b"s3cret") as good:
            good.set("k", b"v")
        for secret, reason in ((b"wrong", "proof is wrong"), (None, "uses a secret")):
            with pytest.raises(PycollError, match=f"authentication failed.*{reason}"):
                TCPStore(HOST, server.port, is_server=False, timeout=5.0, secret=secret)
        assert server.get("k") == b"v"
    with TCPStore(HOST, 0, is_server=True, timeout=5.0) as open_server:
        with pytest.raises(PycollError, match="authentication failed: the server does not use a secret"):
            TCPStore(HOST, open_server.port, is_server=False, timeout=5.0, secret=b"s3cret")


def test_server_exit_is_a_peer_failure(unused_port):
    server = TCPStore(HOST, unused_port, is_server=True, timeout=5.0)
    client = TCPStore(HOST, unused_port, is_server=False, timeout=5.0)
    server.close(linger=0.1)
    with pytest.raises(PeerFailure, match="rendezvous store"):
        client.get("k", timeout=2.0)
    client.close()


def test_server_waits_for_its_clients_before_closing(unused_port):
    server = TCPStore(HOST, unused_port, is_server=True, timeout=5.0)
    client = TCPStore(HOST, unused_port, is_server=False, timeout=5.0)
    threading.Timer(0.3, lambda: (client.set("last", b"word"), client.close())).start()
    start = time.monotonic()
    server.close()
    assert 0.25 < time.monotonic() - start < 4.0
    with pytest.raises(PycollError, match="closed"):
        server.get("last")


def test_port_in_use_is_a_clear_error(server):
    with pytest.raises(PycollError, match=f"cannot host the rendezvous store on {HOST}:{server.port}"):
        TCPStore(HOST, server.port, is_server=True, timeout=1.0)


def test_file_store_add_is_atomic_across_threads(tmp_path):
    stores = [FileStore(tmp_path, timeout=5.0) for _ in range(4)]
    threads = [threading.Thread(target=lambda s=s: [s.add("n", 1) for _ in range(50)]) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stores[0].get("n") == b"200"


def test_gather_collects_every_rank(any_store):
    world = 4
    results = [None] * world
    threads = [threading.Thread(target=lambda r=r: results.__setitem__(
        r, gather(any_store, "g", r, world, f"v{r}".encode(), timeout=10.0))) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [[b"v0", b"v1", b"v2", b"v3"]] * world


def test_gather_timeout_names_the_missing_ranks(any_store):
    for r in (0, 1):
        any_store.set(f"g/{r}", b"x")
    with pytest.raises(Timeout, match=r"^rank 3 did not join within 0.5 s; joined: 0, 1, 2$") as caught:
        gather(any_store, "g", 2, 4, b"x", timeout=0.5)
    assert caught.value.rank == 3
    with pytest.raises(Timeout, match=r"^ranks 3, 4 did not join within 0.2 s; joined: 0, 1, 2$"):
        gather(any_store, "g", 2, 5, b"x", timeout=0.2)


def test_without_torch_the_agent_store_moves_ours_to_the_next_port(unused_port, monkeypatch):
    assert store_port(29500, {"TORCHELASTIC_USE_AGENT_STORE": "True"}) == 29501
    assert store_port(29500, {}) == 29500
    monkeypatch.setitem(sys.modules, "torch.distributed", None)  # import fails: no agent client
    agent = socket.create_server((HOST, unused_port))  # stands in for torchrun's agent on MASTER_PORT
    try:
        launch = LaunchEnv(0, 1, 0, HOST, unused_port, "torchrun")
        with create_store(launch, timeout=5.0, env={"TORCHELASTIC_USE_AGENT_STORE": "True"}) as store:
            assert store.port == unused_port + 1
            store.set("k", b"v")
    finally:
        agent.close()


def test_under_torchrun_rank_0_publishes_a_free_port_in_the_agent_store(unused_port):
    torch_distributed = pytest.importorskip("torch.distributed")
    agent = torch_distributed.TCPStore(HOST, unused_port, is_master=True, wait_for_workers=False)
    taken = socket.create_server((HOST, unused_port + 1))  # the next port is someone else's: no matter
    env = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "2"}
    try:
        stores = [None, None]

        def join(rank):
            stores[rank] = create_store(LaunchEnv(rank, 2, rank, HOST, unused_port, "torchrun"), timeout=10.0,
                                        env=env)

        second = threading.Thread(target=join, args=(1,))
        second.start()
        join(0)
        second.join(15)
        assert int(agent.get("pycoll/store_port/2")) == stores[0].port == stores[1].port != unused_port + 1
        stores[0].set("k", b"v")
        assert stores[1].get("k") == b"v"
    finally:
        for store in stores[::-1]:
            if store is not None:
                store.close()
        taken.close()


def test_a_rank_whose_rank_0_never_publishes_under_torchrun_gets_a_timeout(unused_port):
    torch_distributed = pytest.importorskip("torch.distributed")
    agent = torch_distributed.TCPStore(HOST, unused_port, is_master=True, wait_for_workers=False)
    launch = LaunchEnv(1, 2, 1, HOST, unused_port, "torchrun")
    with pytest.raises(Timeout, match="did not publish the rendezvous store's port") as caught:
        create_store(launch, timeout=0.5, env={"TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert caught.value.rank == 0
    del agent


@pytest.fixture
def unused_port():
    """A port that is free, and whose successor is free too."""
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind((HOST, 0))
            port = a.getsockname()[1]
            try:
                b.bind((HOST, port + 1))
            except OSError:
                continue
            return port
    pytest.skip("no two consecutive free ports")


def test_a_local_store_takes_the_per_user_secret_and_ignores_strangers_failing_it(tmp_path, monkeypatch,
                                                                                     unused_port):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    launch = [LaunchEnv(r, 2, r, HOST, unused_port, "env") for r in range(2)]
    with create_store(launch[0], timeout=5.0) as server, create_store(launch[1], timeout=5.0) as rank1:
        rank1.set("k", b"v")
        assert server.get("k") == b"v"
        with pytest.raises(PycollError, match="the server uses a secret and this side has none"):
            TCPStore(HOST, unused_port, is_server=False, timeout=2.0, rank=1)
        with pytest.raises(PycollError, match="proof is wrong.*share the secret in /elsewhere/store.secret"):
            TCPStore(HOST, unused_port, is_server=False, timeout=2.0, secret=b"guess", rank=1,
                     secret_file="/elsewhere/store.secret")
        time.sleep(0.3)  # the server has seen both fail
        assert not server.check(AUTH_FAILURE_KEY)  # a stranger claiming rank 1 does not stop the job
        assert rank1.get("k") == b"v"


def test_only_a_job_on_one_host_takes_the_per_user_secret(tmp_path, monkeypatch, unused_port):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    one_host = detect({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"})
    several = detect({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "node0"})
    assert one_host.single_host and not several.single_host
    assert not detect({}).single_host and not resolve(rank=0, world_size=2, env={}).single_host
    # A launcher that says every rank is local: the per-user secret, whatever address the store is on.
    local = dataclasses.replace(one_host, master_addr=HOST, master_port=unused_port)
    with create_store(local, timeout=5.0):
        assert os.path.exists(user_secret.secret_path(unused_port))
