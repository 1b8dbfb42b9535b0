"""Produce bench/results/multihost.md: a float32 sum all-reduce, 4 B to 64 MiB, across network-namespace hosts
(H hosts x R ranks, tests/netns_hosts.py) whose links are rate-limited with tc tbf on both ends of each veth:
pycoll's default backend and backend="tcp" beside gloo (torch.distributed, GLOO_SOCKET_IFNAME=eth0), measured
the same way in one run. Per size and job: each call after a barrier, every rank's median over its calls, the
slowest rank's median; then the median of the jobs (--reps jobs per library, interleaved). Every result is
checked exactly (integer-valued data). Namespaces, veths and processes are removed on every exit (an exception,
Ctrl-C, SIGTERM). Needs root and iproute2; otherwise it says why and exits without measuring.

    python bench/multihost.py [--layouts 2x2,2x1] [--rate 2gbit] [--reps 3] [--libs default,tcp,gloo]
                              [--max-mib 64] [--before PYTHON] [--out bench/results/multihost.md]

--before PYTHON adds default-before and tcp-before: the same two run by another interpreter (another build of
pycoll, e.g. the main branch's), interleaved with the rest, for before/after numbers from one run. The ranks
inherit the environment: PYCOLL_SPIN_US=0 measures the waits that sleep at once (recorded in the results).

Each rank is `ip netns exec HOST python bench/multihost.py --worker LIB ...`.
"""

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from allreduce_peers import _fmt_size, machine  # noqa: E402  -- one copy of the machine description
from multiproc import free_port  # noqa: E402
from netns_hosts import SUBNET, HostsUnavailable, namespace_hosts  # noqa: E402

LIBS = ("default", "tcp", "gloo")
BEFORE = "-before"  # the suffix of a library run by --before's interpreter


def sizes(max_mib):
    """Bytes: 4 B, then powers of 16 from 64 B, plus 64 KiB and 256 KiB (mid sizes), up to max_mib MiB."""
    out, n = [4], 64
    while n <= max_mib << 20:
        out.append(n)
        n *= 4 if n >= 16 << 10 else 16
    return out


def iterations(nbytes):
    """Timed calls per size: many for small messages (cheap), few for large ones (seconds each at 2 Gbit)."""
    return 200 if nbytes <= 4096 else 50 if nbytes <= 256 << 10 else 10 if nbytes <= 4 << 20 else 3


class _Pycoll:
    def __init__(self, backend):
        import pycoll

        self.comm = pycoll.init(backend, timeout=120)
        self.rank = self.comm.rank

    def all_reduce(self, x, out):
        self.comm.all_reduce(x, out=out)

    def barrier(self):
        self.comm.barrier()

    def describe(self):
        return f"{self.comm.backend}/{self.comm.transport}"

    def close(self):
        self.comm.close()


class _Gloo:
    def __init__(self):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", init_method="env://")
        self.rank = dist.get_rank()

    def all_reduce(self, x, out):
        # gloo reduces in place: out of place is a copy first (what pycoll does with out= too).
        out[...] = x
        self.dist.all_reduce(self.torch.from_numpy(out))

    def barrier(self):
        self.dist.barrier()

    def describe(self):
        return f"gloo (torch {self.torch.__version__})"

    def close(self):
        self.dist.destroy_process_group()


def worker(lib, max_mib):
    """One rank: every size in turn, untimed warm-up calls, then timed calls each after a barrier. Prints JSON:
    its per-size times and how many results were wrong."""
    import numpy as np

    from pycoll.tools.bench.timing import time_iterations

    comm = _Gloo() if lib == "gloo" else _Pycoll(None if lib == "default" else lib)
    world = int(os.environ["WORLD_SIZE"])
    times, wrong = {}, 0
    for nbytes in sizes(max_mib):
        count = nbytes // 4
        base = (np.arange(count) % 251).astype(np.float32)
        x, out = base + comm.rank, np.empty(count, np.float32)
        want = base * world + world * (world - 1) / 2  # exact in float32: below 2^24
        times[nbytes] = time_iterations(lambda: comm.all_reduce(x, out), comm.barrier, 2, iterations(nbytes))
        wrong += int(not np.array_equal(out, want))
    print(json.dumps({"rank": comm.rank, "times": times, "wrong": wrong, "what": comm.describe()}), flush=True)
    comm.close()


def run_job(names, placement, lib, args):
    """One job of `lib` over the hosts; returns every rank's report."""
    python = sys.executable
    if lib.endswith(BEFORE):
        python, lib = args.before, lib[:-len(BEFORE)]
    port, secret = free_port(), secrets.token_hex(32)  # a secret: the store is on a non-loopback address
    procs = []
    try:
        for rank, host in enumerate(placement):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(len(placement)), MASTER_ADDR=f"{SUBNET}.1",
                       MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="eth0", PYTHONSAFEPATH="1",
                       PYCOLL_SECRET=secret)
            procs.append(subprocess.Popen(["ip", "netns", "exec", names[host], python, __file__, "--worker",
                                           lib, "--max-mib", str(args.max_mib)],
                                          env=env, stdout=subprocess.PIPE, text=True))
        reports = []
        for p in procs:
            stdout, _ = p.communicate(timeout=900)
            if p.returncode != 0:
                raise SystemExit(f"a {lib} rank exited with {p.returncode}: {stdout}")
            reports.append(json.loads(stdout.strip().splitlines()[-1]))
        return reports
    finally:
        for p in procs:  # `ip netns exec` execs the command: the pid is the rank's own
            if p.poll() is None:
                p.kill()
                p.wait()


def shape(names, tbf, tag):
    """tbf on both ends of every host's veth: eth0 in the host (its egress) and its port on the switch (its
    ingress, as the switch's egress)."""
    for i, name in enumerate(names):
        for ns, dev in ((name, "eth0"), (f"{tag}-sw", f"p{i}")):
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", *tbf],
                           check=True, capture_output=True, text=True)


def measure_layout(hosts, per_host, args, tbf):
    """{lib: {bytes: [slowest rank's median per job]}} and what each library ran, for one H x R layout."""
    placement = [r // per_host for r in range(hosts * per_host)]
    per_job = {lib: {} for lib in args.libs}
    what, wrong = {}, 0
    tag = f"pcmh{os.getpid() % 100000}"  # this run's own namespaces: another run may be going
    with namespace_hosts(hosts, tag=tag) as names:
        shape(names, tbf, tag)
        for rep in range(args.reps):
            for lib in args.libs:  # interleaved: each repetition runs every library once
                print(f"{hosts}x{per_host} rep {rep + 1}/{args.reps}: {lib}", flush=True)
                reports = run_job(names, placement, lib, args)
                what[lib] = reports[0]["what"]
                wrong += sum(r["wrong"] for r in reports)
                for nbytes in reports[0]["times"]:
                    slowest = max(statistics.median(r["times"][nbytes]) for r in reports)
                    per_job[lib].setdefault(int(nbytes), []).append(slowest)
    return per_job, what, wrong


def table(per_job, libs):
    """Per size: each library's median over jobs with every job's number, and the default over the best peer."""
    rows = ["| size | " + " | ".join(f"{lib} (us)" for lib in libs) + " | default / best peer |",
            "|---" + "|---:" * (len(libs) + 1) + "|"]
    peers = [lib for lib in libs if lib == "gloo"]
    for nbytes in sorted(per_job[libs[0]]):
        med = {lib: statistics.median(per_job[lib][nbytes]) for lib in libs}
        best = min((med[lib] for lib in peers), default=None)
        ratio = f"{med['default'] / best:.2f}" if best and "default" in med else "-"
        cells = [f"{med[lib] * 1e6:.0f} ({' / '.join(f'{t * 1e6:.0f}' for t in per_job[lib][nbytes])})"
                 for lib in libs]
        rows.append(f"| {_fmt_size(nbytes)} | " + " | ".join(cells) + f" | {ratio} |")
    return rows


def _exit_on_signal(signum, _frame):
    raise SystemExit(f"stopped by signal {signum}")  # unwinds through every finally: processes, namespaces


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", choices=LIBS, help=argparse.SUPPRESS)
    p.add_argument("--layouts", default="2x2,2x1", help="hosts x ranks per host, comma-separated")
    p.add_argument("--rate", default="2gbit")
    p.add_argument("--burst", default="1mb")
    p.add_argument("--latency", default="50ms")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--libs", default=",".join(LIBS))
    p.add_argument("--max-mib", type=int, default=64)
    p.add_argument("--before", help="an interpreter whose pycoll runs default-before and tcp-before")
    p.add_argument("--out", default=str(HERE / "results" / "multihost.md"))
    args = p.parse_args()
    if args.worker:
        return worker(args.worker, args.max_mib)
    args.libs = args.libs.split(",")
    unknown = sorted(set(args.libs) - set(LIBS))
    if unknown:
        p.error(f"--libs: unknown {unknown}; choose from {', '.join(LIBS)}")
    if args.before:
        args.libs += [lib + BEFORE for lib in ("default", "tcp") if lib in args.libs]
    layouts = [tuple(int(v) for v in item.split("x")) for item in args.layouts.split(",")]
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    tbf = ["tbf", "rate", args.rate, "burst", args.burst, "latency", args.latency]
    start, load = time.monotonic(), os.getloadavg()
    sections = []
    try:
        for hosts, per_host in layouts:
            per_job, what, wrong = measure_layout(hosts, per_host, args, tbf)
            sections += [f"## {hosts} hosts x {per_host} rank{'s' if per_host > 1 else ''}", "",
                         "Ran: " + "; ".join(f"{lib}: {what[lib]}" for lib in args.libs)
                         + f". Wrong results over every call: {wrong}.", "", *table(per_job, args.libs), ""]
    except HostsUnavailable as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        return
    kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    libs = ",".join(lib for lib in args.libs if BEFORE not in lib)
    spin = f"PYCOLL_SPIN_US={os.environ['PYCOLL_SPIN_US']} " if "PYCOLL_SPIN_US" in os.environ else ""
    doc = ["# All-reduce across network-namespace hosts", "",
           f"Produced by `{spin}python bench/multihost.py --layouts {args.layouts} --rate {args.rate} "
           f"--burst {args.burst} --latency {args.latency} --reps {args.reps} --libs {libs} "
           f"--max-mib {args.max_mib}{' --before ' + args.before if args.before else ''}` "
           f"(as root) in {time.monotonic() - start:.0f} s.", "", machine(), f"- Kernel {kernel}.",
           f"- Load: 1/5/15-minute load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it started "
           f"(other sessions' builds and tests share the cores), {os.getloadavg()[0]:.1f} at the end.", "",
           f"Setup: network-namespace hosts joined by veth pairs to a bridge (tests/netns_hosts.py); on both ends "
           f"of each host's veth `tc qdisc add ... root {' '.join(tbf)}` (no netem in this kernel). Rank r on host "
           "r // R. float32 sum, out of place, integer-valued data checked exactly on every rank.", "",
           f"Method: {args.reps} jobs per library, interleaved (default, tcp, gloo, default, ...). In a job, per "
           "size, 2 untimed calls, then 200 (up to 4 KiB), 50 (up to 256 KiB), 10 (up to 4 MiB) or 3 timed calls, "
           "each after a barrier; a rank's median; the slowest rank's median. The table: the median over jobs "
           "(microseconds), each job's number in brackets (the spread between repetitions); `default / best peer` "
           "divides the default backend's by the fastest peer's that is not pycoll.", "", *sections]
    Path(args.out).write_text("\n".join(doc))
    print("\n".join(doc))


if __name__ == "__main__":
    main()
