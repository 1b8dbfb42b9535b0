"""Key-value stores for rendezvous: ranks publish small values (addresses, ids) and wait for each other's.

The stores live in their own modules; this one gathers their public names, the import path users know:

TCPStore, create_store   rank 0 hosts a server in a daemon thread; every rank (rank 0 included) is a client
                         (tcp_store.py; the server: store_server.py; the wire format: store_protocol.py)
FileStore                a directory on a filesystem all ranks share (file_store.py)
gather()                 every rank publishes one value and collects everyone's (store_gather.py)
rendezvous(), Rendezvous each init's own generation of keys in the store (generations.py)
"""

from pycoll.rendezvous.file_store import FileStore
from pycoll.rendezvous.generations import RENDEZVOUS_PREFIX, WATCH_INTERVAL, Rendezvous, get_watching, rendezvous
from pycoll.rendezvous.store_gather import gather, missing_ranks_message
from pycoll.rendezvous.store_protocol import (
    AUTH_FAILURE_KEY,
    MAX_FRAME_BYTES,
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    ProtocolError,
)
from pycoll.rendezvous.store_server import DEFAULT_MAX_BYTES, FAILURE_GRACE, MAX_BYTES_ENV, MAX_CLIENTS, is_loopback
from pycoll.rendezvous.tcp_store import CLOSE_LINGER, TCPStore, create_store, store_port

__all__ = [
    "AUTH_FAILURE_KEY", "CLOSE_LINGER", "DEFAULT_MAX_BYTES", "FAILURE_GRACE", "MAX_BYTES_ENV", "MAX_CLIENTS",
    "MAX_FRAME_BYTES", "MAX_KEY_BYTES", "MAX_VALUE_BYTES", "RENDEZVOUS_PREFIX", "WATCH_INTERVAL", "FileStore",
    "ProtocolError", "Rendezvous", "TCPStore", "create_store", "gather", "get_watching", "is_loopback",
    "missing_ranks_message", "rendezvous", "store_port",
]
