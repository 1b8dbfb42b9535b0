"""The handshake that opens every pycoll connection: peer data links (mesh.py) and rendezvous-store clients.

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

The functions below that build and check messages are shared by the blocking helpers here and by the
store's non-blocking server.
"""

import dataclasses
import hashlib
import hmac
import secrets
import socket
import struct
import time

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


class AuthenticationError(HandshakeError):
    """The two sides do not share the same secret."""


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
    header = recv_exact(sock, HELLO_HEADER.size, deadline)
    rest = recv_exact(sock, hello_length(header) - HELLO_HEADER.size, deadline)
    return header + rest


def client_handshake(sock, hello, secret, deadline):
    """Run the client side on a connected blocking socket; returns the server's Hello."""
    own = hello.encode()
    _send_all(sock, own, deadline)
    theirs = _recv_hello(sock, deadline)
    peer = decode_hello(theirs)
    if peer.kind != hello.kind:
        raise HandshakeError(f"the server speaks connection kind {peer.kind}, expected {hello.kind}")
    check_auth_agreement(secret, peer, "server")
    if secret is not None:
        if not check_proof(secret, ROLE_SERVER, own, theirs, recv_exact(sock, PROOF_BYTES, deadline)):
            raise AuthenticationError("authentication failed: the server's proof is wrong (different secrets?)")
        _send_all(sock, proof(secret, ROLE_CLIENT, own, theirs), deadline)
    try:
        ack = recv_exact(sock, len(ACK), deadline)
    except HandshakeError:
        raise HandshakeError("the server rejected the connection (closed it before admitting us)") from None
    if ack != ACK:
        raise HandshakeError(f"expected ACK from the server, got {ack!r}")
    return peer


def server_handshake(sock, hello, secret, deadline, admit):
    """Run the server side on an accepted blocking socket; returns the client's Hello.

    ``admit(client_hello)`` runs once the client is authenticated and raises HandshakeError to refuse it.
    """
    theirs = _recv_hello(sock, deadline)
    peer = decode_hello(theirs)
    if peer.kind != hello.kind:
        raise HandshakeError(f"client speaks connection kind {peer.kind}, expected {hello.kind}")
    own = hello.encode()
    # Reply before checking that both sides agree on using a secret, so that the client can say why it failed.
    _send_all(sock, own + (proof(secret, ROLE_SERVER, theirs, own) if secret is not None else b""), deadline)
    check_auth_agreement(secret, peer, "client")
    if secret is not None:
        if not check_proof(secret, ROLE_CLIENT, theirs, own, recv_exact(sock, PROOF_BYTES, deadline)):
            raise AuthenticationError("authentication failed: the client's proof is wrong")
    admit(peer)
    _send_all(sock, ACK, deadline)
    return peer
