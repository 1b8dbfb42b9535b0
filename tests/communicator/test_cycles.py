"""Errors that name what happened: two ranks that each receive from the other first are told of the cycle
within a second (not at the deadline, not as a "stopped or overloaded" rank), over both message transports;
receives that merely wait are not mistaken for one; the user's first collective is #1 in messages (pycoll's
internal init broadcast is numbered apart); communicators are named by their members."""

import pytest
from multiproc import scenario_module

backend, run = scenario_module("cycle_worker.py", ["tcp", "shm"])


@pytest.mark.timeout(60)
def test_two_ranks_that_both_receive_first_get_an_error_naming_the_cycle_within_a_second(backend):
    reports = run(2, "recv_first", timeout=30)
    for rep in reports.values():
        assert rep["outcome"] == "MismatchError", rep
        assert rep["seconds"] < 1.0, rep
        assert "stopped or overloaded" not in rep["message"], rep
    messages = " ".join(rep["message"] for rep in reports.values())
    assert ("rank 0 waits to receive from rank 1, which waits to receive from rank 0" in messages or
            "rank 1 waits to receive from rank 0, which waits to receive from rank 1" in messages), messages


@pytest.mark.timeout(60)
def test_receives_that_wait_for_a_busy_peer_are_no_cycle(backend):
    for rep in run(2, "ping_pong_slow").values():
        assert rep["outcome"] == "no error" and rep.get("ok"), rep


@pytest.mark.timeout(60)
def test_the_users_first_collective_is_number_one_not_the_internal_init_broadcast(backend):
    reports = run(2, "first_collective_mismatch", timeout=10)
    # The root's broadcast may complete (it only sends); rank 1 finds the disagreement.
    messages = [rep["message"] for rep in reports.values() if rep["outcome"] == "MismatchError"]
    assert messages, reports
    assert any("#1 broadcast(float64 x 3" in m and "#1 broadcast(float64 x 4" in m for m in messages), messages
    assert not any("#2 " in m for m in messages), messages


@pytest.mark.timeout(60)
def test_an_order_mismatch_names_communicators_by_their_members(monkeypatch):
    # Over TCP: there every wait sees the other communicator's frames (see test_split's order test for shm).
    monkeypatch.setenv("PYCOLL_BACKEND", "tcp")
    reports = run(3, "group_order", timeout=10)
    messages = [rep["message"] for rep in reports.values() if rep["outcome"] == "MismatchError"]
    named = [m for m in messages if "order mismatch" in m]
    assert named, reports
    for m in named:
        assert "group [0, 2]" in m and "the communicator of all 3 ranks" in m, m
        assert "2654435769" not in m and "group #" not in m, m


def test_pycolls_internal_calls_are_labelled_as_such_in_messages():
    """The descriptor of init's cost-model broadcast (thread tag PYCOLL_THREAD_INTERNAL, numbered apart) as
    every error message describes it."""
    import ctypes

    import pycoll

    class Desc(ctypes.Structure):  # pycoll_coll_desc_t (pycoll/p2p.h), 40 bytes
        _fields_ = [("seq", ctypes.c_uint64), ("history", ctypes.c_uint64), ("count", ctypes.c_int64),
                    ("root", ctypes.c_int32), ("coll", ctypes.c_uint8), ("dtype", ctypes.c_uint8),
                    ("op", ctypes.c_uint8), ("algorithm", ctypes.c_uint8), ("accuracy", ctypes.c_uint8),
                    ("thread", ctypes.c_uint8 * 3), ("group", ctypes.c_uint32)]

    assert ctypes.sizeof(Desc) == 40
    lib = ctypes.CDLL(pycoll.get_library())
    out = ctypes.create_string_buffer(256)

    def describe(thread):
        d = Desc(seq=1, count=16, root=0, coll=3, dtype=7, algorithm=1, thread=(ctypes.c_uint8 * 3)(*thread))
        lib.pycoll_describe_coll(ctypes.byref(d), out, ctypes.c_size_t(len(out)))
        return out.value.decode()

    assert describe((0xff, 0xff, 0xff)) == ("pycoll's internal #1 broadcast(float64 x 16, root=0) "
                                           "(made by init on every rank)")
    assert describe((0, 0, 0)) == "#1 broadcast(float64 x 16, root=0)"
