"""Connects every pair of ranks with one authenticated TCP socket, ready to hand to the C TCP transport.

Each rank listens on an ephemeral port of its bind address and publishes "host:port" in the store; it connects
to every lower rank and accepts every higher one. Every connection opens with pycoll.handshake (same job id,
same world size, the expected rank, and with a secret mutual HMAC authentication); anything else that reaches
a listener is logged and dropped while the rank keeps accepting.
"""

import fcntl
import logging
import os
import selectors
import socket
import struct
import threading
import time

from pycoll import handshake
from pycoll.errors import PycollError, Timeout
from pycoll.store import missing_ranks_message

log = logging.getLogger("pycoll")

SOCKET_BUFFER_BYTES = 4 << 20
HANDSHAKE_TIMEOUT = 10.0  # a connection that stays silent this long is dropped, so it cannot stall the mesh
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


def connect_mesh(store, rank, world_size, *, job_id, secret, timeout, bind_addr, prefix="pycoll/mesh"):
    """A list of world_size connected blocking sockets, one per peer (None at ``rank``).

    Raises pycoll.Timeout naming the ranks that did not connect within ``timeout`` seconds.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if not isinstance(job_id, str):
        raise TypeError(f"job_id must be a str, got {type(job_id).__name__}")
    if secret is not None and not isinstance(secret, bytes):
        raise TypeError(f"secret must be bytes or None, got {type(secret).__name__}")
    deadline = time.monotonic() + timeout
    hello = handshake.new_hello(handshake.KIND_PEER, rank, world_size, job_id, secret)
    listener = _listen(bind_addr, backlog=world_size + 16)
    acceptor = _Acceptor(listener, hello, secret, deadline)
    peers = acceptor.peers
    try:
        host, port = listener.getsockname()[:2]
        store.set(f"{prefix}/{rank}", _format_address(host, port).encode())
        acceptor.start()
        for lower in range(rank):
            sock = _connect_to(store, f"{prefix}/{lower}", lower, hello, secret, deadline)
            if sock is not None:
                peers[lower] = sock
        acceptor.wait(deadline)
    except BaseException:
        acceptor.stop()
        _close_all(peers)
        raise
    finally:
        listener.close()
    acceptor.stop()
    # A socket closed after admission (its ACK failed) counts as missing.
    missing = [r for r in range(world_size) if r != rank and (peers[r] is None or peers[r].fileno() < 0)]
    if missing:
        connected = [r for r in range(world_size) if r != rank and r not in missing]
        _close_all(peers)
        raise Timeout(missing_ranks_message(missing, connected, timeout, failed=f"did not connect to rank {rank}",
                                            present_label="connected"))
    for sock in peers:
        if sock is not None:
            sock.settimeout(None)
    return peers


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


def _connect_to(store, key, peer_rank, hello, secret, deadline):
    """A socket to ``peer_rank`` after the handshake, or None if it cannot be had before the deadline."""
    try:
        host, port = _parse_address(store.get(key, timeout=max(deadline - time.monotonic(), 0.0)).decode())
    except Timeout:
        log.warning("mesh: rank %d never published its address", peer_rank)
        return None
    delay = 0.01
    while time.monotonic() < deadline:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            _tune(sock)
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.connect((host, port))
            peer = handshake.client_handshake(sock, hello, secret, deadline)
            _check_peer(hello, peer, lambda r: r == peer_rank)
            return sock
        except handshake.AuthenticationError:
            sock.close()
            raise
        except handshake.HandshakeError as exc:
            sock.close()
            raise PycollError(f"mesh: rank {hello.rank} -> rank {peer_rank} at {host}:{port}: {exc}") from None
        except (OSError, Timeout) as exc:
            sock.close()
            log.debug("mesh: connecting to rank %d at %s:%d: %s", peer_rank, host, port, exc)
            time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
            delay = min(delay * 2, 0.5)
    return None


def _close_all(peers):
    for i, sock in enumerate(peers):
        if sock is not None:
            sock.close()
            peers[i] = None


class _Acceptor:
    """Accepts the higher ranks on a background thread; each connection's handshake runs on its own thread,
    so one silent or slow connection cannot hold up the others."""

    def __init__(self, listener, hello, secret, deadline):
        self._listener, self._hello, self._secret, self._deadline = listener, hello, secret, deadline
        self.peers = [None] * hello.world_size
        self._lock = threading.Lock()
        self._expected = hello.world_size - hello.rank - 1
        self._accepted = 0
        self._done = threading.Event()
        self._stopped = False
        # Wakes the accept loop at once when the mesh is complete or abandoned.
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="pycoll-mesh-accept", daemon=True)

    def start(self):
        if self._expected == 0:
            self._done.set()
        else:
            self._thread.start()

    def wait(self, deadline):
        self._done.wait(max(deadline - time.monotonic(), 0.0))

    def stop(self):
        with self._lock:
            self._stopped = True
        self._finish()
        if self._thread.is_alive():
            self._thread.join()
        self._wake_r.close()
        self._wake_w.close()

    def _finish(self):
        self._done.set()
        self._wake_w.send(b"x")

    def _run(self):
        self._listener.setblocking(False)
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._done.is_set():
                remaining = self._deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining) or self._done.is_set():
                    return
                try:
                    sock, address = self._listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:
                    log.warning("mesh: rank %d: accept failed: %s", self._hello.rank, exc)
                    return
                sock.setblocking(True)
                threading.Thread(target=self._handshake, args=(sock, address), name="pycoll-mesh-handshake",
                                 daemon=True).start()

    def _handshake(self, sock, address):
        deadline = min(self._deadline, time.monotonic() + HANDSHAKE_TIMEOUT)
        admitted = []
        try:
            handshake.server_handshake(sock, self._hello, self._secret, deadline,
                                       lambda peer: admitted.append(self._admit(peer, sock)))
        except (PycollError, OSError) as exc:
            if admitted:
                self._release(admitted[0])
            log.warning("mesh: rank %d rejected a connection from %s: %s", self._hello.rank, address, exc)
            sock.close()
            return
        # Counted only now that the ACK is out: once the mesh is complete the socket belongs to the transport,
        # and no handshake byte may still be in flight on it.
        with self._lock:
            self._accepted += 1
            if self._accepted == self._expected:
                self._finish()

    def _admit(self, peer, sock):
        _check_peer(self._hello, peer, lambda r: self._hello.rank < r < self._hello.world_size)
        with self._lock:
            if self._stopped:
                raise handshake.HandshakeError("the mesh is no longer accepting connections")
            if self.peers[peer.rank] is not None:
                raise handshake.HandshakeError(f"rank {peer.rank} is already connected")
            self.peers[peer.rank] = sock
        return peer.rank

    def _release(self, peer_rank):
        with self._lock:
            if not self._stopped:
                self.peers[peer_rank] = None
