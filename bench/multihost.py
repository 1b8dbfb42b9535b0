"""Produce bench/results/multihost.md: a float32 sum all-reduce, 4 B to 64 MiB, across network-namespace hosts
(H hosts x R ranks, tests/netns_hosts.py) whose links are rate-limited with tc tbf on both ends of each veth:
pycoll's default backend and backend="tcp" beside gloo (torch.distributed, GLOO_SOCKET_IFNAME=eth0) and the peers
of bench/multihost_peers.py (Open MPI, MPICH, MLX's ring: each skipped, with why, where it is not installed),
measured the same way in one run. Per size and job: each call after a barrier, every rank's median over its
calls, the slowest rank's median; then the median of the jobs (--reps jobs per library, interleaved). Every
result is checked exactly (integer-valued data), and every job must send at least what an all-reduce must across
each host's link (the veths' counters), so that no library takes a shortcut between the namespace hosts.
Namespaces, veths and processes are removed on every exit (an exception, Ctrl-C, SIGTERM). Needs root and
iproute2; otherwise it says why and exits without measuring.

    python bench/multihost.py [--layouts 2x2,2x1] [--rate 2gbit] [--reps 3]
                              [--libs default,tcp,auto,gloo,openmpi,openmpi-yield,mpich,mlx]
                              [--max-mib 64 | --sizes 4m,64m] [--nics 1] [--streams 1] [--spins 0,200]
                              [--mtu 1500] [--accuracy fast|compensated] [--before PYTHON]
                              [--out bench/results/multihost.md [--append]] [--plot FILE.png]

--nics 2 gives every host two shaped veths (eth0, eth1: two networks) and pycoll's ranks
PYCOLL_SOCKET_IFNAME=eth0,eth1 (gloo keeps eth0). --streams 1,4 runs each pycoll library once per stream count
(PYCOLL_TCP_STREAMS), as "default/4" etc. (without --streams, pycoll's default: a connection per NIC); --spins
0,200 likewise once per PYCOLL_SPIN_US value, as "default@0" (microseconds a wait polls before it sleeps;
without --spins the library's default). --mtu sets every veth's MTU
(both ends; 1500 by default, as a new veth has). The tables add each library's share of the link at 1 MiB and above:
the bytes an all-reduce must move across a host's link each way, 2 (H - 1) / H of the vector, over the time,
against the rate (times the NICs). --append adds the results to --out as a section instead of replacing it.
--accuracy compensated runs pycoll's columns with accuracy="compensated" (named in each column's "Ran:" line;
the peers have plain sums only, so read it against --before, not against them). --plot FILE.png draws every
layout's times (and each library's over the fastest's) with matplotlib (the plot extra) and shows it in the
section.

--libs auto runs pycoll.init("auto") (host islands, one per host). --before PYTHON adds default-before and
tcp-before (and auto-before): the same run by another interpreter (another build of
pycoll, e.g. the main branch's), interleaved with the rest, for before/after numbers from one run. The ranks
inherit the environment: PYCOLL_SPIN_US=0 measures the waits that sleep at once (recorded in the results).

Each rank is `ip netns exec HOST python bench/multihost.py --worker LIB ...` (an MPI's ranks: its launcher's, run
in host 0), and writes its report to a file.
"""

import argparse
import json
import os
import resource
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import multihost_peers  # noqa: E402
from allreduce_peers import _fmt_size, machine  # noqa: E402  -- one copy of the machine description
from multiproc import free_port  # noqa: E402
from netns_hosts import SUBNET, HostsUnavailable, link_bytes, link_mtu, namespace_hosts, set_mtu, shape_links  # noqa: E402

LIBS = ("default", "tcp", "gloo")  # --libs by default
PYCOLL_LIBS = ("default", "tcp", "auto")  # pycoll.init(None), pycoll.init("tcp"), pycoll.init("auto")
PEERS = ("gloo", *multihost_peers.PEERS)  # the libraries that are not pycoll
KNOWN = (*PYCOLL_LIBS, *PEERS)  # every --libs name
BEFORE = "-before"  # the suffix of a library run by --before's interpreter
ACCURACY_ENV = "PYCOLL_BENCH_ACCURACY"  # --accuracy, handed to pycoll's ranks


def parse_sizes(text):
    """ "4m,64m" -> bytes (k, m suffixes: KiB, MiB)."""
    scale = {"k": 1 << 10, "m": 1 << 20}
    return [int(v[:-1]) * scale[v[-1]] if v[-1] in scale else int(v) for v in text.lower().split(",")]


def parse_rate(text):
    """tc's rate ("2gbit", "500mbit") in bits per second."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)):
        if text.endswith(unit):
            return float(text[:-len(unit)]) * scale
    return float(text)


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
        self.rank, self.size = self.comm.rank, self.comm.size
        self.accuracy = os.environ.get(ACCURACY_ENV, "fast")

    def all_reduce(self, x, out):
        self.comm.all_reduce(x, out=out, accuracy=self.accuracy)

    def barrier(self):
        self.comm.barrier()

    def algorithm(self):
        return self.comm.last_algorithm

    def describe(self):
        # The spin its waits poll (the library's default or PYCOLL_SPIN_US), where the engine has native options.
        native = getattr(getattr(self.comm, "_engine", None), "native", None)
        spin = f", spin {native.options['spin_ns'] / 1000:g} us" if hasattr(native, "options") else ""
        accuracy = f", accuracy {self.accuracy}" if self.accuracy != "fast" else ""
        return f"{self.comm.backend}/{self.comm.transport}{spin}{accuracy}"

    def close(self):
        self.comm.close()


class _Gloo:
    def __init__(self):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", init_method="env://")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

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


def open_comm(lib):
    if lib == "gloo":
        return _Gloo()
    if lib in multihost_peers.PEERS:
        return multihost_peers.Mlx() if lib == "mlx" else multihost_peers.Mpi()
    return _Pycoll(None if lib == "default" else lib)


def cpu_seconds():
    """This process's CPU time, every thread's, user and system: what a call costs the cores it shares."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(lib, size_list, report_dir):
    """One rank: every size in turn, untimed warm-up calls, then timed calls each after a barrier. Writes JSON to
    report_dir/RANK.json: its per-size times, CPU seconds per call (the barriers' included), the algorithm its
    last call ran (pycoll's; None for the peers) and how many results were wrong."""
    import numpy as np

    from pycoll.tools.bench.timing import time_iterations

    comm = open_comm(lib)
    world = comm.size
    times, cpu, algorithms, wrong = {}, {}, {}, 0
    for nbytes in size_list:
        count = nbytes // 4
        base = (np.arange(count) % 251).astype(np.float32)
        x, out = base + comm.rank, np.empty(count, np.float32)
        want = base * world + world * (world - 1) / 2  # exact in float32: below 2^24
        used = cpu_seconds()
        times[nbytes] = time_iterations(lambda: comm.all_reduce(x, out), comm.barrier, 2, iterations(nbytes))
        cpu[nbytes] = (cpu_seconds() - used) / (2 + iterations(nbytes))
        algorithms[nbytes] = getattr(comm, "algorithm", lambda: None)()
        wrong += int(not np.array_equal(out, want))
    report = {"rank": comm.rank, "times": times, "cpu": cpu, "algorithms": algorithms, "wrong": wrong,
              "what": comm.describe()}
    (Path(report_dir) / f"rank-{comm.rank}.json").write_text(json.dumps(report))
    comm.close()


def library(label):
    """The library a column's label names: "default/4@20" -> "default" (4 streams, a 20 us spin)."""
    return label.partition("@")[0].partition("/")[0]


def run_job(names, placement, label, args):
    """One job of the library `label` names ("tcp", "default/4": 4 streams, "default@20": PYCOLL_SPIN_US=20)
    over the hosts; returns every rank's report, one per rank."""
    python, (name, _, spin) = sys.executable, label.partition("@")
    lib, _, streams = name.partition("/")
    if lib.endswith(BEFORE):
        python, lib = args.before, lib[:-len(BEFORE)]
    pycoll_env = {"PYCOLL_TCP_STREAMS": streams} if streams else {}
    if spin:
        pycoll_env["PYCOLL_SPIN_US"] = spin
    pycoll_env[ACCURACY_ENV] = args.accuracy
    if args.nics > 1:
        pycoll_env["PYCOLL_SOCKET_IFNAME"] = ",".join(f"eth{k}" for k in range(args.nics))
    port, secret = free_port(), secrets.token_hex(32)  # a secret: the store is on a non-loopback address
    env = dict(os.environ, WORLD_SIZE=str(len(placement)), MASTER_ADDR=f"{SUBNET}.1", MASTER_PORT=str(port),
               GLOO_SOCKET_IFNAME="eth0", PYTHONSAFEPATH="1", PYCOLL_SECRET=secret,
               **(pycoll_env if lib not in ("gloo", *multihost_peers.PEERS) else {}))
    procs = []
    with tempfile.TemporaryDirectory(prefix="pycoll-multihost-") as workdir, \
            open(Path(workdir) / "ranks.log", "w+") as log:
        worker = [python, __file__, "--worker", lib, "--report-dir", workdir,
                  "--sizes", ",".join(map(str, args.size_list))]
        try:
            if lib in multihost_peers.PEERS:
                addresses = [f"{SUBNET}.{i + 1}" for i in range(len(names))]
                procs = multihost_peers.launch(lib, names, placement, addresses, worker, env, workdir, log)
            else:
                procs = [subprocess.Popen(["ip", "netns", "exec", names[host], *worker], stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True,
                                          env=dict(env, RANK=str(rank))) for rank, host in enumerate(placement)]
            for p in procs:
                p.wait(timeout=900)
            failed = [p.returncode for p in procs if p.returncode != 0]
            reports = [json.loads(f.read_text()) for f in sorted(Path(workdir).glob("rank-*.json"))]
            if failed or sorted(r["rank"] for r in reports) != list(range(len(placement))):
                log.seek(0)
                raise SystemExit(f"a {label} job failed (exit codes {failed}, reports from ranks "
                                 f"{sorted(r['rank'] for r in reports)}): {log.read()[-4000:]}")
            return reports
        finally:
            for p in procs:  # each in a process group of its own: an MPI's launcher takes its daemons along
                multihost_peers.stop(p)


def sent_by_hosts(names, nics):
    """Bytes each host has sent on its NICs so far."""
    return [sum(link_bytes(name, f"eth{k}")[1] for k in range(nics)) for name in names]


def crossing_floor(hosts, size_list):
    """The fewest bytes a host must send across its links in one job: per call, the 2 (H - 1) / H of the vector
    that any all-reduce moves across a host's link each way."""
    return sum(2 * (hosts - 1) / hosts * nbytes * (2 + iterations(nbytes)) for nbytes in size_list)


def measure_layout(hosts, per_host, args, tbf):
    """{lib: {bytes: [slowest rank's median per job]}}, the same of the busiest rank's CPU seconds per call, what
    each library ran (and at each size the algorithm of rank 0's last job), its wrong results and the least share
    of crossing_floor a host sent in one of its jobs, for one H x R layout."""
    placement = [r // per_host for r in range(hosts * per_host)]
    per_job, cpu = {lib: {} for lib in args.libs}, {lib: {} for lib in args.libs}
    what, wrong, crossed = {}, dict.fromkeys(args.libs, 0), dict.fromkeys(args.libs, float("inf"))
    floor = crossing_floor(hosts, args.size_list)
    tag = f"pcmh{os.getpid() % 100000}"  # this run's own namespaces: another run may be going
    with namespace_hosts(hosts, tag=tag, nics=args.nics) as names:
        if args.mtu != 1500:
            set_mtu(names, args.mtu, args.nics)
        shape_links(names, tbf, args.nics)
        args.mtu_seen = link_mtu(names[0], "eth0")
        for rep in range(args.reps):
            for lib in args.libs:  # interleaved: each repetition runs every library once
                print(f"{hosts}x{per_host} rep {rep + 1}/{args.reps}: {lib}", flush=True)
                before = sent_by_hosts(names, args.nics)
                reports = run_job(names, placement, lib, args)
                sent = [b - a for a, b in zip(before, sent_by_hosts(names, args.nics))]
                crossed[lib] = min(crossed[lib], min(sent) / floor if hosts > 1 else float("nan"))
                what[lib] = (reports[0]["what"], reports[0]["algorithms"])
                wrong[lib] += sum(r["wrong"] for r in reports)
                for nbytes in reports[0]["times"]:
                    slowest = max(statistics.median(r["times"][nbytes]) for r in reports)
                    per_job[lib].setdefault(int(nbytes), []).append(slowest)
                    cpu[lib].setdefault(int(nbytes), []).append(max(r["cpu"][nbytes] for r in reports))
    return per_job, cpu, what, wrong, crossed


def algorithms_line(what, libs):
    """'default: 4 B-16 KiB recursive_doubling, 64 KiB-64 MiB ring; ...': the algorithm each pycoll library's
    rank 0 ran at each size, consecutive sizes with the same one joined."""
    parts = []
    for lib in libs:
        runs = []  # [first size, last size, algorithm]
        for nbytes, name in sorted((int(n), a) for n, a in what[lib][1].items()):
            if name is None:
                break
            if runs and runs[-1][2] == name:
                runs[-1][1] = nbytes
            else:
                runs.append([nbytes, nbytes, name])
        spans = [f"{_fmt_size(a)}{'-' + _fmt_size(b) if b != a else ''} {name}" for a, b, name in runs]
        if spans:
            parts.append(f"{lib}: {', '.join(spans)}")
    return "Algorithm per size (rank 0's last call): " + "; ".join(parts) + "." if parts else ""


def table(per_job, cpu, libs, link_bytes_per_s, hosts):
    """Per size: each library's median over jobs with every job's number, and the default over the best peer;
    then, from 1 MiB, each library's share of the link (the module's docstring) and the CPU time a call cost its
    busiest rank (median over jobs; on shared cores, what one library leaves the others)."""
    rows = ["| size | " + " | ".join(f"{lib} (us)" for lib in libs) + " | default / best peer |",
            "|---" + "|---:" * (len(libs) + 1) + "|"]
    peers = [lib for lib in libs if lib in PEERS]
    default = next((lib for lib in libs if library(lib) == "default"), None)
    med = {nbytes: {lib: statistics.median(per_job[lib][nbytes]) for lib in libs} for nbytes in per_job[libs[0]]}
    for nbytes in sorted(med):
        best = min((med[nbytes][lib] for lib in peers), default=None)
        ratio = f"{med[nbytes][default] / best:.2f}" if best and default else "-"
        cells = [f"{med[nbytes][lib] * 1e6:.0f} ({' / '.join(f'{t * 1e6:.0f}' for t in per_job[lib][nbytes])})"
                 for lib in libs]
        rows.append(f"| {_fmt_size(nbytes)} | " + " | ".join(cells) + f" | {ratio} |")
    large = [nbytes for nbytes in sorted(med) if nbytes >= 1 << 20]
    if large and hosts > 1:
        rows += ["", "| size | " + " | ".join(f"{lib} (% of link)" for lib in libs) + " | "
                 + " | ".join(f"{lib} (CPU ms per call)" for lib in libs) + " |",
                 "|---" + "|---:" * (2 * len(libs)) + "|"]
        crossing = 2 * (hosts - 1) / hosts
        for nbytes in large:
            rows.append(f"| {_fmt_size(nbytes)} | " + " | ".join(
                f"{100 * crossing * nbytes / med[nbytes][lib] / link_bytes_per_s:.0f}%" for lib in libs) + " | "
                + " | ".join(f"{statistics.median(cpu[lib][nbytes]) * 1e3:.1f}" for lib in libs) + " |")
    return rows


RATIO_TOP = 2.5


def plot_layouts(layouts, path, title):
    """A PNG with a column per layout: each library's median time against the size (log-log), and below it that
    time over the fastest library's at the size (1 is the fastest; cut at RATIO_TOP, so that a library many times
    slower does not flatten the ones near 1). layouts: [(label, per_job, libs)]."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(layouts), figsize=(5.2 * len(layouts), 7.5), squeeze=False, sharex="col")
    for col, (label, per_job, libs) in enumerate(layouts):
        sizes = sorted(per_job[libs[0]])
        med = {lib: [statistics.median(per_job[lib][n]) for n in sizes] for lib in libs}
        fastest = [min(med[lib][i] for lib in libs) for i in range(len(sizes))]
        time_ax, ratio_ax = axes[0][col], axes[1][col]
        for lib in libs:
            style = dict(marker="o", markersize=3, linewidth=2.2 if library(lib) == "default" else 1.2, label=lib)
            time_ax.plot(sizes, [t * 1e6 for t in med[lib]], **style)
            ratio_ax.plot(sizes, [t / f for t, f in zip(med[lib], fastest)], **style)
        time_ax.set(title=label, ylabel="time (us)", yscale="log")
        ratio_ax.set(xlabel="size (B)", ylabel=f"time / fastest library's (cut at {RATIO_TOP:g})",
                     ylim=(0.9, RATIO_TOP))
        ratio_ax.axhline(1, color="grey", linewidth=0.8)
        for ax in (time_ax, ratio_ax):
            ax.set_xscale("log", base=2)
            ax.grid(True, which="both", alpha=0.3)
        time_ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def outliers(per_job, libs):
    """'lib at size: N.Nx' for every repetition more than twice its library's median at that size."""
    out = []
    for lib in libs:
        for nbytes, times in sorted(per_job[lib].items()):
            worst = max(times) / statistics.median(times)
            if worst > 2:
                out.append(f"{lib} at {_fmt_size(nbytes)}: {worst:.1f}x")
    return out


def plot_link(args, plotted):
    """Draw --plot and return the Markdown that shows it (a path relative to --out's folder), or nothing."""
    if not args.plot:
        return []
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    plot_layouts(plotted, args.plot, f"float32 sum all-reduce across namespace hosts, tbf rate {args.rate}, "
                                     f"{args.nics} NIC{'s' if args.nics > 1 else ''} per host")
    where = os.path.relpath(Path(args.plot).resolve(), Path(args.out).resolve().parent)
    return [f"![Each library's time per size and layout, and its time over the fastest library's]({where})", ""]


def _exit_on_signal(signum, _frame):
    raise SystemExit(f"stopped by signal {signum}")  # unwinds through every finally: processes, namespaces


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", choices=KNOWN, help=argparse.SUPPRESS)
    p.add_argument("--report-dir", help=argparse.SUPPRESS)
    p.add_argument("--sizes", help="comma-separated sizes (4k, 4m, ...) instead of 4 B to --max-mib")
    p.add_argument("--nics", type=int, choices=(1, 2), default=1, help="shaped veths per host")
    p.add_argument("--streams", default="",
                   help="PYCOLL_TCP_STREAMS values, comma-separated: one job each (default: unset, one per NIC)")
    p.add_argument("--spins", default="", help="PYCOLL_SPIN_US values, comma-separated: one job each")
    p.add_argument("--accuracy", default="fast", choices=("fast", "compensated"),
                   help="pycoll's accuracy= (the peers have only plain sums)")
    p.add_argument("--mtu", type=int, default=1500, help="every veth's MTU (both ends)")
    p.add_argument("--append", action="store_true", help="add a section to --out instead of replacing it")
    p.add_argument("--layouts", default="2x2,2x1", help="hosts x ranks per host, comma-separated")
    p.add_argument("--rate", default="2gbit")
    p.add_argument("--burst", default="1mb")
    p.add_argument("--latency", default="50ms")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--libs", default=",".join(LIBS))
    p.add_argument("--max-mib", type=int, default=64)
    p.add_argument("--before", help="an interpreter whose pycoll runs default-before and tcp-before")
    p.add_argument("--out", default=str(HERE / "results" / "multihost.md"))
    p.add_argument("--plot", help="also a PNG of every layout's times (matplotlib: the plot extra), linked from --out")
    args = p.parse_args()
    args.size_list = parse_sizes(args.sizes) if args.sizes else sizes(args.max_mib)
    if args.worker:
        return worker(args.worker, args.size_list, args.report_dir)
    args.libs_text, args.libs = args.libs, args.libs.split(",")
    unknown = sorted(set(args.libs) - set(KNOWN))
    if unknown:
        p.error(f"--libs: unknown {unknown}; choose from {', '.join(KNOWN)}")
    skipped = {lib: multihost_peers.unavailable(lib) for lib in args.libs if lib in multihost_peers.PEERS}
    skipped = {lib: why for lib, why in skipped.items() if why}
    for lib, why in skipped.items():
        print(f"skipping {lib}: {why}", file=sys.stderr)
    args.libs = [lib for lib in args.libs if lib not in skipped]
    if args.before:
        args.libs += [lib + BEFORE for lib in PYCOLL_LIBS if lib in args.libs]
    streams = args.streams.split(",")
    if args.streams:  # one job per stream count for each pycoll library
        args.libs = [f"{lib}/{n}" if lib not in PEERS else lib for lib in args.libs for n in streams
                     if lib not in PEERS or n == streams[0]]
    if args.spins:  # one job per spin for each pycoll library
        spins = args.spins.split(",")
        args.libs = [f"{lib}@{us}" if lib not in PEERS else lib for lib in args.libs for us in spins
                     if lib not in PEERS or us == spins[0]]
    layouts = [tuple(int(v) for v in item.split("x")) for item in args.layouts.split(",")]
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    tbf = ["tbf", "rate", args.rate, "burst", args.burst, "latency", args.latency]
    start, load = time.monotonic(), os.getloadavg()
    sections, plotted, level = [], [], "##" if args.append else "#"
    if args.plot:  # before any job runs, not after minutes of them
        from pycoll.tools.bench.plot import require_matplotlib

        require_matplotlib()
    try:
        for hosts, per_host in layouts:
            per_job, cpu, what, wrong, crossed = measure_layout(hosts, per_host, args, tbf)
            plotted.append((f"{hosts} hosts x {per_host} rank{'s' if per_host > 1 else ''}", per_job, args.libs))
            short = [lib for lib in args.libs if crossed[lib] < 1]
            if short:  # it did not cross the network: it found a shortcut between the namespace hosts
                raise SystemExit(f"{', '.join(short)} sent less across a host's link than an all-reduce must "
                                 f"({', '.join(f'{crossed[lib]:.2f}' for lib in short)} of it)")
            link = parse_rate(args.rate) / 8 * args.nics
            sections += [f"{level}# {hosts} hosts x {per_host} rank{'s' if per_host > 1 else ''}"
                         f"{f', {args.nics} NICs each' if args.nics > 1 else ''}", "",
                         "Ran: " + "; ".join(f"{lib}: {what[lib][0]}" for lib in args.libs) + ".",
                         algorithms_line(what, args.libs), "",
                         "Wrong results over every call: " + ", ".join(f"{lib} {n}" for lib, n in wrong.items())
                         + ". Least bytes a host sent in a job, over what an all-reduce must send: "
                         + ", ".join(f"{lib} {crossed[lib]:.2f}" for lib in args.libs)
                         + ". Repetitions over twice their median: "
                         + (", ".join(outliers(per_job, args.libs)) or "none") + ".", "",
                         *table(per_job, cpu, args.libs, link, hosts), ""]
    except HostsUnavailable as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        return
    kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    libs = args.libs_text
    spin = f"PYCOLL_SPIN_US={os.environ['PYCOLL_SPIN_US']} " if "PYCOLL_SPIN_US" in os.environ else ""
    title = "All-reduce across network-namespace hosts"
    if args.append:
        title += (f": {args.nics} NIC{'s' if args.nics > 1 else ''} per host, PYCOLL_TCP_STREAMS "
                  f"{args.streams or 'unset (one per NIC)'}")
    shape_of = f"--sizes {args.sizes}" if args.sizes else f"--max-mib {args.max_mib}"
    doc = [f"{level} {title}", "",
           f"Produced by `{spin}python bench/multihost.py --layouts {args.layouts} --rate {args.rate} "
           f"--burst {args.burst} --latency {args.latency} --reps {args.reps} --libs {libs} {shape_of} "
           f"--nics {args.nics}{' --streams ' + args.streams if args.streams else ''}"
           f"{' --spins ' + args.spins if args.spins else ''}"
           f"{f' --mtu {args.mtu}' if args.mtu != 1500 else ''}"
           f"{' --accuracy ' + args.accuracy if args.accuracy != 'fast' else ''}"
           f"{' --before ' + args.before if args.before else ''}"
           f"{' --append' if args.append else ''}{' --plot ' + args.plot if args.plot else ''}` (as root) in "
           f"{time.monotonic() - start:.0f} s.", "", machine(),
           f"- Kernel {kernel}.",
           f"- Load: 1/5/15-minute load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it started, "
           f"{os.getloadavg()[0]:.1f} at the end (whatever else runs on the machine shares its cores; "
           "the note beside a run says what did).", "",
           f"Setup: network-namespace hosts joined by veth pairs to a bridge (tests/netns_hosts.py), {args.nics} "
           f"per host (ethK to bridge K: one network per NIC), MTU {args.mtu_seen} (read back from host 0's eth0); "
           "on both ends of each veth `tc qdisc add ... root "
           f"{' '.join(tbf)}` (no netem in this kernel). Rank r on host r // R. float32 sum, out of place, "
           "integer-valued data checked exactly on every rank.", "",
           f"Method: {args.reps} jobs per library, interleaved (default, tcp, gloo, default, ...). In a job, per "
           "size, 2 untimed calls, then 200 (up to 4 KiB), 50 (up to 256 KiB), 10 (up to 4 MiB) or 3 timed calls, "
           "each after a barrier; a rank's median; the slowest rank's median. The table: the median over jobs "
           "(microseconds), each job's number in brackets (the spread between repetitions); `default / best peer` "
           "divides the default backend's by the fastest peer's that is not pycoll. `lib/N`: PYCOLL_TCP_STREAMS=N; "
           "`lib@S`: PYCOLL_SPIN_US=S. "
           "The peers: bench/multihost_peers.py (openmpi: Debian's Open MPI under mpirun, ob1 with TCP between "
           "hosts, busy-polling; openmpi-yield: the same with mpi_yield_when_idle 1; mpich: MPICH from the package "
           "index under hydra, UCX_TLS=tcp,self; mlx: MLX's ring backend, CPU build).",
           "", *[f"Skipped {lib}: {why}." for lib, why in skipped.items()], *([""] if skipped else []),
           *plot_link(args, plotted), *sections]
    if args.append and Path(args.out).exists():  # a missing file is begun by the section
        Path(args.out).write_text(Path(args.out).read_text().rstrip("\n") + "\n\n" + "\n".join(doc))
    else:
        Path(args.out).write_text("\n".join(doc))
    print("\n".join(doc))


if __name__ == "__main__":
    main()
