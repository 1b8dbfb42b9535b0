"""What the worker scripts share about their report, the JSON line the test reads from the last line of stdout:
the outcome of a call that is expected to fail or to meet a dead peer (or of a loop until a peer dies), and the
end of a run (the scenario's error, the report printed, the communicator closed)."""

import contextlib
import json
import sys
import time
import traceback

import numpy as np

import pycoll


@contextlib.contextmanager
def outcome(report, errors=pycoll.PycollError):
    """The with-block's outcome into report: "no error", or the class name of the error (one of `errors`) it
    raised, with its message under "message"."""
    try:
        yield
        report["outcome"] = "no error"
    except errors as exc:
        report["outcome"] = type(exc).__name__
        report["message"] = str(exc)


@contextlib.contextmanager
def peer_failure(report):
    """The with-block's outcome where a peer dies during it: "no error", or "PeerFailure" with the rank it
    names under "failed_rank"; and under "seconds" how long the block took to end."""
    start = time.monotonic()
    try:
        yield
        report["outcome"] = "no error"
    except pycoll.PeerFailure as exc:
        report["outcome"] = "PeerFailure"
        report["failed_rank"] = exc.rank
    report["seconds"] = time.monotonic() - start


def all_reduce_until_peer_failure(comm, report, elements):
    """Print the ready line the test waits for, then all-reduce `elements` float32 ones in a loop until a peer
    dies (the test kills one): the rank the PeerFailure names under "failed_rank", the wall-clock time it was
    caught under "caught". Returns the array, for calls on the broken communicator."""
    x = np.ones(elements, dtype=np.float32)
    print('{"ready": true}', flush=True)
    try:
        for _ in range(1_000_000):
            comm.all_reduce(x)
    except pycoll.PeerFailure as exc:
        report["caught"] = time.time()
        report["failed_rank"] = exc.rank
    return x


def expect(exc_type, words, fn, *args, **kwargs):
    """fn(*args, **kwargs) raises exc_type with every one of words in its message."""
    try:
        fn(*args, **kwargs)
    except exc_type as exc:
        for w in words:
            assert w in str(exc), (w, str(exc))
        return
    raise AssertionError(f"no {exc_type.__name__} for {words}")


@contextlib.contextmanager
def refusal(report):
    """Around calls that every rank must refuse: the error's class name and message into report, or "ok" when
    the block ran to its end (the test fails on that)."""
    try:
        yield
        report["ok"] = True
    except pycoll.PycollError as exc:
        report.update(error=type(exc).__name__, message=str(exc))


@contextlib.contextmanager
def failure_reported(report):
    """Around a worker's whole scenario: any exception that ends it into report ("ok" false, its class name,
    message and traceback), for the test to show."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 -- reported to the test
        report.update(ok=False, error=type(exc).__name__, message=str(exc), traceback=traceback.format_exc())


@contextlib.contextmanager
def scenario_report(report):
    """Around a worker's whole scenario: the pycoll error that ended it, if any, under "error", then the report
    printed. Any other exception breaks the script itself (no report: the test fails on that)."""
    try:
        yield
    except pycoll.PycollError as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(report), flush=True)


def report_and_close(report, comm):
    """Print the report, then close comm (None: init failed) -- the report is out even if close fails, and a
    close that fails after the scenario's own error is not the test's concern."""
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    if comm is not None:
        try:
            comm.close()
        except pycoll.PycollError:
            pass


def close_and_print(report, comm, started):
    """The end of a scenario whose report keeps any close error: the time since `started` under "elapsed", comm
    closed (None: init failed) with a failure under "close_error", then the report printed."""
    report["elapsed"] = time.monotonic() - started
    if comm is not None:
        try:
            comm.close()
        except Exception as exc:  # noqa: BLE001 -- reported to the test
            report.setdefault("close_error", f"{type(exc).__name__}: {exc}")
    print(json.dumps(report), flush=True)
