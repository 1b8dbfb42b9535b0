"""An island rank's failure socket (pycoll/islands/failures.py) against another user of the host, with real
processes: its abstract name shows in /proc/net/unix, but a failure notice another user sends to it is dropped;
one from a process of this user still ends the island's wait."""

import secrets
import socket
import subprocess
import sys
import threading

import pytest
from strangers import Stranger, stranger_uid

from pycoll.errors import PycollError
from pycoll.islands.failures import IslandWatch

pytestmark = pytest.mark.timeout(60)

SEND = "import socket, sys\nsocket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(sys.argv[2].encode(), " \
       "b'\\0' + bytes.fromhex(sys.argv[1]))\n"


def _forger(address):
    """As another user: finds the socket in /proc/net/unix, sends it a notice that rank 1 failed."""
    def attack(_held):
        with open("/proc/net/unix") as f:
            visible = any(line.split()[-1] == "@" + address[1:].decode() for line in f if line.split())
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"1 forged by another user", address)
        return {"visible": visible}
    return attack


def test_another_users_notice_is_dropped_and_this_users_is_heard():
    stranger_uid()
    heard, first = [], threading.Event()

    def on_failure(rank, reason):
        heard.append((rank, reason))
        first.set()

    watch = IslandWatch(0)
    watch.start([], on_failure)
    try:
        stranger = Stranger(_forger(watch.identity[4]))
        try:
            report = stranger.result()
        finally:
            stranger.release()
        assert report == {"visible": True}, report
        first.wait(1.0)  # where the forged notice is heard, it is by now
        subprocess.run([sys.executable, "-c", SEND, watch.identity[4][1:].hex(), "1 failed for real"], check=True,
                       timeout=30)
        assert first.wait(10.0), "a notice from this user was not heard"
    finally:
        watch.close()
    assert heard == [(1, "failed for real")], heard


def _holder(address):
    """As another user: binds `address` and holds it until released."""
    def attack(held):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(address)
        held.append(sock)
        return {"bound": True}
    return attack


@pytest.mark.parametrize("taken", [3, 8])
def test_a_socket_name_another_user_holds_is_drawn_again(monkeypatch, taken):
    """The first `taken` names the rank draws are one another user's process holds: it draws again and binds
    another (3), or after 8 says so in a PycollError (8)."""
    stranger_uid()
    fixed = "ab" * 16
    draws = iter([fixed] * taken)
    real = secrets.token_hex
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(draws, None) or real(n))
    stranger = Stranger(_holder(b"\0pycoll-island-" + fixed.encode()))
    try:
        assert stranger.result() == {"bound": True}
        if taken == 8:
            with pytest.raises(PycollError, match="all taken"):
                IslandWatch(0)
            return
        watch = IslandWatch(0)
        watch.close()
        assert watch.identity[4].startswith(b"\0pycoll-island-") and fixed.encode() not in watch.identity[4]
    finally:
        stranger.release()
