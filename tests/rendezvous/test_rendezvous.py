"""Rendezvous hardening: re-initialising on one MASTER_PORT, failures that end every rank's wait at once and
say why, floods of idle connections against the store and the mesh listeners, the store's byte cap, and the
refusal to host an open store on a wildcard address. Real processes and real sockets on 127.0.0.1."""

import json
import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from multiproc import SCRIPTS, Ranks

import pycoll
from pycoll.errors import PycollError
from pycoll.rendezvous import handshake, listener, user_secret
from pycoll.rendezvous.launch_env import LaunchEnv
from pycoll.rendezvous.store import FileStore, Rendezvous, TCPStore, rendezvous

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"


# -- 1. init -> close -> init on one port ------------------------------------------------------------------
def _cycles(n, cycles):
    with Ranks(n, "rdv_worker.py", "cycles", env={"TEST_CYCLES": str(cycles)}, timeout=10) as ranks:
        reports = ranks.reports(deadline_s=cycles * 10.0)
    for rank, rep in reports.items():
        assert "error" not in rep, rep
        assert rep["cycles"] == cycles, rep
    return reports


@pytest.mark.parametrize("n", [2, 4])
def test_reinit_on_the_same_port_succeeds_every_time(n):
    reports = _cycles(n, 20)
    assert max(reports[0]["times"]) < 5.0, reports[0]["times"]  # no cycle waits for a deadline


@pytest.mark.stress
@pytest.mark.timeout(600)
@pytest.mark.parametrize("n", [2, 4])
def test_reinit_on_the_same_port_50_times(n):
    _cycles(n, 50)


def test_a_closing_store_refuses_new_clients_but_serves_its_own():
    server = TCPStore(HOST, 0, is_server=True, timeout=5.0)
    client = TCPStore(HOST, server.port, is_server=False, timeout=5.0)
    closer = threading.Thread(target=server.close, kwargs={"linger": 5.0})
    closer.start()
    time.sleep(0.3)  # the server is now closing, waiting for `client`
    with pytest.raises(pycoll.Timeout, match="closed the connection before replying"):
        TCPStore(HOST, server.port, is_server=False, timeout=0.8)  # a client of a next rendezvous
    other_thread = {}
    worker = threading.Thread(target=lambda: other_thread.update(v=client.add("n", 1)))
    worker.start()  # a new thread of an existing client opens its own connection: still admitted
    worker.join()
    assert other_thread["v"] == 1
    client.close()
    closer.join()


def test_a_closing_store_waits_for_a_client_the_serving_thread_has_not_admitted_yet(monkeypatch):
    """A client counts from the moment the C listener hands it over: its handshake has ended, so it may use the
    store before the (here: slowed) serving thread admits it, and a stop must not find the store idle then."""
    take_reports = listener.AdmittingServer._take_reports

    def slow_take_reports(self):
        if self._reports:
            time.sleep(0.5)  # a serving thread late to run, as under load
        take_reports(self)

    monkeypatch.setattr(listener.AdmittingServer, "_take_reports", slow_take_reports)
    server = TCPStore(HOST, 0, is_server=True, timeout=5.0)
    client = TCPStore(HOST, server.port, is_server=False, timeout=5.0)
    closer = threading.Thread(target=server.close, kwargs={"linger": 5.0})
    closer.start()
    time.sleep(0.1)  # the stop has begun, before either client was admitted
    client.set("k", b"v")
    assert client.get("k") == b"v"
    assert closer.is_alive()  # still waiting for `client`
    client.close()
    closer.join(timeout=5.0)
    assert not closer.is_alive()


def test_a_store_that_resets_a_queued_client_is_retried_not_taken_for_a_foreign_service(monkeypatch):
    """A store that stops with this client still in its accept queue resets the connection before the client
    has sent its greeting: that is a store going away (the next one may come), like a refused connection."""
    first = socket.create_server((HOST, 0))
    port = first.getsockname()[1]
    connected, reset = threading.Event(), threading.Event()
    real_handshake = handshake.client_handshake

    def handshake_after_the_reset(sock, *args, **kwargs):
        if not connected.is_set():
            connected.set()
            reset.wait(5.0)
            time.sleep(0.1)  # the reset has arrived
        return real_handshake(sock, *args, **kwargs)

    monkeypatch.setattr(handshake, "client_handshake", handshake_after_the_reset)
    servers = []

    def replace_the_store():
        connected.wait(5.0)
        first.close()  # resets the connection in its queue
        reset.set()
        time.sleep(0.3)
        servers.append(TCPStore(HOST, port, is_server=True, timeout=5.0, secret=b"s" * 32))

    swapper = threading.Thread(target=replace_the_store)
    swapper.start()
    try:
        client = TCPStore(HOST, port, is_server=False, timeout=5.0, secret=b"s" * 32)
        client.set("k", b"v")
        client.close()
    finally:
        swapper.join()
        for server in servers:
            server.close()


def test_each_init_on_one_store_reads_only_its_own_keys(tmp_path):
    store = FileStore(tmp_path, timeout=5.0)
    first = [rendezvous(LaunchEnv(r, 2, r, HOST, 1, "env"), store)[1] for r in range(2)]
    first[0].set("mesh/0", b"old address")
    second = [rendezvous(LaunchEnv(r, 2, r, HOST, 1, "env"), store)[1] for r in range(2)]
    assert [v.generation for v in first + second] == [0, 0, 1, 1]
    assert not second[1].check("mesh/0")  # the previous init's key is not seen
    with pytest.raises(pycoll.Timeout, match="'mesh/0' was not set within 0.3 s"):
        second[1].get("mesh/0", timeout=0.3)


# -- 3. failures end every rank's wait at once ---------------------------------------------------------------
@pytest.mark.parametrize("late", [1, 2])
def test_store_host_dying_is_a_peer_failure_naming_rank_0_within_2s(late):
    waiting = 3 - late  # rank 2 waits in the mesh listener, or rank 2 waits for rank 1's address
    with Ranks(3, "rdv_worker.py", "late", env={"TEST_LATE": str(late), "TEST_LATE_DELAY": "60"},
               timeout=30) as ranks:
        ranks.wait_ready([0, waiting])
        time.sleep(1.5)  # both are inside init, waiting for the late rank
        killed_at = time.time()
        os.kill(ranks.procs[0].pid, signal.SIGKILL)
        report = ranks.reports([waiting], deadline_s=20)[waiting]
    print(f"rank {waiting} raised {report.get('error')} {report['raised_at'] - killed_at:.2f} s after rank 0 died")
    assert report.get("error") == "PeerFailure", report
    assert report["failed_rank"] == 0 and "rank 0" in report["message"], report
    assert report["raised_at"] - killed_at < 2.0, report


@pytest.mark.parametrize("bad_secret", ["wrong", ""])
def test_a_rank_failing_the_secret_check_fails_every_rank_within_2s(bad_secret):
    # Rank 2 comes 1 s late with a wrong (or no) secret, while ranks 0 and 1 already wait for it.
    with Ranks(3, "rdv_worker.py", "late", timeout=30,
               env={"TEST_LATE": "2", "TEST_LATE_DELAY": "1.0"},
               rank_env=lambda r: {"PYCOLL_SECRET": bad_secret if r == 2 else "s3cret"}) as ranks:
        reports = ranks.reports()
    failed_at = reports[2]["raised_at"]
    print("raised after rank 2's own error: " + ", ".join(
        f"rank {r} {rep['raised_at'] - failed_at:+.2f} s" for r, rep in reports.items()))
    for rank, rep in reports.items():
        assert rep.get("error") == "AuthenticationError", rep
        assert "rank 2" in rep["message"], rep
        assert rep["raised_at"] - failed_at < 2.0, (rank, rep)


def test_a_rendezvous_wait_ends_as_soon_as_a_failure_is_recorded(tmp_path):
    view = Rendezvous(FileStore(tmp_path, timeout=30.0), 0)
    failure = pycoll.AuthenticationError("rank 3 failed the shared-secret check of rank 1")
    threading.Timer(0.3, view.record_failure, args=(failure,)).start()
    start = time.monotonic()
    with pytest.raises(pycoll.AuthenticationError, match="rank 3 failed"):
        view.get("never", timeout=30.0)
    assert time.monotonic() - start < 2.0


def test_authentication_error_is_a_pycoll_error():
    assert issubclass(pycoll.AuthenticationError, pycoll.PycollError)
    assert issubclass(handshake.AuthenticationError, pycoll.AuthenticationError)
    assert issubclass(handshake.AuthenticationError, handshake.HandshakeError)


# -- 2. floods of idle connections --------------------------------------------------------------------------
def _raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < n:
        if hard != resource.RLIM_INFINITY and hard < n:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {n}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def _hold(port, count):
    """``count`` connections to ``port`` that never send a byte (closed by the caller)."""
    held = []
    for _ in range(count):
        try:
            held.append(socket.create_connection((HOST, port), timeout=5.0))
        except OSError:
            pass
    return held


def _close_all(socks):
    for sock in socks:
        sock.close()


def test_late_rank_joins_while_5000_idle_connections_are_held(tmp_path):
    _raise_nofile(5000 + 256)
    go = tmp_path / "go"
    with Ranks(2, "rdv_worker.py", "late", env={"TEST_LATE": "1", "TEST_GO_FILE": str(go)},
               timeout=30) as ranks:
        ranks.wait_ready([0])
        held = _wait_for_store_then_hold(ranks.port, 5000)
        try:
            assert len(held) >= 4500, len(held)
            go.touch()
            reports = ranks.reports(deadline_s=40)
        finally:
            _close_all(held)
        log_lines = ranks.stderr[0].count("\n")
    assert reports[1].get("ok"), reports[1]
    assert reports[1]["init_s"] < 10.0, reports[1]
    print(f"held {len(held)} idle connections; late rank's init took {reports[1]['init_s']:.2f} s; "
          f"rank 0 log lines: {log_lines}")


def _wait_for_store_then_hold(port, count):
    # Without PYCOLL_SECRET the job's loopback store takes this user's per-host secret, as this process can.
    with TCPStore(HOST, port, is_server=False, timeout=20.0, secret=user_secret.read_or_create(port)) as probe:
        probe.check("x")  # rank 0's store is up
    return _hold(port, count)


def _cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_store_out_of_file_descriptors_stays_responsive_without_spinning():
    _raise_nofile(2000 + 256)
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "store_host.py"), "48"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held = []
    try:
        port = json.loads(proc.stdout.readline())["port"]
        held = _hold(port, 2000)
        cpu_before, window_start = _cpu_seconds(proc.pid), time.monotonic()
        time.sleep(3.0)
        cpu = (_cpu_seconds(proc.pid) - cpu_before) / (time.monotonic() - window_start)
        start = time.monotonic()
        with TCPStore(HOST, port, is_server=False, timeout=10.0) as client:
            client.set("k", b"v")
            assert client.get("k") == b"v"
        answered = time.monotonic() - start
    finally:
        _close_all(held)
        proc.stdin.close()
        proc.wait(timeout=20)
    log_lines = proc.stderr.read().count("\n")
    proc.stdout.close()
    proc.stderr.close()
    print(f"held {len(held)}; store CPU {cpu:.0%} while flooded; a client answered in {answered:.2f} s; "
          f"{log_lines} log lines")
    assert cpu < 0.5, f"the store used {cpu:.0%} of a core while flooded (spinning?)"
    assert answered < 5.0
    assert log_lines < 40, log_lines


def test_pending_connections_are_bounded_and_never_evict_clients(monkeypatch, caplog):
    monkeypatch.setattr(listener, "MAX_PENDING", 8)
    with TCPStore(HOST, 0, is_server=True, timeout=10.0) as server:
        client = TCPStore(HOST, server.port, is_server=False, timeout=10.0)
        held = _hold(server.port, 100)
        try:
            time.sleep(0.5)
            open_count = sum(not _peer_closed(s) for s in held)
            assert open_count <= 8, open_count
            client.set("still", b"here")  # the authenticated client was never evicted
            with TCPStore(HOST, server.port, is_server=False, timeout=5.0) as late:
                assert late.get("still") == b"here"
        finally:
            _close_all(held)
            client.close()
    evictions = [r for r in caplog.records if "already in the handshake" in r.getMessage()]
    assert 1 <= len(evictions) <= 3, [r.getMessage() for r in evictions]  # rate-limited
    assert "not logged" in caplog.text or len(evictions) == 1


def _peer_closed(sock):
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_log_is_rate_limited_per_kind(caplog):
    log = listener.RateLimitedLog(interval=60.0)
    with caplog.at_level(logging.WARNING, logger="pycoll"):
        for i in range(1000):
            log.log(logging.WARNING, "a", f"flood {i}")
        log.log(logging.WARNING, "b", "another kind")
    assert [r.getMessage() for r in caplog.records] == ["flood 0", "another kind"]


# -- 4. the store's byte cap ---------------------------------------------------------------------------------
def test_store_refuses_writes_over_its_byte_cap(monkeypatch):
    with TCPStore(HOST, 0, is_server=True, timeout=5.0, max_bytes=1 << 20) as store:
        store.set("a", bytes(600 << 10))
        with pytest.raises(PycollError, match="store is full.*over its cap of 1048576.*PYCOLL_STORE_MAX_BYTES"):
            store.set("b", bytes(600 << 10))
        store.set("a", bytes(900 << 10))  # replacing a value counts only the difference
        store.set("a", b"small")
        store.set("b", bytes(600 << 10))
    monkeypatch.setenv("PYCOLL_STORE_MAX_BYTES", "1000")
    with TCPStore(HOST, 0, is_server=True, timeout=5.0) as store:
        with pytest.raises(PycollError, match="over its cap of 1000"):
            store.set("k", bytes(2000))
    monkeypatch.setenv("PYCOLL_STORE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="PYCOLL_STORE_MAX_BYTES"):
        TCPStore(HOST, 0, is_server=True, timeout=5.0)


# -- 5. no secret: no open store on a wildcard address ---------------------------------------------------------
def test_wildcard_store_without_a_secret_is_refused(monkeypatch, caplog):
    monkeypatch.delenv("PYCOLL_ALLOW_INSECURE", raising=False)
    with pytest.raises(PycollError, match="wildcard.*PYCOLL_SECRET.*PYCOLL_ALLOW_INSECURE=1"):
        TCPStore("0.0.0.0", 0, is_server=True, timeout=2.0)
    with TCPStore("0.0.0.0", 0, is_server=True, timeout=2.0, secret=b"k") as store:
        assert store.port
    monkeypatch.setenv("PYCOLL_ALLOW_INSECURE", "1")
    with caplog.at_level(logging.WARNING, logger="pycoll"):
        with TCPStore("0.0.0.0", 0, is_server=True, timeout=2.0) as store:
            assert store.port
    assert "without a secret" in caplog.text
