"""How fast the survivors notice a peer that leaves quietly: rank 2 of 3 closes its communicator, exits, or
os._exit()s while ranks 0 and 1 wait in an all-reduce. The latency is from just before it left to each
survivor's PeerFailure (CLOCK_MONOTONIC, one clock for the host's processes), per transport and algorithm; each
case is repeated and the median and the worst are reported. Jobs of `tests/scripts/shm_fault_worker.py leave`
(the scenario the fault tests assert on) run one after another.

    python bench/peer_departure.py --repeats 5 [--out bench/results/peer_departure.md]
"""

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from multiproc import Ranks  # noqa: E402

CASES = [("shm", "shm_slots"), ("shm", "ring"), ("tcp", "ring")]  # (backend, algorithm)
HOWS = ("close", "exit", "os_exit")
DEADLINE_S = 10


def one_job(backend, algorithm, how):
    """Both survivors' latencies (s), or the reason the job did not end in PeerFailure naming rank 2."""
    env = {"PYCOLL_BACKEND": backend, "TEST_HOW": how, "TEST_ALGORITHM": algorithm}
    with Ranks(3, "shm_fault_worker.py", "leave", env=env, timeout=DEADLINE_S) as ranks:
        reports = ranks.reports()
    out = []
    for r in (0, 1):
        rep = reports[r]
        if rep.get("error") != "PeerFailure" or rep.get("failed_rank") != 2:
            return f"rank {r}: {rep}"
        out.append(rep["noticed_at"] - reports[2]["left_at"])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="write the markdown table here")
    args = parser.parse_args()
    rows = []
    for backend, algorithm in CASES:
        for how in HOWS:
            latencies, failures = [], []
            for _ in range(args.repeats):
                got = one_job(backend, algorithm, how)
                (failures.append(got) if isinstance(got, str) else latencies.extend(got))
            rows.append((backend, algorithm, how, latencies, failures))
            med = f"{statistics.median(latencies) * 1e3:.1f}" if latencies else "-"
            print(f"{backend:4} {algorithm:9} {how:8} median {med} ms, failures {len(failures)}", flush=True)
    load = os.getloadavg()[0]
    lines = ["# A peer that leaves quietly: time until every survivor raises PeerFailure", "",
             f"`python bench/peer_departure.py --repeats {args.repeats}`, "
             f"{time.strftime('%Y-%m-%d', time.gmtime())}; {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} logical cores, Python {platform.python_version()}; 1-minute load average "
             f"{load:.1f} when it ended.", "",
             "3 ranks on one host; rank 2 leaves 0.3 s after the others entered a 1000-element all-reduce. "
             "Latency: from just before it left to each survivor's error (2 survivors x repeats samples).", "",
             "| backend | algorithm | how rank 2 leaves | median (ms) | worst (ms) | samples | not PeerFailure |",
             "|---|---|---|---:|---:|---:|---:|"]
    for backend, algorithm, how, latencies, failures in rows:
        med = f"{statistics.median(latencies) * 1e3:.1f}" if latencies else "-"
        worst = f"{max(latencies) * 1e3:.1f}" if latencies else "-"
        lines.append(f"| {backend} | {algorithm} | {how} | {med} | {worst} | {len(latencies)} | {len(failures)} |")
    for *_, failures in rows:
        lines += [f"- {f}" for f in failures[:3]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
