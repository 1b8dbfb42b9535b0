"""The ``pycoll`` command line (also ``python -m pycoll``).

Each subcommand is a module ``pycoll/cli/<name>.py`` defining ``register(subparsers)``, which adds its parser
and sets ``func`` (parsed args -> exit code). To add one, list its module name in SUBCOMMANDS.
"""

import argparse
import importlib

import pycoll

SUBCOMMANDS = ("run", "bench", "tune", "config", "trace")


def build_parser():
    parser = argparse.ArgumentParser(prog="pycoll", description="pycoll: collective communication for Python.")
    parser.add_argument("--version", action="version", version=f"pycoll {pycoll.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"pycoll.cli.{name}").register(subparsers)
    return parser


def main(argv=None):
    """Runs the command line; returns the process exit code."""
    args = build_parser().parse_args(argv)
    return args.func(args)
