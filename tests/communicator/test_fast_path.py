"""The fast path (pycoll/_bindings/fast_path.pxi): the common call -- C-contiguous NumPy arrays, accepted names --
runs without building Buffers, and every other call falls through to the general path, which checks and
explains it. Checked by making the general path's buffer lookup fail loudly: a call that must take the fast
path still works, one that must not reaches the general path."""

import numpy as np
import pytest

try:
    import ml_dtypes
except ImportError:  # optional: the bfloat16 case needs it
    ml_dtypes = None

import pycoll
import pycoll.comm
from pycoll.algorithms import ALGORITHMS


class GeneralPathTaken(Exception):
    pass


@pytest.fixture
def comm():
    with pycoll.init(rank=0, world_size=1, timeout=10) as c:
        yield c


@pytest.fixture
def no_general_path(monkeypatch):
    def refuse(x, *, name="x", writable=False):
        raise GeneralPathTaken(name)
    monkeypatch.setattr(pycoll.comm, "as_buffer", refuse)


X = np.arange(8, dtype=np.float32)
Y = np.zeros(8, dtype=np.float32)

# (name, call(comm)): calls that must take the fast path.
COMMON = [
    ("all_reduce", lambda comm: comm.all_reduce(X)),
    ("all_reduce out", lambda comm: comm.all_reduce(X, "max", out=Y, algorithm="ring", accuracy="kahan")),
    ("reduce_scatter", lambda comm: comm.reduce_scatter(X, Y, op="min")),
    ("all_gather", lambda comm: comm.all_gather(X, Y)),
    ("broadcast", lambda comm: comm.broadcast(X, root=0)),
    ("reduce", lambda comm: comm.reduce(X, 0, "prod", accuracy="compensated")),
    ("reduce with out", lambda comm: comm.reduce(X, 0, out=Y)),
    ("reduce with out = x", lambda comm: comm.reduce(Y, 0, out=Y)),
    ("all_to_all", lambda comm: comm.all_to_all(X, Y)),
    ("int64 2-d", lambda comm: comm.all_reduce(np.ones((2, 3), dtype=np.int64))),
    ("uint8", lambda comm: comm.all_reduce(np.ones(3, dtype=np.uint8), "max")),
    ("float16", lambda comm: comm.all_reduce(np.ones(3, dtype=np.float16))),
]


@pytest.mark.parametrize("name, call", COMMON, ids=[name for name, _ in COMMON])
def test_common_calls_take_the_fast_path(comm, no_general_path, name, call):
    call(comm)
    assert comm.last_algorithm in ALGORITHMS and comm.last_algorithm != "auto", name


# Calls the fast path must leave to the general path (which accepts some and refuses others).
UNCOMMON = [
    ("strided", lambda comm: comm.all_reduce(X[::2])),
    ("read-only in place", lambda comm: comm.all_reduce(np.broadcast_to(X, (8,)))),
    ("byte-swapped", lambda comm: comm.all_reduce(X.astype(">f4"))),
    ("bytearray view", lambda comm: comm.all_reduce(memoryview(bytearray(8)).cast("f"))),
    ("op id", lambda comm: comm.all_reduce(X, op=0)),
    ("unknown op", lambda comm: comm.all_reduce(X, op="mean")),
    ("unknown algorithm", lambda comm: comm.all_reduce(X, algorithm="tree")),
    ("out of another dtype", lambda comm: comm.all_reduce(X, out=np.zeros(8, np.float64))),
    ("read-only out", lambda comm: comm.all_reduce(X, out=np.broadcast_to(np.float32(0), (8,)))),
    ("reduce with overlapping out", lambda comm: comm.reduce(Y[:6], 0, out=Y[2:])),
    ("all_to_all in place", lambda comm: comm.all_to_all(Y, Y)),
    ("all_to_all overlapping", lambda comm: comm.all_to_all(Y[:4], Y[2:6])),
    ("all_to_all of another dtype", lambda comm: comm.all_to_all(X, np.zeros(8, np.float64))),
    ("all_to_all read-only out", lambda comm: comm.all_to_all(X, np.broadcast_to(np.float32(0), (8,)))),
    ("bool root", lambda comm: comm.broadcast(X, root=False)),
    ("numpy integer root", lambda comm: comm.broadcast(X, root=np.int64(0))),
    ("long complex", lambda comm: comm.all_reduce(np.ones(2, np.clongdouble))),
    ("tag out of range", lambda comm: comm.recv(Y, 1, tag=2 ** 32)),
    ("root beyond 32 bits", lambda comm: comm.broadcast(X, root=2 ** 31)),
    ("bool", lambda comm: comm.all_reduce(np.ones(3, dtype=bool), "max")),
    # A dtype the buffer protocol cannot describe: the buffer request itself fails.
    *([("bfloat16", lambda comm: comm.all_reduce(np.ones(3, dtype=ml_dtypes.bfloat16)))] if ml_dtypes else []),
]


@pytest.mark.parametrize("name, call", UNCOMMON, ids=[name for name, _ in UNCOMMON])
def test_every_other_call_reaches_the_general_path(comm, no_general_path, name, call):
    with pytest.raises(GeneralPathTaken):
        call(comm)


@pytest.mark.parametrize("name, call", UNCOMMON, ids=[name for name, _ in UNCOMMON])
def test_the_general_path_still_judges_what_the_fast_path_declines(comm, name, call):
    """Unpatched: each declined call either works or raises the general path's typed error, never anything
    from the fast path itself."""
    try:
        call(comm)
    except (TypeError, ValueError) as exc:
        assert "x" in str(exc) or "out" in str(exc) or "op" in str(exc) or "algorithm" in str(exc) \
            or "root" in str(exc) or "tag" in str(exc), (name, exc)


# Calls the fast path hands to the library as they are: what the C call sees for itself (counts against the
# collective, a root or peer that is no rank) the library refuses (native/comm/call.c), with the general path's
# own error, as the rules are the library's on either path.
REFUSED = [
    ("out of another length", lambda comm: comm.all_reduce(X, out=np.zeros(7, np.float32))),
    ("blocks of the wrong length", lambda comm: comm.all_gather(X, np.zeros(9, np.float32))),
    ("reduce with out of another length", lambda comm: comm.reduce(X, 0, out=np.zeros(7, np.float32))),
    ("all_to_all of another length", lambda comm: comm.all_to_all(X, np.zeros(7, np.float32))),
    ("root out of range", lambda comm: comm.broadcast(X, root=1)),
    ("negative root", lambda comm: comm.reduce(X, -1)),
    ("send to itself", lambda comm: comm.send(X, 0)),
    ("recv from out of range", lambda comm: comm.recv(Y, 1)),
]


@pytest.mark.parametrize("name, call", REFUSED, ids=[name for name, _ in REFUSED])
def test_the_library_refuses_alike_on_both_paths(comm, monkeypatch, name, call):
    with monkeypatch.context() as m, pytest.raises(ValueError) as fast:
        m.setattr(pycoll.comm, "as_buffer", lambda x, **kw: pytest.fail(f"{name}: left the fast path"))
        call(comm)
    monkeypatch.setattr(comm, "_fast", None)
    with pytest.raises(ValueError) as general:
        call(comm)
    assert str(fast.value) == str(general.value), name


def test_an_algorithm_pinned_by_the_environment_holds_on_the_fast_path(monkeypatch, no_general_path):
    monkeypatch.setenv("PYCOLL_ALGORITHM", "mesh")
    with pycoll.init(rank=0, world_size=1, timeout=10) as comm:
        comm.all_reduce(np.ones(4, np.float32))
        assert comm.last_algorithm == "mesh"


def test_the_fast_paths_results_are_the_general_paths(comm, monkeypatch):
    """reduce into out and all_to_all return what the general path returns, with the same bytes."""
    x = np.arange(8, dtype=np.float32)
    fast = (comm.reduce(x, 0, out=np.zeros(8, np.float32)), comm.all_to_all(x, np.zeros(8, np.float32)))
    monkeypatch.setattr(comm, "_fast", None)
    general = (comm.reduce(x, 0, out=np.zeros(8, np.float32)), comm.all_to_all(x, np.zeros(8, np.float32)))
    for f, g in zip(fast, general):
        assert f.tobytes() == g.tobytes() == x.tobytes()


def test_a_closed_communicator_says_so(comm):
    comm.close()
    with pytest.raises(pycoll.CommunicatorClosed):
        comm.all_reduce(np.ones(4, np.float32))


def test_a_backend_without_a_fast_path_runs_the_general_path(comm, monkeypatch):
    monkeypatch.setattr(comm, "_fast", None)
    seen = []
    real = pycoll.comm.as_buffer
    monkeypatch.setattr(pycoll.comm, "as_buffer", lambda x, **kw: seen.append(kw["name"]) or real(x, **kw))
    x = np.ones(4, np.float32)
    assert comm.all_reduce(x) is x
    assert seen == ["x"]
