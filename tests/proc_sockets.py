"""The TCP sockets of a process, read from /proc (root reads another user's)."""

import os

ESTABLISHED, LISTEN = "01", "0A"  # the states as /proc/net/tcp writes them


def tcp_sockets(pid="self"):
    """(state, local, remote) of every TCP socket, IPv4 and IPv6, that process `pid` holds; the addresses as
    /proc/net/tcp writes them ("HEXADDR:HEXPORT")."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    found.append((fields[3], fields[1], fields[2]))
    return found
