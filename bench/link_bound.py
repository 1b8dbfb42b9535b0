"""What the shaped links of bench/multihost.py carry without any collective library: two namespace hosts send each
other MiB each way at once (a two-rank all-reduce's traffic: 2 (H - 1) / H of the vector each way), split over
their NICs, one plain TCP connection per NIC and direction, a thread per connection end, buffers allocated and
touched before the clock starts. Its share of the rate is the ceiling the all-reduce tables can be read against:
what this kernel's veths, bridges and tbf qdiscs let two processes on these cores move.

    python bench/link_bound.py [--nics 1,2] [--mib 64] [--reps 5] [--rate 2gbit] [--burst 1mb] [--latency 50ms]

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
from netns_hosts import SUBNETS, HostsUnavailable, namespace_hosts, shape_links  # noqa: E402

PORT = 5600  # inside the namespace hosts: nothing else listens there


def endpoint(role, nics, nbytes):
    """One host's side: host "a" listens on each NIC, "b" connects; both then send and receive nbytes split over
    the NICs at once. Prints the seconds from the start signal to the last byte received."""
    import socket
    import threading

    per = nbytes // nics
    conns = []
    for k in range(nics):
        if role == "a":
            ls = socket.create_server((f"{SUBNETS[k]}.1", PORT + k))
            conns.append(ls.accept()[0])
            ls.close()
        else:
            give_up = time.monotonic() + 30
            while True:
                try:
                    conns.append(socket.create_connection((f"{SUBNETS[k]}.1", PORT + k), timeout=30))
                    break
                except OSError:
                    if time.monotonic() > give_up:
                        raise
                    time.sleep(0.05)
    out = bytearray(b"\x5a" * per)
    ins = [memoryview(bytearray(b"\x00" * per)) for _ in conns]  # touched: no page faults on the clock

    def receive(conn, view):
        got = 0
        while got < per:
            n = conn.recv_into(view[got:])
            if n == 0:
                raise ConnectionError("peer closed early")
            got += n

    conns[0].sendall(b"s")  # both sides ready: start together
    if conns[0].recv(1) != b"s":
        raise ConnectionError("no start signal")
    start = time.perf_counter()
    threads = [threading.Thread(target=c.sendall, args=(out,)) for c in conns]
    threads += [threading.Thread(target=receive, args=(c, v)) for c, v in zip(conns, ins)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(time.perf_counter() - start))


def one_exchange(nics, nbytes, tbf):
    """Seconds the slower host took to send and receive nbytes each way over fresh shaped hosts."""
    with namespace_hosts(2, tag=f"pclb{os.getpid() % 100000}", nics=nics) as names:
        shape_links(names, tbf, nics)
        procs = [subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-P", __file__, "--endpoint", role,
                                   "--nics", str(nics), "--bytes", str(nbytes)], stdout=subprocess.PIPE, text=True)
                 for name, role in zip(names, "ab")]
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
    p.add_argument("--endpoint", choices=("a", "b"), help=argparse.SUPPRESS)
    p.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    p.add_argument("--nics", default="1,2")
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rate", default="2gbit")
    p.add_argument("--burst", default="1mb")
    p.add_argument("--latency", default="50ms")
    args = p.parse_args()
    if args.endpoint:
        return endpoint(args.endpoint, int(args.nics), args.bytes)
    nics_list = [int(n) for n in args.nics.split(",")]
    tbf = ["tbf", "rate", args.rate, "burst", args.burst, "latency", args.latency]
    nbytes, load = args.mib << 20, os.getloadavg()
    times = {n: [] for n in nics_list}
    try:
        for _ in range(args.reps):
            for n in nics_list:  # interleaved
                times[n].append(one_exchange(n, nbytes, tbf))
    except HostsUnavailable as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        return
    print(f"Plain TCP, {args.mib} MiB each way between 2 namespace hosts, `{' '.join(tbf)}` on both ends of every "
          f"veth; {args.reps} repetitions, interleaved; load average {load[0]:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end.\n")
    print("| NICs | time (ms) | share of the NICs' combined rate |\n|---:|---:|---:|")
    for n in nics_list:
        med = statistics.median(times[n])
        ideal = nbytes * 8 / (parse_rate(args.rate) * n)
        each = " / ".join(f"{t * 1e3:.0f}" for t in times[n])
        print(f"| {n} | {med * 1e3:.0f} ({each}) | {ideal / med:.0%} |")


if __name__ == "__main__":
    main()
