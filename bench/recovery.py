"""Recovery from a lost rank: kill -9 of one rank at a random point of a loop of all-reduces, and the time from
the kill until every survivor has caught the PeerFailure, shrunk the communicator and finished its next
all-reduce on the shrunk one (with the right sum). p50 and p99 over many kills, per backend, beside the peers
of recovery_peers.py (Open MPI 5 ULFM, restarting the job under torchrun) measured the same way in the same run.

    python bench/recovery.py [--ranks 4] [--kills 20] [--backends tcp,shm] [--peers ulfm,torchrun]
        [--markdown bench/results/recovery.md]
    python bench/recovery.py --hosts 2 --ranks 8 --kills 50 --backends default --markdown bench/results/recovery.md

Each kill is a job of its own on this host (127.0.0.1): the ranks all-reduce 16 KiB in a loop, this process
kills a random rank after a random 50-300 ms, and the survivors report when they caught the failure and when
their all-reduce on the shrunk communicator returned (CLOCK_MONOTONIC, one clock for every process of the
machine). The kills interleave: each round draws one victim and one delay and runs them on every backend and
peer in turn. A peer that cannot run here (recovery_peers.py says why) is left out with its reason; peers run
on one host only. With --hosts H (root, iproute2) the ranks are spread evenly over H network-namespace hosts
(tests/netns_hosts.py), rank 0's host serving the store; backend "default" leaves PYCOLL_BACKEND unset, as a
job that spans hosts runs by default (shared memory within a host, TCP between hosts). That mode writes its own
section of the markdown file, keeping the rest."""

import argparse
import contextlib
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the ranks run with PYTHONSAFEPATH
from cpu_model import cpu_model  # noqa: E402
from netns_hosts import SUBNET, namespace_hosts  # noqa: E402
from recovery_peers import PEERS, openmpi_version  # noqa: E402


def rank_main():
    import numpy as np

    import pycoll

    comm = pycoll.init(timeout=20.0)
    rank = comm.rank
    x = np.ones(4096, dtype=np.float32)
    print('{"ready": true}', flush=True)
    try:
        while True:
            comm.all_reduce(x)
    except pycoll.PeerFailure:
        caught = time.monotonic()
    new = comm.shrink()
    shrunk = time.monotonic()
    y = np.array([rank + 1.0])
    new.all_reduce(y)
    done = time.monotonic()
    print(json.dumps({"caught": caught, "shrunk": shrunk, "done": done, "sum": float(y[0]), "ranks": new.ranks,
                      "transport": comm.transport}), flush=True)
    new.close()
    comm.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_kill(n, backend, victim, delay, hosts=None):
    """hosts: the network-namespace hosts to spread the ranks over, evenly and in rank order (None: this one)."""
    port = free_port()
    procs = []
    per_host = -(-n // len(hosts)) if hosts else n
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r % per_host),
                   MASTER_ADDR=f"{SUBNET}.1" if hosts else "127.0.0.1", MASTER_PORT=str(port), PYTHONUNBUFFERED="1",
                   PYTHONSAFEPATH="1")
        env.pop("PYCOLL_BACKEND", None)
        if backend != "default":
            env["PYCOLL_BACKEND"] = backend
        wrap = ["ip", "netns", "exec", hosts[r // per_host]] if hosts else []
        procs.append(subprocess.Popen([*wrap, sys.executable, __file__, "--rank-worker"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        for p in procs:
            line = p.stdout.readline()
            if not json.loads(line or "{}").get("ready"):
                raise RuntimeError(f"a rank did not start: {p.stderr.read()}")
        time.sleep(delay)
        killed = time.monotonic()
        os.kill(procs[victim].pid, signal.SIGKILL)
        procs[victim].wait()  # reaped: the kernel has taken it down (its sockets closed, its pid gone)
        died = time.monotonic()
        reports = []
        for r, p in enumerate(procs):
            if r == victim:
                continue
            out, err = p.communicate(timeout=60)
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            if p.returncode != 0 or not lines:
                raise RuntimeError(f"rank {r} exited {p.returncode}: {err}")
            reports.append(json.loads(lines[-1]))
        want = float(sum(r + 1 for r in range(n) if r != victim))
        if any(rep["sum"] != want for rep in reports):
            raise RuntimeError(f"wrong sum after the shrink: {reports}")
        if hosts and any(rep["transport"] != "shm+tcp" for rep in reports):
            raise RuntimeError(f"expected shared memory within the hosts and TCP between them: {reports}")
        return {"died": died - killed, **{when: max(rep[when] for rep in reports) - killed
                                          for when in ("caught", "shrunk", "done")}}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def machine():
    load = os.getloadavg()
    return (f"- CPU: {cpu_model()}, {os.cpu_count()} logical cores; {platform.platform()}\n"
            f"- Python {platform.python_version()}\n"
            f"- Load: 1/5/15-minute load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it started")


def main():
    if "--rank-worker" in sys.argv:
        return rank_main()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--backends", default="tcp,shm", help="pycoll's backends ('': none)")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"of {', '.join(PEERS)} ('': none; one host only)")
    parser.add_argument("--hosts", type=int, default=1, help="network-namespace hosts to spread the ranks over")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--markdown", help="write the results there")
    args = parser.parse_args()
    peers = [name for name in args.peers.split(",") if name] if args.hosts == 1 else []
    for name in peers:
        if name not in PEERS:
            parser.error(f"--peers: unknown peer {name!r} (known: {', '.join(PEERS)})")
    rng = random.Random(args.seed)
    state = machine()
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        hosts = stack.enter_context(namespace_hosts(args.hosts, tag="pcrec")) if args.hosts > 1 else None
        # (label, kill(victim, delay) -> {"died", "caught", "shrunk", "done"}: the peers have no died/shrunk)
        runs, skipped, ran = [], [], []
        for backend in filter(None, args.backends.split(",")):
            runs.append((backend if hosts else f"pycoll {backend}",
                         lambda v, d, b=backend: one_kill(args.ranks, b, v, d, hosts)))
        for name in peers:
            label, unavailable, kill = PEERS[name]
            why = unavailable()
            if why:
                print(f"{name}: skipped: {why}", flush=True)
                skipped.append(f"{label}: not measured, {why}")
                continue
            ran.append(name)
            runs.append((label, lambda v, d, k=kill: dict(zip(("caught", "done"), k(args.ranks, v, d)))))
        if not runs:
            parser.error("nothing to measure: no backend, and no peer that can run here")
        rows = measure(args, runs, rng)
    if args.markdown and hosts:
        write_hosts_section(args, state, started, rows)
    elif args.markdown:
        write_one_host(args, state, started, rows, skipped, versions(ran))


def versions(peers):
    """The versions of what ran, as a line."""
    import importlib.metadata

    import pycoll

    out = [f"pycoll {pycoll.__version__}"]
    if "ulfm" in peers:
        out.append(openmpi_version())
    if "torchrun" in peers:
        out.append(f"torch {importlib.metadata.version('torch')}")
    return "- " + "; ".join(out)


TIMES = ("died", "caught", "shrunk", "done")


def measure(args, runs, rng):
    """One row per run: args.kills kills of a random rank, the runs interleaved (each round one victim and one
    delay for all)."""
    times = {label: ({t: [] for t in TIMES}, []) for label, _ in runs}
    for i in range(args.kills):
        victim, delay = rng.randrange(args.ranks), rng.uniform(0.05, 0.3)
        for label, kill in runs:
            got = kill(victim, delay)
            for t in TIMES:
                if t in got:
                    times[label][0][t].append(got[t] * 1e3)
            times[label][1].append(victim)
            print(f"[{i + 1}/{args.kills}] {label}: rank {victim} killed, caught {got['caught'] * 1e3:.1f} ms, "
                  f"recovered {got['done'] * 1e3:.1f} ms", flush=True)
    rows = []
    for label, (values, victims) in times.items():
        row = (label, args.kills, *(percentile(values[t], q) if values[t] else None for t in TIMES for q in (50, 99)),
               max(values["done"]), ", ".join(str(v) for v in sorted(set(victims))))
        rows.append(row)
        print(f"{label}: {args.kills} kills; " + "; ".join(
            f"{'recovered' if t == 'done' else t} p50 {row[2 + 2 * k]:.1f} ms p99 {row[3 + 2 * k]:.1f} ms"
            for k, t in enumerate(TIMES)
            if row[2 + 2 * k] is not None) + f" (max {row[-2]:.1f} ms); ranks killed: {row[-1]}", flush=True)
    return rows


def ratios(rows):
    """Each peer's recovered p50 and p99 over each pycoll backend's, as sentences."""
    ours = [r for r in rows if r[0].startswith("pycoll ")]
    return " ".join(f"{r[0]}: " + ", ".join(f"{r[8] / o[8]:.2f}x {o[0]}'s p50 and {r[9] / o[9]:.2f}x its p99"
                                            for o in ours) + "."
                    for r in rows if not r[0].startswith("pycoll ") and ours)


HEADER = ("| backend | kills | died p50 (ms) | died p99 (ms) | caught p50 (ms) | caught p99 (ms) | shrunk p50 (ms) | "
          "shrunk p99 (ms) | recovered p50 (ms) | recovered p99 (ms) | max (ms) | ranks killed |\n|" + " --- |" * 12)
METHOD = """Method: each kill is a job of its own; its ranks all-reduce 16 KiB (float32 sum) in a loop, and after a
random 50-300 ms one rank chosen at random gets SIGKILL. Every survivor catches the PeerFailure, calls `shrink()` and
all-reduces its rank + 1 on the shrunk communicator (the sum is checked). "died": from the kill until this
process had reaped the killed rank (the kernel took it down: on loaded cores it must be scheduled to exit,
and until then its sockets stay open and its pid lives); "caught": until the last survivor caught the
PeerFailure; "shrunk": until the last survivor's `shrink()` returned; "recovered": until the
last survivor's all-reduce on the shrunk communicator returned."""


def table(rows):
    return "\n".join("| {} | {} |".format(*row[:2]) + "".join(" - |" if v is None else f" {v:.1f} |"
                                                              for v in row[2:-1]) + f" {row[-1]} |" for row in rows)


def command():
    return "python bench/recovery.py " + " ".join(sys.argv[1:])


PEERS_METHOD = """Each round draws one victim and one delay and runs them on every row in turn, so the rows
interleave and share the machine's load. Open MPI ULFM (`mpiexec --with-ft ulfm`, mpi4py): every survivor
catches the MPI error, calls `Revoke()`, `Shrink()` and `Allreduce`s its rank + 1 on the shrunk communicator.
torchrun: the job's torchrun sees the dead worker, stops the others and exits; a torchrun job of the survivors
is started at once, and its ranks all-reduce their old rank + 1 (gloo); its "caught" is when the failed job had
ended. The peers have no "died" or "shrunk" (-)."""


def write_one_host(args, state, started, rows, skipped, versions_line):
    """The file's head; the sections other runs wrote below it (## headings) are kept."""
    path = Path(args.markdown)
    old = path.read_text() if path.exists() else ""
    rest = old[old.index("\n## ") + 1:] if "\n## " in old else ""
    path.write_text(f"""# Recovery from a killed rank: {args.ranks} ranks on one host

Produced by `{command()}` in {time.monotonic() - started:.0f} s.

{state}, {os.getloadavg()[0]:.1f} at the end.
{versions_line}{"".join(f"{chr(10)}- {line}" for line in skipped)}

{METHOD} CLOCK_MONOTONIC, one clock for every process of the host. {PEERS_METHOD}

{HEADER}
{table(rows)}

{ratios(rows)}
""" + ("\n" + rest if rest else ""))


def write_hosts_section(args, state, started, rows):
    """This mode's own section of the file, replaced if there, else added at the end."""
    path = Path(args.markdown)
    heading = f"## {args.ranks} ranks on {args.hosts} network-namespace hosts"
    kernel = platform.release()
    section = f"""{heading}

Produced by `{command()}` in {time.monotonic() - started:.0f} s, as root.

{state}, {os.getloadavg()[0]:.1f} at the end; kernel {kernel}.

Setup: {args.hosts} network-namespace hosts joined by veth pairs to a bridge (tests/netns_hosts.py), ranks spread
evenly in rank order ({args.ranks // args.hosts} per host), the store on rank 0's host. Backend "default": no
PYCOLL_BACKEND, so the job runs over shared memory within each host and TCP between the hosts (transport
`shm+tcp`, checked on every survivor).

{METHOD} CLOCK_MONOTONIC, one clock for every process of the machine (namespaces share it).

{HEADER}
{table(rows)}
"""
    old = path.read_text() if path.exists() else ""
    if heading + "\n" in old:
        start = old.index(heading + "\n")
        end = old.find("\n## ", start + len(heading))
        new = old[:start] + section + (old[end + 1:] if end >= 0 else "")
        new = new.replace(section + "## ", section + "\n## ")
    else:
        new = old.rstrip("\n") + "\n\n" + section if old else section
    path.write_text(new)


if __name__ == "__main__":
    main()
