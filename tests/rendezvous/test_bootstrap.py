"""The C bootstrap (native/bootstrap, pycoll/bootstrap.h) as pycoll.get_unique_id / pycoll.init_rank reach it:
ranks on threads of this process, impostors speaking the handshake from Python (so the C HMAC is checked
against Python's hmac), floods, and the failures every rank must hear of."""

import ctypes
import hashlib
import hmac
import os
import re
import socket
import struct
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st
from multiproc import close_at_once, segments_of

import pycoll
from pycoll._bindings.comm import MAX_WORLD_SIZE, NativeComm, unique_id_address

pytestmark = pytest.mark.timeout(90)

# The unique id's layout (native/bootstrap/unique_id.c): "PCID", version, 0, address (family, port, ip[16]),
# job (16 bytes), secret (32 bytes).
ID_ADDR, ID_JOB, ID_SECRET = 8, 28, 44


def _id_parts(unique_id):
    family, port = struct.unpack("!HH", unique_id[ID_ADDR:ID_ADDR + 4])
    return port, unique_id[ID_JOB:ID_JOB + 16], unique_id[ID_SECRET:ID_SECRET + 32]


def _join(unique_id, world, ranks=None, timeout=20.0, backend="cpu"):
    """pycoll.init_rank for `ranks` (default: all) on threads; each rank's Communicator or exception."""
    ranks = list(range(world)) if ranks is None else ranks
    results = {}

    def run(i, rank):
        try:
            results[i] = pycoll.init_rank(unique_id, rank, world, timeout=timeout, backend=backend, ifname="lo")
        except Exception as exc:  # noqa: BLE001 (inspected by the test)
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, r)) for i, r in enumerate(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[i] for i in range(len(ranks))]


def _hello(kind, rank, world, job, nonce):
    return b"PYCB" + struct.pack("!HBBii", 1, kind, 0, rank, world) + job + nonce


def _impostor(port, job, secret, rank=1, world=2):
    """Speaks the client side of the handshake with `secret`: what the server answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
        hello = _hello(1, rank, world, job, os.urandom(32))
        sock.sendall(hello)
        reply = b""
        while len(reply) < 96:
            chunk = sock.recv(96 - len(reply))
            if not chunk:
                return "closed"
            reply += chunk
        expected = hmac.new(secret, b"pycoll-server" + hello + reply[:64], hashlib.sha256).digest()
        if not hmac.compare_digest(expected, reply[64:]):
            return "server proof does not match this secret"
        sock.sendall(hmac.new(secret, b"pycoll-client" + hello + reply[:64], hashlib.sha256).digest())
        return "accepted"


@settings(max_examples=50, deadline=None)
@given(key=st.binary(max_size=200), data=st.lists(st.binary(max_size=300), max_size=4))
def test_the_c_hmac_is_hmac_sha256(key, data):
    lib = ctypes.CDLL(pycoll.get_library())
    out = ctypes.create_string_buffer(32)
    parts = (ctypes.c_char_p * max(len(data), 1))(*data)
    lens = (ctypes.c_size_t * max(len(data), 1))(*[len(d) for d in data])
    lib.pycoll_hmac_sha256(key, ctypes.c_size_t(len(key)), len(data), parts, lens, out)
    assert out.raw == hmac.new(key, b"".join(data), hashlib.sha256).digest()


def test_a_job_of_three_runs_collectives_and_leaves_nothing_behind():
    before = segments_of([os.getpid()])
    unique_id = pycoll.get_unique_id("lo")
    comms = _join(unique_id, 3)
    try:
        assert all(isinstance(c, pycoll.Communicator) for c in comms), comms
        import numpy as np

        out = [np.full(5, c.rank + 1.0) for c in comms]
        threads = [threading.Thread(target=c.all_reduce, args=(x,)) for c, x in zip(comms, out)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all((x == 6.0).all() for x in out)
    finally:
        close_at_once(comms)
    # Only this job's names (other jobs may run on the machine): its ranks are threads of this process.
    assert segments_of([os.getpid()]) - before == set()


def test_a_single_rank_job():
    (comm,) = _join(pycoll.get_unique_id("lo"), 1)
    assert (comm.size, comm.hosts, comm.transport) == (1, 1, "shm")
    close_at_once([comm])


def test_the_id_listens_where_asked_and_never_on_the_wildcard(monkeypatch):
    monkeypatch.delenv("PYCOLL_SOCKET_IFNAME", raising=False)
    assert unique_id_address(pycoll.get_unique_id(toward="127.0.0.1")).startswith("127.0.0.1:")
    assert unique_id_address(pycoll.get_unique_id(toward="localhost")).startswith("127.0.0.1:")
    assert unique_id_address(pycoll.get_unique_id("lo", toward="10.0.0.1")).startswith("127.0.0.1:")
    monkeypatch.setenv("PYCOLL_SOCKET_IFNAME", "lo")
    address = unique_id_address(pycoll.get_unique_id())
    assert address.startswith("127.0.0.1:") and not address.startswith("0.0.0.0")


def test_unknown_interfaces_are_named(monkeypatch):
    with pytest.raises(ValueError, match=r"no-such-if0.*ifname.*interfaces with one here: .*lo"):
        pycoll.get_unique_id("no-such-if0")
    monkeypatch.setenv("PYCOLL_SOCKET_IFNAME", "nosuch1")
    with pytest.raises(ValueError, match="PYCOLL_SOCKET_IFNAME"):
        pycoll.get_unique_id()


@pytest.mark.parametrize("bad, error, match", [
    (b"x" * 10, ValueError, "128 bytes"),
    ("not bytes", TypeError, "unique_id must be bytes"),
    (b"\0" * 128, ValueError, "not a pycoll unique id"),
])
def test_bad_ids_are_refused(bad, error, match):
    with pytest.raises(error, match=match):
        pycoll.init_rank(bad, 0, 2, timeout=1.0)


def test_bad_ranks_are_refused():
    unique_id = pycoll.get_unique_id("lo")
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\), got 2"):
        pycoll.init_rank(unique_id, 2, 2)
    with pytest.raises(TypeError, match="rank must be an int"):
        pycoll.init_rank(unique_id, "0", 2)


def test_the_missing_ranks_are_named_at_the_deadline():
    start = time.monotonic()
    results = _join(pycoll.get_unique_id("lo"), 3, ranks=[0, 1], timeout=2.0)
    assert time.monotonic() - start < 10
    assert all(isinstance(r, pycoll.Timeout) for r in results), results
    # Whichever thread of this process claims the id's listener first serves it (rank 0 or rank 1) and names
    # the missing rank; the other, at the same deadline, hears that or times out on its own wait.
    named = [r for r in results if re.search(r"rank 2 of 3 did not register with the bootstrap root \(rank [01], ",
                                                str(r))]
    assert named and all("(registered: 0, 1)" in str(r) for r in named), results


def test_an_id_serves_one_communicator():
    unique_id = pycoll.get_unique_id("lo")
    close_at_once(_join(unique_id, 1))
    with pytest.raises(pycoll.Timeout, match="did the process that made the unique id call"):
        pycoll.init_rank(unique_id, 1, 2, timeout=1.0, ifname="lo")


def test_ranks_disagreeing_on_the_world_size_all_hear_it():
    unique_id = pycoll.get_unique_id("lo")
    results = {}

    def run(rank, world):
        try:
            results[rank] = pycoll.init_rank(unique_id, rank, world, timeout=10.0, ifname="lo")
        except Exception as exc:  # noqa: BLE001
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(0, 2)), threading.Thread(target=run, args=(1, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for rank in (0, 1):
        assert isinstance(results[rank], ValueError), results
        # Either thread may serve the id (the first to claim its listener): the message names both sides.
        assert str(results[rank]) in ("rank 1 called pycoll_comm_init_rank with world size 3, rank 0 with 2",
                                      "rank 0 called pycoll_comm_init_rank with world size 2, rank 1 with 3")


def test_two_processes_claiming_one_rank_all_hear_it():
    results = _join(pycoll.get_unique_id("lo"), 3, ranks=[0, 1, 1], timeout=10.0)
    assert all(isinstance(r, ValueError) and "two processes registered as rank 1" in str(r) for r in results), \
        results


def test_a_rank_that_registers_after_the_job_failed_still_hears_why():
    # The two rank 1s meet first (one serves the id and refuses the other); rank 0 starts half a second after the
    # refused one has its answer, as a rank started a moment later would. The root keeps the id's listener for it
    # a while, so it hears the same reason instead of timing out on a closed listener.
    unique_id, results = pycoll.get_unique_id("lo"), {}

    def run(i, rank):
        try:
            results[i] = pycoll.init_rank(unique_id, rank, 3, timeout=10.0, ifname="lo")
        except Exception as exc:  # noqa: BLE001 (inspected by the test)
            results[i] = exc

    first = [threading.Thread(target=run, args=(i, 1)) for i in (0, 1)]
    for t in first:
        t.start()
    deadline = time.monotonic() + 10
    while not results and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # the root has told the ranks it had: before, it closed the id's listener right then
    late = threading.Thread(target=run, args=(2, 0))
    late.start()
    for t in (*first, late):
        t.join()
    assert all(isinstance(results[i], ValueError) and "two processes registered as rank 1" in str(results[i])
               for i in range(3)), results


def test_a_rank_with_a_forged_secret_is_refused_and_the_job_names_the_drop():
    unique_id = pycoll.get_unique_id("lo")
    forged = unique_id[:ID_SECRET] + bytes(b ^ 1 for b in unique_id[ID_SECRET:ID_SECRET + 32]) + \
        unique_id[ID_SECRET + 32:]
    results = {}
    thread = threading.Thread(target=lambda: results.update(root=_join(unique_id, 2, ranks=[0], timeout=3.0)[0]))
    thread.start()
    with pytest.raises(pycoll.AuthenticationError, match="does not hold this job's secret"):
        pycoll.init_rank(forged, 1, 2, timeout=3.0, ifname="lo")
    thread.join()
    assert isinstance(results["root"], pycoll.Timeout) and "connection dropped" in str(results["root"]), results


def test_junk_impostors_and_a_flood_do_not_keep_the_ranks_apart():
    unique_id = pycoll.get_unique_id("lo")
    port, job, secret = _id_parts(unique_id)
    results = {}
    root = threading.Thread(target=lambda: results.update(root=_join(unique_id, 2, ranks=[0], timeout=30.0)[0]))
    root.start()
    flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]  # silent, held open
    try:
        for junk in (os.urandom(512), b"GET / HTTP/1.0\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
                sock.sendall(junk)
        assert _impostor(port, os.urandom(16), secret) in ("closed", "server proof does not match this secret")
        assert _impostor(port, job, b"w" * 32) in ("closed", "server proof does not match this secret")
        start = time.monotonic()
        rank1 = pycoll.init_rank(unique_id, 1, 2, timeout=30.0, ifname="lo")
        joined_s = time.monotonic() - start
    finally:
        for sock in flood:
            sock.close()
    root.join()
    try:
        assert isinstance(results["root"], pycoll.Communicator), results
        assert joined_s < 10, joined_s
    finally:
        close_at_once([rank1, results["root"]])


def test_a_watch_that_raises_ends_the_wait_at_once():
    unique_id = pycoll.get_unique_id("lo")
    start = time.monotonic()

    def watch():
        if time.monotonic() - start > 0.3:
            raise pycoll.PeerFailure("the job failed elsewhere", rank=3)

    with pytest.raises(pycoll.PeerFailure, match="the job failed elsewhere"):
        NativeComm.init_rank(unique_id, 0, 2, timeout=30.0, ifname="lo", watch=watch)
    assert time.monotonic() - start < 3


def test_a_rank_killed_while_it_waits_for_the_others_leaves_nothing_in_dev_shm(tmp_path):
    """Segments are created only once every rank is there (step 4 of native/bootstrap/init_rank.c), so a rank
    killed while it waits -- for registrations, here -- leaves no file behind."""
    import signal
    import subprocess
    import sys

    script = ("import pycoll, sys\n"
              "unique_id = pycoll.get_unique_id('lo')\n"
              "print('waiting', flush=True)\n"
              "pycoll.init_rank(unique_id, 0, 2, timeout=30, ifname='lo')\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert proc.stdout.readline().strip() == "waiting"
        time.sleep(0.5)  # inside pycoll_comm_init_rank, waiting for rank 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"pycoll-{proc.pid}-")]


@pytest.mark.parametrize("world_size", [2**31 - 1, 2**31, 2**64, MAX_WORLD_SIZE + 1, 0])
def test_world_sizes_beyond_the_limit_are_refused_at_once_naming_world_size(world_size):
    unique_id = pycoll.get_unique_id("lo")
    start = time.monotonic()
    with pytest.raises(ValueError, match=rf"world_size must be in \[1, {MAX_WORLD_SIZE}\] .*got {world_size}"):
        NativeComm.init_rank(unique_id, 0, world_size, timeout=30.0, ifname="lo")
    if world_size > 0:
        with pytest.raises(ValueError, match="world_size"):
            pycoll.init_rank(unique_id, 0, world_size, timeout=30.0, ifname="lo")
    assert time.monotonic() - start < 2


class _Id(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


@pytest.mark.parametrize("world_size", [2**31 - 1, MAX_WORLD_SIZE + 1, -5])
def test_the_c_call_refuses_a_huge_world_size_at_once(world_size):
    lib = ctypes.CDLL(pycoll.get_library())
    lib.pycoll_comm_init_rank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32, _Id, ctypes.c_int32,
                                          ctypes.c_double]
    lib.pycoll_bootstrap_error.restype = ctypes.c_char_p
    unique_id = _Id()
    ctypes.memmove(ctypes.byref(unique_id), pycoll.get_unique_id("lo"), ctypes.sizeof(unique_id))
    comm = ctypes.c_void_p()
    start = time.monotonic()
    status = lib.pycoll_comm_init_rank(ctypes.byref(comm), world_size, unique_id, 0, 30.0)
    assert time.monotonic() - start < 2
    assert status != 0 and comm.value is None
    assert f"world_size must be in [1, {MAX_WORLD_SIZE}]".encode() in lib.pycoll_bootstrap_error()


def test_a_registrant_claiming_a_huge_world_size_is_refused_at_once():
    unique_id = pycoll.get_unique_id("lo")
    port, job, secret = _id_parts(unique_id)
    results = {}
    root = threading.Thread(target=lambda: results.update(root=_join(unique_id, 2, ranks=[0], timeout=30.0)[0]))
    start = time.monotonic()
    root.start()
    with socket.create_connection(("127.0.0.1", port), timeout=10.0) as sock:
        world = 2**31 - 1
        hello = _hello(1, 1, world, job, os.urandom(32))
        sock.sendall(hello)
        reply = sock.recv(96, socket.MSG_WAITALL)
        sock.sendall(hmac.new(secret, b"pycoll-client" + hello + reply[:64], hashlib.sha256).digest())
        assert sock.recv(1) == b"\x06"
        sock.sendall(struct.pack("!ii", 1, world) + bytes(272))  # a registration record for that world
        root.join()
    assert time.monotonic() - start < 5
    assert isinstance(results["root"], ValueError), results
    assert "rank 1 called pycoll_comm_init_rank with world size 2147483647, rank 0 with 2" in str(results["root"])


_LOW_LIMIT_SCRIPT = """
import os, resource, sys, time
import pycoll
unique_id = pycoll.get_unique_id("lo")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
start = time.monotonic()
try:
    pycoll.init_rank(unique_id, 0, int(sys.argv[1]), timeout=30.0, ifname="lo")
except BaseException as exc:
    print(type(exc).__name__, round(time.monotonic() - start, 1), exc, flush=True)
for fd in (0, 1, 2):
    os.fstat(fd)  # EBADF if set-up closed a descriptor it never opened
print("fds 0-2 open", flush=True)
"""


def test_a_world_size_above_the_descriptor_limit_is_refused_naming_both():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _LOW_LIMIT_SCRIPT, "1000"], capture_output=True, text=True,
                         timeout=60, cwd="/", stdin=subprocess.PIPE, check=False)
    assert out.returncode == 0, out.stderr
    kind, seconds, message = out.stdout.splitlines()[0].split(" ", 2)
    assert kind == "ValueError" and float(seconds) < 2, out.stdout
    assert "world_size 1000" in message and "RLIMIT_NOFILE 256" in message, message
    assert out.stdout.splitlines()[1] == "fds 0-2 open"


_NO_MEMORY_SCRIPT = """
import os, resource, sys
import pycoll
from pycoll._bindings.comm import NativeComm
unique_id = pycoll.get_unique_id("lo")
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
# Room for the per-rank descriptor arrays (256 KiB each), not for the table of records (14 MiB): set-up fails
# half-way through its allocations, and must close nothing it did not open.
resource.setrlimit(resource.RLIMIT_AS, (vm + 8 * 2**20, resource.RLIM_INFINITY))
try:
    NativeComm.init_rank(unique_id, 0, int(sys.argv[1]), timeout=30.0, ifname="lo")
except BaseException as exc:
    print(type(exc).__name__, flush=True)
for fd in (0, 1, 2):
    os.fstat(fd)
print("fds 0-2 open", flush=True)
"""


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""), reason="ASan reserves terabytes of address space")
def test_a_set_up_that_runs_out_of_memory_closes_nothing_it_did_not_open():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _NO_MEMORY_SCRIPT, str(MAX_WORLD_SIZE)], capture_output=True,
                         text=True, timeout=60, cwd="/", stdin=subprocess.PIPE, check=False)
    assert out.stdout.splitlines() == ["MemoryError", "fds 0-2 open"], (out.stdout, out.stderr)


def test_a_bootstrap_error_names_the_roots_address_once():
    unique_id = pycoll.get_unique_id("lo")
    close_at_once(_join(unique_id, 1))  # the id's listener is gone: rank 1 finds nobody there
    address = unique_id_address(unique_id)
    with pytest.raises(pycoll.Timeout) as caught:
        pycoll.init_rank(unique_id, 1, 2, timeout=1.0, ifname="lo")
    assert str(caught.value).count(address) == 1, str(caught.value)
    assert f"the bootstrap root at {address} did not accept a connection in time" in str(caught.value)
