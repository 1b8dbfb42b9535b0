"""One rank of a mesh test: connects to every peer, sends "p->q" to each, reports what arrived as JSON."""

import json
import socket
import sys

from pycoll.rendezvous.connections import choose_bind_address, connect_mesh
from pycoll.rendezvous.store import TCPStore

port, rank, world = (int(a) for a in sys.argv[1:4])
with TCPStore("127.0.0.1", port, is_server=False, timeout=20.0) as store:
    peers = connect_mesh(store, rank, world, job_id="proc-job", secret=b"k", timeout=20.0,
                         bind_addr=choose_bind_address("127.0.0.1"))
for peer, sock in enumerate(peers):
    if sock is not None:
        message = f"{rank}->{peer}".encode()
        sock.sendall(bytes([len(message)]) + message)
received = {}
for peer, sock in enumerate(peers):
    if sock is not None:
        length = sock.recv(1, socket.MSG_WAITALL)[0]
        received[str(peer)] = sock.recv(length, socket.MSG_WAITALL).decode()
others = [s for s in peers if s is not None]
print(json.dumps({
    "received": received,
    "none_at_own_rank": peers[rank] is None,
    "nodelay": all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in others),
    "rcvbuf": min(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) for s in others),
}))
