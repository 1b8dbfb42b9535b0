"""Re-initialisation on one MASTER_PORT: how many init -> all_reduce -> close cycles out of N succeed, and
the time per cycle. Jobs of `tests/scripts/rdv_worker.py cycles` run one after another; a job stops at its
first failed cycle (which costs --timeout seconds) and the next job carries on until N cycles were tried.

    python bench/rdv_cycles.py -n 2 --cycles 50 --timeout 5
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from multiproc import Ranks  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2, help="ranks")
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=5.0, help="init timeout of each cycle (s)")
    args = parser.parse_args()
    tried = succeeded = 0
    times, errors = [], []
    while tried < args.cycles:
        env = {"TEST_CYCLES": str(args.cycles - tried)}
        with Ranks(args.n, "rdv_worker.py", "cycles", env=env, timeout=args.timeout) as ranks:
            reports = [json.loads(p.communicate(timeout=args.cycles * (args.timeout + 30))[0].splitlines()[-1])
                       for p in ranks.procs]
        done = min(r["cycles"] for r in reports)
        failed = any("error" in r for r in reports)
        succeeded += done
        tried += done + failed
        times += reports[0]["times"][:done]
        errors += [f"rank {r['rank']}: {r['error']}: {r['message']}" for r in reports if "error" in r]
    print(json.dumps({"ranks": args.n, "tried": tried, "succeeded": succeeded,
                      "median_cycle_s": statistics.median(times) if times else None,
                      "max_cycle_s": max(times) if times else None, "errors": errors[:6]}, indent=1))


if __name__ == "__main__":
    main()
