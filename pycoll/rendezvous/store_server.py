"""The rendezvous store's server: TCPStore's rank 0 runs it in daemon threads, on the C listener and the serving
loop of pycoll.rendezvous.listener, bounded in clients and bytes, refusing the wildcard address without a secret."""

import ipaddress
import logging
import secrets
import socket
import threading
import time

from pycoll import settings
from pycoll.errors import PycollError
from pycoll.rendezvous import listener
from pycoll.rendezvous.store_protocol import (
    AUTH_FAILURE_KEY,
    F64,
    I64,
    MAX_FRAME_BYTES,
    OP_ADD,
    OP_CHECK,
    OP_GET,
    OP_SET,
    ST_ERROR,
    ST_OK,
    ST_TIMEOUT,
    U32,
    ProtocolError,
    decode_body,
    encode_frame,
    expect_fields,
    frame_length,
)

log = logging.getLogger("pycoll")

DEFAULT_MAX_BYTES = 64 << 20  # all keys and values together (a stranger must not fill rank 0's memory)
MAX_BYTES_ENV = "PYCOLL_STORE_MAX_BYTES"
MAX_CLIENTS = 4096  # admitted connections; those still in the handshake are bounded apart (pycoll.rendezvous.listener)
FAILURE_GRACE = 1.0  # seconds a failed rendezvous's store stays up for ranks that have not connected yet


class StoreServer(listener.AdmittingServer):
    """The store's server (pycoll.rendezvous.listener). Holds at most ``max_bytes`` of keys and values. A client
    whose HELLO claims a rank and that fails the secret check is recorded under AUTH_FAILURE_KEY, which every
    waiting rank watches, so the whole job fails fast and says who."""

    def __init__(self, host, port, secret, handshake_timeout, max_bytes, secret_file):
        # The instance goes in the server's HELLO; a client's later connections (one per thread) present it back,
        # so that a closing server still serves its own clients and a restarted one is noticed.
        super().__init__(_listen(host, port), secret=secret, instance=secrets.token_bytes(16),
                         handshake_timeout=handshake_timeout, name="store")
        self._secret_file = secret_file
        self.port = self._listener.getsockname()[1]
        self._max_bytes = max_bytes
        self._data = {}
        self._bytes = 0  # keys and values held
        self._waiters = {}  # key -> connections whose GET waits for it
        # Clients handed over by the C listener and not gone yet. Counted from the hand-over, on the listener's
        # thread: a client whose handshake has ended may already be using the store before the serving thread
        # admits it, and a stop must wait for it too.
        self._clients = 0
        self._clients_lock = threading.Lock()
        self._idle = threading.Event()  # set while no client is connected
        self._idle.set()
        self._failed_at = None  # when a rank failed the secret check (the rendezvous cannot succeed)
        self.start()

    def stop(self, linger):
        """Refuses new clients at once (a client of the next rendezvous must not see this one's keys; it
        retries until the next server is up), then stops once every client has disconnected, or after
        ``linger`` seconds: ranks still reading the store when rank 0 finishes must not lose it."""
        end = time.monotonic() + linger
        if self._failed_at is not None:
            # Ranks still starting learn why the job failed instead of timing out on a store that is gone.
            time.sleep(max(min(self._failed_at + FAILURE_GRACE, end) - time.monotonic(), 0.0))
        else:
            self.close_to_new()
        self._idle.wait(max(end - time.monotonic(), 0.0))
        super().stop()

    def admit_check(self, rank):
        if len(self.admitted) >= MAX_CLIENTS:
            raise PycollError(f"{len(self.admitted)} clients are already connected")

    def on_handed_over(self, rank):
        with self._clients_lock:
            self._clients += 1
            self._idle.clear()

    def on_dropped(self, conn):
        if conn.waiting is not None:
            self._waiters.get(conn.waiting[0], []).remove(conn)
        with self._clients_lock:
            self._clients -= 1
            if self._clients == 0:
                self._idle.set()

    def on_handshake_failed(self, rank, reason):
        if self._secret_file is not None:
            # Every rank of this user on this host reads the same file: only another user (or a rank that sees
            # another filesystem) fails, and a stranger must not be able to stop the job by claiming a rank.
            return
        if rank >= 0:
            message = (f"rank {rank} failed the shared-secret check of the rendezvous store (rank 0's "
                       f"{self.name} at port {self.port}): {reason}; every rank needs the same PYCOLL_SECRET")
            self._put(AUTH_FAILURE_KEY.encode(), message.encode())
            self._failed_at = time.monotonic()

    def on_data(self, conn):
        if len(conn.inbuf) > MAX_FRAME_BYTES + U32.size:
            raise ProtocolError(f"more than {MAX_FRAME_BYTES} bytes sent without waiting for a reply")
        while conn in self.admitted and conn.waiting is None and len(conn.inbuf) >= U32.size:
            length = frame_length(conn.inbuf)
            if len(conn.inbuf) < U32.size + length:
                return
            body = bytes(conn.inbuf[U32.size:U32.size + length])
            del conn.inbuf[:U32.size + length]
            self._handle_request(conn, body)

    def _handle_request(self, conn, body):
        op, fields = decode_body(body)
        if op == OP_SET:
            key, value = expect_fields(fields, 2, "set")
            self._reply(conn, *self._put(key, value))
        elif op == OP_GET:
            key, wait = expect_fields(fields, 2, "get")
            if key in self._data:
                self._reply(conn, ST_OK, self._data[key])
            else:
                conn.waiting = (key, time.monotonic() + F64.unpack(wait)[0])
                self._waiters.setdefault(key, []).append(conn)
        elif op == OP_ADD:
            key, amount = expect_fields(fields, 2, "add")
            try:
                total = int(self._data.get(key, b"0")) + I64.unpack(amount)[0]
            except ValueError:
                self._reply(conn, ST_ERROR, b"add: the key holds a value that is not an integer")
                return
            status, *error = self._put(key, str(total).encode())
            self._reply(conn, status, *(error or [I64.pack(total)]))
        elif op == OP_CHECK:
            self._reply(conn, ST_OK, b"\x01" if all(k in self._data for k in fields) else b"\x00")
        else:
            raise ProtocolError(f"unknown operation {op}")

    def _put(self, key, value):
        """Stores key = value unless the store would then hold more than max_bytes; (status, *fields)."""
        old = self._data.get(key)
        total = self._bytes + len(key) + len(value) - (0 if old is None else len(key) + len(old))
        if total > self._max_bytes:
            return ST_ERROR, (f"the store is full: writing {len(value)} bytes under {key[:80]!r} would make "
                               f"it hold {total} bytes, over its cap of {self._max_bytes} (max_bytes= or "
                               f"{MAX_BYTES_ENV} on rank 0)").encode()
        self._data[key] = value
        self._bytes = total
        for conn in self._waiters.pop(key, ()):
            conn.waiting = None
            self._reply(conn, ST_OK, value)
        return (ST_OK,)

    def on_tick(self, now):
        for key, conns in list(self._waiters.items()):
            for conn in [c for c in conns if c.waiting[1] <= now]:
                conns.remove(conn)
                conn.waiting = None
                self._reply(conn, ST_TIMEOUT)
            if not conns:
                del self._waiters[key]

    def _reply(self, conn, status, *fields):
        self.send(conn, encode_frame(status, *fields))


def max_bytes_setting(max_bytes):
    if max_bytes is None:
        max_bytes = settings.get(MAX_BYTES_ENV)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
    return max_bytes


def check_wildcard(host, secret):
    """Without a secret anyone who reaches the port can join the job: refuse to offer that on every interface
    unless PYCOLL_ALLOW_INSECURE=1 says so, and warn when it is offered beyond this host."""
    if secret is not None:
        return host
    address = _address(host)
    if address is None:
        return host  # _listen says what is wrong with it
    insecure_ok = settings.get("PYCOLL_ALLOW_INSECURE")
    if address.is_unspecified and not insecure_ok:
        raise PycollError(f"refusing to host the rendezvous store on the wildcard address {host} without a "
                          "secret: anyone who can reach it could join the job. Set PYCOLL_SECRET to the same "
                          "value on every rank (pycoll run does this), or PYCOLL_ALLOW_INSECURE=1 to allow it")
    if not address.is_loopback and not _warned_insecure:
        _warned_insecure.append(host)
        log.warning("the rendezvous store listens on %s without a secret: anyone who can reach that address "
                    "can join the job, read its addresses and feed it data; set PYCOLL_SECRET", host)
    return host


_warned_insecure = []  # warn once per process


def _address(host):
    """``host``'s first address (an ipaddress object), or None when it does not resolve."""
    try:
        return ipaddress.ip_address(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, ValueError):
        return None


def is_loopback(host):
    address = _address(host)
    return address is not None and address.is_loopback


def _listen(host, port):
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        return socket.create_server(address, family=family, backlog=1024)
    except OSError as exc:
        raise PycollError(f"cannot host the rendezvous store on {host}:{port}: {exc} (is another job or "
                          "torchrun's agent using that port?)") from None
