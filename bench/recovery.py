"""Recovery from a lost rank: kill -9 of one rank at a random point of a loop of all-reduces, and the time from
the kill until every survivor has caught the PeerFailure, shrunk the communicator and finished its next
all-reduce on the shrunk one (with the right sum). p50 and p99 over many kills, per backend, beside the peers
of recovery_peers.py (Open MPI 5 ULFM, restarting the job under torchrun) measured the same way in the same run.

    python bench/recovery.py [--ranks 4] [--kills 20] [--backends tcp,shm] [--peers ulfm,torchrun]
        [--markdown bench/results/recovery.md]

Each kill is a job of its own on this host (127.0.0.1): the ranks all-reduce 16 KiB in a loop, this process
kills a random rank after a random 50-300 ms, and the survivors report when they caught the failure and when
their all-reduce on the shrunk communicator returned (CLOCK_MONOTONIC, one clock for every process of the
host). The kills interleave: each round draws one victim and one delay and runs them on every backend and peer
in turn. A peer that cannot run here (recovery_peers.py says why) is left out with its reason."""

import argparse
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import time

from recovery_peers import PEERS, openmpi_version


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
    y = np.array([rank + 1.0])
    new.all_reduce(y)
    done = time.monotonic()
    print(json.dumps({"caught": caught, "done": done, "sum": float(y[0]), "ranks": new.ranks}), flush=True)
    new.close()
    comm.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_kill(n, backend, victim, delay):
    port = free_port()
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), PYCOLL_BACKEND=backend, PYTHONUNBUFFERED="1")
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank-worker"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    try:
        for p in procs:
            line = p.stdout.readline()
            if not json.loads(line or "{}").get("ready"):
                raise RuntimeError(f"a rank did not start: {p.stderr.read()}")
        time.sleep(delay)
        killed = time.monotonic()
        os.kill(procs[victim].pid, signal.SIGKILL)
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
        return max(rep["caught"] for rep in reports) - killed, max(rep["done"] for rep in reports) - killed
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
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"- CPU: {cpu}, {os.cpu_count()} logical cores; {platform.platform()}\n"
            f"- Python {platform.python_version()}\n"
            f"- Load: 1/5/15-minute load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it started")


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


def pycoll_kill(backend):
    return lambda n, victim, delay: one_kill(n, backend, victim, delay)


def main():
    if "--rank-worker" in sys.argv:
        return rank_main()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--backends", default="tcp,shm", help="pycoll's backends ('': none)")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"of {', '.join(PEERS)} ('': none)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--markdown", help="write the results there")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    state = machine()
    started = time.monotonic()
    # (label, one_kill(n, victim, delay)) for everything measured, in the order each round runs them.
    runs, skipped = [], []
    for backend in filter(None, args.backends.split(",")):
        runs.append((f"pycoll {backend}", pycoll_kill(backend)))
    for name in filter(None, args.peers.split(",")):
        if name not in PEERS:
            parser.error(f"--peers: unknown peer {name!r} (known: {', '.join(PEERS)})")
        label, unavailable, kill = PEERS[name]
        why = unavailable()
        if why:
            print(f"{name}: skipped: {why}", flush=True)
            skipped.append(f"{label}: not measured, {why}")
            continue
        runs.append((label, kill))
    if not runs:
        parser.error("nothing to measure: no backend, and no peer that can run here")
    ran = [name for name in filter(None, args.peers.split(",")) if PEERS[name][0] in dict(runs)]
    times = {label: ([], [], []) for label, _ in runs}  # caught, recovered (ms), victims
    for i in range(args.kills):
        victim, delay = rng.randrange(args.ranks), rng.uniform(0.05, 0.3)
        for label, kill in runs:
            caught, done = kill(args.ranks, victim, delay)
            times[label][0].append(caught * 1e3)
            times[label][1].append(done * 1e3)
            times[label][2].append(victim)
            print(f"[{i + 1}/{args.kills}] {label}: rank {victim} killed, caught {caught * 1e3:.1f} ms, "
                  f"recovered {done * 1e3:.1f} ms", flush=True)
    rows = []
    for label, (detect, recover, victims) in times.items():
        row = (label, args.kills, percentile(detect, 50), percentile(detect, 99), percentile(recover, 50),
               percentile(recover, 99), max(recover), ", ".join(str(v) for v in sorted(set(victims))))
        rows.append(row)
        print("{}: {} kills, caught p50 {:.1f} ms p99 {:.1f} ms; recovered p50 {:.1f} ms p99 {:.1f} ms "
              "(max {:.1f} ms); ranks killed: {}".format(*row), flush=True)
    if args.markdown:
        write_markdown(args, rows, skipped, state, versions(ran), time.monotonic() - started)


def ratios(rows):
    """Each peer's recovered p50 and p99 over each pycoll backend's, as sentences."""
    ours = [r for r in rows if r[0].startswith("pycoll ")]
    return " ".join(f"{r[0]}: " + ", ".join(f"{r[4] / o[4]:.2f}x {o[0]}'s p50 and {r[5] / o[5]:.2f}x its p99"
                                            for o in ours) + "."
                    for r in rows if not r[0].startswith("pycoll ") and ours)


def write_markdown(args, rows, skipped, state, versions_line, seconds):
    command = "python bench/recovery.py " + " ".join(sys.argv[1:])
    header = ("| backend | kills | caught p50 (ms) | caught p99 (ms) | recovered p50 (ms) | recovered p99 (ms) | "
              "max (ms) | ranks killed |")
    table = "\n".join("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {} |".format(*row) for row in rows)
    left_out = "".join(f"\n- {line}" for line in skipped)
    with open(args.markdown, "w") as f:
        f.write(f"""# Recovery from a killed rank: {args.ranks} ranks on one host

Produced by `{command}` in {seconds:.0f} s.

{state}, {os.getloadavg()[0]:.1f} at the end.
{versions_line}{left_out}

Method: each kill is a job of its own; its ranks all-reduce 16 KiB (float32 sum) in a loop, and after a random
50-300 ms one rank chosen at random gets SIGKILL. Each round draws one victim and one delay and runs them on
every row below in turn, so the rows interleave and share the machine's load. pycoll: every survivor catches
the PeerFailure, calls `shrink()` and all-reduces its rank + 1 on the shrunk communicator. Open MPI ULFM
(`mpiexec --with-ft ulfm`, mpi4py): every survivor catches the MPI error, calls `Revoke()`, `Shrink()` and
`Allreduce`s its rank + 1 on the shrunk communicator. torchrun: the job's torchrun sees the dead worker, stops
the others and exits; a torchrun job of the survivors is started at once, and its ranks all-reduce their old
rank + 1 (gloo). The sum is checked everywhere. "caught": from the kill until the last survivor caught the
failure (torchrun: until the failed job had ended); "recovered": until the last survivor's all-reduce after the
failure returned. CLOCK_MONOTONIC, one clock for every process of the host.

{header}
| --- | --- | --- | --- | --- | --- | --- | --- |
{table}

{ratios(rows)}
""")


if __name__ == "__main__":
    main()
