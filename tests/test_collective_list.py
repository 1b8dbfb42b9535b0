"""The one list of collectives (PYCOLL_COLLECTIVES, native/include/pycoll/ids.h) and what must follow it: the
enum's values (ABI), the names, a validation case (native/comm/call.c), a table row that serves it and the
runner that calls it (native/algorithms/table.c), a Python method. Each collective is run once, on one rank,
by every algorithm that serves it, through the one call description: a collective the list has and any of
those lack is refused or runs as something else, and fails here."""

import os
import re

import numpy as np
import pytest

import pycoll
from pycoll._bindings import abi
from pycoll.algorithms import ALGORITHMS, COLL_ALGORITHMS, NATIVE_ONLY
from pycoll.comm import Communicator
from pycoll.dtypes import dtype_id

IDS_H = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "native", "include", "pycoll", "ids.h")

# Part of the ABI: descriptors carry these over the wire and programs built against older headers pass them.
ABI_VALUES = {"all_reduce": 0, "reduce_scatter": 1, "all_gather": 2, "broadcast": 3, "reduce": 4, "barrier": 5,
              "send/recv": 6, "all_to_all": 7, "gather": 8, "scatter": 9, "all_gather_v": 10,
              "reduce_scatter_v": 11}

K = 4  # elements per rank's block
# Per collective: the Communicator method that reaches it, and a valid call on one rank as
# (send elements or None, recv elements or None, extra NativeComm.run keywords).
CASES = {
    "all_reduce": ("all_reduce", K, K, {}),
    "reduce_scatter": ("reduce_scatter", K, K, {}),
    "all_gather": ("all_gather", K, K, {}),
    "broadcast": ("broadcast", None, K, {"root": 0}),
    "reduce": ("reduce", K, K, {"root": 0}),
    "barrier": ("barrier", None, None, {}),
    "send/recv": ("send", None, None, None),  # messages: no schedule, a peer needed (test_point_to_point.py)
    "all_to_all": ("all_to_all", K, K, {}),
    "gather": ("gather", K, K, {"root": 0}),
    "scatter": ("scatter", K, K, {"root": 0}),
    "all_gather_v": ("all_gather", K, K, {"counts": True}),
    "reduce_scatter_v": ("reduce_scatter", K, K, {"counts": True}),
}


def listed():
    """(ID, value, name) of each line of PYCOLL_COLLECTIVES, as the header spells it."""
    with open(IDS_H) as f:
        text = f.read()
    return re.findall(r"X\((\w+), (\d+), \w+, \"([^\"]+)\", \w+\)", text)


def test_the_list_is_the_abi_and_every_binding_takes_it():
    lines = listed()
    assert {name: int(value) for _, value, name in lines} == ABI_VALUES
    assert abi.COLLECTIVES == ABI_VALUES  # names and ids reach Python from the list, in id order
    assert [int(value) for _, value, _ in lines] == list(range(len(lines)))


def test_every_listed_collective_has_a_case_a_method_and_a_schedule():
    assert set(CASES) == set(abi.COLLECTIVES), "a collective of the list without a case here (add one)"
    for name, (method, *_rest) in CASES.items():
        assert callable(getattr(Communicator, method, None)), f"{name}: no Communicator.{method}"
        if name != "send/recv":
            assert set(COLL_ALGORITHMS[name]) - set(NATIVE_ONLY), f"{name}: no algorithm table row serves it"


@pytest.fixture(scope="module")
def native():
    comm = pycoll.init(rank=0, world_size=1, timeout=10)
    yield comm._engine.native
    comm.close()


@pytest.mark.parametrize("coll,algorithm", [(c, a) for c in CASES if c != "send/recv" for a in COLL_ALGORITHMS[c]
                                            if a not in NATIVE_ONLY])
def test_every_schedule_of_the_table_runs_through_the_call_description(native, coll, algorithm):
    _, send_n, recv_n, extra = CASES[coll]
    extra = dict(extra)
    send = np.arange(send_n, dtype=np.float64) + 1 if send_n is not None else None
    recv = np.zeros(recv_n, dtype=np.float64) if recv_n is not None else None
    counts = np.array([K], dtype=np.int64)
    if extra.pop("counts", False):
        extra["counts"] = counts.ctypes.data
    native.run(abi.COLLECTIVES[coll], send.ctypes.data if send is not None else 0,
               recv.ctypes.data if recv is not None else 0, send_n or 0, recv_n or 0, dtype_id("float64"),
               algorithm=ALGORITHMS[algorithm], **extra)
    assert native.last_algorithm == algorithm, coll
    if send is not None and recv is not None:  # one rank: every collective with both buffers copies its block
        assert np.array_equal(recv, send), (coll, algorithm, recv)
