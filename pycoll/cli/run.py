"""``pycoll run -n N script.py args...``: starts N ranks of a program on this host (pycoll.launcher says what
each rank gets and how failures and signals are handled)."""

import argparse
import sys

from pycoll.launcher import launch


def register(subparsers):
    parser = subparsers.add_parser(
        "run", help="start N local ranks of a program",
        description="Start N ranks of a Python program on this host, with the environment pycoll.init() reads.")
    parser.add_argument("-n", "--nproc", type=_positive_int, required=True, help="number of ranks")
    parser.add_argument("--backend", help="exported to the ranks as PYCOLL_BACKEND")
    parser.add_argument("--master-port", type=_port, help="rendezvous port (default: a free one)")
    parser.add_argument("--timeout", type=_positive_float,
                        help="stop every rank after this many seconds and exit with 124 (default: no limit)")
    parser.add_argument("--grace-period", type=_positive_float, default=5.0,
                        help="seconds between SIGTERM and SIGKILL when stopping ranks (default: 5)")
    parser.add_argument("-m", dest="module", action="store_true",
                        help="the program is a module name, run as python -m MODULE")
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args...]")
    parser.set_defaults(func=lambda args: _run_command(parser, args))


def _run_command(parser, args):
    if not args.program:
        parser.error("give the program to run: script.py [args...] or -m module [args...]")
    head, rest = args.program[0], args.program[1:]
    command = [sys.executable, "-m", head, *rest] if args.module else [sys.executable, head, *rest]
    return launch(command, args.nproc, backend=args.backend, master_port=args.master_port, timeout=args.timeout,
                  grace_period=args.grace_period)


# argparse puts the option's name before these messages ("argument -n/--nproc: expected ..."); a type function
# that raised ValueError would instead be reported by its own name ("invalid _positive_int value").
def _number(text, kind, expected):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def _positive_int(text):
    value = _number(text, int, "a whole number of at least 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value}")
    return value


def _positive_float(text):
    value = _number(text, float, "a number of seconds greater than 0")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds greater than 0, got {text}")
    return value


def _port(text):
    value = _number(text, int, "a port number in [1, 65535]")
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"expected a port number in [1, 65535], got {value}")
    return value
