"""Produce bench/results/hierarchical.md: a float32 sum all-reduce across two network-namespace hosts of two ranks
each, the link between them rate-limited with tc tbf, hierarchical against the flat ring and auto, in one job,
interleaved, several jobs; the slowest rank's time per call, medians. Every result is checked exactly
(integer-valued data). Needs root and iproute2 (tests/netns_hosts.py).

    python bench/hierarchical_netns.py [--rate 400mbit] [--burst 1mb] [--latency 400ms] [--mib 16] [--jobs 3]
                                       [--repeats 5] [--out bench/results/hierarchical.md]

Run from the repository root; each rank is `ip netns exec HOST python bench/hierarchical_netns.py --worker`.
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
from allreduce_peers import machine  # noqa: E402  -- one copy of the machine description
from multiproc import free_port  # noqa: E402
from netns_hosts import SUBNET, namespace_hosts  # noqa: E402

ALGORITHMS = ("ring", "hierarchical", "auto")
PLACEMENT = (0, 0, 1, 1)  # ranks 0, 1 on host 0; 2, 3 on host 1: the flat ring crosses the link twice


def worker(mib, repeats):
    """One rank: `repeats` rounds of every algorithm, interleaved, each call after a barrier; prints JSON with
    the slowest rank's seconds per call, per algorithm, and the algorithm auto ran."""
    import numpy as np

    import pycoll

    comm = pycoll.init(timeout=120)
    count = (mib << 20) // 4
    base = (np.arange(count) % 251).astype(np.float32)
    want = base * comm.size + comm.size * (comm.size - 1) / 2  # exact in float32: below 2^24
    x, out = base + comm.rank, np.empty(count, np.float32)
    times = {name: [] for name in ALGORITHMS}
    wrong, auto_ran = 0, None
    for name in ALGORITHMS:  # untimed: first use sets up scratch space
        comm.all_reduce(x, out=out, algorithm=name)
    for _ in range(repeats):
        for name in ALGORITHMS:
            comm.barrier()
            t = time.perf_counter()
            comm.all_reduce(x, out=out, algorithm=name)
            elapsed = np.array([time.perf_counter() - t])
            if name == "auto":
                auto_ran = comm.last_algorithm
            wrong += int(not np.array_equal(out, want))
            comm.all_reduce(elapsed, op="max")
            times[name].append(float(elapsed[0]))
    print(json.dumps({"rank": comm.rank, "times": times, "wrong": wrong, "auto_ran": auto_ran,
                      "transport": comm.transport, "hosts": comm.hosts}))
    comm.close()


def run_job(names, args):
    port = free_port()
    procs = []
    for rank, host in enumerate(PLACEMENT):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(len(PLACEMENT)), MASTER_ADDR=f"{SUBNET}.1",
                   MASTER_PORT=str(port), PYTHONSAFEPATH="1")
        procs.append(subprocess.Popen(["ip", "netns", "exec", names[host], sys.executable, __file__, "--worker",
                                       "--mib", str(args.mib), "--repeats", str(args.repeats)],
                                      env=env, stdout=subprocess.PIPE, text=True))
    reports = []
    try:
        for p in procs:
            stdout, _ = p.communicate(timeout=600)
            if p.returncode != 0:
                raise SystemExit(f"a rank exited with {p.returncode}: {stdout}")
            reports.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return reports


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rate", default="400mbit")
    p.add_argument("--burst", default="1mb")
    p.add_argument("--latency", default="400ms")
    p.add_argument("--mib", type=int, default=16)
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=str(HERE / "results" / "hierarchical.md"))
    args = p.parse_args()
    if args.worker:
        return worker(args.mib, args.repeats)
    start, load = time.monotonic(), os.getloadavg()
    tbf = ["tbf", "rate", args.rate, "burst", args.burst, "latency", args.latency]
    with namespace_hosts(2, tag="pchb") as names:
        for name in names:  # each host's egress: both directions of the link between them
            subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "eth0", "root", *tbf],
                           check=True, capture_output=True, text=True)
        jobs = [run_job(names, args) for _ in range(args.jobs)]
    elapsed = time.monotonic() - start
    # A job's time per algorithm: the median over its repeats of the slowest rank's time (the same on every
    # rank after the max all-reduce); then the median over jobs.
    per_job = {name: [statistics.median(job[0]["times"][name]) for job in jobs] for name in ALGORITHMS}
    med = {name: statistics.median(v) for name, v in per_job.items()}
    wrong = sum(rep["wrong"] for job in jobs for rep in job)
    auto_ran = sorted({rep["auto_ran"] for job in jobs for rep in job})
    rows = [f"| {name} | {med[name] * 1e3:.1f} | {' / '.join(f'{t * 1e3:.1f}' for t in per_job[name])} | "
            f"{med[name] / med['ring']:.2f} |" for name in ALGORITHMS]
    transport = jobs[0][0]["transport"]
    kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    doc = ["# Hierarchical all-reduce across two rate-limited hosts", "",
           f"Produced by `python bench/hierarchical_netns.py --rate {args.rate} --burst {args.burst} "
           f"--latency {args.latency} --mib {args.mib} --jobs {args.jobs} --repeats {args.repeats}` in "
           f"{elapsed:.0f} s.", "", machine(), f"- Kernel {kernel}.",
           f"- Load: 1/5/15-minute load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it started, "
           f"{os.getloadavg()[0]:.1f} at the end (whatever else runs on the machine shares its cores; "
           "the note beside a run says what did).", "",
           f"Setup: two network-namespace hosts joined by veth pairs to a bridge (tests/netns_hosts.py); on each "
           f"host `tc qdisc add dev eth0 root {' '.join(tbf)}` (netem is not in this kernel). Ranks 0, 1 on host 0, "
           f"ranks 2, 3 on host 1 (backend cpu, transport {transport}: the two ranks of a host talk over "
           f"{'shared memory' if 'shm' in transport else 'loopback TCP'}). {args.mib} MiB float32 sum, out of "
           f"place, integer-valued data checked exactly on every rank.", "",
           f"Method: {args.jobs} jobs; in each, {args.repeats} rounds of ring, hierarchical, auto interleaved, each "
           "call after a barrier; a call's time is the slowest rank's. Per job the median of its rounds, then the "
           "median of the jobs.", "",
           "| algorithm | median (ms) | per job (ms) | / ring |", "|---|---:|---:|---:|", *rows, "",
           f"auto ran: {', '.join(auto_ran)}. Wrong results over every call of every job: {wrong}.", ""]
    Path(args.out).write_text("\n".join(doc))
    print("\n".join(doc))


if __name__ == "__main__":
    main()
