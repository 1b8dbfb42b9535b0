"""torchft's recovery from a killed replica, over pycoll (pycoll.torchft.ProcessGroupPycoll) and over torchft's
own gloo process group, side by side: the time from the kill -9 of one replica until every survivor has
committed its next step without it. Jobs alternate between the two, same machine, same run.

    python bench/recovery_torchft.py [--replicas 3] [--kills 3] [--markdown bench/results/recovery.md]

Each kill is a job of its own (tests/torchft_job.py): torchft's lighthouse (torchft's defaults: a replica is
dead after 5 s without a heartbeat) and N replica groups of one process, training torchft's DDP on 127.0.0.1;
after a few steps with every replica and a random 0-500 ms more, a random replica gets SIGKILL. CLOCK_MONOTONIC,
one clock for every process of the host. With --markdown the table is appended to that file."""

import argparse
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from torchft_job import TorchftJob  # noqa: E402


def one_kill(n, pg, rng):
    """Seconds from the kill until the last survivor committed a step with the n - 1 others."""
    with TorchftJob(n, pg) as job:
        job.start(time.monotonic() + 240)
        deadline = time.monotonic() + 120
        for r in range(n):
            job.commits_until(r, lambda c: c["n"] == n and c["step"] >= 3, deadline)
        time.sleep(rng.uniform(0, 0.5))
        victim = rng.randrange(n)
        killed = job.kill(victim)
        done = [job.commits_until(r, lambda c: c["n"] == n - 1 and c["t"] > killed, deadline)[-1]["t"]
                for r in range(n) if r != victim]
    return max(done) - killed, victim


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    load = os.getloadavg()
    start = time.monotonic()
    times = {"pycoll": [], "gloo": []}
    for i in range(args.kills):
        for pg in ("pycoll", "gloo") if i % 2 == 0 else ("gloo", "pycoll"):
            seconds, victim = one_kill(args.replicas, pg, rng)
            times[pg].append(seconds)
            print(f"{pg}: replica {victim} killed, survivors committed after {seconds:.2f} s", flush=True)
    from importlib.metadata import version

    import torch
    rows = [f"| torchft over {pg} | {len(t)} | {statistics.median(t):.2f} | {min(t):.2f} | {max(t):.2f} |"
            for pg, t in times.items()]
    ratio = statistics.median(times["pycoll"]) / statistics.median(times["gloo"])
    text = "\n".join([
        "", f"## torchft over pycoll and over gloo: {args.replicas} replica groups on one host", "",
        f"Produced by `python bench/recovery_torchft.py --replicas {args.replicas} --kills {args.kills}` in "
        f"{time.monotonic() - start:.0f} s; torch {torch.__version__}, torchft {version('torchft')}, Python "
        f"{platform.python_version()}, {os.cpu_count()} logical cores. Load: 1/5/15-minute load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it started, {os.getloadavg()[0]:.1f} at the end "
        "(other developers' tests ran meanwhile).", "",
        "Time from the kill -9 of a random replica (after a few steps with all of them, plus a random 0-500 ms) "
        "until every survivor had committed a step without it; the two process groups alternate job by job.", "",
        "| process group | kills | median (s) | min (s) | max (s) |", "| --- | --- | --- | --- | --- |", *rows, "",
        f"pycoll / gloo (medians): {ratio:.2f}.", ""])
    print(text)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
