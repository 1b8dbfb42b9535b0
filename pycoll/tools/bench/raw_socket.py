"""Raw TCP between 2 processes over loopback: ping-pong (half a round trip: the latency floor of any TCP
collective here) and a one-way stream (the bandwidth ceiling), timed like the collectives (median of many).
Up to 64 KiB both sides poll non-blocking sockets instead of sleeping in recv, as pycoll's transport and Open MPI
do while a rank has a core of its own: a sleeping receiver would measure the scheduler's wake-up, not the
network. Larger messages block, so that neither side's spinning steals the other's core."""

from __future__ import annotations

import multiprocessing
import socket
import statistics
import time

from pycoll.tools.bench.sweep import iterations

POLL_UP_TO = 64 * 1024


def _recv_exactly(sock, view):
    got = 0
    while got < len(view):
        try:
            n = sock.recv_into(view[got:])
        except BlockingIOError:
            continue
        if n == 0:
            raise ConnectionError("peer closed")
        got += n


def _send_all(sock, view):
    sent = 0
    while sent < len(view):
        try:
            sent += sock.send(view[sent:])
        except BlockingIOError:
            continue


def _echo(port, sizes, iters, warmup):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(max(sizes))
        for nbytes in sizes:
            warm, timed = iterations(nbytes, iters, warmup)
            view = memoryview(buf)[:nbytes]
            s.setblocking(nbytes > POLL_UP_TO)
            for _ in range(warm + timed):  # ping-pong: echo back
                _recv_exactly(s, view)
                _send_all(s, view)
            for _ in range(warm + timed):  # stream: receive, then a 1-byte ack
                _recv_exactly(s, view)
                _send_all(s, memoryview(b"k"))


def measure(sizes, iters=None, warmup=None):
    """[{bytes, pingpong_us (one way), stream_gbps}] for each size."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        peer = multiprocessing.get_context("spawn").Process(
            target=_echo, args=(listener.getsockname()[1], list(sizes), iters, warmup), daemon=True)
        peer.start()
        conn, _ = listener.accept()
    rows = []
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(max(sizes))
        ack = bytearray(1)
        for nbytes in sizes:
            warm, timed = iterations(nbytes, iters, warmup)
            view = memoryview(buf)[:nbytes]
            conn.setblocking(nbytes > POLL_UP_TO)
            pingpong = []
            for k in range(warm + timed):
                t0 = time.perf_counter()
                _send_all(conn, view)
                _recv_exactly(conn, view)
                if k >= warm:
                    pingpong.append((time.perf_counter() - t0) / 2)
            stream = []
            for k in range(warm + timed):
                t0 = time.perf_counter()
                _send_all(conn, view)
                _recv_exactly(conn, memoryview(ack))
                if k >= warm:
                    stream.append(time.perf_counter() - t0)
            rows.append({"bytes": nbytes, "pingpong_us": statistics.median(pingpong) * 1e6,
                         "stream_gbps": nbytes / statistics.median(stream) / 1e9})
    peer.join(10)
    return rows
