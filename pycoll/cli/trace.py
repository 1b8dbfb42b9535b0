"""`pycoll trace DIR`: merge the flight recorder's dumps of a job and say which rank hung, straggled or disagreed
(pycoll/trace/); docs/tracing.md."""

from __future__ import annotations

import argparse
import os
import sys

HELP = "merge a job's trace dumps (PYCOLL_TRACE_DIR): hangs, stragglers, mismatches, time per rank"

DESCRIPTION = """\
Reads every pycoll-trace-<comm>-rank<R>.json in DIR (the flight recorder's dumps: on an error, on a signal,
on comm.dump_trace(), at close with PYCOLL_TRACE_ON_CLOSE=1) and prints, per communicator, the rank that never
entered the collective the others are in (hang), ranks that called different collectives, dtypes, counts or
ops at one sequence number (mismatch), failed calls and the ranks that entered collectives last (stragglers);
then per rank its time between calls (compute), in calls, and waiting, with the peer it waited on most."""

EPILOG = """\
exit status: 0 nothing found; 1 a hang, mismatch, failed call or missing dump was found; 2 the dumps could not
be read (the message names the file) or an output could not be written.

examples:
  PYCOLL_TRACE_DIR=/tmp/trace pycoll run -n 4 train.py   # dumps appear there on an error
  pycoll trace /tmp/trace --plot timeline.png --perfetto trace.json   # open trace.json in ui.perfetto.dev
  pycoll trace /tmp/trace --torch-fr /tmp/fr && python -m torch.distributed.flight_recorder.fr_trace /tmp/fr
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("trace", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory", metavar="DIR", help="the directory holding the dumps")
    p.add_argument("--plot", metavar="FILE.png", help="write a timeline picture (needs matplotlib)")
    p.add_argument("--perfetto", metavar="FILE.json",
                   help="write a Chrome/Perfetto trace: a process per rank, a track per communicator")
    p.add_argument("--torch-fr", metavar="OUT_DIR",
                   help="write torch's flight-recorder dumps (one per process) into OUT_DIR, for "
                        "python -m torch.distributed.flight_recorder.fr_trace")
    p.set_defaults(func=run)


def _error(message) -> int:
    print(f"pycoll trace: error: {message}", file=sys.stderr)
    return 2


def run(args) -> int:
    from pycoll.tools.bench.plot import PlotUnavailable, require_matplotlib
    from pycoll.trace import analysis, dumps, perfetto, report

    try:
        if args.plot:
            require_matplotlib()
        comms = dumps.read_dir(args.directory)
    except (dumps.TraceFormatError, PlotUnavailable) as exc:
        return _error(exc)
    reports = analysis.analyze(comms)
    print(report.text(reports, analysis.rank_times(comms)))
    written = []
    try:
        if args.perfetto:
            perfetto.write(args.perfetto, comms, reports)
            written.append(f"{args.perfetto} (open it in ui.perfetto.dev or chrome://tracing)")
        if args.plot:
            from pycoll.trace import plot

            plot.plot(args.plot, comms, reports, title=f"pycoll trace {args.directory}")
            written.append(args.plot)
        if args.torch_fr:
            from pycoll.trace import torch_fr

            os.makedirs(args.torch_fr, exist_ok=True)
            written += torch_fr.convert(comms, args.torch_fr)
    except OSError as exc:
        return _error(f"{exc.filename}: {exc.strerror}")
    for what in written:
        print(f"wrote {what}")
    return 1 if any(r.findings for r in reports) else 0
