"""Produce bench/results/mpi_peers.md: pycoll (auto) beside Open MPI, Intel MPI (impi-rt), MPICH (mpich), oneCCL
and gloo, float32 sum, measured side by side: each run is one `pycoll bench --compare mpi,impi,mpich,oneccl,gloo`
(pycoll, then each peer) per world size and collective, the runs repeated so that the tools interleave, and the
median of the runs reported.

    PYCOLL_BENCH_IMPI=DIR PYCOLL_BENCH_MPICH=DIR PYCOLL_BENCH_ONECCL=DIR python bench/mpi_peers.py [--worlds 2]
        [--runs 3] [-b 4] [-e 16M] [-f 4] [--collective all_reduce[,reduce_scatter,...]]
        [--peers mpi,impi,mpich,oneccl,gloo]
        [--baseline PYTHON] [--from-json RUN.json,RUN.json,...] [--out bench/results/mpi_peers.md]

--baseline: another installation of pycoll (its venv's python, e.g. one built from main) measured alone before
each comparison run, as a "pycoll before" column: a change's before and after, interleaved with the peers.
--from-json tabulates runs already made with the command this prints (their JSON files) instead of running.
docs/benchmarks.md says how to install the MPIs and oneCCL.
"""

import importlib.metadata
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pycoll.tools.bench import sweep

sys.path.insert(0, str(Path(__file__).parent))
from allreduce_peers import _fmt_size, machine, sweep_arguments  # noqa: E402  -- one copy of the machine description
from core_to_core import round_trips  # noqa: E402

COLUMNS = (("cpu", "pycoll (auto)"), ("before", "pycoll before"), ("impi", "Intel MPI"), ("mpich", "MPICH"),
           ("mpi", "Open MPI"), ("oneccl", "oneCCL"), ("gloo", "gloo"))
PEERS = "mpi,impi,mpich,oneccl,gloo"


def command(world, collective, args, peers=True):
    """The run's command line; a collective that moves no data (the barrier) takes no sizes, dtype or op."""
    compare = ["--compare", args.peers] if peers and args.peers else []
    sizes = [] if collective in sweep.NO_DATA else ["-b", args.b, "-e", args.e, "-f", str(args.f), "-d",
                                                    "float32", "-o", "sum"]
    return ["pycoll", "bench", "-n", str(world), "--collective", collective, *sizes, *compare]


def run_once(world, collective, args, json_path, python=sys.executable, peers=True):
    """One `pycoll bench` run's rows; python: the interpreter whose pycoll runs (--baseline's: its rows are
    labelled "before", and it runs no peers)."""
    cmd = [python, "-m", *command(world, collective, args, peers), "--json", str(json_path)]
    # PYTHONSAFEPATH: from a source checkout's root, `-m pycoll` must still import the installed package.
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONSAFEPATH="1"),
                          check=False)
    print(proc.stdout, flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"pycoll bench exited with {proc.returncode}")
    rows = json.loads(Path(json_path).read_text())
    return rows if python == sys.executable else [dict(r, backend="before") for r in rows]


def core_to_core_probe():
    """The machine's core-to-core round trip now (us), or None where it has one core."""
    medians = round_trips(seconds=0.5)
    return statistics.median(medians) if medians else None


def mpi_versions():
    """The packaged MPIs' and oneCCL's versions, from the environments the bench uses."""
    out = []
    for var, pkg, companion in (("PYCOLL_BENCH_IMPI", "impi-rt", "mpi4py"), ("PYCOLL_BENCH_MPICH", "mpich", "mpi4py"),
                                ("PYCOLL_BENCH_ONECCL", "oneccl", "oneccl-devel")):
        prefix = os.environ.get(var)
        if not prefix:
            out.append(f"{pkg}: {var} not set")
            continue
        site = Path(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
        dists = {d.metadata["Name"].lower(): d.version for d in importlib.metadata.distributions(path=[str(site)])}
        out.append(f"{pkg} {dists.get(pkg, '?')} with {companion} {dists.get(companion, '?')} ({var}={prefix})")
    return "- " + "; ".join(out)


def table(runs, world, collective):
    cells = {}
    for rows in runs:
        for r in rows:
            # The form these tables have always shown (an older installation's rows have no in_place).
            if r["world"] == world and r["collective"] == collective and \
                    r.get("in_place") in (None, sweep.FORMS[collective][0]):
                cells.setdefault((r["bytes"], r["backend"]), []).append(r["time_us"])
    columns = [(k, label) for k, label in COLUMNS if any(key == k for _, key in cells)]
    before = any(k == "before" for k, _ in columns)
    lines = [f"### {collective}, {world} ranks: time (us; the slowest rank's median, median of the runs)",
             "", "| size | " + " | ".join(label for _, label in columns) + " | best peer / pycoll |" +
             (" before / pycoll |" if before else ""), "|---:|" + "---:|" * (len(columns) + 1 + before)]
    for nbytes in sorted({b for b, _ in cells}):
        med = {k: statistics.median(cells[(nbytes, k)]) for k, _ in columns if (nbytes, k) in cells}
        best = min((k for k in med if k not in ("cpu", "before")), key=med.get, default=None)
        row = [_fmt_size(nbytes)] + [f"{med[k]:.1f}" if k in med else "-" for k, _ in columns]
        row.append(f"{med[best] / med['cpu']:.2f} ({dict(COLUMNS)[best]})" if best and "cpu" in med else "-")
        if before:
            row.append(f"{med['before'] / med['cpu']:.2f}" if "before" in med and "cpu" in med else "-")
        lines.append("| " + " | ".join(row) + " |")
    wrong = sum(r["wrong"] for rows in runs for r in rows if r["world"] == world and r["collective"] == collective)
    return "\n".join(lines + ["", f"#wrong over every row of every run: {wrong}."])


def main():
    p = sweep_arguments(__doc__, "mpi_peers.md", runs=True)
    p.set_defaults(worlds="2", e="16M")
    p.add_argument("--collective", default="all_reduce", help="collective(s), comma-separated")
    p.add_argument("--peers", default=PEERS, help=f"what --compare runs (default {PEERS}; '': none)")
    p.add_argument("--baseline", default=None, metavar="PYTHON",
                   help="the python of another pycoll installation, measured alone before each run")
    p.add_argument("--from-json", default=None, help="comma-separated JSON files of runs already made")
    args = p.parse_args()
    start, load = time.monotonic(), os.getloadavg()
    worlds = [int(w) for w in args.worlds.split(",")]
    collectives = args.collective.split(",")
    runs = {w: [] for w in worlds}
    probes = []  # the machine's core-to-core round trip before each run, and after the last
    if args.from_json:
        if len(worlds) != 1:
            raise SystemExit("--from-json: give one --worlds, the world size of those runs")
        runs[worlds[0]] = [json.loads(Path(f).read_text()) for f in args.from_json.split(",")]
        how = (f"Tabulated by `python bench/mpi_peers.py --worlds {args.worlds} -b {args.b} -e {args.e} -f {args.f} "
               f"--collective {args.collective} --from-json ...` from {len(runs[worlds[0]])} runs, one after the "
               f"other, of:")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                for world in worlds:
                    for coll in collectives:
                        probes.append(core_to_core_probe())
                        json_path = Path(tmp) / f"w{world}-{coll}-{i}.json"
                        if args.baseline:
                            runs[world].append(run_once(world, coll, args, json_path, args.baseline, peers=False))
                        runs[world].append(run_once(world, coll, args, json_path))
            probes.append(core_to_core_probe())
        baseline = f" --baseline {args.baseline}" if args.baseline else ""
        peers = shlex.quote(args.peers)
        how = (f"Produced by `python bench/mpi_peers.py --worlds {args.worlds} --runs {args.runs} -b {args.b} "
               f"-e {args.e} -f {args.f} --collective {args.collective} --peers {peers}{baseline}` in "
               f"{time.monotonic() - start:.0f} s; each of these ran {args.runs} times, alternating"
               f"{' (each after the same run of the baseline pycoll, without --compare)' if baseline else ''}:")
    doc = [f"# {args.collective} on one host: pycoll beside Intel MPI, MPICH, Open MPI, oneCCL and gloo", "", how, "",
           *[f"    {' '.join(command(w, c, args))}" for w in worlds for c in collectives], "", machine(),
           mpi_versions()]
    if not args.from_json:
        doc.append(f"- Load: 1/5/15-minute load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it "
                   f"started, {os.getloadavg()[0]:.1f} at the end.")
    if probes and None not in probes:
        doc.append("- The machine's 64 KiB round trip between two cores (bench/core_to_core.py, the median of half a "
                   "second, us) before each run and after the last: " + ", ".join(f"{p:.0f}" for p in probes) +
                   ". Where it changes several-fold, so do the collectives run then, pycoll's and the peers' alike.")
    doc += ["", ("Method: pycoll bench's (float32 sum, out of place; each iteration after a barrier; a rank's median; "
                 "the slowest rank's), then the median of the runs. Each peer runs in its own job after pycoll's, in "
                 "the order pycoll, Open MPI (mpirun, default transports: shared memory), Intel MPI, MPICH (each its "
                 "package's mpiexec, unpinned), oneCCL (pycoll's launcher; OFI shared memory, no worker thread), gloo "
                 "(torch.distributed over TCP loopback)."), ""]
    for coll in collectives:
        for world in worlds:
            doc += [table(runs[world], world, coll), ""]
    Path(args.out).write_text("\n".join(doc))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
