"""`pycoll bench`: nccl-tests style sweeps of pycoll's collectives, checked for correctness, with --compare
against gloo and Open MPI measured the same way, and --accuracy-report (errors in ulps against the exact sum).
See docs/api.md ("Command line")."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from pycoll.algorithms import ACCURACIES, ACCURACY_ALIASES, ALGORITHM_ALIASES
from pycoll.tools.accuracy import format_table
from pycoll.tools.bench import accuracy_report, launch, peers, plot, report, sweep
from pycoll.tools.bench.progress import Progress, follow

HELP = "benchmark collectives (sizes x dtypes x ops x algorithms), optionally against gloo and MPI"

DESCRIPTION = """\
Times pycoll's collectives over a sweep of sizes, nccl-tests style: one row per case with size, count, type,
redop, algorithm (and the one `auto` picked), then per form (out-of-place, in-place: side by side where the
collective has both) time, p50, p99, algbw, busbw, #wrong and max relative error against the exact result. Each
timed iteration starts after a barrier; a rank's time is the median of its iterations; the time shown is the
slowest rank's; p50 and p99 are percentiles over iterations of the slowest rank's time in each. With
--accuracy-report it measures all-reduce error in ulps instead."""

EPILOG = """\
where the ranks come from:
  pycoll bench -n 2 ...                       start 2 local ranks (the table is printed once, here)
  pycoll run -n 2 -m pycoll bench ...         one rank per process of a job; rank 0 prints
  torchrun --nproc-per-node 2 -m pycoll bench ...
  mpirun -n 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 python -m pycoll bench ...

examples:
  pycoll bench -n 4 -b 8 -e 64M -f 4 --algorithm all --json out.json
  pycoll bench -n 2 -d float32,bfloat16 -o sum,max --accuracy fast,compensated --plot bench.png
  pycoll bench -n 2 --compare gloo,mpi        peer/pycoll time ratios per size
  pycoll bench -n 2 --compare impi,mpich --mpi-prefix impi=.venv-impi,mpich=.venv-mpich
  pycoll bench -n 2 --compare oneccl --mpi-prefix oneccl=.venv-oneccl
  pycoll bench --accuracy-report --worlds 2,8,64 -d float32 --json ulps.json
  pycoll bench --accuracy-report --processes --worlds 2,4
"""

# Sweep options default to None so that --accuracy-report can tell which were given; these are their values.
# --backend's is init()'s (pycoll.comm.default_backend), so that the bench measures what programs run.
SWEEP_DEFAULTS = {"collective": "all_reduce", "algorithm": "auto", "accuracy": "fast",
                  "dtype": "float32", "op": "sum", "minbytes": "8", "maxbytes": "32M", "stepfactor": 2}
# Options that mean nothing to the accuracy report, by their attribute and their flag.
_SWEEP_ONLY = (("nproc", "-n"), ("backend", "--backend"), ("collective", "--collective"), ("op", "-o"),
               ("minbytes", "-b"), ("maxbytes", "-e"), ("stepfactor", "-f"), ("iters", "--iters"),
               ("warmup", "--warmup"), ("root", "--root"), ("plot", "--plot"), ("compare", "--compare"),
               ("mpi_prefix", "--mpi-prefix"), ("in_place", "--in-place"), ("out_of_place", "--out-of-place"),
               ("trace", "--trace"))
_REPORT_ONLY = (("worlds", "--worlds"), ("processes", "--processes"), ("data", "--data"), ("count", "--count"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    ranks = p.add_argument_group("ranks")
    ranks.add_argument("-n", "--nproc", type=int, default=None,
                       help="start N local ranks (default: be one rank of a job started by pycoll run, torchrun "
                            "or mpirun; rank 0 prints)")
    ranks.add_argument("--backend", default=None, help="backend(s), comma-separated (default: what pycoll.init() uses, "
                            "PYCOLL_BACKEND or cpu)")
    ranks.add_argument("--device", default=None, choices=("cpu", "cuda", "npu"),
                       help="where the arrays live: cpu (NumPy), cuda (torch, else CuPy) or npu (torch_npu), on "
                            "the device LOCAL_RANK names; cuda/npu time as nccl-tests: back-to-back calls between "
                            "device events, one synchronize per window (default: the "
                            "backends' memory: cuda for nccl, npu for hccl, else cpu)")
    ranks.add_argument("--timeout", type=float, default=3600.0,
                       help="seconds before a launched job is stopped (default 3600)")

    cases = p.add_argument_group("what to run (every combination)")
    cases.add_argument("--collective", default=None, choices=sweep.COLLECTIVES,
                       help="default all_reduce; barrier moves no data, so its sweep is one row (size and count 0, "
                            "busbw 0, checked only for returning) whatever -b, -e, -f, -d and -o say")
    cases.add_argument("--algorithm", default=None, metavar="A",
                       help="algorithm(s), comma-separated, or 'all' (default auto; the report: all)")
    cases.add_argument("--accuracy", default=None, metavar="M",
                       help=f"{_accuracy_names()}, comma-separated or 'all' (default fast; the report: all)")
    cases.add_argument("-d", "--dtype", default=None,
                       help=f"dtype(s), comma-separated or 'all': {', '.join(sweep.DTYPES)} (default float32; "
                            f"the report: every float dtype)")
    cases.add_argument("-o", "--op", default=None, help=f"op(s), comma-separated or 'all': {', '.join(sweep.OPS)} "
                                                       f"(default sum)")
    cases.add_argument("-b", "--minbytes", default=None, metavar="MIN_BYTES",
                       help="smallest size, e.g. 8, 4K, 1M (default 8)")
    cases.add_argument("-e", "--maxbytes", default=None, metavar="MAX_BYTES", help="largest size (default 32M)")
    cases.add_argument("-f", "--stepfactor", type=int, default=None, metavar="FACTOR",
                       help="size multiplier between steps (default 2)")
    cases.add_argument("--iters", type=int, default=None,
                       help=f"timed iterations per size (default: {sweep.MAX_ITERS} for small sizes down to "
                            f"{sweep.MIN_ITERS} for large ones)")
    cases.add_argument("--warmup", type=int, default=None, help="warm-up iterations per size (default: iters/10)")
    cases.add_argument("--root", type=int, default=None, help="root of broadcast/reduce (default 0)")
    cases.add_argument("--seed", type=int, default=0, help="seed of the random data of the error checks")
    forms = cases.add_mutually_exclusive_group()
    forms.add_argument("--in-place", action="store_true", default=None,
                       help="time only the in-place form (all_reduce and reduce with out=None, all_gather into "
                            "its own block, broadcast)")
    forms.add_argument("--out-of-place", action="store_true", default=None,
                       help="time only the out-of-place form (separate input and output); default: both forms "
                            "of each collective that has both (all_reduce, reduce, all_gather), side by side")

    out = p.add_argument_group("output (the table always goes to stdout; progress, and whatever the ranks and "
                               "the peers print, to stderr)")
    out.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    out.add_argument("--csv", metavar="FILE", help="write the rows as CSV")
    out.add_argument("--plot", metavar="FILE.png", help="plot busbw and time against size (needs matplotlib)")
    out.add_argument("--trace", metavar="DIR",
                     help="keep the run's flight record: every rank dumps its communicators' recent calls into DIR "
                          "when they close (PYCOLL_TRACE_DIR=DIR, PYCOLL_TRACE_ON_CLOSE=1); read it with "
                          "pycoll trace DIR")
    out.add_argument("--compare", default=None, metavar="gloo,mpi,mpi-tcp,impi,mpich,oneccl",
                     help="also run these peers (torch.distributed gloo; mpi4py under mpirun with Open MPI's "
                          "default transports, or mpi-tcp: TCP only; impi: Intel MPI from impi-rt; mpich: MPICH "
                          "from mpich; oneccl: Intel oneCCL on the CPU) on the same sizes and collective and print "
                          "peer/pycoll time ratios (needs -n); a peer not installed is skipped, saying what to "
                          "install")
    out.add_argument("--mpi-prefix", default=None, metavar="impi=DIR,mpich=DIR,oneccl=DIR",
                     help="the environments holding impi-rt or mpich with mpi4py (each made by python -m venv DIR "
                          "&& DIR/bin/pip install impi-rt mpi4py), or oneccl with oneccl-devel (docs/benchmarks.md); "
                          "default: $PYCOLL_BENCH_IMPI, $PYCOLL_BENCH_MPICH, $PYCOLL_BENCH_ONECCL")

    acc = p.add_argument_group("accuracy report (all-reduce error in ulps against the correctly rounded sum)")
    acc.add_argument("--accuracy-report", action="store_true",
                     help="report max and mean ulps per algorithm x accuracy x world size x dtype x data set, "
                          "instead of timing")
    acc.add_argument("--worlds", default=None, metavar="N,N,...",
                     help=f"world sizes (default {','.join(map(str, accuracy_report.SIM_WORLDS))} simulated; "
                          f"{','.join(map(str, accuracy_report.PROCESS_WORLDS))} with --processes)")
    acc.add_argument("--processes", action="store_true", default=None,
                     help="real rank processes over TCP loopback (default: simulated ranks in this process, "
                          "driving the same C schedules)")
    acc.add_argument("--data", default=None, help="data set(s): gaussian, mixed (1e-8..1e8 with cancellation), "
                                                  "crafted, comma-separated or 'all' (default all)")
    acc.add_argument("--count", type=int, default=None, help="elements per rank (default 4096)")


def _accuracy_names() -> str:
    """Every accuracy mode the library takes, with its aliases, for --accuracy's help."""
    aliases = {}
    for alias, name in ACCURACY_ALIASES.items():
        aliases.setdefault(name, []).append(alias)
    return ", ".join(name + (f" (alias {', '.join(aliases[name])})" if name in aliases else "")
                     for name in ACCURACIES)


def _given(args, options) -> list[str]:
    return [flag for name, flag in options if getattr(args, name) is not None]


_SIZES = (("minbytes", "-b"), ("maxbytes", "-e"), ("stepfactor", "-f"))


def _sizes_note(args) -> str | None:
    """A comment line for the table where sizes were given to a collective that moves no data (read before
    _config fills in the defaults)."""
    given = _given(args, _SIZES)
    if args.collective in sweep.NO_DATA and given:
        return f"# {', '.join(given)}: {args.collective} moves no data; its sweep is one row of 0 bytes"
    return None


def _config(args) -> dict:
    """The sweep a rank runs, from the arguments; ValueError names the bad argument."""
    given = _given(args, _REPORT_ONLY)
    if given:
        raise ValueError(f"{', '.join(given)}: only with --accuracy-report")
    for name, value in SWEEP_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.backend is None:
        from pycoll.comm import default_backend

        args.backend = default_backend()
    if args.nproc is not None and args.nproc < 1:
        raise ValueError(f"-n must be at least 1, got {args.nproc}")
    for name in ("iters", "warmup"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "iters" else 0):
            raise ValueError(f"--{name} must be at least {1 if name == 'iters' else 0}, got {value}")
    accuracies = [ACCURACY_ALIASES.get(a.strip(), a.strip()) for a in args.accuracy.split(",")]
    algorithms = [a.strip() for a in args.algorithm.split(",") if a.strip()]
    if not algorithms or ("all" in algorithms and len(algorithms) > 1):
        raise ValueError(f"--algorithm: give names or 'all', got {args.algorithm!r}")
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    if not backends:
        raise ValueError("--backend: empty list")
    _check_backends(backends, algorithms)
    args.device = _device_for(backends, args.device)
    size_list = sweep.sizes(sweep.parse_size(args.minbytes, "-b"), sweep.parse_size(args.maxbytes, "-e"),
                            args.stepfactor)
    in_place = [True] if args.in_place else [False] if args.out_of_place else [False, True]
    sweep.forms(args.collective, in_place)  # the collective has one of them, before any rank starts
    return {"collective": args.collective, "backends": backends, "algorithms": algorithms,
            "accuracies": sweep.parse_list(",".join(accuracies), sweep.ACCURACIES, "--accuracy"),
            "dtypes": sweep.parse_list(args.dtype, sweep.DTYPES, "-d"),
            "ops": sweep.parse_list(args.op, sweep.OPS, "-o"), "sizes": size_list, "iters": args.iters,
            "warmup": args.warmup, "root": args.root or 0, "seed": args.seed, "device": args.device,
            "in_place": in_place}


# The memory each vendor backend takes; every other backend takes host memory.
_BACKEND_DEVICE = {"nccl": "cuda", "hccl": "npu"}


def _device_for(backends, device):
    """--device, or where none is given the memory the backends take (one kind for every backend of the run)."""
    kinds = {_BACKEND_DEVICE.get(b, "cpu") for b in backends}
    if device is not None:
        return device
    if len(kinds) > 1:
        raise ValueError(f"--device: backends {', '.join(backends)} take different memory "
                         f"({', '.join(sorted(kinds))}); run them separately, or name --device")
    return kinds.pop()


def _check_backends(backends, algorithms) -> None:
    """Every backend usable here and offering every requested algorithm, before any rank starts."""
    import pycoll

    statuses = {s.name: s for s in pycoll.backends()}
    for name in backends:
        status = statuses.get(name)
        if status is None:
            raise ValueError(f"--backend: unknown backend {name!r}; known: {', '.join(sorted(statuses))}")
        if not status.usable:
            raise ValueError(f"--backend: {name} is not usable here: {status.reason}")
        missing = [a for a in algorithms if a != "all" and a not in status.algorithms]
        if missing:
            raise ValueError(f"--algorithm: backend {name!r} has no {', '.join(map(repr, missing))}; it has "
                             f"{', '.join(status.algorithms)}")


def _compare_list(args) -> list[str]:
    if args.mpi_prefix is not None:
        if not args.compare:
            raise ValueError("--mpi-prefix: only with --compare impi, mpich or oneccl")
        peers.set_prefixes(args.mpi_prefix)
    names = [c.strip() for c in (args.compare or "").split(",") if c.strip()]
    bad = [c for c in names if c not in peers.PEERS]
    if bad:
        raise ValueError(f"--compare: unknown peer {', '.join(map(repr, bad))}; choose from "
                         f"{', '.join(peers.PEERS)}")
    if names and args.nproc is None:
        raise ValueError("--compare needs -n: each peer is started as its own job of N ranks")
    return names


def _launched(n, config, timeout, runner):
    """Rows of a job of n ranks: config in, rank 0's rows out, through files in a private directory; rank 0's
    progress is shown here, since the ranks' own output goes through pipes."""
    with tempfile.TemporaryDirectory(prefix="pycoll-bench-") as tmp:
        config_path, result_path = os.path.join(tmp, "config.json"), os.path.join(tmp, "rows.json")
        progress_path = os.path.join(tmp, "progress")
        with open(config_path, "w") as f:
            json.dump(dict(config, progress_file=progress_path), f)
        with follow(progress_path, Progress.for_terminal(sys.stderr)):
            runner(n, config_path, result_path, timeout)
        with open(result_path) as f:
            return json.load(f)


def _pycoll_job(n, config_path, result_path, timeout):
    launch.run_module(n, "pycoll.tools.bench.worker", [config_path, result_path], timeout=timeout)


def _keep_trace(directory) -> None:
    """Have every rank started from here (and this process, where it is one) dump its flight record into
    `directory` at close."""
    os.makedirs(directory, exist_ok=True)
    # written for the ranks this process starts, which read them through the settings registry
    os.environ.update({"PYCOLL_TRACE_DIR": os.path.abspath(directory), "PYCOLL_TRACE_ON_CLOSE": "1"})


def _error(message, code=2) -> int:
    print(f"pycoll bench: error: {message}", file=sys.stderr)
    return code


def _current_algorithm_names(text):
    """--algorithm with each former name replaced by its current one, and a note on stderr saying so: a command
    line's user never sees a DeprecationWarning (Python shows those only for code in __main__)."""
    names = []
    for name in text.split(","):
        new = ALGORITHM_ALIASES.get(name.strip())
        if new:
            print(f"pycoll bench: --algorithm {name.strip()} is deprecated and will be removed in the next release; "
                  f"use {new} (the backend and transport 'shm' keep their name)", file=sys.stderr)
        names.append(new or name)
    return ",".join(names)


def run(args) -> int:
    if args.algorithm is not None:
        args.algorithm = _current_algorithm_names(args.algorithm)
    if args.accuracy_report:
        return _run_accuracy_report(args)
    note = _sizes_note(args)
    try:
        config = _config(args)
        compare = _compare_list(args)
        if args.plot:
            plot.require_matplotlib()
    except (ValueError, plot.PlotUnavailable) as exc:
        return _error(exc)
    if args.trace:
        _keep_trace(args.trace)
    if args.nproc is not None:
        try:
            rows = _launched(args.nproc, config, args.timeout, _pycoll_job)
        except launch.RankFailed as exc:
            return _error(f"{exc} (its error is above)", 1)
    else:
        from pycoll.tools.bench import worker

        try:
            rows = worker.run(config, Progress.for_terminal(sys.stderr))
        except ValueError as exc:  # --device naming a device this host lacks
            return _error(exc)
        if rows is None:  # not rank 0: rank 0 prints
            return 0
    if note:
        print(note, flush=True)
    print(report.table(rows), flush=True)
    peer_rows = []
    for name in compare:
        peer = peers.PEERS[name]
        why = peer.unavailable()
        pconfig = None
        if why is None:
            pconfig, why = peers.peer_config(peer, config)
        if pconfig is None:
            print(f"# --compare {name}: skipped: {why}", flush=True)
            continue
        try:
            got = _launched(args.nproc, pconfig, args.timeout, peer.launch)
        except launch.RankFailed as exc:
            print(f"# --compare {name}: failed: {exc}", flush=True)
            continue
        print(report.table(got), flush=True)
        peer_rows.extend(got)
    if peer_rows:
        print(report.ratio_table(rows, peer_rows), flush=True)
    everything = rows + peer_rows
    if args.json:
        report.to_json(everything, args.json)
    if args.csv:
        report.to_csv(everything, args.csv)
    if args.plot:
        plot.plot(everything, args.plot)
    if args.trace:
        print(f"# the ranks' flight records are in {args.trace}: pycoll trace {args.trace}", flush=True)
    if any(r["wrong"] for r in everything):
        return _error("some results were wrong (#wrong > 0)", 1)
    return 0


def _run_accuracy_report(args) -> int:
    given = _given(args, _SWEEP_ONLY)
    if given:
        return _error(f"{', '.join(given)}: not with --accuracy-report (it runs all_reduce over --worlds)")
    try:
        plan = accuracy_report.plan(worlds=args.worlds, processes=bool(args.processes), algorithms=args.algorithm,
                                    accuracies=args.accuracy, dtypes=args.dtype, datasets=args.data,
                                    count=4096 if args.count is None else args.count, seed=args.seed)
    except ValueError as exc:
        return _error(exc)
    try:
        rows = accuracy_report.run(plan, Progress.for_terminal(sys.stderr), args.timeout)
    except RuntimeError as exc:  # a job of real processes failed
        return _error(exc, 1)
    print(f"# all_reduce error in ulps against the correctly rounded exact sum; {plan.count} elements per rank, "
          f"seed {plan.seed}; transport sim = simulated ranks, tcp = real processes", flush=True)
    print(format_table(rows), end="", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.csv:
        report.to_csv(rows, args.csv, accuracy_report.KEYS)
    bad = accuracy_report.failures(rows)
    if bad:
        return _error(f"{len(bad)} rows where ranks' results differ or compensated or reproducible mode is over "
                      "1 ulp", 1)
    return 0


def register(subparsers) -> None:
    """Add `bench` to the `pycoll` command's subparsers."""
    p = subparsers.add_parser("bench", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="pycoll bench", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
