"""`pycoll bench`: nccl-tests style sweeps of pycoll's collectives, checked for correctness, with --compare
against gloo and Open MPI measured the same way. See ../shared/API.md ("Command line")."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from pycoll.bench import launch, peers, plot, report, sweep

HELP = "benchmark collectives (sizes x dtypes x ops x algorithms), optionally against gloo and MPI"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--nproc", type=int, default=None,
                   help="start N local ranks (default: run as one rank of a job started by pycoll run, "
                        "torchrun or mpirun; rank 0 prints)")
    p.add_argument("--backend", default="tcp", help="backend(s), comma-separated (default tcp)")
    p.add_argument("--collective", default="all_reduce", choices=sweep.COLLECTIVES)
    p.add_argument("--algorithm", default="auto", help="algorithm(s), comma-separated, or 'all' (default auto)")
    p.add_argument("--accuracy", default="fast", help="fast, compensated (alias kahan), comma-separated or 'all'")
    p.add_argument("-d", "--dtype", default="float32", help="dtype(s), comma-separated or 'all' (default float32)")
    p.add_argument("-o", "--op", default="sum", help="op(s): sum, prod, min, max, avg, comma-separated or 'all'")
    p.add_argument("-b", "--minbytes", default="8", help="smallest size, e.g. 8, 4K, 1M (default 8)")
    p.add_argument("-e", "--maxbytes", default="32M", help="largest size (default 32M)")
    p.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplier between steps (default 2)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per size (default: by size)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up iterations per size (default: by size)")
    p.add_argument("--root", type=int, default=0, help="root of broadcast/reduce (default 0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random data for max_rel_err")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV")
    p.add_argument("--plot", metavar="FILE.png", help="plot busbw and time against size (needs matplotlib)")
    p.add_argument("--compare", default="", metavar="gloo,mpi",
                   help="also run these peers on the same sizes and print peer/pycoll time ratios (needs -n)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before a launched job is stopped")


def _config(args) -> dict:
    """The sweep a rank runs, from the arguments; ValueError names the bad argument."""
    if args.nproc is not None and args.nproc < 1:
        raise ValueError(f"-n must be at least 1, got {args.nproc}")
    for name in ("iters", "warmup"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "iters" else 0):
            raise ValueError(f"--{name} must be at least {1 if name == 'iters' else 0}, got {value}")
    accuracies = [{"kahan": "compensated"}.get(a.strip(), a.strip()) for a in args.accuracy.split(",")]
    algorithms = [a.strip() for a in args.algorithm.split(",") if a.strip()]
    if not algorithms or ("all" in algorithms and len(algorithms) > 1):
        raise ValueError(f"--algorithm: give names or 'all', got {args.algorithm!r}")
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    if not backends:
        raise ValueError("--backend: empty list")
    _check_backends(backends, algorithms)
    size_list = sweep.sizes(sweep.parse_size(args.minbytes, "-b"), sweep.parse_size(args.maxbytes, "-e"),
                            args.stepfactor)
    return {"collective": args.collective, "backends": backends, "algorithms": algorithms,
            "accuracies": sweep.parse_list(",".join(accuracies), sweep.ACCURACIES, "--accuracy"),
            "dtypes": sweep.parse_list(args.dtype, sweep.DTYPES, "-d"),
            "ops": sweep.parse_list(args.op, sweep.OPS, "-o"), "sizes": size_list, "iters": args.iters,
            "warmup": args.warmup, "root": args.root, "seed": args.seed}


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
    names = [c.strip() for c in args.compare.split(",") if c.strip()]
    bad = [c for c in names if c not in peers.PEERS]
    if bad:
        raise ValueError(f"--compare: unknown peer {', '.join(map(repr, bad))}; choose from "
                         f"{', '.join(peers.PEERS)}")
    if names and args.nproc is None:
        raise ValueError("--compare needs -n: each peer is started as its own job of N ranks")
    return names


def _launched(n, config, timeout, runner):
    """Rows of a job of n ranks: config in, rank 0's rows out, through files in a private directory."""
    with tempfile.TemporaryDirectory(prefix="pycoll-bench-") as tmp:
        config_path, result_path = os.path.join(tmp, "config.json"), os.path.join(tmp, "rows.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        runner(n, config_path, result_path, timeout)
        with open(result_path) as f:
            return json.load(f)


def _pycoll_job(n, config_path, result_path, timeout):
    launch.run_module(n, "pycoll.bench.worker", [config_path, result_path], timeout=timeout)


def run(args) -> int:
    try:
        config = _config(args)
        compare = _compare_list(args)
        if args.plot:
            plot.require_matplotlib()
    except (ValueError, plot.PlotUnavailable) as exc:
        print(f"pycoll bench: error: {exc}", file=sys.stderr)
        return 2
    if args.nproc is not None:
        try:
            rows = _launched(args.nproc, config, args.timeout, _pycoll_job)
        except launch.RankFailed as exc:
            print(f"pycoll bench: error: {exc} (its error is above)", file=sys.stderr)
            return 1
    else:
        from pycoll.bench import worker
        from pycoll.bench.progress import Progress

        rows = worker.run(config, Progress.for_terminal(sys.stderr))
        if rows is None:  # not rank 0: rank 0 prints
            return 0
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
    if any(r["wrong"] for r in everything):
        print("pycoll bench: some results were wrong (#wrong > 0)", file=sys.stderr)
        return 1
    return 0


def register(subparsers) -> None:
    """Add `bench` to the `pycoll` command's subparsers."""
    p = subparsers.add_parser("bench", help=HELP, description=HELP)
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="pycoll bench", description=HELP)
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
