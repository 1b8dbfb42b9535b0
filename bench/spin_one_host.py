"""Produce bench/results/spin_one_host.md: pycoll's default backend on one host (shared memory), float32 sum
all-reduce, for several PYCOLL_SPIN_US values (how long a wait polls before it sleeps), with 2 ranks and with more
ranks than cores, beside the library's own default (PYCOLL_SPIN_US unset) and peers, measured in one run.

    python bench/spin_one_host.py [--worlds 2,4] [--spins 0,20,50,200] [--reps 3] [--compare gloo,mpich]
                                  [--sizes 4,1k,16k,64k,1m,16m] [--before PYTHON]
                                  [--out bench/results/spin_one_host.md]

Each repetition runs, per world, `pycoll bench` once per spin value, then once with PYCOLL_SPIN_US unset and
--compare (the peers' rows come from that job), so that every setting sees the same load in turn. The table: per
size, each setting's median over repetitions of pycoll bench's time (the slowest rank's median), every
repetition's number in brackets, and each spin's time over the unset default's. MPICH comes from
$PYCOLL_BENCH_MPICH (pycoll bench --mpi-prefix). --before PYTHON runs every setting twice, first by another
interpreter (another build of pycoll, e.g. the main branch's: "before", "before, spin S"), for before/after
numbers from one run; their ratio columns divide by this build's job with the same spin.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from allreduce_peers import _fmt_size, machine  # noqa: E402  -- one copy of the machine description
from multihost import parse_sizes  # noqa: E402

UNSET = "unset"
BEFORE = "before"


def run_bench(world, spin, compare, sweep, json_path, python=sys.executable):
    """pycoll bench's rows for one job: spin microseconds (UNSET: the library's default), peers if compare;
    python: the interpreter whose pycoll runs it."""
    cmd = [python, "-m", "pycoll", "bench", "-n", str(world), *sweep, "-d", "float32", "-o", "sum",
           "--out-of-place", *(["--compare", compare] if compare else []), "--json", str(json_path)]
    env = dict(os.environ, PYTHONSAFEPATH="1")
    env.pop("PYCOLL_SPIN_US", None)
    if spin != UNSET:
        env["PYCOLL_SPIN_US"] = spin
    shown = "python" if python == sys.executable else python
    print(f"$ {'' if spin == UNSET else f'PYCOLL_SPIN_US={spin} '}{shown} -m pycoll {' '.join(cmd[3:-2])}", flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"pycoll bench exited with {proc.returncode}:\n{proc.stdout[-3000:]}")
    return json.loads(Path(json_path).read_text())


def sweep_for(size_list):
    """-b -e -f for pycoll bench: powers of 4 from the smallest size, which must hold every size asked for."""
    low, high = min(size_list), max(size_list)
    return ["-b", str(low), "-e", str(high), "-f", "4"]


def job_of(setting):
    """(PYCOLL_SPIN_US value or UNSET, whether the --before interpreter runs it) of a setting: "50", UNSET,
    BEFORE (the other build, spin unset) or "before@50"."""
    if setting == BEFORE:
        return UNSET, True
    if setting.startswith(BEFORE + "@"):
        return setting.split("@", 1)[1], True
    return setting, False


def counterpart(setting):
    """What a setting's ratio column divides by: a spin by the unset default, a --before job by this build's
    job with the same spin."""
    spin, before = job_of(setting)
    return spin if before else UNSET


def before_of(spin):
    """The --before build's setting with this spin (UNSET: its default)."""
    return BEFORE if spin == UNSET else f"{BEFORE}@{spin}"


def is_pycoll(setting):
    """Whether a setting is one of pycoll's jobs (the others are peers, named as they are)."""
    return setting in (UNSET, BEFORE) or setting.isdigit() or setting.startswith(BEFORE + "@")


def label(setting, column=False):
    """A setting's name: in the table's head (column) or in a ratio's."""
    if not is_pycoll(setting):
        return setting
    spin, before = job_of(setting)
    if spin == UNSET:
        return ("before" if before else "default") + (" (unset)" if column else "")
    return f"{'before, ' if before else ''}spin {spin}{' us' if column else ''}"


def table(cells, settings, size_list, world):
    """cells[(setting, bytes)] = [time per repetition]; a row per size, then each of pycoll's settings over its
    counterpart (a spin over the default; a --before job over this build's with the same spin)."""
    ratios = [s for s in settings if is_pycoll(s) and s != UNSET]
    head = [label(s, column=True) for s in settings]
    lines = [f"### {world} ranks: time (us; median of the repetitions, each in brackets)", "",
             "| size | " + " | ".join(head) + " | " +
             " | ".join(f"{label(s)} / {label(counterpart(s))}" for s in ratios) + " |",
             "|---:|" + "---:|" * (len(settings) + len(ratios))]
    for nbytes in size_list:
        med = {s: statistics.median(cells[(s, nbytes)]) for s in settings if cells.get((s, nbytes))}
        row = [_fmt_size(nbytes)]
        for s in settings:
            row.append(f"{med[s]:.0f} ({' / '.join(f'{t:.0f}' for t in cells[(s, nbytes)])})" if s in med else "-")
        row += [f"{med[s] / med[counterpart(s)]:.2f}" if s in med and med.get(counterpart(s)) else "-"
                for s in ratios]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worlds", default="2,4")
    p.add_argument("--spins", default="0,20,50,200", help="PYCOLL_SPIN_US values, one job each")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--compare", default="gloo,mpich", help="peers, run in the job with PYCOLL_SPIN_US unset")
    p.add_argument("--sizes", default="4,1k,16k,64k,1m,16m", help="powers of 4 apart (pycoll bench's -f 4)")
    p.add_argument("--before", help="an interpreter whose pycoll runs each setting too, just before this build")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "spin_one_host.md"))
    args = p.parse_args()
    size_list = parse_sizes(args.sizes)
    worlds = [int(w) for w in args.worlds.split(",")]
    spins = [s for s in args.spins.split(",") if s]
    # With --before, every setting twice: the other build's job just before this one's.
    settings = [x for s in [*spins, UNSET] for x in ([before_of(s), s] if args.before else [s])]
    peers = [c for c in args.compare.split(",") if c]
    start, load = time.monotonic(), os.getloadavg()
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    cells, wrong, commands = {w: {} for w in worlds}, 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for world in worlds:
                for spin in settings:
                    spin_env, before = job_of(spin)
                    compare = args.compare if spin == UNSET else ""
                    rows = run_bench(world, spin_env, compare, sweep_for(size_list), Path(tmp) / "rows.json",
                                     args.before if before else sys.executable)
                    for r in rows:
                        if r["bytes"] not in size_list:
                            continue
                        pycoll_row = r["backend"] not in peers
                        setting = spin if pycoll_row else r["backend"]
                        cells[world].setdefault((setting, r["bytes"]), []).append(r["time_us"])
                        wrong += r["wrong"]
                    if rep == 0 and world == worlds[0]:
                        python = f"{args.before} " if before else "python "
                        spin_env = "" if spin_env == UNSET else f"PYCOLL_SPIN_US={spin_env} "
                        commands.append(f"{spin_env}{python}-m pycoll "
                                        f"bench -n N {' '.join(sweep_for(size_list))} -d float32 -o sum "
                                        f"--out-of-place{f' --compare {compare}' if compare else ''}")
    uptime_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    elapsed = time.monotonic() - start
    doc = ["# All-reduce on one host: how long a wait polls (PYCOLL_SPIN_US)", "",
           f"Produced by `python bench/spin_one_host.py --worlds {args.worlds} --spins {args.spins or chr(39) * 2} "
           f"--reps {args.reps} --compare {args.compare or chr(39) * 2} --sizes {args.sizes}"
           f"{f' --before {args.before}' if args.before else ''}` in {elapsed:.0f} s; each repetition ran, "
           "per world N, one after another:", "", *[f"    {c}" for c in commands], "", machine(),
           f"- Load: 1/5/15-minute load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it started, "
           f"{os.getloadavg()[0]:.1f} at the end (whatever else runs on the machine shares its cores; "
           "the note beside a run says what did).",
           f"- `uptime` before: {uptime_before}; after: {uptime_after}.", "",
           "Method: pycoll bench's (float32 sum, the default backend, auto, out of place; each iteration after a "
           "barrier; a rank's median; the slowest rank's), per repetition; the table gives the median over "
           "repetitions. `default (unset)`: the library's own choice of spin; the peers ran in that job. "
           f"Wrong results over every row: {wrong}.", ""]
    missing = [c for c in peers if not any(k[0] == c for w in worlds for k in cells[w])]
    if missing:  # pycoll bench --compare skips a peer that is not installed (saying why on its stderr)
        doc += [f"Asked for but not measured (not installed here, so pycoll bench skipped them): "
                f"{', '.join(missing)}.", ""]
    for world in worlds:
        doc += [*table(cells[world], settings + [c for c in peers if any(k[0] == c for k in cells[world])],
                       size_list, world), ""]
    Path(args.out).write_text("\n".join(doc))
    print("\n".join(doc))


if __name__ == "__main__":
    main()
