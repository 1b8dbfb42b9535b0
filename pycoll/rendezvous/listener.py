"""The rendezvous store's server core (store_server.py): the C bootstrap's listener (native/bootstrap/
store_listener.c, bound as pycoll._bindings.comm._StoreListener) accepts and authenticates connections in one
thread; each admitted socket is handed to a second thread, one selector serving every admitted client.

The defences against floods of connections that never authenticate are the C listener's, shared with the C
bootstrap's listeners: connections still in the handshake are bounded apart from admitted ones (at the bound
the oldest silent one is dropped first, never an admitted client); each has a short handshake deadline; when
accept() runs out of file descriptors the oldest handshake is dropped to make room, or, with none, the listener
rests a moment instead of spinning. What remains here is what Python does with its reports: warnings are
rate-limited per kind for the whole process (every server it runs, one after another or at once, shares the
limit), with a count of those not logged; a client turned away by design (a closing store refusing the next
rendezvous's ranks, which retry), a silent one or one that leaves is no misbehaviour: logged at INFO.
"""

import collections
import contextlib
import logging
import re
import resource
import selectors
import socket
import threading
import time

from pycoll._bindings.comm import _StoreListener
from pycoll.errors import PycollError

log = logging.getLogger("pycoll")

SWEEP_INTERVAL = 0.2  # how often the loop runs its periodic work
MAX_PENDING = 1024  # connections in the handshake at once, at most (less under a low RLIMIT_NOFILE)
LOG_INTERVAL = 5.0  # at most one warning per kind per this many seconds
DROP_JUNK, DROP_QUIET, DROP_AUTH = 0, 1, 2  # how the C listener classes a dropped connection (BOOT_DROP_*)


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
    __slots__ = ("sock", "peer", "rank", "inbuf", "outbuf", "events", "waiting")

    def __init__(self, sock, rank):
        self.sock, self.rank, self.peer = sock, rank, None
        with contextlib.suppress(OSError):
            self.peer = sock.getpeername()
        self.inbuf, self.outbuf = bytearray(), bytearray()
        self.events = selectors.EVENT_READ
        self.waiting = None  # for the store: (key, deadline) of a GET waiting for its key


class AdmittingServer:
    """Accepts on ``listener`` through the C listener (with ``secret``, bytes or None, and ``instance``, the
    16 bytes clients present back) and serves the admitted connections. Subclasses say what to do with them
    (the ``on_*`` hooks, run on the serving thread). A misbehaving connection is logged (rate-limited) and
    dropped; nothing it sends stops the loop."""

    def __init__(self, listener, *, secret, instance, handshake_timeout, name):
        self.secret, self.instance, self.name = secret, instance, name
        self.handshake_timeout = handshake_timeout
        self.log = PROCESS_LOG
        self._listener = listener
        listener.setblocking(False)  # the C listener accepts until none is left
        self._native = _StoreListener(self._admitted_by_c, self._dropped_by_c)
        self._reports = collections.deque()  # from the C listener's thread to the serving one
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.admitted = set()
        self._stopping = False
        self._listen_thread = threading.Thread(target=self._listen, name=f"pycoll-{name}-listener", daemon=True)
        self._thread = threading.Thread(target=self._serve, name=f"pycoll-{name}", daemon=True)

    # -- hooks ----------------------------------------------------------------------------------------------
    def on_handed_over(self, rank):
        """The C listener authenticated a client (claiming ``rank``) and hands it over; runs on the listener's
        thread, before the serving thread admits it (on_admitted) or turns it away (on_dropped)."""

    def on_admitted(self, conn):
        """A client was admitted."""

    def on_data(self, conn):
        """An admitted connection received bytes (in ``conn.inbuf``)."""

    def on_handshake_failed(self, rank, reason):
        """A client failed authentication; ``rank`` is the one it claimed (-1: none)."""

    def on_dropped(self, conn):
        """A handed-over connection is gone: dropped after admission, or turned away by admit_check."""

    def on_tick(self, now):
        """Runs every loop turn (at least every SWEEP_INTERVAL seconds)."""

    def admit_check(self, rank):
        """Raises PycollError to refuse an admitted client (it is closed)."""

    # -- control, from any thread ---------------------------------------------------------------------------
    def start(self):
        self._listen_thread.start()
        self._thread.start()

    def close_to_new(self):
        """Clients presenting no instance (a next rendezvous's) are turned away from now on; ours still come in."""
        self._native.close_to_new()

    def wake(self):
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def stop(self):
        self._stopping = True
        self._native.stop()
        with contextlib.suppress(OSError):
            # Wakes the C listener's poll at once (it would see the stop within 0.1 s); the descriptor stays
            # open until the listener has returned, so it cannot be reused under it.
            self._listener.shutdown(socket.SHUT_RDWR)
        self.wake()
        for thread in (self._listen_thread, self._thread):
            if thread.is_alive():
                thread.join(timeout=10.0)
        if self._thread.ident is None:  # never started: release what the loop would have
            self._cleanup()
        self._wake_w.close()

    # -- the C listener's thread ----------------------------------------------------------------------------
    def _listen(self):
        try:
            self._native.serve(self._listener.fileno(), self.secret, self.instance, pending_limit(),
                               self.handshake_timeout)
        except PycollError as exc:
            log.warning("%s: the listener stopped: %s", self.name, exc)

    def _admitted_by_c(self, fd, rank):
        if self._stopping:
            return False
        self.on_handed_over(rank)
        self._reports.append(("admitted", fd, rank))
        self.wake()
        return True

    def _dropped_by_c(self, rank, kind, reason):
        level = logging.INFO if kind == DROP_QUIET else logging.WARNING
        self.log.log(level, (self.name, reason_kind(reason)), f"{self.name}: dropping connection: {reason}")
        if kind == DROP_AUTH:
            self._reports.append(("auth", rank, reason))
            self.wake()

    # -- the serving loop -----------------------------------------------------------------------------------
    def _serve(self):
        try:
            while not self._stopping:
                for key, mask in self._selector.select(timeout=SWEEP_INTERVAL):
                    if key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    elif key.data in self.admitted:
                        self._on_event(key.data, mask)
                self._take_reports()
                self.on_tick(time.monotonic())
        finally:
            self._cleanup()

    def _take_reports(self):
        while self._reports:
            what, *args = self._reports.popleft()
            if what == "auth":
                self.on_handshake_failed(*args)
                continue
            fd, rank = args
            conn = Connection(socket.socket(fileno=fd), rank)
            try:
                self.admit_check(rank)
            except PycollError as exc:
                self.log.log(logging.WARNING, (self.name, reason_kind(str(exc))),
                             f"{self.name}: dropping connection from {conn.peer}: {exc}")
                conn.sock.close()
                self.on_dropped(conn)
                continue
            conn.sock.setblocking(False)
            self.admitted.add(conn)
            self._selector.register(conn.sock, conn.events, conn)
            self.on_admitted(conn)

    def _cleanup(self):
        self._native.stop()
        if self._listen_thread.is_alive():
            self._listen_thread.join(timeout=10.0)  # the C listener uses the listening socket until it returns
        while self._reports:
            what, *args = self._reports.popleft()
            if what == "admitted":
                socket.socket(fileno=args[0]).close()
        for conn in list(self.admitted):
            self.drop(conn, None)
        self._listener.close()
        self._selector.close()
        self._wake_r.close()

    def _on_event(self, conn, mask):
        # Any failure is about this one connection: log it and drop the connection, never the server.
        try:
            if mask & selectors.EVENT_WRITE:
                self.flush(conn)
            if mask & selectors.EVENT_READ and conn in self.admitted:
                self._read(conn)
        except Exception as exc:  # noqa: BLE001 -- junk must never take the server down
            self.drop(conn, str(exc) if isinstance(exc, PycollError) else f"unexpected {type(exc).__name__}: {exc}")

    def _read(self, conn):
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.drop(conn, f"receive failed: {exc}")
            return
        if not data:
            self.drop(conn, None)
            return
        conn.inbuf += data
        self.on_data(conn)

    def send(self, conn, data):
        conn.outbuf += data
        self.flush(conn)

    def flush(self, conn):
        if conn not in self.admitted:
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

    def drop(self, conn, reason, level=logging.WARNING):
        if reason is not None:
            self.log.log(level, (self.name, reason_kind(reason)),
                         f"{self.name}: dropping connection from {conn.peer}: {reason}")
        if conn not in self.admitted:
            return
        self.admitted.discard(conn)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        conn.sock.close()
        self.on_dropped(conn)
