"""TCPStore: the rendezvous store rank 0 hosts (pycoll.rendezvous.store_server) and every rank is a client of;
create_store makes the job's from the launcher's environment."""

import datetime
import os
import socket
import struct
import threading
import time

from pycoll.errors import PeerFailure, PycollError, Timeout, check_process
from pycoll.rendezvous import handshake, user_secret
from pycoll.rendezvous.store_protocol import (
    F64,
    I64,
    OP_ADD,
    OP_CHECK,
    OP_GET,
    OP_SET,
    ST_ERROR,
    ST_TIMEOUT,
    U32,
    check_timeout,
    decode_body,
    encode_frame,
    frame_length,
    key_bytes,
    key_list,
    value_bytes,
)
from pycoll.rendezvous.store_server import StoreServer, check_wildcard, is_loopback, max_bytes_setting
from pycoll.rendezvous.wait_report import WaitReport

_REPLY_MARGIN = 5.0  # extra client patience on top of a server-side wait, so the server's reply arrives first
CLOSE_LINGER = 5.0  # the most a closing server waits for its clients (capped by the store's timeout)


class TCPStore:
    """A rendezvous store over TCP. The server (``is_server=True``, rank 0) runs in a daemon thread of this
    process; clients connect with retries until ``timeout``, since the server may start later. With ``secret``
    every connection authenticates both ways before any operation. ``port=0`` on the server picks a free port
    (see ``.port``). ``rank`` is announced in the handshake, so that the server can name a rank that fails the
    secret check. The server holds at most ``max_bytes`` (default: PYCOLL_STORE_MAX_BYTES, else 64 MiB).
    ``secret_file`` names the file ``secret`` was read from when it is this user's per-host secret
    (pycoll.rendezvous.user_secret): errors then point to it, and a client failing the secret check is only
    logged, never recorded as the job's failure, since only another user's process can hold another secret.
    ``secret_hold`` (a user_secret.HeldSecret) is closed with the store: the file stays held while it is used."""

    def __init__(self, host, port, *, is_server, timeout=300.0, secret=None, handshake_timeout=5.0, rank=None,
                 max_bytes=None, secret_file=None, secret_hold=None):
        self._secret_hold = secret_hold
        if not isinstance(host, str) or not host:
            raise TypeError(f"host must be a non-empty str, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int):
            raise TypeError(f"port must be an int, got {type(port).__name__}")
        if not (0 <= port < 65536) or (port == 0 and not is_server):
            raise ValueError(f"port must be in [1, 65535] (0 only for the server), got {port}")
        if secret is not None and not isinstance(secret, bytes):
            raise TypeError(f"secret must be bytes or None, got {type(secret).__name__}")
        self.host = host
        self.timeout = check_timeout("timeout", timeout)
        self._secret = secret
        self._secret_file = secret_file
        self._rank = -1 if rank is None else rank
        self._instance = handshake.NO_INSTANCE  # the server's, learnt on the first connection
        self._lock = threading.Lock()  # guards _socks and _closed
        self._local = threading.local()
        self._socks = []
        self._closed = False
        self._pid = os.getpid()  # a fork's child shares these sockets with this process: it must not use them
        self._server = (StoreServer(check_wildcard(host, secret), port, secret, handshake_timeout,
                                     max_bytes_setting(max_bytes), secret_file) if is_server else None)
        self.port = self._server.port if self._server is not None else port
        try:
            self._socket()  # connect now, so that a missing server or a wrong secret fails here
        except BaseException:
            self.close()
            raise

    def _connect(self):
        deadline = time.monotonic() + self.timeout
        delay, last_error = 0.02, None
        report = WaitReport(lambda waited: self._unreachable(waited, last_error))
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"cannot reach the rendezvous store at {self.host}:{self.port} within "
                              f"{self.timeout:g} s: {last_error}")
            try:
                return self._try_connect(min(deadline, time.monotonic() + 10.0))
            except (handshake.Refused, OSError) as exc:
                # Nobody listens yet, a previous rendezvous's server is closing, or one makes room under a
                # flood: the server may come (back) later.
                last_error = exc
            report.poll()
            time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
            delay = min(delay * 2, 1.0)

    def _unreachable(self, waited, error):
        who = f"rank {self._rank}" if self._rank >= 0 else "this client"
        return (f"{who}: cannot reach the rendezvous store at {self.host}:{self.port} for {waited:.0f} s ({error}); "
                f"still trying until {self.timeout:g} s. Check that rank 0, which hosts the store, has started; "
                f"that MASTER_ADDR ({self.host}) names rank 0's host as this host sees it, that MASTER_PORT is the "
                f"same on every rank, and that no firewall blocks port {self.port}")

    def _try_connect(self, deadline):
        sock = socket.create_connection((self.host, self.port), timeout=max(deadline - time.monotonic(), 0.001))
        try:
            if sock.getsockname() == sock.getpeername():
                # Nobody listened, and the kernel gave this socket the port it dialled as its own: a TCP
                # simultaneous open with itself. It is "nobody listens yet", not a store that answered. Closed
                # with a reset, not into TIME_WAIT, which would keep the store's server off that port for a minute.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                raise ConnectionRefusedError(f"no listener at {self.host}:{self.port} (connected to itself)")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._instance = handshake.client_handshake(sock, self._secret, self._rank, self._instance, deadline)
            return sock
        except BaseException as exc:
            sock.close()
            if isinstance(exc, PeerFailure):
                raise PeerFailure(f"the rendezvous store at {self.host}:{self.port} is a new one: rank 0 restarted "
                                  "its store (or another job took the port)", rank=0) from None
            if isinstance(exc, handshake.AuthenticationError):
                who = f"rank {self._rank}" if self._rank >= 0 else "this client"
                hint = "" if self._secret_file is None else (
                    f" (without PYCOLL_SECRET the ranks of one host share the secret in {self._secret_file}: "
                    "ranks of other users, or that see another filesystem there, need PYCOLL_SECRET)")
                raise handshake.AuthenticationError(f"{who} failed the shared-secret check of the rendezvous "
                                                    f"store at {self.host}:{self.port}: {exc}{hint}") from None
            if isinstance(exc, (handshake.HandshakeError, Timeout)) and not isinstance(exc, handshake.Refused):
                raise type(exc)(f"the service at {self.host}:{self.port} is not a usable pycoll store: "
                                f"{exc}") from None
            raise

    def _socket(self):
        """This thread's connection: each thread has its own, so a GET waiting in one thread never holds up
        another thread's requests."""
        sock = getattr(self._local, "sock", None)
        if sock is not None:
            return sock
        self._check_open()
        sock = self._connect()
        with self._lock:
            if self._closed:
                sock.close()
                raise PycollError("the store is closed")
            self._socks.append(sock)
        self._local.sock = sock
        return sock

    def _check_open(self):
        if self._pid != os.getpid():
            check_process(self._pid, f"the rendezvous store client of {self.host}:{self.port}")
        with self._lock:
            if self._closed:
                raise PycollError("the store is closed")

    def _discard(self, sock):
        with self._lock:
            if sock in self._socks:
                self._socks.remove(sock)
        sock.close()
        self._local.sock = None

    def _request(self, op, *fields, wait=None):
        frame = encode_frame(op, *fields)
        self._check_open()
        sock = self._socket()
        sock.settimeout(self.timeout if wait is None else wait + _REPLY_MARGIN)
        try:
            sock.sendall(frame)
            length = frame_length(self._recv(sock, U32.size))
            status, reply = decode_body(self._recv(sock, length))
        except (socket.timeout, OSError, PycollError) as exc:
            self._discard(sock)  # the stream may be mid-frame: it cannot be used again
            self._check_open()  # closed by another thread while this one waited
            if isinstance(exc, socket.timeout):
                raise Timeout(f"the rendezvous store at {self.host}:{self.port} did not answer") from None
            if isinstance(exc, PycollError):
                raise
            raise PeerFailure(f"lost the connection to the rendezvous store that rank 0 hosts at "
                              f"{self.host}:{self.port}: {exc} (did rank 0 exit?)",
                              rank=0) from None
        if status == ST_ERROR:
            raise PycollError(reply[0].decode(errors="replace") if reply else "the store reported an error")
        return status, reply

    def _recv(self, sock, n):
        chunks, got = [], 0
        while got < n:
            chunk = sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise PeerFailure(f"the rendezvous store at {self.host}:{self.port} closed the connection "
                                  "(did rank 0 exit?)", rank=0)
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def set(self, key, value):
        self._request(OP_SET, key_bytes(key), value_bytes(value))

    def get(self, key, timeout=None):
        """The value of ``key``, waiting up to ``timeout`` seconds (default: the store's) for it to be set."""
        wait = self.timeout if timeout is None else check_timeout("timeout", timeout)
        status, reply = self._request(OP_GET, key_bytes(key), F64.pack(wait), wait=wait)
        if status == ST_TIMEOUT:
            raise Timeout(f"key {key!r} was not set within {wait:g} s")
        return reply[0]

    def add(self, key, n):
        """Adds ``n`` to the integer at ``key`` (0 when unset) and returns the new value."""
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, got {type(n).__name__}")
        _, reply = self._request(OP_ADD, key_bytes(key), I64.pack(n))
        return I64.unpack(reply[0])[0]

    def check(self, keys):
        """Whether every key in ``keys`` (a str or an iterable of str) is set, without waiting."""
        _, reply = self._request(OP_CHECK, *[key_bytes(k) for k in key_list(keys)])
        return reply[0] == b"\x01"

    def close(self, linger=None):
        """Closes the connections and, on the server's rank, stops the server once the other ranks have closed
        theirs, waiting at most ``linger`` seconds (default: min(timeout, 5)). Idempotent. In a fork's child it
        only forgets them: the connections and the server are the parent's."""
        if self._pid != os.getpid():
            self._closed, self._socks, self._server = True, [], None
            return
        with self._lock:
            self._closed = True
            socks, self._socks = self._socks, []
        for sock in socks:
            sock.close()
        if self._server is not None:
            self._server.stop(min(self.timeout, CLOSE_LINGER) if linger is None else check_timeout("linger", linger))
            self._server = None
        if self._secret_hold is not None:
            self._secret_hold.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def store_port(master_port, env=None):
    """The port rank 0 hosts the store on when no agent store can carry it: MASTER_PORT, or MASTER_PORT + 1
    under torchrun when its agent's own store already listens on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE)."""
    return master_port + 1 if _uses_agent_store(os.environ if env is None else env) else master_port


def _uses_agent_store(env):
    return env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() in ("1", "true")


def _agent_store(launch, env, timeout):
    """A client of torchrun's agent store on MASTER_PORT, through torch's own TCPStore, or None when the job has
    no agent store or torch cannot be imported. It carries the port rank 0 picked for pycoll's store: a fixed
    port next to the agent's may be taken by any other socket of the host."""
    if not _uses_agent_store(env):
        return None
    try:
        from torch.distributed import TCPStore as AgentStore
    except ImportError:
        return None
    return AgentStore(launch.master_addr, launch.master_port, is_master=False,
                      timeout=datetime.timedelta(seconds=timeout))


def _port_from_agent(agent, key, timeout):
    try:
        return int(agent.get(key))
    except (RuntimeError, ValueError) as exc:  # torch's store errors derive from RuntimeError
        raise Timeout(f"rank 0 did not publish the rendezvous store's port in torchrun's agent store within "
                      f"{timeout:g} s: {exc}", rank=0) from None


def create_store(launch, *, timeout=300.0, secret=None, env=None):
    """The job's TCPStore from a LaunchEnv: hosted by rank 0, at the launcher's rendezvous address. Without a
    secret, a job whose ranks all run on this host (a loopback address, or the launcher says so) uses this
    user's per-host secret (pycoll.rendezvous.user_secret), so that other local users can neither read the
    store nor join; a job over several hosts needs PYCOLL_SECRET, and is warned without one. Under torchrun's
    agent store, rank 0 hosts on a free port and publishes it there."""
    env = os.environ if env is None else env
    agent = _agent_store(launch, env, timeout)
    port = store_port(launch.master_port, env) if agent is None else launch.master_port
    held = None
    if secret is None and (launch.single_host or is_loopback(launch.master_addr)):
        held = user_secret.hold(port)
    try:
        return _open_store(launch, agent, port, timeout, held.value if held else secret, env, held)
    except BaseException:
        if held is not None:
            held.close()
        raise


def _open_store(launch, agent, port, timeout, secret, env, held):
    secret_file = held.path if held is not None else None
    if agent is not None:
        key = f"pycoll/store_port/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        if launch.rank == 0:
            store = TCPStore(launch.master_addr, 0, is_server=True, timeout=timeout, secret=secret, rank=0,
                             secret_file=secret_file, secret_hold=held)
            agent.set(key, str(store.port))
            return store
        port = _port_from_agent(agent, key, timeout)
    return TCPStore(launch.master_addr, port, is_server=launch.rank == 0, timeout=timeout, secret=secret,
                    rank=launch.rank, secret_file=secret_file, secret_hold=held)
