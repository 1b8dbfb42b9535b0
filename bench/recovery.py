"""Recovery from a lost rank: kill -9 of one rank at a random point of a loop of all-reduces, and the time from
the kill until every survivor has caught the PeerFailure, shrunk the communicator and finished its next
all-reduce on the shrunk one (with the right sum). p50 and p99 over many kills, per backend.

    python bench/recovery.py [--ranks 4] [--kills 20] [--backends tcp,shm] [--markdown bench/results/recovery.md]

Each kill is a job of its own on this host (127.0.0.1): the ranks all-reduce 16 KiB in a loop, this process
kills a random rank after a random 50-300 ms, and the survivors report when they caught the failure and when
their all-reduce on the shrunk communicator returned (CLOCK_MONOTONIC, one clock for every process of the
host)."""

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


def one_kill(n, backend, rng):
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
        time.sleep(rng.uniform(0.05, 0.3))
        victim = rng.randrange(n)
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
        return victim, max(rep["caught"] for rep in reports) - killed, max(rep["done"] for rep in reports) - killed
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


def main():
    if "--rank-worker" in sys.argv:
        return rank_main()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--backends", default="tcp,shm")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--markdown", help="write the results there")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    state = machine()
    started = time.monotonic()
    rows = []
    for backend in args.backends.split(","):
        detect, recover, victims = [], [], []
        for _ in range(args.kills):
            victim, caught, done = one_kill(args.ranks, backend, rng)
            victims.append(victim)
            detect.append(caught * 1e3)
            recover.append(done * 1e3)
        row = (backend, args.kills, percentile(detect, 50), percentile(detect, 99), percentile(recover, 50),
               percentile(recover, 99), max(recover), ", ".join(str(v) for v in sorted(set(victims))))
        rows.append(row)
        print("{}: {} kills, caught p50 {:.1f} ms p99 {:.1f} ms; recovered p50 {:.1f} ms p99 {:.1f} ms "
              "(max {:.1f} ms); ranks killed: {}".format(*row), flush=True)
    if args.markdown:
        command = "python bench/recovery.py " + " ".join(sys.argv[1:])
        header = ("| backend | kills | caught p50 (ms) | caught p99 (ms) | recovered p50 (ms) | recovered p99 (ms) | "
                  "max (ms) | ranks killed |")
        table = "\n".join("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {} |".format(*row) for row in rows)
        with open(args.markdown, "w") as f:
            f.write(f"""# Recovery from a killed rank: {args.ranks} ranks on one host

Produced by `{command}` in {time.monotonic() - started:.0f} s.

{state}, {os.getloadavg()[0]:.1f} at the end.

Method: each kill is a job of its own; its ranks all-reduce 16 KiB (float32 sum) in a loop, and after a random
50-300 ms one rank chosen at random gets SIGKILL. Every survivor catches the PeerFailure, calls `shrink()` and
all-reduces its rank + 1 on the shrunk communicator (the sum is checked). "caught": from the kill until the last
survivor caught the PeerFailure; "recovered": until the last survivor's all-reduce on the shrunk communicator
returned. CLOCK_MONOTONIC, one clock for every process of the host. pycoll alone: Open MPI ULFM and torchft
were not measured here.

{header}
| --- | --- | --- | --- | --- | --- | --- | --- |
{table}
""")


if __name__ == "__main__":
    main()
