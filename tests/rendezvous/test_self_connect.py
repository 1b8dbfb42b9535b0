"""A store client dialling a port of this host where nobody listens yet may be handed that same port as its own
by the kernel, and the TCP simultaneous open then connects the socket to itself. The client must take that for
"nobody listens yet" and keep trying, as for a refused connection, not for a store that answered. A network
namespace whose ephemeral range holds only the store's port and its neighbour makes the kernel do it on the
first try (on the shared range it happens about once in the ephemeral range's size of tries); the range widens
when the server comes up."""

import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.netns, pytest.mark.timeout(60)]

PORT = 40000  # inside the test's own namespace only

CLIENT_FIRST = textwrap.dedent(f"""
    import socket, struct, threading, time
    from pycoll.rendezvous.tcp_store import TCPStore

    probe = socket.socket()
    try:
        probe.connect(("127.0.0.1", {PORT}))
        print("self-connect:", probe.getsockname() == probe.getpeername(), flush=True)
    except OSError as exc:
        print("self-connect: False", exc, flush=True)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # no TIME_WAIT on the port
    probe.close()

    servers = []
    def serve_later():
        time.sleep(0.5)  # the client has been trying for a while
        with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
            f.write("{PORT} {PORT + 7}")  # room for the server's own client and this one
        servers.append(TCPStore("127.0.0.1", {PORT}, is_server=True, timeout=10.0, secret=b"s" * 32))
    threading.Thread(target=serve_later).start()
    client = TCPStore("127.0.0.1", {PORT}, is_server=False, timeout=10.0, secret=b"s" * 32)
    client.set("k", b"v")
    print("value:", client.get("k").decode(), flush=True)
    client.close()
    while not servers:
        time.sleep(0.05)
    servers[0].close()
""")


@pytest.mark.parametrize("hosts", [1], indirect=True)
def test_a_client_connected_to_itself_waits_for_the_real_store(hosts):
    ns = ["ip", "netns", "exec", hosts[0]]
    subprocess.run([*ns, "sysctl", "-q", "-w", f"net.ipv4.ip_local_port_range={PORT} {PORT + 1}"], check=True)
    out = subprocess.run([*ns, sys.executable, "-P", "-c", CLIENT_FIRST], capture_output=True, text=True, timeout=50)
    assert "self-connect: True" in out.stdout, out.stdout + out.stderr  # the kernel does what the test is about
    assert out.returncode == 0, out.stdout + out.stderr
    assert "value: v" in out.stdout, out.stdout + out.stderr
