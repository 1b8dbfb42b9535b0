"""The one list of collectives (PYCOLL_COLLECTIVES, native/include/pycoll/ids.h) and what must follow it: the
enum's values (ABI), the names, a validation case (native/comm/call.c), a table row that serves it and the
runner that calls it (native/algorithms/table.c), a Python method. Each collective is run once, on one rank,
by every algorithm that serves it, through the one call description: a collective the list has and any of
those lack is refused or runs as something else, and fails here."""

import os
import re

import numpy as np
import pytest
from repo_paths import ROOT

import pycoll
from pycoll._bindings import abi
from pycoll.algorithms import COLL_ALGORITHMS, NATIVE_ONLY
from pycoll.buffers import as_buffer
from pycoll.comm import Communicator
from pycoll.plugins import Call

IDS_H = os.path.join(ROOT, "native", "include", "pycoll", "ids.h")

# Part of the ABI: descriptors carry these over the wire and programs built against older headers pass them.
ABI_VALUES = {"all_reduce": 0, "reduce_scatter": 1, "all_gather": 2, "broadcast": 3, "reduce": 4, "barrier": 5,
              "send/recv": 6, "all_to_all": 7, "gather": 8, "scatter": 9, "all_gather_v": 10,
              "reduce_scatter_v": 11}

K = 4  # elements per rank's block
# A valid call on one rank of each kind (ids.h) as (send elements or None, recv elements or None, extra
# pycoll.plugins.Call keywords): on one rank every collective with both buffers copies send into recv.
KIND_CALLS = {
    "reduction": (K, K, {}),
    "blocks": (K, K, {}),
    "in_place_rooted": (None, K, {"root": 0}),
    "rooted_reduction": (K, K, {"root": 0}),
    "no_data": (None, None, {}),
    "rooted": (K, K, {"root": 0}),
    "counts": (K, K, {"counts": True}),
    "counts_reduction": (K, K, {"counts": True}),
    "message": None,  # no schedule; a peer needed (test_point_to_point.py)
}


def listed():
    """(ID, value, field, name, kind) of each line of PYCOLL_COLLECTIVES, as the header spells it."""
    with open(IDS_H) as f:
        text = f.read()
    return re.findall(r"X\((\w+), (\d+), (\w+), \"([^\"]+)\", (\w+)\)", text)


LISTED = listed()
KIND = {name: kind for _, _, _, name, kind in LISTED}


def test_the_list_is_the_abi_and_every_binding_takes_it():
    assert {name: int(value) for _, value, _, name, _ in LISTED} == ABI_VALUES
    assert abi.COLLECTIVES == ABI_VALUES  # names and ids reach Python from the list, in id order
    assert [int(value) for _, value, _, _, _ in LISTED] == list(range(len(LISTED)))


def test_every_listed_collective_has_a_kind_a_method_and_a_schedule():
    for _, _, field, name, kind in LISTED:
        assert kind in KIND_CALLS, f"{name}: kind {kind} has no call here (add one)"
        # the _v collectives are all_gather / reduce_scatter with counts=; messages are send and recv
        method = {"send_recv": "send"}.get(field, field.removesuffix("_v"))
        assert callable(getattr(Communicator, method, None)), f"{name}: no Communicator.{method}"
        if kind != "message":
            assert set(COLL_ALGORITHMS[name]) - set(NATIVE_ONLY), f"{name}: no algorithm table row serves it"


@pytest.fixture(scope="module")
def native():
    comm = pycoll.init(rank=0, world_size=1, timeout=10)
    yield comm._engine.native
    comm.close()


@pytest.mark.parametrize("coll,algorithm", [(c, a) for c in abi.COLLECTIVES if KIND_CALLS.get(KIND.get(c))
                                            for a in COLL_ALGORITHMS[c] if a not in NATIVE_ONLY])
def test_every_schedule_of_the_table_runs_through_the_call_description(native, coll, algorithm):
    send_n, recv_n, extra = KIND_CALLS[KIND[coll]]
    extra = dict(extra)
    send = np.arange(send_n, dtype=np.float64) + 1 if send_n is not None else None
    recv = np.zeros(recv_n, dtype=np.float64) if recv_n is not None else None
    if extra.pop("counts", False):
        extra["counts"] = np.array([K], dtype=np.int64)
    native.run(Call(coll, as_buffer(send) if send is not None else None,
                    as_buffer(recv) if recv is not None else None, algorithm=algorithm, **extra))
    assert native.last_algorithm == algorithm, coll
    if send is not None and recv is not None:  # one rank: every collective with both buffers copies its block
        assert np.array_equal(recv, send), (coll, algorithm, recv)
