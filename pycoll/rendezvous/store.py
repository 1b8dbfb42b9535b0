"""Key-value stores for rendezvous: ranks publish small values (addresses, ids) and wait for each other's.

TCPStore: rank 0 hosts a server in a daemon thread; every rank (rank 0 included) is a client of it.
FileStore: a directory on a filesystem all ranks share (mode 0700, files 0600, values HMAC'd with a secret).
gather(): every rank publishes one value and collects everyone's.

TCPStore protocol: a connection opens with the handshake of pycoll.rendezvous.handshake (magic, version, optional mutual
HMAC authentication), then carries frames: length u32 (big-endian, at most MAX_FRAME_BYTES) + body, where a
body is a one-byte code (operation or reply status) followed by fields, each a u32 length and its bytes.
"""

import contextlib
import fcntl
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import socket
import struct
import threading
import time

from pycoll.rendezvous import handshake, listener, user_secret
from pycoll.errors import AuthenticationError, PeerFailure, PycollError, Timeout

log = logging.getLogger("pycoll")

MAX_KEY_BYTES = 4096
MAX_VALUE_BYTES = 64 << 20
MAX_FRAME_BYTES = MAX_VALUE_BYTES + MAX_KEY_BYTES + 64
DEFAULT_MAX_BYTES = 64 << 20  # all keys and values together (a stranger must not fill rank 0's memory)
MAX_BYTES_ENV = "PYCOLL_STORE_MAX_BYTES"
MAX_CLIENTS = 4096  # admitted connections; those still in the handshake are bounded apart (pycoll.rendezvous.listener)
AUTH_FAILURE_KEY = "pycoll/auth-failure"  # set by the server when a rank fails the secret check

_U32 = struct.Struct("!I")
_I64 = struct.Struct("!q")
_F64 = struct.Struct("!d")

_OP_SET, _OP_GET, _OP_ADD, _OP_CHECK = 1, 2, 3, 4
_ST_OK, _ST_TIMEOUT, _ST_ERROR = 0, 1, 2

WATCH_INTERVAL = 0.2  # how often a rank waiting on the rendezvous checks for failures elsewhere
FAILURE_GRACE = 1.0  # seconds a failed rendezvous's store stays up for ranks that have not connected yet
_REPLY_MARGIN = 5.0  # extra client patience on top of a server-side wait, so the server's reply arrives first
CLOSE_LINGER = 5.0  # the most a closing server waits for its clients (capped by the store's timeout)


class ProtocolError(PycollError):
    """A store frame broke the protocol."""


def _encode_frame(code, *fields):
    body = bytes([code]) + b"".join(_U32.pack(len(f)) + f for f in fields)
    return _U32.pack(len(body)) + body


def _decode_body(body):
    if not body:
        raise ProtocolError("empty frame")
    fields, pos = [], 1
    while pos < len(body):
        if pos + _U32.size > len(body):
            raise ProtocolError("truncated field length")
        (n,) = _U32.unpack_from(body, pos)
        pos += _U32.size
        if pos + n > len(body):
            raise ProtocolError(f"field of {n} bytes overruns the frame")
        fields.append(body[pos:pos + n])
        pos += n
    return body[0], fields


def _fields(fields, count, op):
    if len(fields) != count:
        raise ProtocolError(f"operation {op} takes {count} fields, got {len(fields)}")
    return fields


def _key_bytes(key):
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    raw = key.encode()
    if not raw or len(raw) > MAX_KEY_BYTES:
        raise ValueError(f"key must be 1 to {MAX_KEY_BYTES} bytes of UTF-8, got {len(raw)}")
    return raw


def _value_bytes(value):
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"value must be bytes, got {type(value).__name__}")
    raw = bytes(value)
    if len(raw) > MAX_VALUE_BYTES:
        raise ValueError(f"value must be at most {MAX_VALUE_BYTES} bytes, got {len(raw)}")
    return raw


def _check_timeout(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return float(value)


def _key_list(keys):
    return [keys] if isinstance(keys, str) else list(keys)


class _StoreServer(listener.HandshakeServer):
    """The store's server on the shared non-blocking core (pycoll.rendezvous.listener). Holds at most ``max_bytes`` of
    keys and values. A client whose HELLO claims a rank and that fails the secret check is recorded under
    AUTH_FAILURE_KEY, which every waiting rank watches, so the whole job fails fast and says who."""

    def __init__(self, host, port, secret, handshake_timeout, max_bytes, secret_file):
        super().__init__(_listen(host, port), secret=secret, handshake_timeout=handshake_timeout, name="store")
        self._secret_file = secret_file
        self.port = self._listener.getsockname()[1]
        self._max_bytes = max_bytes
        self._data = {}
        self._bytes = 0  # keys and values held
        self._waiters = {}  # key -> connections whose GET waits for it
        self._idle = threading.Event()  # set while no client is connected
        self._idle.set()
        # Sent in the server's Hello; a client's later connections (one per thread) present it back, so that
        # a closing server still serves its own clients and a restarted one is noticed.
        self.instance = secrets.token_hex(8)
        self._closing = False
        self._failed_at = None  # when a rank failed the secret check (the rendezvous cannot succeed)
        self.start()

    def stop(self, linger):
        """Refuses new clients at once (a client of the next rendezvous must not see this one's keys; it
        retries until the next server is up), then stops once every client has disconnected, or after
        ``linger`` seconds: ranks still reading the store when rank 0 finishes must not lose it."""
        self._closing = True
        end = time.monotonic() + linger
        if self._failed_at is not None:
            # Ranks still starting learn why the job failed instead of timing out on a store that is gone.
            time.sleep(max(min(self._failed_at + FAILURE_GRACE, end) - time.monotonic(), 0.0))
        self._idle.wait(max(end - time.monotonic(), 0.0))
        super().stop()

    def new_hello(self):
        return handshake.new_hello(handshake.KIND_STORE, -1, 0, self.instance, self.secret)

    def screen(self, peer):
        if self._closing and self._failed_at is None and peer.job_id != self.instance:
            raise handshake.Refused("the store is closing: it takes no new clients")

    def admit_check(self, peer):
        self.screen(peer)  # the store may have started closing while this client authenticated
        if len(self.admitted) >= MAX_CLIENTS:
            raise handshake.HandshakeError(f"{len(self.admitted)} clients are already connected")

    def on_admitted(self, conn):
        self._idle.clear()

    def on_dropped(self, conn):
        if conn.waiting is not None:
            self._waiters.get(conn.waiting[0], []).remove(conn)
        if not self.admitted:
            self._idle.set()

    def on_handshake_failed(self, conn, exc):
        peer = conn.handshake.peer
        if self._secret_file is not None:
            # Every rank of this user on this host reads the same file: only another user (or a rank that sees
            # another filesystem) fails, and a stranger must not be able to stop the job by claiming a rank.
            return
        if isinstance(exc, handshake.AuthenticationError) and peer is not None and peer.rank >= 0:
            message = (f"rank {peer.rank} failed the shared-secret check of the rendezvous store (rank 0's "
                       f"{self.name} at port {self.port}): {exc}; every rank needs the same PYCOLL_SECRET")
            self._put(AUTH_FAILURE_KEY.encode(), message.encode())
            self._failed_at = time.monotonic()

    def on_data(self, conn):
        if len(conn.inbuf) > MAX_FRAME_BYTES + _U32.size:
            raise ProtocolError(f"more than {MAX_FRAME_BYTES} bytes sent without waiting for a reply")
        while conn in self.admitted and conn.waiting is None and len(conn.inbuf) >= _U32.size:
            (length,) = _U32.unpack_from(conn.inbuf)
            if length == 0 or length > MAX_FRAME_BYTES:
                raise ProtocolError(f"frame length {length} outside [1, {MAX_FRAME_BYTES}]")
            if len(conn.inbuf) < _U32.size + length:
                return
            body = bytes(conn.inbuf[_U32.size:_U32.size + length])
            del conn.inbuf[:_U32.size + length]
            self._handle_request(conn, body)

    def _handle_request(self, conn, body):
        op, fields = _decode_body(body)
        if op == _OP_SET:
            key, value = _fields(fields, 2, "set")
            self._reply(conn, *self._put(key, value))
        elif op == _OP_GET:
            key, wait = _fields(fields, 2, "get")
            if key in self._data:
                self._reply(conn, _ST_OK, self._data[key])
            else:
                conn.waiting = (key, time.monotonic() + _F64.unpack(wait)[0])
                self._waiters.setdefault(key, []).append(conn)
        elif op == _OP_ADD:
            key, amount = _fields(fields, 2, "add")
            try:
                total = int(self._data.get(key, b"0")) + _I64.unpack(amount)[0]
            except ValueError:
                self._reply(conn, _ST_ERROR, b"add: the key holds a value that is not an integer")
                return
            status, *error = self._put(key, str(total).encode())
            self._reply(conn, status, *(error or [_I64.pack(total)]))
        elif op == _OP_CHECK:
            self._reply(conn, _ST_OK, b"\x01" if all(k in self._data for k in fields) else b"\x00")
        else:
            raise ProtocolError(f"unknown operation {op}")

    def _put(self, key, value):
        """Stores key = value unless the store would then hold more than max_bytes; (status, *fields)."""
        old = self._data.get(key)
        total = self._bytes + len(key) + len(value) - (0 if old is None else len(key) + len(old))
        if total > self._max_bytes:
            return _ST_ERROR, (f"the store is full: writing {len(value)} bytes under {key[:80]!r} would make "
                               f"it hold {total} bytes, over its cap of {self._max_bytes} (max_bytes= or "
                               f"{MAX_BYTES_ENV} on rank 0)").encode()
        self._data[key] = value
        self._bytes = total
        for conn in self._waiters.pop(key, ()):
            conn.waiting = None
            self._reply(conn, _ST_OK, value)
        return (_ST_OK,)

    def on_tick(self, now):
        for key, conns in list(self._waiters.items()):
            for conn in [c for c in conns if c.waiting[1] <= now]:
                conns.remove(conn)
                conn.waiting = None
                self._reply(conn, _ST_TIMEOUT)
            if not conns:
                del self._waiters[key]

    def _reply(self, conn, status, *fields):
        self.send(conn, _encode_frame(status, *fields))


def _max_bytes(max_bytes):
    if max_bytes is None:
        text = os.environ.get(MAX_BYTES_ENV)
        try:
            max_bytes = int(text) if text else DEFAULT_MAX_BYTES
        except ValueError:
            raise ValueError(f"{MAX_BYTES_ENV} must be a number of bytes, got {text!r}") from None
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
    return max_bytes


def _check_wildcard(host, secret):
    """Without a secret anyone who reaches the port can join the job: refuse to offer that on every interface
    unless PYCOLL_ALLOW_INSECURE=1 says so, and warn when it is offered beyond this host."""
    if secret is not None:
        return host
    address = _address(host)
    if address is None:
        return host  # _listen says what is wrong with it
    insecure_ok = os.environ.get("PYCOLL_ALLOW_INSECURE") == "1"
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


class TCPStore:
    """A rendezvous store over TCP. The server (``is_server=True``, rank 0) runs in a daemon thread of this
    process; clients connect with retries until ``timeout``, since the server may start later. With ``secret``
    every connection authenticates both ways before any operation. ``port=0`` on the server picks a free port
    (see ``.port``). ``rank`` is announced in the handshake, so that the server can name a rank that fails the
    secret check. The server holds at most ``max_bytes`` (default: PYCOLL_STORE_MAX_BYTES, else 64 MiB).
    ``secret_file`` names the file ``secret`` was read from when it is this user's per-host secret
    (pycoll.rendezvous.user_secret): errors then point to it, and a client failing the secret check is only
    logged, never recorded as the job's failure, since only another user's process can hold another secret."""

    def __init__(self, host, port, *, is_server, timeout=300.0, secret=None, handshake_timeout=5.0, rank=None,
                 max_bytes=None, secret_file=None):
        if not isinstance(host, str) or not host:
            raise TypeError(f"host must be a non-empty str, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int):
            raise TypeError(f"port must be an int, got {type(port).__name__}")
        if not (0 <= port < 65536) or (port == 0 and not is_server):
            raise ValueError(f"port must be in [1, 65535] (0 only for the server), got {port}")
        if secret is not None and not isinstance(secret, bytes):
            raise TypeError(f"secret must be bytes or None, got {type(secret).__name__}")
        self.host = host
        self.timeout = _check_timeout("timeout", timeout)
        self._secret = secret
        self._secret_file = secret_file
        self._rank = -1 if rank is None else rank
        self._instance = ""  # the server's, learnt on the first connection
        self._lock = threading.Lock()  # guards _socks and _closed
        self._local = threading.local()
        self._socks = []
        self._closed = False
        self._server = (_StoreServer(_check_wildcard(host, secret), port, secret, handshake_timeout,
                                     _max_bytes(max_bytes), secret_file) if is_server else None)
        self.port = self._server.port if self._server is not None else port
        try:
            self._socket()  # connect now, so that a missing server or a wrong secret fails here
        except BaseException:
            self.close()
            raise

    def _connect(self):
        deadline = time.monotonic() + self.timeout
        delay, last_error = 0.02, None
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
            time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
            delay = min(delay * 2, 1.0)

    def _try_connect(self, deadline):
        sock = socket.create_connection((self.host, self.port), timeout=max(deadline - time.monotonic(), 0.001))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = handshake.new_hello(handshake.KIND_STORE, self._rank, 0, self._instance, self._secret)
            server = handshake.client_handshake(sock, hello, self._secret, deadline, self._check_instance)
            self._instance = server.job_id
            return sock
        except BaseException as exc:
            sock.close()
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

    def _check_instance(self, server):
        if self._instance and server.job_id != self._instance:
            raise PeerFailure(f"the rendezvous store at {self.host}:{self.port} is a new one: rank 0 restarted "
                              "its store (or another job took the port)", rank=0)

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
        frame = _encode_frame(op, *fields)
        self._check_open()
        sock = self._socket()
        sock.settimeout(self.timeout if wait is None else wait + _REPLY_MARGIN)
        try:
            sock.sendall(frame)
            (length,) = _U32.unpack(self._recv(sock, _U32.size))
            if length == 0 or length > MAX_FRAME_BYTES:
                raise ProtocolError(f"the store sent a frame of {length} bytes")
            status, reply = _decode_body(self._recv(sock, length))
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
        if status == _ST_ERROR:
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
        self._request(_OP_SET, _key_bytes(key), _value_bytes(value))

    def get(self, key, timeout=None):
        """The value of ``key``, waiting up to ``timeout`` seconds (default: the store's) for it to be set."""
        wait = self.timeout if timeout is None else _check_timeout("timeout", timeout)
        status, reply = self._request(_OP_GET, _key_bytes(key), _F64.pack(wait), wait=wait)
        if status == _ST_TIMEOUT:
            raise Timeout(f"key {key!r} was not set within {wait:g} s")
        return reply[0]

    def add(self, key, n):
        """Adds ``n`` to the integer at ``key`` (0 when unset) and returns the new value."""
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, got {type(n).__name__}")
        _, reply = self._request(_OP_ADD, _key_bytes(key), _I64.pack(n))
        return _I64.unpack(reply[0])[0]

    def check(self, keys):
        """Whether every key in ``keys`` (a str or an iterable of str) is set, without waiting."""
        _, reply = self._request(_OP_CHECK, *[_key_bytes(k) for k in _key_list(keys)])
        return reply[0] == b"\x01"

    def close(self, linger=None):
        """Closes the connections and, on the server's rank, stops the server once the other ranks have closed
        theirs, waiting at most ``linger`` seconds (default: min(timeout, 5)). Idempotent."""
        with self._lock:
            self._closed = True
            socks, self._socks = self._socks, []
        for sock in socks:
            sock.close()
        if self._server is not None:
            self._server.stop(min(self.timeout, CLOSE_LINGER) if linger is None else _check_timeout("linger", linger))
            self._server = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FileStore:
    """A rendezvous store in a directory every rank can see. One file per key (named by the key's SHA-256),
    written to a temporary name and renamed into place so readers never see half a value; add() serialises
    on an flock'ed lock file; get() polls with exponential backoff.

    The directory is created mode 0700; an existing one must belong to this user and be closed to others
    (else PycollError), and every file is created 0600, so other users can neither read the values (the unique
    id among them) nor plant their own. With ``secret`` (bytes, the same on every rank) each value is stored
    with an HMAC-SHA256 of its key and bytes, and a value that fails it raises pycoll.AuthenticationError:
    what another process with write access there (a shared filesystem's other hosts) writes is refused."""

    _LOCK_NAME = ".lock"
    _MAC_LABEL = b"pycoll-filestore"

    def __init__(self, path, timeout=300.0, *, secret=None):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        if secret is not None and not isinstance(secret, bytes):
            raise TypeError(f"secret must be bytes or None, got {type(secret).__name__}")
        self.path = os.fspath(path)
        self.timeout = _check_timeout("timeout", timeout)
        self._secret = secret or None
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        os.close(user_secret.open_private_directory(
            self.path, follow_symlinks=True, remedy="chmod 700 it, or name a new directory (FileStore creates it)"))

    def with_secret(self, secret):
        """This store authenticated with ``secret`` where it has none of its own (init's secret or PYCOLL_SECRET
        reaches a FileStore handed to init, as it reaches the TCP store)."""
        return self if self._secret is not None or secret is None else FileStore(self.path, self.timeout,
                                                                                 secret=secret)

    def _file(self, raw_key):
        return os.path.join(self.path, hashlib.sha256(raw_key).hexdigest())

    def _mac(self, raw_key, value):
        return hmac.new(self._secret, self._MAC_LABEL + _U32.pack(len(raw_key)) + raw_key + value,
                        hashlib.sha256).digest()

    def _write(self, raw_key, value):
        target = self._file(raw_key)
        temporary = f"{target}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write((self._mac(raw_key, value) if self._secret else b"") + value)
        os.replace(temporary, target)

    def _read(self, raw_key):
        try:
            fd = os.open(self._file(raw_key), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        if self._secret is None:
            return data
        mac, value = data[:hashlib.sha256().digest_size], data[hashlib.sha256().digest_size:]
        if not hmac.compare_digest(mac, self._mac(raw_key, value)):
            raise AuthenticationError(f"the FileStore value of key {raw_key.decode(errors='replace')!r} in "
                                      f"{self.path} fails the secret check: written with another secret "
                                      "(every rank needs the same one) or by another process")
        return value

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(os.path.join(self.path, self._LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def set(self, key, value):
        self._write(_key_bytes(key), _value_bytes(value))

    def get(self, key, timeout=None):
        wait = self.timeout if timeout is None else _check_timeout("timeout", timeout)
        raw_key = _key_bytes(key)
        deadline = time.monotonic() + wait
        delay = 0.001
        while True:
            value = self._read(raw_key)
            if value is not None:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"key {key!r} was not set within {wait:g} s")
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.1)

    def add(self, key, n):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, got {type(n).__name__}")
        raw_key = _key_bytes(key)
        with self._locked():
            current = self._read(raw_key)
            try:
                total = int(current or b"0") + n
            except ValueError:
                raise PycollError(f"add: key {key!r} holds a value that is not an integer") from None
            self._write(raw_key, str(total).encode())
        return total

    def check(self, keys):
        return all(os.path.exists(self._file(_key_bytes(k))) for k in _key_list(keys))

    def close(self):
        """Nothing to release; present so both stores are used alike."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def gather(store, prefix, rank, world_size, value, timeout, ranks=None):
    """Every rank publishes ``value`` under ``prefix``; returns all ranks' values in rank order (only those of
    ``ranks``, when given: the ranks taking part, ``rank`` among them). A rank missing after ``timeout`` seconds
    raises Timeout naming it and those that joined."""
    timeout = _check_timeout("timeout", timeout)
    ranks = range(world_size) if ranks is None else ranks
    store.set(f"{prefix}/{rank}", value)
    deadline = time.monotonic() + timeout
    values = []
    for r in ranks:
        try:
            values.append(store.get(f"{prefix}/{r}", timeout=max(deadline - time.monotonic(), 0.0)))
        except Timeout:
            joined = [q for q in ranks if store.check(f"{prefix}/{q}")]
            missing = [q for q in ranks if q not in joined]
            raise Timeout(missing_ranks_message(missing, joined, timeout),
                          rank=missing[0] if missing else None) from None
    return values


def missing_ranks_message(missing, present, timeout, failed="did not join", present_label="joined"):
    """ "rank 3 did not join within 60 s; joined: 0, 1, 2" (shared with connections.py)."""
    subject = f"rank {missing[0]}" if len(missing) == 1 else "ranks " + ", ".join(map(str, missing))
    present_text = ", ".join(map(str, present)) if present else "none"
    return f"{subject} {failed} within {timeout:g} s; {present_label}: {present_text}"


def store_port(master_port, env=None):
    """The port rank 0 hosts the store on: MASTER_PORT, or MASTER_PORT + 1 under torchrun when its agent's
    own store already listens on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True)."""
    env = os.environ if env is None else env
    agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() in ("1", "true")
    return master_port + 1 if agent_store else master_port


def create_store(launch, *, timeout=300.0, secret=None, env=None):
    """The job's TCPStore from a LaunchEnv: hosted by rank 0, at the launcher's rendezvous address. Without a
    secret, a job whose ranks all run on this host (a loopback address, or the launcher says so) uses this
    user's per-host secret (pycoll.rendezvous.user_secret), so that other local users can neither read the
    store nor join; a job over several hosts needs PYCOLL_SECRET, and is warned without one."""
    port = store_port(launch.master_port, env)
    secret_file = None
    if secret is None and (launch.single_host or is_loopback(launch.master_addr)):
        secret, secret_file = user_secret.read_or_create(port), user_secret.secret_path(port)
    return TCPStore(launch.master_addr, port, is_server=launch.rank == 0, timeout=timeout, secret=secret,
                    rank=launch.rank, secret_file=secret_file)


RENDEZVOUS_PREFIX = "pycoll/rdv"


class Rendezvous:
    """One rendezvous's view of a store, used like a store: every key lives under pycoll/rdv/<generation>/,
    so an init never reads what an earlier init of the job left in the same store (on a FileStore, or on a
    TCPStore still shutting down). check_failures() raises what was recorded for the whole job: a rank that
    failed the secret check at the store's server or at a peer."""

    def __init__(self, store, generation):
        self.store, self.generation = store, generation
        self.prefix = f"{RENDEZVOUS_PREFIX}/{generation}"
        self.timeout = store.timeout

    def _key(self, key):
        _key_bytes(key)
        return f"{self.prefix}/{key}"

    def set(self, key, value):
        self.store.set(self._key(key), value)

    def get(self, key, timeout=None):
        """Like the store's get, but a failure recorded for the job ends the wait at once."""
        wait = self.timeout if timeout is None else _check_timeout("timeout", timeout)
        try:
            return get_watching(self.store, self._key(key), time.monotonic() + wait, self.check_failures)
        except Timeout:
            raise Timeout(f"key {key!r} was not set within {wait:g} s") from None

    def add(self, key, n):
        return self.store.add(self._key(key), n)

    def check(self, keys):
        return self.store.check([self._key(k) for k in _key_list(keys)])

    def check_failures(self):
        """Raises pycoll.AuthenticationError if one was recorded; PeerFailure(rank=0) if the store is gone."""
        for key in (AUTH_FAILURE_KEY, self._key(AUTH_FAILURE_KEY)):  # the server's record, then the ranks'
            if self.store.check(key):
                raise AuthenticationError(self.store.get(key, 0.0).decode(errors="replace"))

    def record_failure(self, exc):
        self.set(AUTH_FAILURE_KEY, str(exc).encode())

    def close(self):
        """The store belongs to whoever opened it."""


def get_watching(store, key, deadline, check):
    """store.get(key) in slices of WATCH_INTERVAL with ``check()`` (which raises to give up) in between, so that
    a failure elsewhere ends the wait at once; Timeout at ``deadline`` (time.monotonic())."""
    while True:
        remaining = deadline - time.monotonic()
        try:
            return store.get(key, timeout=max(min(remaining, WATCH_INTERVAL), 0.0))
        except Timeout:
            if remaining <= WATCH_INTERVAL:
                raise
        check()


def rendezvous(launch, store=None, *, timeout=300.0, secret=None, env=None):
    """(the store this process opened or None, this rendezvous's Rendezvous or None for a single rank).

    Every rank's init adds one to a counter: the n-th init of a job on one store is generation
    (n - 1) // world_size. Rank 0's own TCPStore is new, so there the generation must be 0: a rank that gets
    more reached the previous rendezvous's server while rank 0 was closing it, and reconnects until the new
    one is up; so does one whose first request that closing server cut off."""
    if store is not None:
        if isinstance(store, FileStore):
            store = store.with_secret(secret)
        return None, Rendezvous(store, _next_generation(store, launch.world_size))
    if launch.world_size == 1:
        return None, None
    deadline = time.monotonic() + timeout
    while True:
        own = create_store(launch, timeout=timeout, secret=secret, env=env)
        try:
            generation = _next_generation(own, launch.world_size)
        except PeerFailure:
            own.close(linger=0)
            if launch.rank == 0 or time.monotonic() > deadline:
                raise
            generation = None
        except BaseException:
            own.close(linger=0)
            raise
        if generation == 0:
            return own, Rendezvous(own, 0)
        own.close(linger=0)
        if time.monotonic() > deadline:
            raise Timeout(f"the rendezvous store at {own.host}:{own.port} still served a finished rendezvous "
                          f"after {timeout:g} s (rank 0 did not close its previous communicator)")
        time.sleep(0.05)


def _next_generation(store, world_size):
    return (store.add(f"{RENDEZVOUS_PREFIX}/arrivals", 1) - 1) // world_size
