"""One set of rules per call: engines whose calls never reach a libpycoll communicator -- the vendor engines, a
third-party plugin's -- get them checked by the library's own rules (pycoll_call_check, native/comm/call.c)
before run() is called, refused with the sentence the host engines' C call gives."""

import os
import re

import numpy as np
import pytest
from fakes.vendor_harness import FakeDeviceArray, make_engine, run_ranks_ok, vendor_fixtures

import pycoll
from pycoll import plugins
from pycoll.errors import PycollError

fake_env, env = vendor_fixtures("nccl")


def _device(n, dtype=np.float32):
    return FakeDeviceArray(np.ones(n, dtype))


# (call(comm, rank), exception class, what the library says); 2 ranks.
BAD_CALLS = [
    (lambda c, r: c.all_reduce(_device(4), out=_device(5)), ValueError,
     "all_reduce: send_count must be recv_count = 5, got 4"),
    (lambda c, r: c.reduce_scatter(_device(4), _device(3)), ValueError,
     "reduce_scatter: send_count must be size * recv_count = 6, got 4"),
    (lambda c, r: c.all_gather(_device(2), _device(5)), ValueError,
     "all_gather: recv_count must be size * send_count = 4, got 5"),
    (lambda c, r: c.broadcast(_device(4), root=2), ValueError, "root must be in [0, 2), got 2"),
    (lambda c, r: c.reduce(_device(4), root=-1), ValueError, "root must be in [0, 2), got -1"),
    (lambda c, r: c.send(_device(4), r), ValueError, "dest must be another rank in [0, 2), got {r} (this rank is {r})"),
    (lambda c, r: c.recv(_device(4), 5), ValueError, "source must be another rank in [0, 2), got 5"),
    (lambda c, r: c.all_to_all(_device(5), _device(5)), ValueError,
     "all_to_all: send_count must be size * k (a multiple of size 2), got 5"),
    (lambda c, r: c.all_reduce(_device(4, np.int32), accuracy="reproducible"), PycollError,
     "accuracy reproducible: dtype int32 is not supported"),
]


def _vendor_rank(rank, world):
    from pycoll.plugins.nccl import NcclBackend
    engine = make_engine("nccl", rank, world, 10.0)
    comm = pycoll.Communicator(engine, rank=rank, size=world, backend=NcclBackend(), timeout=10.0)
    log = os.environ["FAKE_COLL_LOG"]
    before = open(log).read()
    refused = []
    for call, error, says in BAD_CALLS:
        with pytest.raises(error) as caught:
            call(comm, rank)
        refused.append((type(caught.value).__name__, str(caught.value)))
    # The other rank's lines may be there (its good call below, ahead of this one's): this rank's only.
    reached = [line for line in open(log).read()[len(before):].splitlines() if f" rank={rank} " in line]
    x = np.full(4, rank + 1, np.float32)
    comm.all_reduce(FakeDeviceArray(x))  # still usable
    comm.close()
    return refused, reached, x.tolist()


@pytest.mark.timeout(90)
def test_a_vendor_engine_refuses_bad_calls_by_the_librarys_rules_before_the_vendor_sees_them(env):
    for rank, (refused, reached, summed) in enumerate(run_ranks_ok(_vendor_rank, 2, env)):
        for (_, error, says), (name, message) in zip(BAD_CALLS, refused):
            assert name == error.__name__ and says.format(r=rank) in message, (says, name, message)
        assert reached == [], reached  # nothing of them reached the (fake) NCCL
        assert summed == [3.0] * 4


class Recording(plugins.Engine):
    """A third-party engine: it runs nothing, it keeps the calls it is given."""

    def __init__(self):
        self.calls = []

    def run(self, call, async_op=False):
        self.calls.append(call)
        return plugins.engine.run_now(lambda: "ring") if async_op else "ring"


class Declared(plugins.Backend):
    name = "declared"
    algorithms = ("auto", "ring", "mesh")
    accuracies = ("fast", "compensated", "reproducible")


@pytest.fixture
def plugin_comm():
    engine = Recording()
    with pycoll.Communicator(engine, rank=0, size=2, backend=Declared(), timeout=5.0) as comm:
        yield comm, engine


@pytest.mark.parametrize("call, error, says", [
    (lambda c: c.all_reduce(np.ones(4, np.complex64), op="max"), ValueError,
     "op max is not defined for dtype complex64: complex numbers have no order"),
    (lambda c: c.all_reduce(np.ones(4, np.int32), accuracy="reproducible"), PycollError,
     "accuracy reproducible: dtype int32 is not supported"),
    (lambda c: c.all_gather(np.ones(1), np.ones(5), counts=[1, 3]), ValueError,
     "all_gather_v: recv_count must be sum(counts) = 4, got 5"),
    (lambda c: c.reduce_scatter(np.ones(4), np.ones(2), counts=[2, 2], algorithm="mesh"), ValueError,
     "algorithm mesh has no reduce_scatter_v"),
    (lambda c: c.gather(np.ones(2), np.ones(3), root=0), ValueError,
     "gather: recv_count must be size * send_count = 4, got 3"),
    (lambda c: c.all_reduce(np.ones(4), out=np.ones(3), async_op=True), ValueError,
     "all_reduce: send_count must be recv_count = 3, got 4"),
    (lambda c: c.send(np.ones(4), 0), ValueError, "dest must be another rank in [0, 2), got 0 (this rank is 0)"),
])
def test_a_third_party_engine_gets_only_checked_calls(plugin_comm, call, error, says):
    comm, engine = plugin_comm
    with pytest.raises(error, match=f"^{re.escape(says)}"):
        call(comm)
    assert engine.calls == []
    comm.all_reduce(np.ones(4), async_op=True).wait()
    assert [c.collective for c in engine.calls] == ["all_reduce"]
