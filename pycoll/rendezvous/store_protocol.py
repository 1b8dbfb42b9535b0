"""The rendezvous store's wire format and argument checks, shared by its server, TCPStore, FileStore and the
rendezvous generations.

A connection opens with the handshake of pycoll.rendezvous.handshake (magic, version, optional mutual HMAC
authentication), then carries frames: length u32 (big-endian, at most MAX_FRAME_BYTES) + body, where a body is
a one-byte code (operation or reply status) followed by fields, each a u32 length and its bytes."""

import struct

from pycoll.errors import PycollError

MAX_KEY_BYTES = 4096
MAX_VALUE_BYTES = 64 << 20
MAX_FRAME_BYTES = MAX_VALUE_BYTES + MAX_KEY_BYTES + 64
AUTH_FAILURE_KEY = "pycoll/auth-failure"  # set by the server when a rank fails the secret check

U32 = struct.Struct("!I")
I64 = struct.Struct("!q")
F64 = struct.Struct("!d")

OP_SET, OP_GET, OP_ADD, OP_CHECK = 1, 2, 3, 4
ST_OK, ST_TIMEOUT, ST_ERROR = 0, 1, 2


class ProtocolError(PycollError):
    """A store frame broke the protocol."""


def encode_frame(code, *fields):
    body = bytes([code]) + b"".join(U32.pack(len(f)) + f for f in fields)
    return U32.pack(len(body)) + body


def frame_length(data, offset=0):
    """The body length the frame header at data[offset:] gives, refused outside [1, MAX_FRAME_BYTES]."""
    (length,) = U32.unpack_from(data, offset)
    if length == 0 or length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame length {length} outside [1, {MAX_FRAME_BYTES}]")
    return length


def decode_body(body):
    if not body:
        raise ProtocolError("empty frame")
    fields, pos = [], 1
    while pos < len(body):
        if pos + U32.size > len(body):
            raise ProtocolError("truncated field length")
        (n,) = U32.unpack_from(body, pos)
        pos += U32.size
        if pos + n > len(body):
            raise ProtocolError(f"field of {n} bytes overruns the frame")
        fields.append(body[pos:pos + n])
        pos += n
    return body[0], fields


def expect_fields(fields, count, op):
    if len(fields) != count:
        raise ProtocolError(f"operation {op} takes {count} fields, got {len(fields)}")
    return fields


def key_bytes(key):
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    raw = key.encode()
    if not raw or len(raw) > MAX_KEY_BYTES:
        raise ValueError(f"key must be 1 to {MAX_KEY_BYTES} bytes of UTF-8, got {len(raw)}")
    return raw


def value_bytes(value):
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"value must be bytes, got {type(value).__name__}")
    raw = bytes(value)
    if len(raw) > MAX_VALUE_BYTES:
        raise ValueError(f"value must be at most {MAX_VALUE_BYTES} bytes, got {len(raw)}")
    return raw


def check_timeout(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return float(value)


def key_list(keys):
    return [keys] if isinstance(keys, str) else list(keys)
