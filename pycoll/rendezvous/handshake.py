"""The handshake that opens every pycoll connection: rendezvous-store clients (peer data links
shake hands in C, native/bootstrap/handshake.c).

Wire protocol (all integers big-endian):

1. client -> server  HELLO = magic "PYCL", version u16, kind u8, flags u8, rank i32, world_size i32,
                     job id length u16, job id (UTF-8, <= 256 bytes), nonce (32 random bytes)
2. server -> client  HELLO of the server, then, when authenticating, its proof (32 bytes)
3. client -> server  the client's proof (only when authenticating)
4. server -> client  ACK (one byte) once it admits the client; a rejected client sees the connection close.

A proof is HMAC-SHA256(secret, role || client HELLO || server HELLO); both HELLOs carry fresh nonces, so a proof
cannot be replayed on another connection, and the role label stops one side's proof from being reflected as
the other's. Authentication is mutual: the client checks the server's proof before sending its own. Both sides
must agree on whether a secret is used (the AUTH flag); a mismatch fails the handshake.

The functions below that build and check messages are shared by the blocking client here and by
ServerHandshake, the server side as a state machine that the non-blocking servers (the store and the mesh
listeners, pycoll.rendezvous.listener) feed with the bytes each connection receives.
"""

import dataclasses
import hashlib
import hmac
import secrets
import socket
import struct
import time

from pycoll import errors
from pycoll.errors import PycollError, Timeout

MAGIC = b"PYCL"
VERSION = 1
KIND_STORE = 1
KIND_PEER = 2
FLAG_AUTH = 1
NONCE_BYTES = 32
PROOF_BYTES = hashlib.sha256().digest_size
MAX_JOB_ID_BYTES = 256
ACK = b"\x06"
ROLE_CLIENT = b"pycoll-client"
ROLE_SERVER = b"pycoll-server"

HELLO_HEADER = struct.Struct("!4sHBBiiH")


class HandshakeError(PycollError):
    """A connection broke the handshake protocol; it is dropped."""


class AuthenticationError(HandshakeError, errors.AuthenticationError):
    """The two sides do not share the same secret (also a pycoll.AuthenticationError)."""


class Refused(HandshakeError):
    """The server closed the connection before replying: it is shutting down, or dropped us to make room
    while flooded. Worth retrying, unlike other handshake errors."""


@dataclasses.dataclass(frozen=True)
class Hello:
    kind: int
    rank: int
    world_size: int
    job_id: str
    auth: bool
    nonce: bytes

    def encode(self):
        job = self.job_id.encode()
        flags = FLAG_AUTH if self.auth else 0
        return (HELLO_HEADER.pack(MAGIC, VERSION, self.kind, flags, self.rank, self.world_size, len(job))
                + job + self.nonce)


def new_hello(kind, rank, world_size, job_id, secret):
    if len(job_id.encode()) > MAX_JOB_ID_BYTES:
        raise ValueError(f"job_id must be at most {MAX_JOB_ID_BYTES} bytes of UTF-8, got {len(job_id.encode())}")
    return Hello(kind, rank, world_size, job_id, secret is not None, secrets.token_bytes(NONCE_BYTES))


def hello_length(header):
    """Total length of the HELLO whose fixed header is ``header``; rejects foreign or oversized input early."""
    magic, version, _, _, _, _, job_len = HELLO_HEADER.unpack(header)
    if magic != MAGIC:
        raise HandshakeError(f"bad magic {magic!r} (not a pycoll peer)")
    if version != VERSION:
        raise HandshakeError(f"protocol version {version}, expected {VERSION}")
    if job_len > MAX_JOB_ID_BYTES:
        raise HandshakeError(f"job id of {job_len} bytes exceeds {MAX_JOB_ID_BYTES}")
    return HELLO_HEADER.size + job_len + NONCE_BYTES


def decode_hello(data):
    hello_length(data[:HELLO_HEADER.size])
    _, _, kind, flags, rank, world_size, job_len = HELLO_HEADER.unpack(data[:HELLO_HEADER.size])
    job = data[HELLO_HEADER.size:HELLO_HEADER.size + job_len]
    try:
        job_id = job.decode()
    except UnicodeDecodeError:
        raise HandshakeError("job id is not UTF-8") from None
    return Hello(kind, rank, world_size, job_id, bool(flags & FLAG_AUTH), bytes(data[-NONCE_BYTES:]))


def proof(secret, role, client_hello, server_hello):
    return hmac.new(secret, role + client_hello + server_hello, hashlib.sha256).digest()


def check_proof(secret, role, client_hello, server_hello, received):
    return hmac.compare_digest(proof(secret, role, client_hello, server_hello), received)


def check_auth_agreement(own_secret, peer, peer_name):
    """Both sides must use a secret, or neither."""
    if own_secret is not None and not peer.auth:
        raise AuthenticationError(f"authentication failed: the {peer_name} does not use a secret")
    if own_secret is None and peer.auth:
        raise AuthenticationError(f"authentication failed: the {peer_name} uses a secret and this side has none "
                                  "(set PYCOLL_SECRET)")


def recv_exact(sock, n, deadline):
    """Exactly n bytes, or Timeout at ``deadline`` (time.monotonic()), or HandshakeError when the peer closes."""
    chunks, got = [], 0
    while got < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Timeout(f"handshake: no reply within the deadline (got {got} of {n} bytes)")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(min(n - got, 65536))
        except socket.timeout:
            continue
        if not chunk:
            raise HandshakeError("the other side closed the connection during the handshake")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _send_all(sock, data, deadline):
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise Timeout("handshake: deadline passed before sending")
    sock.settimeout(remaining)
    try:
        sock.sendall(data)
    except socket.timeout:
        raise Timeout("handshake: the other side does not read") from None


def _recv_hello(sock, deadline):
    try:
        header = recv_exact(sock, HELLO_HEADER.size, deadline)
    except (HandshakeError, ConnectionResetError) as exc:
        raise Refused(f"the server closed the connection before replying ({exc})") from None
    rest = recv_exact(sock, hello_length(header) - HELLO_HEADER.size, deadline)
    return header + rest


def client_handshake(sock, hello, secret, deadline, check=None):
    """Run the client side on a connected blocking socket; returns the server's Hello.

    ``check(server_hello)`` runs as soon as the server's Hello arrives and raises HandshakeError to give up.
    """
    own = hello.encode()
    _send_all(sock, own, deadline)
    theirs = _recv_hello(sock, deadline)
    peer = decode_hello(theirs)
    if peer.kind != hello.kind:
        raise HandshakeError(f"the server speaks connection kind {peer.kind}, expected {hello.kind}")
    if check is not None:
        check(peer)
    check_auth_agreement(secret, peer, "server")
    if secret is not None:
        if not check_proof(secret, ROLE_SERVER, own, theirs, recv_exact(sock, PROOF_BYTES, deadline)):
            raise AuthenticationError("authentication failed: the server's proof is wrong (different secrets?)")
        _send_all(sock, proof(secret, ROLE_CLIENT, own, theirs), deadline)
    try:
        ack = recv_exact(sock, len(ACK), deadline)
    except HandshakeError:
        # Both sides agreed on the secret by now (a wrong one fails above, on this side), so a server that closes
        # here was full or shutting down -- a previous rendezvous's store closing as this rank re-inits: the
        # caller may retry, as for a server that closed before replying.
        raise Refused("the server closed the connection before admitting us (full, or shutting down)") from None
    if ack != ACK:
        raise HandshakeError(f"expected ACK from the server, got {ack!r}")
    return peer


class ServerHandshake:
    """The server side of one connection's handshake, for non-blocking servers: ``feed`` it what arrived, it
    sends through ``send`` what the client must get back. ``peer`` is the client's Hello from the moment it
    arrives (so that a failure can name the rank the client claimed); ``done`` once the ACK is sent.

    ``screen(peer)`` runs as soon as the client's Hello arrives, before any reply, and raises HandshakeError to
    turn the client away unanswered (it then sees Refused and may retry); ``admit(peer)`` runs once the client
    is authenticated, before the ACK, and raises HandshakeError to refuse it."""

    MAX_BUFFERED = HELLO_HEADER.size + MAX_JOB_ID_BYTES + NONCE_BYTES + PROOF_BYTES

    def __init__(self, hello, secret, admit=None, screen=None):
        self._hello, self._secret, self._admit, self._screen = hello, secret, admit, screen
        self._own = self._theirs = b""
        self.peer = None
        self.state = "hello"  # -> "proof" (with a secret) -> "done"

    @property
    def done(self):
        return self.state == "done"

    def feed(self, inbuf, send):
        """Consumes what it can of ``inbuf`` (a bytearray). Raises HandshakeError (AuthenticationError when the
        secret check fails) to have the connection dropped."""
        if self.state == "hello" and self._take_hello(inbuf, send) and self._secret is None:
            self._finish(send)
        if self.state == "proof" and len(inbuf) >= PROOF_BYTES:
            received = bytes(inbuf[:PROOF_BYTES])
            del inbuf[:PROOF_BYTES]
            if not check_proof(self._secret, ROLE_CLIENT, self._theirs, self._own, received):
                raise AuthenticationError("authentication failed: the client's proof is wrong")
            self._finish(send)
        if not self.done and len(inbuf) > self.MAX_BUFFERED:
            # A client speaks only after our reply; more than a HELLO and a proof before that is junk.
            raise HandshakeError(f"{len(inbuf)} bytes sent before the handshake finished")

    def _take_hello(self, inbuf, send):
        if len(inbuf) < HELLO_HEADER.size:
            return False
        need = hello_length(bytes(inbuf[:HELLO_HEADER.size]))
        if len(inbuf) < need:
            return False
        self._theirs = bytes(inbuf[:need])
        del inbuf[:need]
        self.peer = decode_hello(self._theirs)
        if self.peer.kind != self._hello.kind:
            raise HandshakeError(f"client speaks connection kind {self.peer.kind}, expected {self._hello.kind}")
        if self._screen is not None:
            self._screen(self.peer)
        self._own = self._hello.encode()
        # Reply before checking that both sides agree on using a secret, so that the client can say why it failed.
        send(self._own + (proof(self._secret, ROLE_SERVER, self._theirs, self._own)
                          if self._secret is not None else b""))
        check_auth_agreement(self._secret, self.peer, "client")
        self.state = "proof"
        return True

    def _finish(self, send):
        if self._admit is not None:
            self._admit(self.peer)
        self.state = "done"
        send(ACK)
