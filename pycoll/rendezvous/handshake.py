"""The handshake that opens every rendezvous-store connection: the C bootstrap's (native/bootstrap/handshake.h,
kind BOOT_KIND_STORE), mutual HMAC-SHA256 over both sides' fresh nonces, run in C on both sides. The server side
runs in the C listener (pycoll.rendezvous.store_server); this module is the client side's entry and the errors a
failed handshake raises.

A client presents the store's instance (16 bytes, zeros on its first connection) and learns it from the reply:
a closing store still admits its own clients, and a store restarted at the same address is noticed."""

from pycoll import errors
from pycoll._bindings.comm import _STORE_INSTANCE_BYTES, _store_client_handshake
from pycoll.errors import PeerFailure, PycollError, Timeout

NO_INSTANCE = bytes(_STORE_INSTANCE_BYTES)


class HandshakeError(PycollError):
    """A connection broke the handshake protocol; it is dropped."""


class AuthenticationError(HandshakeError, errors.AuthenticationError):
    """The two sides do not share the same secret (also a pycoll.AuthenticationError)."""


class Refused(HandshakeError):
    """The server closed the connection before admitting us: it is shutting down, or dropped us to make room
    while flooded. Worth retrying, unlike other handshake errors."""


def client_handshake(sock, secret, rank, instance, deadline, what="the server"):
    """Runs the client side on a connected socket until ``deadline`` (time.monotonic()); returns the store's
    instance. ``secret``: bytes, or None for a store without one. A store that answers for another instance
    raises PeerFailure (rank 0's store restarted)."""
    timeout = sock.gettimeout()
    sock.setblocking(False)  # the C side waits with poll(), up to the deadline
    try:
        outcome, message, theirs = _store_client_handshake(sock.fileno(), secret, rank, instance, deadline, what)
    finally:
        sock.settimeout(timeout)
    if outcome == "ok":
        return theirs
    if outcome == "auth":
        raise AuthenticationError(message)
    if outcome == "closed":
        raise Refused(f"the server closed the connection before replying ({message})")
    if outcome == "other_job":
        raise PeerFailure(message, rank=0)
    if outcome == "timeout":
        raise Timeout(f"handshake: {message}")
    raise HandshakeError(message)

