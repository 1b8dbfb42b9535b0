"""The Communicator's argument checking and array handling, on a world of one (no peers needed): every bad
input gets a typed exception naming the argument, and any array type works without copies."""

import re

import numpy as np
import pytest
from algorithm_table import ALL_REDUCE_SCHEDULES
from repo_paths import ROOT

import pycoll

LONG_COMPLEX = np.dtype(np.clongdouble)  # a complex dtype pycoll does not take (complex64/128 it does)


def test_attributes_and_repr(comm):
    assert (comm.rank, comm.size, comm.backend) == (0, 1, "cpu")  # the default backend for host memory
    assert (comm.hosts, comm.local_rank, comm.local_size) == (1, 0, 1)
    assert "rank=0 size=1" in repr(comm)


def test_in_place_returns_the_same_array(comm):
    x = np.arange(10, dtype=np.float32)
    assert comm.all_reduce(x) is x
    assert np.array_equal(x, np.arange(10, dtype=np.float32))


def test_out_of_place_leaves_x_alone(comm):
    x = np.arange(10, dtype=np.int64)
    out = np.zeros_like(x)
    assert comm.all_reduce(x, op=pycoll.MAX, out=out) is out
    assert np.array_equal(out, x)


def test_avg_and_every_algorithm_name(comm):
    x = np.full(5, 3.0)
    for algorithm in ("auto", *ALL_REDUCE_SCHEDULES):
        comm.all_reduce(x, op="avg", algorithm=algorithm, accuracy="kahan")
    assert np.array_equal(x, np.full(5, 3.0))


def test_multidimensional_and_zero_length(comm):
    x = np.ones((3, 4), dtype=np.int8)
    comm.all_reduce(x)
    comm.all_reduce(np.empty(0, dtype=np.float32))


def test_buffer_protocol_objects(comm):
    data = bytearray(8)
    comm.all_reduce(memoryview(data).cast("f"))  # float32 view of a bytearray


def test_torch_cpu_tensor_through_dlpack(comm):
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32)
    assert comm.all_reduce(t) is t
    assert t.tolist() == list(range(6))


@pytest.mark.parametrize("call, error, words", [
    (lambda c: c.all_reduce(np.ones(4)[::2]), ValueError, "C-contiguous"),
    (lambda c: c.all_reduce(np.ones(4, dtype=np.clongdouble)), TypeError, LONG_COMPLEX.name),
    (lambda c: c.all_reduce(np.ones(4), op="mean"), ValueError, "mean"),
    (lambda c: c.all_reduce(np.ones(4), algorithm="tree"), ValueError, "tree"),
    (lambda c: c.all_reduce(np.ones(4), algorithm=3), TypeError, "algorithm"),
    (lambda c: c.all_reduce(np.ones(4), accuracy="exact"), ValueError, "exact"),
    (lambda c: c.all_reduce(np.ones(4), out=np.ones(5)), ValueError, "send_count must be recv_count = 5, got 4"),
    (lambda c: c.all_reduce(np.ones(4), out=np.ones(4, dtype=np.float32)), TypeError, "out"),
    (lambda c: c.all_reduce([1.0, 2.0]), TypeError, "x must be an array"),
    (lambda c: c.broadcast(np.ones(4), root=1), ValueError, "root"),
    (lambda c: c.broadcast(np.ones(4), root="0"), TypeError, "root"),
    (lambda c: c.broadcast(np.ones(4), root=True), TypeError, "root must be an integer, got bool"),
    (lambda c: c.broadcast(np.ones(4), root=np.True_), TypeError, "root must be an integer"),
    (lambda c: c.broadcast(np.ones(4), root=1.0), TypeError, "root must be an integer, got float"),
    (lambda c: c.reduce(np.ones(4), root=np.int64(1)), ValueError, "root must be in [0, 1), got 1"),
    (lambda c: c.all_reduce(np.ones(4, dtype=np.clongdouble)), TypeError,
     f"x: unsupported dtype {LONG_COMPLEX.str} ({LONG_COMPLEX.name})"),
    (lambda c: c.reduce_scatter(np.ones(4), np.ones(3)), ValueError, "send_count must be size * recv_count"),
    (lambda c: c.all_gather(np.ones(4), np.ones(3)), ValueError, "recv_count must be size * send_count"),
])
def test_bad_arguments_are_named(comm, call, error, words):
    with pytest.raises(error, match=re.escape(words)):
        call(comm)


@pytest.mark.parametrize("dtype", [np.clongdouble, np.longdouble, np.bool_, np.uint16, ">f4"])
def test_unsupported_dtype_of_out_names_out(comm, dtype):
    x = np.ones(4, dtype=np.float32)
    calls = (lambda out: comm.all_reduce(x, out=out), lambda out: comm.reduce_scatter(x, out),
             lambda out: comm.all_gather(x, out), lambda out: comm.reduce(x, root=0, out=out))
    for call in calls:
        with pytest.raises(TypeError, match="^out: unsupported dtype"):
            call(np.ones(4, dtype=dtype))


def test_root_takes_any_integer_type(comm):
    torch = pytest.importorskip("torch")
    for root in (0, np.int64(0), np.uint8(0), torch.tensor(0)):
        x = np.arange(3.0)
        assert comm.broadcast(x, root=root) is x
        comm.reduce(x, root=root)
    with pytest.raises(TypeError, match="root must be an integer"):
        comm.broadcast(np.ones(2), root=torch.tensor(False))


def test_op_takes_any_integer_type_too(comm):
    torch = pytest.importorskip("torch")
    x = np.arange(3.0)
    comm.all_reduce(x, op=torch.tensor(3))  # max
    with pytest.raises(ValueError, match="unknown op"):
        comm.all_reduce(x, op=True)


@pytest.fixture
def no_launcher(monkeypatch):
    """No launcher variables, and a process that has not warned about running alone yet."""
    from pycoll.rendezvous import launch_env

    for var in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(launch_env, "_warned_single_rank", False, raising=False)


def test_init_without_a_launcher_warns_once(no_launcher):
    with pytest.warns(UserWarning, match=r"single rank.*pycoll run -n 4 script\.py.*torchrun.*mpirun") as caught:
        pycoll.init().close()
        pycoll.init().close()
    assert len([w for w in caught if "single rank" in str(w.message)]) == 1
    assert caught[0].filename == __file__  # points at the caller's init()


def test_init_with_a_launcher_or_arguments_does_not_warn(no_launcher, monkeypatch, recwarn):
    pycoll.init(rank=0, world_size=1).close()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    pycoll.init().close()
    assert not [w for w in recwarn if "single rank" in str(w.message)]


def test_integer_avg_truncation_is_documented():

    assert "truncates toward zero" in pycoll.Communicator.all_reduce.__doc__
    api = (ROOT / "docs" / "api.md").read_text()
    assert re.search(r"\| `avg` \|.*integers truncate toward zero", api)


def test_read_only_destination(comm):
    x = np.ones(4)
    x.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        comm.all_reduce(x)
    out = np.zeros(4)
    comm.all_reduce(x, out=out)  # a read-only input is fine out of place
    assert np.array_equal(out, x)


def test_gpu_array_on_a_host_backend_is_refused(comm):
    class FakeCudaArray:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (1 << 20, False), "version": 3}

    with pytest.raises(TypeError, match="cuda memory"):
        comm.all_reduce(FakeCudaArray())


def test_closed_communicator_refuses_work_and_close_is_idempotent():
    comm = pycoll.init(rank=0, world_size=1)
    comm.close()
    comm.close()
    with pytest.raises(pycoll.CommunicatorClosed):
        comm.all_reduce(np.ones(2))


def test_pycoll_algorithm_environment(monkeypatch):
    monkeypatch.setenv("PYCOLL_ALGORITHM", "mesh")
    with pycoll.init(rank=0, world_size=1) as comm:
        comm.all_reduce(np.ones(3))
        assert comm.last_algorithm == "mesh"
    monkeypatch.setenv("PYCOLL_ALGORITHM", "bogus")
    with pytest.raises(ValueError, match="PYCOLL_ALGORITHM"):
        pycoll.init(rank=0, world_size=1)


def test_init_arguments_are_checked():
    with pytest.raises(pycoll.BackendUnavailable, match="unknown backend"):
        pycoll.init("carrier-pigeon", rank=0, world_size=1)
    with pytest.raises(ValueError, match="timeout"):
        pycoll.init(rank=0, world_size=1, timeout=0)


def test_backends_lists_usability_and_reasons():
    statuses = {s.name: s for s in pycoll.backends()}
    assert statuses["tcp"].usable
    for name in ("nccl", "hccl"):
        assert name in statuses
        assert statuses[name].usable or statuses[name].reason


def test_dlpack_cuda_array_without_cupy_says_what_to_install(comm, monkeypatch):
    class JaxLikeGpuArray:
        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, stream=None):
            raise AssertionError("not reached without CuPy")

    monkeypatch.setitem(__import__("sys").modules, "cupy", None)  # as if CuPy were not installed
    with pytest.raises(TypeError, match="install CuPy"):
        comm.all_reduce(JaxLikeGpuArray())


def test_uneven_counts_are_checked_by_the_library_alone(comm):
    """The counts= forms: Python only packs the counts; their values against the buffers, and the algorithm the
    uneven reduce-scatter has, are the C library's rules (native/comm/call.c), refused there naming the field."""
    x, out = np.ones(3, np.float32), np.empty(4, np.float32)
    with pytest.raises(ValueError, match=re.escape("all_gather_v: recv_count must be sum(counts) = 3, got 4")):
        comm.all_gather(x, out, counts=[3])
    with pytest.raises(ValueError, match=re.escape("counts[0] must be >= 0, got -1")):
        comm.all_gather(x, out, counts=[-1])
    with pytest.raises(ValueError, match="recursive_doubling has no reduce_scatter_v; it runs as ring"):
        comm.reduce_scatter(x, np.empty(3, np.float32), counts=[3], algorithm="recursive_doubling")
    assert comm.all_gather(x, out[:3], counts=[3]) is not None  # refused before anything was sent: still usable
