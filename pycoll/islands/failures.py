"""How a failure reaches the ranks of a device island that wait inside their vendor's collective. A vendor does
not notice a peer that died (its kernel waits on until the deadline), and it cannot hear of a failure pycoll
saw elsewhere (a leader whose step between islands failed); pycoll's host transports notice both. So each rank
of a device island of several ranks runs one thread that blocks on two signals from its island's peers (every
one on this host):

- a peer's process exited: its pidfd (os.pidfd_open) becomes readable;
- a peer failed out of a step with a job-wide error (PeerFailure, Timeout): it sends one datagram, saying why,
  to each peer's socket (a Unix datagram socket in the abstract namespace, named at random at init).

The abstract namespace is shared by every user of the network namespace, and its names are listed in
/proc/net/unix: a name another process holds is drawn again, and a datagram is heard only when the kernel says
(SCM_CREDENTIALS) that a process of this user sent it, so another user cannot abort the island's collectives.

Either one aborts this rank's vendor communicator (VendorEngine.request_abort): the collective waiting on it
raises PeerFailure at once rather than Timeout at the deadline. A peer that closes says goodbye first, so its
exit afterwards is no failure. A peer in another pid or network namespace cannot be watched this way: it is
reached at the deadline, as before.
"""

from __future__ import annotations

import errno
import os
import secrets
import select
import socket
import struct
import threading

from pycoll.errors import PycollError

_GOODBYE = b"\0goodbye"
_DATAGRAM_BYTES = 4096
_BIND_ATTEMPTS = 8  # names drawn before giving up: one another process holds is drawn again
_UCRED = struct.Struct("iII")  # struct ucred: pid, uid, gid


def _namespace(kind):
    """The inode of this process's `kind` namespace ("pid", "net"), or None where /proc does not say."""
    try:
        return os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return None


def _bind_fresh_name(sock):
    """Binds sock to a new random abstract name; returns it."""
    for _ in range(_BIND_ATTEMPTS):
        address = b"\0pycoll-island-" + secrets.token_hex(16).encode()
        try:
            sock.bind(address)
            return address
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
    raise PycollError(f"cannot bind this rank's island socket: the {_BIND_ATTEMPTS} random names drawn for it were "
                      "all taken in the abstract namespace, so another process is taking them as they are drawn")


class IslandWatch:
    """This rank's watch over its island peers. `identity` is what the peers need to watch this rank and to reach
    it: (rank, pid, pid namespace, network namespace, socket address), all-gathered at init; start() then
    watches the peers' identities."""

    def __init__(self, rank):
        self.rank = rank
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # every datagram says who sent it
        address = _bind_fresh_name(self._sock)
        self.identity = (rank, os.getpid(), _namespace("pid"), _namespace("net"), address)
        self._peers = []  # the addresses a notice goes to
        self._stop_read, self._stop_write = os.pipe()
        self._thread = None
        self._pidfds = {}  # fd -> rank

    def start(self, peers, on_failure):
        """Watch `peers` (their identities); on the first failure, on_failure(rank or -1, reason) runs on the
        watch's thread, once."""
        pid_ns, net_ns = _namespace("pid"), _namespace("net")
        for rank, pid, their_pid_ns, their_net_ns, address in peers:
            if net_ns is not None and their_net_ns == net_ns:
                self._peers.append(address)
            if pid_ns is not None and their_pid_ns == pid_ns:
                try:
                    self._pidfds[os.pidfd_open(pid)] = rank
                except (OSError, AttributeError):  # gone already (then the host step notices), or no pidfds
                    pass
        self._thread = threading.Thread(target=self._watch, args=(on_failure,), name="pycoll-island-watch",
                                        daemon=True)
        self._thread.start()

    def _watch(self, on_failure):
        poller = select.poll()
        for fd in (self._stop_read, self._sock.fileno(), *self._pidfds):
            poller.register(fd, select.POLLIN)
        departed = set()
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._stop_read in ready:
                return
            # The notices first, whatever woke the thread: a goodbye is sent before its sender exits.
            while (notice := self._receive()) is not None:
                if notice.startswith(_GOODBYE):
                    departed.add(int(notice[len(_GOODBYE):]))
                    continue
                rank, _, reason = notice.decode("utf-8", "replace").partition(" ")
                on_failure(int(rank), reason)
                return
            for fd in ready & self._pidfds.keys():
                poller.unregister(fd)
                rank = self._pidfds[fd]
                if rank not in departed:
                    on_failure(rank, f"rank {rank} of its island is gone: its process exited (noticed by rank "
                                     f"{self.rank})")
                    return

    def _receive(self):
        """The next datagram a process of this user sent (another user's are dropped), or None."""
        while True:
            try:
                data, ancillary, _, _ = self._sock.recvmsg(_DATAGRAM_BYTES, socket.CMSG_SPACE(_UCRED.size),
                                                           socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            for level, kind, value in ancillary:
                if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS) and len(value) >= _UCRED.size \
                        and _UCRED.unpack_from(value)[1] == os.geteuid():
                    return data

    def _send(self, message):
        for address in self._peers:
            try:
                self._sock.sendto(message, socket.MSG_DONTWAIT, address)
            except OSError:  # a peer gone or its queue full: it fails on its own
                pass

    def notify(self, failed_rank, reason):
        """Tell every peer that this rank failed out of a step: their waits inside the vendor end now.
        `failed_rank`: the rank that failed first, as far as this rank knows (-1: unknown)."""
        self._send(f"{failed_rank} {reason}".encode("utf-8", "replace")[:_DATAGRAM_BYTES])

    def close(self):
        """Say goodbye (this rank's exit after it is no failure), stop the thread. Idempotent."""
        if self._sock.fileno() < 0:
            return
        self._send(_GOODBYE + str(self.rank).encode())
        os.write(self._stop_write, b"x")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        for fd in (*self._pidfds, self._stop_read, self._stop_write):
            os.close(fd)
        self._pidfds = {}
        self._sock.close()
