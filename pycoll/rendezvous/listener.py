"""The non-blocking server core of the rendezvous store (store_server.py): one thread, one selector, every
handshake a state machine (handshake.ServerHandshake), so thousands of silent connections cost a few hundred
bytes each and no thread.

Defences against floods of connections that never authenticate:
- connections still in the handshake ("pending") are bounded apart from admitted ones; at the bound the
  oldest pending connection that has sent nothing is dropped first (then the oldest pending one), never an
  admitted client, so a rank that has already spoken is not pushed out by idle sockets;
- every pending connection has a short handshake deadline;
- when accept() runs out of file descriptors (EMFILE/ENFILE) the oldest pending connection is dropped to
  make room, or, with none to drop, the listener is left unpolled for a moment instead of spinning;
- warnings are rate-limited per kind for the whole process (every server it runs, one after another or at
  once, shares the limit), with a count of those not logged;
- a client the server turns away by design (a closing store refusing the next rendezvous's ranks, which
  retry) is no misbehaviour: logged at INFO, never as a warning.
"""

import collections
import contextlib
import errno
import logging
import re
import resource
import selectors
import socket
import threading
import time

from pycoll.rendezvous import handshake

log = logging.getLogger("pycoll")

SWEEP_INTERVAL = 0.2  # how often the loop expires handshakes and runs its periodic work
MAX_PENDING = 1024  # connections in the handshake at once, at most (less under a low RLIMIT_NOFILE)
ACCEPT_BATCH = 128  # accepts per loop turn, so that connections already accepted are served in between
ACCEPT_PAUSE = 0.25  # seconds the listener rests after accept() failed with no pending connection to drop
LOG_INTERVAL = 5.0  # at most one warning per kind per this many seconds
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)


def pending_limit():
    """MAX_PENDING, or a quarter of the file-descriptor limit when that is lower: pending connections must
    leave descriptors for everything else the process does."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_PENDING
    return max(4, min(MAX_PENDING, soft // 4))


class RateLimitedLog:
    """At most one record per kind per ``interval`` seconds; the next one says how many were not logged.
    Thread-safe: PROCESS_LOG, the servers' one, is shared by every server thread of the process."""

    def __init__(self, interval=LOG_INTERVAL):
        self._interval = interval
        self._last = {}
        self._suppressed = collections.Counter()
        self._lock = threading.Lock()

    def log(self, level, kind, message):
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self._interval:
                self._suppressed[kind] += 1
                return
            self._last[kind] = now
            suppressed = self._suppressed.pop(kind, 0)
        if suppressed:
            message += f" ({suppressed} more like this in the last {now - last:.0f} s not logged)"
        log.log(level, "%s", message)


# Every server of the process logs through this one: each init makes a new store server, so a limit per
# server would let a warning repeated once per init through unlimited.
PROCESS_LOG = RateLimitedLog()


def reason_kind(reason):
    """The part of a reason that names its kind: the text before the first number or quote ("bad magic",
    "job id"), so that a flood of one kind with varying details is rate-limited as one."""
    return re.split(r"['\"\d]", reason, maxsplit=1)[0]


class Connection:
    __slots__ = ("sock", "peer", "inbuf", "outbuf", "handshake", "deadline", "events", "heard", "waiting")

    def __init__(self, sock, peer, handshake_, deadline):
        self.sock, self.peer, self.handshake, self.deadline = sock, peer, handshake_, deadline
        self.inbuf, self.outbuf = bytearray(), bytearray()
        self.events = selectors.EVENT_READ
        self.heard = False  # whether it has sent anything (a silent one is evicted first)
        self.waiting = None  # for the store: (key, deadline) of a GET waiting for its key


class HandshakeServer:
    """Accepts on ``listener`` and runs each connection's handshake without blocking. Subclasses say what
    Hello to answer with and what to do with admitted connections (the ``on_*`` hooks, run on the loop's
    thread). A misbehaving connection is logged (rate-limited) and dropped; nothing it sends stops the loop."""

    def __init__(self, listener, *, secret, handshake_timeout, name):
        self.secret = secret
        self.handshake_timeout = handshake_timeout
        self.name = name
        self.max_pending = pending_limit()
        self.log = PROCESS_LOG
        self._listener = listener
        listener.setblocking(False)
        self._listening = True
        self._resume_at = None  # when a paused listener is polled again
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, "listener")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._pending = collections.OrderedDict()  # connection -> None, oldest first
        self.admitted = set()
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name=f"pycoll-{name}", daemon=True)

    # -- hooks ----------------------------------------------------------------------------------------------
    def new_hello(self):
        raise NotImplementedError

    def screen(self, peer):
        """Raises HandshakeError to turn a client away as soon as its Hello arrives, unanswered."""

    def admit_check(self, peer):
        """Raises HandshakeError to refuse an authenticated client."""

    def on_admitted(self, conn):
        """The ACK is queued; ``conn.inbuf`` may already hold what the client sent after it."""

    def on_data(self, conn):
        """An admitted connection received bytes (in ``conn.inbuf``)."""

    def on_handshake_failed(self, conn, exc):
        """A pending connection failed; ``conn.handshake.peer`` is its Hello when it sent one."""

    def on_dropped(self, conn):
        """An admitted connection is gone."""

    def on_tick(self, now):
        """Runs every loop turn (at least every SWEEP_INTERVAL seconds)."""

    # -- control, from any thread ---------------------------------------------------------------------------
    def start(self):
        self._thread.start()

    def wake(self):
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def stop(self):
        self._stopping = True
        self.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=10.0)
        elif self._thread.ident is None:  # never started: release what the loop would have
            self._cleanup()
        self._wake_w.close()

    # -- the loop -------------------------------------------------------------------------------------------
    def _serve(self):
        try:
            while not self._stopping:
                ready = self._selector.select(timeout=SWEEP_INTERVAL)
                accept = False
                # Connections first: one already accepted finishes its handshake before new arrivals can
                # push it out of the pending table.
                for key, mask in ready:
                    if key.data == "listener":
                        accept = True
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    elif key.data in self._pending or key.data in self.admitted:
                        self._on_event(key.data, mask)
                if accept and self._listening:
                    self._accept()
                now = time.monotonic()
                self._expire(now)
                self._resume_listener(now)
                self.on_tick(now)
        finally:
            self._cleanup()

    def _cleanup(self):
        for conn in list(self._pending) + list(self.admitted):
            self.drop(conn, None)
        self._close_listener()
        self._selector.close()
        self._wake_r.close()

    def _close_listener(self):
        if self._listening:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._listener)
        self._listening = False
        self._listener.close()
        self._listener = None

    def _accept(self):
        for _ in range(ACCEPT_BATCH):
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_FDS and self._pending:
                    self.drop(self._evictee(), f"dropped to free a file descriptor ({exc.strerror})")
                    continue
                self.log.log(logging.WARNING, "accept", f"{self.name}: accept failed: {exc}; not accepting "
                                                        f"for {ACCEPT_PAUSE:g} s")
                self._pause_listener()
                return
            if len(self._pending) >= self.max_pending:
                self.drop(self._evictee(), f"dropped: {len(self._pending)} connections are already in the "
                                           "handshake (oldest silent one goes first)")
            self._register(sock, peer)

    def _register(self, sock, peer):
        sock.setblocking(False)
        conn = Connection(sock, peer, handshake.ServerHandshake(self.new_hello(), self.secret, self.admit_check,
                                                                self.screen),
                          time.monotonic() + self.handshake_timeout)
        self._pending[conn] = None
        self._selector.register(sock, conn.events, conn)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _evictee(self):
        return next((c for c in self._pending if not c.heard), next(iter(self._pending)))

    def _pause_listener(self):
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self._listener)
        self._listening = False
        self._resume_at = time.monotonic() + ACCEPT_PAUSE

    def _resume_listener(self, now):
        if self._resume_at is not None and now >= self._resume_at:
            self._resume_at = None
            self._listening = True
            self._selector.register(self._listener, selectors.EVENT_READ, "listener")

    def _expire(self, now):
        for conn in [c for c in self._pending if c.deadline <= now]:
            self.drop(conn, f"did not finish the handshake within {self.handshake_timeout:g} s", logging.INFO)

    def _on_event(self, conn, mask):
        # Any failure is about this one connection: log it and drop the connection, never the server.
        try:
            if mask & selectors.EVENT_WRITE:
                self.flush(conn)
            if mask & selectors.EVENT_READ and (conn in self._pending or conn in self.admitted):
                self._read(conn)
        except handshake.HandshakeError as exc:
            if conn in self._pending:
                self.on_handshake_failed(conn, exc)
            # Refused is the server's own choice (screen: e.g. a closing store), not the client's fault.
            self.drop(conn, str(exc), logging.INFO if isinstance(exc, handshake.Refused) else logging.WARNING)
        except Exception as exc:  # noqa: BLE001 -- junk must never take the server down
            self.drop(conn, f"unexpected {type(exc).__name__}: {exc}")

    def _read(self, conn):
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.drop(conn, f"receive failed: {exc}")
            return
        if not data:
            self._closed_by_peer(conn)
            return
        conn.heard = True
        conn.inbuf += data
        if conn in self._pending:
            conn.handshake.feed(conn.inbuf, lambda out: self.send(conn, out))
            if not conn.handshake.done:
                return
            del self._pending[conn]
            self.admitted.add(conn)
            conn.deadline = None
            self.on_admitted(conn)
        if conn.inbuf and conn in self.admitted:
            self.on_data(conn)

    def _closed_by_peer(self, conn):
        if conn in self.admitted:
            self.drop(conn, None)
            return
        hs = conn.handshake
        if hs.state == "proof" and hs.peer is not None and hs.peer.auth:
            # A client leaves after our proof only when it found our proof wrong: different secrets.
            self.on_handshake_failed(conn, handshake.AuthenticationError(
                "authentication failed: the client closed the connection on seeing the server's proof "
                "(different secrets?)"))
        self.drop(conn, "closed the connection before finishing the handshake", logging.INFO)

    def send(self, conn, data):
        conn.outbuf += data
        self.flush(conn)

    def flush(self, conn):
        if conn not in self._pending and conn not in self.admitted:
            return
        try:
            sent = conn.sock.send(conn.outbuf) if conn.outbuf else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self.drop(conn, f"send failed: {exc}")
            return
        del conn.outbuf[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0)
        if events != conn.events:
            conn.events = events
            self._selector.modify(conn.sock, events, conn)

    def release(self, conn):
        """Stops serving an admitted connection without closing its socket (handed to its owner)."""
        self.admitted.discard(conn)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)

    def drop(self, conn, reason, level=logging.WARNING):
        if reason is not None:
            self.log.log(level, (self.name, reason_kind(reason)),
                         f"{self.name}: dropping connection from {conn.peer}: {reason}")
        was_admitted = conn in self.admitted
        self._pending.pop(conn, None)
        self.release(conn)
        conn.sock.close()
        if was_admitted:
            self.on_dropped(conn)
