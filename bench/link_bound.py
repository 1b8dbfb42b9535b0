"""What the shaped links of bench/multihost.py carry without any collective library: H namespace hosts in a ring,
each sending its successor and receiving from its predecessor at once what a ring all-reduce of the vector
moves per host (2 (H - 1) / H of it each way: the vector itself between two hosts), split over their NICs, one
plain TCP connection per NIC and direction, a thread per connection end, buffers allocated and touched before
the clock starts. Its share of the rate is the ceiling the all-reduce tables can be read against: what this
kernel's veths, bridges and tbf qdiscs let H processes on these cores move.

    python bench/link_bound.py [--hosts 2,4] [--nics 1,2] [--mib 64] [--reps 5] [--rate 2gbit] [--burst 1mb]
                               [--latency 50ms] [--mtu 1500]

Prints a markdown table (median of the repetitions, each repetition's number in brackets). Needs root and
iproute2, like bench/multihost.py.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from multihost import parse_rate  # noqa: E402  -- one copy of the rate parser
from netns_hosts import SUBNETS, HostsUnavailable, namespace_hosts, set_mtu, shape_links  # noqa: E402

PORT = 5600  # inside the namespace hosts: nothing else listens there


def endpoint(index, hosts, nics, nbytes):
    """Host `index` of the ring: on each NIC it listens for its predecessor and connects to its successor, then
    sends nbytes to the successor and receives nbytes from the predecessor, split over the NICs, all at once.
    Prints the seconds from the start signal to the last byte moved."""
    import socket
    import threading

    per = nbytes // nics
    succ = (index + 1) % hosts
    listeners = [socket.create_server((f"{SUBNETS[k]}.{index + 1}", PORT + k)) for k in range(nics)]
    outs = []
    for k in range(nics):
        give_up = time.monotonic() + 30
        while True:
            try:
                outs.append(socket.create_connection((f"{SUBNETS[k]}.{succ + 1}", PORT + k), timeout=30))
                break
            except OSError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.05)
    ins = [ls.accept()[0] for ls in listeners]
    for ls in listeners:
        ls.close()
    out = bytearray(b"\x5a" * per)
    views = [memoryview(bytearray(b"\x00" * per)) for _ in ins]  # touched: no page faults on the clock

    def receive(conn, view):
        got = 0
        while got < per:
            n = conn.recv_into(view[got:])
            if n == 0:
                raise ConnectionError("peer closed early")
            got += n

    # Start together: a token goes round the ring twice (the second round tells every host the first is done).
    for _ in range(2):
        if index == 0:
            outs[0].sendall(b"s")
        if ins[0].recv(1) != b"s":
            raise ConnectionError("no start signal")
        if index != 0:
            outs[0].sendall(b"s")
    start = time.perf_counter()
    threads = [threading.Thread(target=c.sendall, args=(out,)) for c in outs]
    threads += [threading.Thread(target=receive, args=(c, v)) for c, v in zip(ins, views)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(time.perf_counter() - start))


def ring_bytes(hosts, vector_bytes):
    """What a ring all-reduce of the vector sends per host and direction."""
    return 2 * (hosts - 1) * vector_bytes // hosts


def payload_share(mtu):
    """TCP payload over the bytes tbf counts for a full frame: IPv4 (20) and TCP with timestamps (32) inside the
    MTU, the Ethernet header (14) outside it."""
    return (mtu - 52) / (mtu + 14)


def one_exchange(hosts, nics, nbytes, tbf, mtu):
    """Seconds the slowest host took to send and receive nbytes each way over fresh shaped hosts."""
    with namespace_hosts(hosts, tag=f"pclb{os.getpid() % 100000}", nics=nics) as names:
        shape_links(names, tbf, nics)
        if mtu:
            set_mtu(names, mtu, nics)
        procs = [subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-P", __file__, "--endpoint", str(i),
                                   "--hosts", str(hosts), "--nics", str(nics), "--bytes", str(nbytes)],
                                  stdout=subprocess.PIPE, text=True)
                 for i, name in enumerate(names)]
        try:
            outs = [p.communicate(timeout=120)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(p.returncode for p in procs):
            raise SystemExit(f"an endpoint failed: exit codes {[p.returncode for p in procs]}")
        return max(json.loads(out) for out in outs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", type=int, help=argparse.SUPPRESS)
    p.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    p.add_argument("--hosts", default="2", help="hosts in the ring, comma-separated: one row each")
    p.add_argument("--nics", default="1,2")
    p.add_argument("--mib", type=int, default=64, help="the vector a ring all-reduce would reduce")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rate", default="2gbit")
    p.add_argument("--burst", default="1mb")
    p.add_argument("--latency", default="50ms")
    p.add_argument("--mtu", type=int, default=0, help="every veth's MTU (default: the kernel's, 1500)")
    args = p.parse_args()
    if args.endpoint is not None:
        return endpoint(args.endpoint, int(args.hosts), int(args.nics), args.bytes)
    cases = [(int(h), int(n)) for h in args.hosts.split(",") for n in args.nics.split(",")]
    tbf = ["tbf", "rate", args.rate, "burst", args.burst, "latency", args.latency]
    load = os.getloadavg()
    times = {case: [] for case in cases}
    try:
        for _ in range(args.reps):
            for hosts, nics in cases:  # interleaved
                nbytes = ring_bytes(hosts, args.mib << 20)
                times[(hosts, nics)].append(one_exchange(hosts, nics, nbytes, tbf, args.mtu))
    except HostsUnavailable as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        return
    print(f"Plain TCP, a ring all-reduce's bytes for {args.mib} MiB each way between namespace hosts in a ring, "
          f"`{' '.join(tbf)}` on both ends of every veth, MTU {args.mtu or 1500}; {args.reps} repetitions, "
          f"interleaved; load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end. tbf counts "
          f"every frame's headers: at this MTU a TCP payload is at most {payload_share(args.mtu or 1500):.1%} of "
          "the bytes it passes (a 1 MB bucket, full when the clock starts, adds its own share).\n")
    print("| hosts | NICs | MiB each way | time (ms) | share of the NICs' combined rate |\n|---:|---:|---:|---:|---:|")
    for hosts, nics in cases:
        nbytes = ring_bytes(hosts, args.mib << 20)
        med = statistics.median(times[(hosts, nics)])
        ideal = nbytes * 8 / (parse_rate(args.rate) * nics)
        each = " / ".join(f"{t * 1e3:.0f}" for t in times[(hosts, nics)])
        print(f"| {hosts} | {nics} | {nbytes / (1 << 20):.0f} | {med * 1e3:.0f} ({each}) | {ideal / med:.0%} |")


if __name__ == "__main__":
    main()
