"""What the benchmarks started with `pycoll run` (one process per rank) share: their options, a timer, and the
line that says what ran."""

import argparse
import time


def repeats_parser(doc, repeats=15):
    """The benchmark's options, its --repeats among them; the first line of doc describes it."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=repeats)
    return parser


def timed(fn):
    """Seconds fn() took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def job_line(comm):
    """How many ranks, over which backend and transport."""
    return f"{comm.size} ranks, backend {comm.backend} ({getattr(comm._engine, 'transport', comm.backend)})"
