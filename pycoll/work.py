"""pycoll.Work, the handle a collective called with async_op=True returns, and pycoll.wait_all.

The collective itself runs on the communicator's progress thread in C (native/comm/progress.c), or, on the
vendor backends, on the device, on a stream of the communicator's own (backends/README.md); a Work wraps
the engine's handle (NativeWork for the host backends; a VendorWork for the vendor backends' enqueued
collectives; CompletedHandle for engines that run the collective at call time) and adds what Python needs: the
result, references to the arrays until the collective completes, and done-callbacks.

When callbacks run: the progress thread never runs Python, so a callback runs in the Python thread that first
sees the Work complete -- in wait(), is_completed(), exception() or wait_all() -- or at once, in
add_done_callback() itself, when the Work has already completed. Each runs once, in the order added; one that
raises an Exception is logged (logger "pycoll") and does not stop the others. One that raises any other
BaseException (KeyboardInterrupt, SystemExit) does not stop them either: every callback still runs, and the
first such exception is re-raised after the last of them, from the call that ran them.
"""

from __future__ import annotations

import logging
import threading
import time

from pycoll.errors import Timeout

log = logging.getLogger("pycoll")


class CompletedHandle:
    """The handle of a collective that already ran (or failed) when it was called: what engines without a
    progress thread return for async_op=True (the vendor backends, for what they run at call time)."""

    def __init__(self, algorithm=None, error=None):
        self.algorithm = algorithm
        self._error = error

    def wait(self, timeout):
        return True

    def done(self):
        return True

    def error(self):
        return self._error


def _timeout_seconds(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
    if not timeout >= 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
    return float(timeout)


class Work:
    """A collective started with async_op=True. It runs in the background, in call order with every other
    collective on its communicator; its arrays must not be touched until it completes."""

    def __init__(self, handle, result, keep, on_error=None):
        """handle: the engine's (wait(timeout) -> bool, done(), error(), algorithm); result: what wait()
        returns; keep: the arrays to keep alive until completion; on_error(exc): told once of a failure."""
        self._handle = handle
        self._result = result
        self._keep = keep
        self._on_error = on_error
        self._callbacks = []
        self._lock = threading.Lock()
        self._finished = False
        self._error = None

    def __repr__(self):
        state = "completed" if self._finished else "pending"
        return f"<pycoll.Work {state}>"

    def _observe(self):
        """Once the handle is done: record the outcome, release the arrays, run the callbacks (once)."""
        with self._lock:
            if self._finished or not self._handle.done():
                return self._finished
            self._error = self._handle.error()
            self._finished = True
            self._keep = None
            callbacks, self._callbacks = self._callbacks, []
        if self._error is not None and self._on_error is not None:
            self._on_error(self._error)
        interrupted = None
        for fn in callbacks:
            try:
                self._call(fn)
            except BaseException as exc:  # noqa: BLE001 -- re-raised below, once every callback has run
                if interrupted is None:
                    interrupted = exc
        if interrupted is not None:
            raise interrupted
        return True

    def _call(self, fn):
        try:
            fn(self)
        except Exception:  # noqa: BLE001 -- a callback's failure must not break the others or the waiter
            log.exception("pycoll: a Work done-callback raised")

    @property
    def algorithm(self):
        """The algorithm that ran (what "auto" chose), once completed; None before."""
        return self._handle.algorithm

    def wait(self, timeout=None, *, block=False):
        """Wait for the collective and return its result (as the blocking call returns it), or raise its error
        (as the blocking call raises it). With `timeout` (seconds), raise pycoll.Timeout if it has not
        completed by then: the collective keeps running and the Work can be waited on again.

        A vendor collective on device memory (NCCL, HCCL) is not waited for on the host, as torch's
        ProcessGroupNCCL's Work.wait() does not: the framework's current stream is ordered after the collective's
        end, and wait() returns at once, so later work on that stream sees the result. Its error, if it fails,
        comes from synchronize() or exception() then, or from the communicator's next call. block=True (or a
        timeout, or synchronize()) waits on the host."""
        seconds = _timeout_seconds(timeout)
        if not block and seconds is None and self._ordered():
            return self._result
        if not self._finished and not self._handle.wait(seconds):
            raise Timeout(f"Work.wait: the collective did not complete within {seconds} s; it is still running "
                          f"(wait again, or close the communicator to cancel it)")
        self._observe()
        if self._error is not None:
            raise self._error
        return self._result

    def synchronize(self, timeout=None):
        """wait(timeout, block=True): wait on the host for the collective to complete (device work too)."""
        return self.wait(timeout, block=True)

    def _ordered(self):
        """Whether the framework's current stream now waits for the collective, so the host need not: a pending
        vendor collective on device memory (a finished one: False, and wait() reports it as before)."""
        order = getattr(self._handle, "order_stream", None)
        if order is None or self._observe():
            return False
        return order()

    def is_completed(self):
        """True once the collective has completed, successfully or not."""
        return self._observe()

    def exception(self):
        """The exception the collective failed with, None if it succeeded or has not completed yet."""
        self._observe()
        return self._error

    def add_done_callback(self, fn):
        """Call fn(work) once the Work completes (see the module docstring for which thread runs it); at once
        when it already has."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        with self._lock:
            if not self._finished:
                self._callbacks.append(fn)
                return
        self._call(fn)


def wait_all(works, timeout=None):
    """Wait for every Work and return their results in order; the first error (in the order given) is raised
    after all have completed, so no collective is left running behind it. `timeout` bounds the whole wait."""
    works = list(works)
    for w in works:
        if not isinstance(w, Work):
            raise TypeError(f"works must hold pycoll.Work objects, got {type(w).__name__}")
    seconds = _timeout_seconds(timeout)
    end = None if seconds is None else time.monotonic() + seconds
    for w in works:
        left = None if end is None else max(0.0, end - time.monotonic())
        if not w._finished and not w._handle.wait(left):
            raise Timeout(f"wait_all: not every collective completed within {seconds} s; they are still running")
        w._observe()
    for w in works:
        if w._error is not None:
            raise w._error
    return [w._result for w in works]
