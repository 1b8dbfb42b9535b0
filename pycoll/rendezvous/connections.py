"""Connects every pair of ranks with one authenticated TCP socket, ready to hand to the C TCP transport.

Each rank listens on an ephemeral port of its bind address and publishes "host:port" in the store; it connects
to every lower rank and accepts every higher one. Every connection opens with pycoll.rendezvous.handshake (same job id,
same world size, the expected rank, and with a secret mutual HMAC authentication); anything else that reaches
a listener is logged and dropped while the rank keeps accepting.
"""

import contextlib
import fcntl
import logging
import os
import select
import socket
import struct
import threading
import time

from pycoll import errors
from pycoll.rendezvous import handshake, listener
from pycoll.errors import PeerFailure, PycollError, Timeout
from pycoll.rendezvous.store import WATCH_INTERVAL, get_watching, missing_ranks_message

log = logging.getLogger("pycoll")

SOCKET_BUFFER_BYTES = 4 << 20
HANDSHAKE_TIMEOUT = 5.0  # a connection that stays silent this long is dropped, so it cannot stall the mesh
_SIOCGIFADDR = 0x8915  # linux/sockios.h
_IFNAMSIZ = 16


def choose_bind_address(master_addr, ifname=None):
    """The local address peers should reach this rank on.

    With ``ifname`` (or PYCOLL_SOCKET_IFNAME) the IPv4 address of that interface; otherwise the local address
    the kernel routes to ``master_addr`` from, which is 127.0.0.1 for a single-host job.
    """
    ifname = ifname or os.environ.get("PYCOLL_SOCKET_IFNAME") or None
    if ifname is not None:
        return _interface_address(ifname)
    try:
        family, _, _, _, address = socket.getaddrinfo(master_addr, 9, type=socket.SOCK_DGRAM)[0]
    except socket.gaierror as exc:
        raise ValueError(f"master_addr {master_addr!r} does not resolve: {exc}") from None
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(address)  # a UDP connect sends nothing; it only picks the route and source address
        except OSError as exc:
            raise ValueError(f"no route from this host to master_addr {master_addr!r}: {exc}") from None
        return probe.getsockname()[0]


def _interface_address(ifname):
    name = ifname.encode()
    if not 0 < len(name) < _IFNAMSIZ:
        raise ValueError(f"ifname must be 1 to {_IFNAMSIZ - 1} bytes, got {ifname!r}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            reply = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name))
        except OSError as exc:
            known = ", ".join(n for _, n in socket.if_nameindex())
            raise ValueError(f"network interface {ifname!r} (ifname / PYCOLL_SOCKET_IFNAME) has no IPv4 "
                             f"address: {exc.strerror}; interfaces here: {known}") from None
    return socket.inet_ntoa(reply[20:24])  # struct ifreq: 16-byte name, then sockaddr_in (address at +4)


def connect_mesh(store, rank, world_size, *, job_id, secret, timeout, bind_addr, prefix=None, reach=None):
    """A list of world_size connected blocking sockets, one per peer of ``reach`` (default: every other rank;
    each rank's ``reach`` must name the ranks whose ``reach`` names it), None for the others.

    Addresses are published under ``prefix`` (default "pycoll/mesh/<job_id>"); a store that serves several
    meshes of one job needs a distinct prefix for each.

    Raises pycoll.Timeout naming the ranks that did not connect within ``timeout`` seconds.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if not isinstance(job_id, str):
        raise TypeError(f"job_id must be a str, got {type(job_id).__name__}")
    if secret is not None and not isinstance(secret, bytes):
        raise TypeError(f"secret must be bytes or None, got {type(secret).__name__}")
    reach = frozenset(range(world_size) if reach is None else reach) - {rank}
    prefix = f"pycoll/mesh/{job_id}" if prefix is None else prefix
    deadline = time.monotonic() + timeout
    hello = handshake.new_hello(handshake.KIND_PEER, rank, world_size, job_id, secret)
    acceptor = _Acceptor(_listen(bind_addr, backlog=world_size + 16), hello, secret, reach)
    peers = acceptor.peers
    watch = _Watch(store, peers, acceptor)
    completed = False
    try:
        host, port = acceptor.address
        store.set(f"{prefix}/{rank}", _format_address(host, port).encode())
        acceptor.start()
        for lower in sorted(r for r in reach if r < rank):
            sock = _connect_to(store, f"{prefix}/{lower}", lower, hello, secret, deadline, watch)
            if sock is not None:
                peers[lower] = sock
        while not acceptor.done and time.monotonic() < deadline:
            watch.check()
            acceptor.wait(min(deadline, time.monotonic() + WATCH_INTERVAL) - time.monotonic())
        completed = True
    except errors.AuthenticationError as exc:
        watch.record(exc)
        raise
    finally:
        acceptor.stop()  # first: no connection is admitted after this
        if not completed:
            _close_all(peers)
    missing = [r for r in sorted(reach) if peers[r] is None]
    if missing:
        connected = [r for r in sorted(reach) if r not in missing]
        _close_all(peers)
        raise Timeout(missing_ranks_message(missing, connected, timeout, failed=f"did not connect to rank {rank}",
                                            present_label="connected"), rank=missing[0])
    for sock in peers:
        if sock is not None:
            sock.settimeout(None)
    return peers


class _Watch:
    """What a rank checks while it waits for the others, so that a failure elsewhere ends the wait at once
    with its real reason instead of a Timeout at the deadline: a peer already connected that closed (it died),
    the store's connection (rank 0 died: PeerFailure from the store), and authentication failures recorded in
    the store by the store's server or by another rank (a store with ``check_failures``, store.Rendezvous)."""

    def __init__(self, store, peers, acceptor):
        self._store, self._peers, self._acceptor = store, peers, acceptor
        self._rank = acceptor.rank

    def check(self):
        if self._acceptor.auth_failure is not None:
            raise errors.AuthenticationError(self._acceptor.auth_failure)
        gone = next((peer for peer, sock in enumerate(self._peers) if sock is not None and _closed(sock)), None)
        check_failures = getattr(self._store, "check_failures", None)
        if check_failures is not None:
            check_failures()  # after looking at the peers: a recorded failure is why a peer left
        if gone is not None:
            raise PeerFailure(f"rank {gone} closed its connection to rank {self._rank} before every rank had "
                              "joined (did it exit?)", rank=gone)

    def record(self, exc):
        """Tells every rank (best effort: the store may be what failed)."""
        record_failure = getattr(self._store, "record_failure", None)
        if record_failure is not None:
            with contextlib.suppress(PycollError, OSError):
                record_failure(exc)


def _closed(sock):
    """Whether the peer closed ``sock`` (it sends nothing before the mesh is complete but its first data)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    if not poller.poll(0):
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""  # readable, so this does not block
    except (BlockingIOError, InterruptedError, socket.timeout):
        return False
    except OSError:
        return True


def _listen(bind_addr, backlog):
    try:
        family, _, _, _, address = socket.getaddrinfo(bind_addr, 0, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_NUMERICHOST)[0]
    except socket.gaierror:
        raise ValueError(f"bind_addr must be a numeric IP address, got {bind_addr!r}") from None
    if address[0] in ("0.0.0.0", "::"):
        raise ValueError("bind_addr must be a specific address, not the wildcard (see choose_bind_address)")
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        _tune(sock)  # before listen(), so accepted sockets inherit the buffers and the TCP window scale
        sock.bind(address)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise PycollError(f"cannot listen on {bind_addr}: {exc}") from None
    return sock


def _tune(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _format_address(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _parse_address(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def _check_peer(own, peer, expected_rank):
    if peer.job_id != own.job_id:
        raise handshake.HandshakeError(f"job id {peer.job_id!r}, expected {own.job_id!r}")
    if peer.world_size != own.world_size:
        raise handshake.HandshakeError(f"world size {peer.world_size}, expected {own.world_size}")
    if not expected_rank(peer.rank):
        raise handshake.HandshakeError(f"unexpected rank {peer.rank}")


def _connect_to(store, key, peer_rank, hello, secret, deadline, watch):
    """A socket to ``peer_rank`` after the handshake, or None if it cannot be had before the deadline."""
    try:
        address = get_watching(store, key, deadline, watch.check)
    except Timeout:
        log.warning("mesh: rank %d never published its address", peer_rank)
        return None
    host, port = _parse_address(address.decode())
    delay = 0.01
    while time.monotonic() < deadline:
        watch.check()
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            _tune(sock)
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.connect((host, port))
            handshake.client_handshake(sock, hello, secret, deadline,
                                       lambda peer: _check_peer(hello, peer, lambda r: r == peer_rank))
            return sock
        except handshake.AuthenticationError as exc:
            sock.close()
            raise handshake.AuthenticationError(f"rank {hello.rank} failed the shared-secret check with rank "
                                                f"{peer_rank}: {exc}") from None
        except (OSError, Timeout, handshake.Refused) as exc:
            sock.close()
            log.debug("mesh: connecting to rank %d at %s:%d: %s", peer_rank, host, port, exc)
        except handshake.HandshakeError as exc:
            sock.close()
            raise PycollError(f"mesh: rank {hello.rank} -> rank {peer_rank} at {host}:{port}: {exc}") from None
        time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
        delay = min(delay * 2, 0.5)
    return None


def _close_all(peers):
    for i, sock in enumerate(peers):
        if sock is not None:
            sock.close()
            peers[i] = None


class _Acceptor(listener.HandshakeServer):
    """Accepts the higher ranks on the shared non-blocking core (pycoll.rendezvous.listener): one thread and one selector
    however many connections arrive, so silent, slow or flooding ones cannot hold up the others."""

    def __init__(self, listening, hello, secret, reach):
        super().__init__(listening, secret=secret, handshake_timeout=HANDSHAKE_TIMEOUT, name=f"mesh rank {hello.rank}")
        self._hello = hello
        self.rank = hello.rank
        self.address = listening.getsockname()[:2]
        self.peers = [None] * hello.world_size
        self._reach = reach  # the ranks this rank connects with; it accepts those above it
        self._expected = sum(r > hello.rank for r in reach)
        self._reserved = set()  # ranks admitted, whose sockets are published once their ACK is sent
        self._done = threading.Event()
        self.auth_failure = None  # what a connection claiming a rank of this job failed, if one did

    @property
    def done(self):
        return self._done.is_set()

    def start(self):
        if self._expected == 0:
            self._done.set()
        else:
            super().start()

    def wait(self, timeout):
        self._done.wait(max(timeout, 0.0))

    def new_hello(self):
        return self._hello

    def admit_check(self, peer):
        _check_peer(self._hello, peer, lambda r: r > self._hello.rank and r in self._reach)
        if peer.rank in self._reserved:
            raise handshake.HandshakeError(f"rank {peer.rank} is already connected")
        self._reserved.add(peer.rank)

    def on_admitted(self, conn):
        sock = conn.sock
        self.release(conn)
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            sock.sendall(conn.outbuf)  # the rest of the ACK, if any: data written by the caller must follow it
        except OSError as exc:
            self._reserved.discard(conn.handshake.peer.rank)
            self.log.log(logging.WARNING, "ack", f"{self.name}: could not admit {conn.peer}: {exc}")
            sock.close()
            return
        self.peers[conn.handshake.peer.rank] = sock
        if sum(s is not None for s in self.peers[self._hello.rank + 1:]) == self._expected:
            self._done.set()

    def on_handshake_failed(self, conn, exc):
        peer = conn.handshake.peer
        if (isinstance(exc, handshake.AuthenticationError) and peer is not None
                and self._hello.rank < peer.rank < self._hello.world_size):
            self.auth_failure = f"rank {peer.rank} failed the shared-secret check of rank {self._hello.rank}: {exc}"
