"""pycoll.Work and the async_op keyword on one rank: argument checks stay synchronous, results and callbacks,
the engines without a progress thread (a completed Work), and the arrays kept alive for a dropped Work."""

import gc
import logging
import weakref

import numpy as np
import pytest
from multiproc import free_port

import pycoll
from pycoll.plugins import Call, Engine
from pycoll.plugins.engine import run_now
from pycoll.work import CompletedHandle, Work


@pytest.fixture
def comm():
    c = pycoll.init(rank=0, world_size=1, master_port=free_port())
    yield c
    c.close()


def test_every_collective_takes_async_op_and_returns_what_the_blocking_call_returns(comm):
    x = np.arange(6, dtype=np.int64)
    out = np.empty_like(x)
    works = [comm.all_reduce(x, async_op=True), comm.all_reduce(x, out=out, async_op=True),
             comm.reduce_scatter(x, out, async_op=True), comm.all_gather(x, out, async_op=True),
             comm.broadcast(x, root=0, async_op=True), comm.reduce(x, root=0, async_op=True),
             comm.barrier(async_op=True)]
    assert all(isinstance(w, pycoll.Work) for w in works)
    results = pycoll.wait_all(works)
    assert [r is e for r, e in zip(results, [x, out, out, out, x, x, None])] == [True] * 7
    assert works[0].algorithm in ("ring", "halving_doubling", "mesh", "recursive_doubling")


def test_bad_arguments_raise_at_call_time_not_from_wait(comm):
    with pytest.raises(ValueError, match="op"):
        comm.all_reduce(np.zeros(3), op="mean", async_op=True)
    with pytest.raises(TypeError, match="async_op"):
        comm.all_reduce(np.zeros(3), async_op="yes")
    with pytest.raises(ValueError, match="root"):
        comm.broadcast(np.zeros(3), root=1, async_op=True)
    w = comm.barrier(async_op=True)
    with pytest.raises(ValueError, match="timeout"):
        w.wait(timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        w.wait(timeout="1")
    with pytest.raises(TypeError, match="fn must be callable"):
        w.add_done_callback(3)
    with pytest.raises(TypeError, match="pycoll.Work"):
        pycoll.wait_all([w, 3])


def test_a_callback_that_raises_is_logged_and_the_others_still_run(comm, caplog):
    w = comm.barrier(async_op=True)
    seen = []
    w.wait()
    with caplog.at_level(logging.ERROR, logger="pycoll"):
        w.add_done_callback(lambda _: 1 / 0)
        w.add_done_callback(seen.append)
    assert seen == [w] and "done-callback raised" in caplog.text


class _Gate:
    """A handle that completes when the test says so: callbacks are added while the Work is pending."""
    algorithm = None

    def __init__(self):
        self.open = False

    def wait(self, timeout):
        return self.open

    def done(self):
        return self.open

    def error(self):
        return None


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_every_callback_runs_and_the_first_base_exception_is_raised_after_them(interrupt):
    gate = _Gate()
    w = Work(gate, "result", None)
    seen = []

    def stop(tag):
        def callback(_):
            seen.append(tag)
            raise interrupt(tag)
        return callback

    w.add_done_callback(seen.append)
    w.add_done_callback(stop("first"))
    w.add_done_callback(seen.append)
    w.add_done_callback(stop("second"))
    w.add_done_callback(seen.append)
    gate.open = True
    with pytest.raises(interrupt) as caught:
        w.wait()
    assert caught.value.args == ("first",)
    assert seen == [w, "first", w, "second", w]
    assert w.wait() == "result"  # the callbacks ran once; the Work itself succeeded
    assert seen == [w, "first", w, "second", w]


def test_a_dropped_work_keeps_its_array_alive_until_the_collective_completed(comm):
    x = np.ones(1 << 16)
    alive = weakref.ref(x)
    comm.all_reduce(x, async_op=True)
    del x
    gc.collect()
    assert alive() is not None  # the communicator holds it for the pending Work
    comm.barrier()              # a blocking call runs after it: the Work has completed
    gc.collect()
    assert alive() is None


def test_after_close_async_calls_raise_communicator_closed(comm):
    comm.close()
    with pytest.raises(pycoll.CommunicatorClosed):
        comm.all_reduce(np.zeros(3), async_op=True)


class RunsNow(Engine):
    """An engine without a progress thread, like the vendor ones: an async call runs now (run_now)."""

    def run(self, call, async_op=False):
        return run_now(self._run, call) if async_op else self._run(call)

    def _run(self, call):
        if call.collective == "all_reduce":
            raise pycoll.PeerFailure("rank 1 died", rank=1)
        return "ring"


def test_engines_without_a_progress_thread_return_completed_works_with_the_error_inside():
    engine = RunsNow()
    ok = Work(engine.run(Call("barrier"), True), None, None)
    assert ok.is_completed() and ok.wait() is None and ok.algorithm == "ring"
    failed = Work(engine.run(Call("all_reduce"), True), "x", None)
    assert failed.is_completed() and isinstance(failed.exception(), pycoll.PeerFailure)
    with pytest.raises(pycoll.PeerFailure, match="rank 1 died"):
        failed.wait()
    assert isinstance(engine.run(Call("barrier"), True), CompletedHandle)
