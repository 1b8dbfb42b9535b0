"""Arrays taken through DLPack (PyTorch, JAX, anything with __dlpack__): every supported dtype, bfloat16
included, read without NumPy in between; capsules consumed by the DLPack rules; refusals that name the argument.
Real 2-rank jobs check results bit for bit against a reference."""

import re
import sys

import numpy as np
import pytest
from multiproc import Ranks

from pycoll.buffers import as_buffer
from pycoll.dtypes import DTYPES

pytestmark = pytest.mark.timeout(60)

_NO_TORCH = "needs PyTorch (pip install torch==2.13.0)"
_NO_JAX = "needs JAX (pip install '.[jax]')"


class Exporter:
    """Exports an array only through DLPack, optionally without the DLPack 1.0 keywords (legacy capsules)."""

    def __init__(self, array, legacy=False, error=None):
        self.array, self.legacy, self.error, self.capsules = array, legacy, error, []

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __dlpack__(self, stream=None, **kwargs):
        if self.error is not None:
            raise self.error
        if self.legacy and kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument")
        capsule = self.array.__dlpack__(**kwargs)
        self.capsules.append(capsule)
        return capsule


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_every_supported_dtype_from_torch(comm, dtype):
    torch = pytest.importorskip("torch", reason=_NO_TORCH)
    t = torch.arange(12).reshape(3, 4).to(getattr(torch, dtype))
    buf = as_buffer(t, writable=True)
    assert (buf.ptr, buf.count, buf.dtype, buf.itemsize) == (t.data_ptr(), 12, DTYPES[dtype], t.element_size())
    assert (buf.memory, buf.readonly) == ("host", False)
    before = t.clone()
    assert comm.all_reduce(t) is t
    assert torch.equal(t, before)


def test_jax_bfloat16_is_read_through_dlpack():
    jnp = pytest.importorskip("jax.numpy", reason=_NO_JAX)
    x = jnp.arange(6, dtype=jnp.bfloat16)
    buf = as_buffer(x)
    assert (buf.count, buf.dtype, buf.itemsize, buf.readonly) == (6, DTYPES["bfloat16"], 2, True)


def test_torch_views_offsets_and_unit_dimensions():
    torch = pytest.importorskip("torch", reason=_NO_TORCH)
    base = torch.zeros(4, 6)
    row = base[2]  # a view at an offset
    assert as_buffer(row).ptr == base.data_ptr() + 2 * 6 * 4
    assert as_buffer(torch.zeros(1, 5)[:, :]).count == 5  # strides of size-1 dimensions do not matter
    assert as_buffer(torch.zeros(5, 1).t()).count == 5
    assert as_buffer(torch.empty(0, 3)).count == 0
    with pytest.raises(ValueError, match=re.escape("x must be C-contiguous (got strides (4, 16) for shape (4, 4))")):
        as_buffer(torch.zeros(4, 4).t())
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        as_buffer(base[:, 1], name="out")


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
def test_capsule_is_consumed_and_its_deleter_called(legacy):
    array = np.arange(8, dtype=np.float32)
    exporter = Exporter(array, legacy=legacy)
    refs = sys.getrefcount(array)
    buf = as_buffer(exporter)
    assert buf.ptr == array.ctypes.data and buf.count == 8
    (capsule,) = exporter.capsules
    assert "used_dltensor" in repr(capsule) and ("versioned" in repr(capsule)) != legacy
    assert sys.getrefcount(array) == refs + 1  # NumPy's DLPack manager holds the array while the Buffer lives
    assert buf.readonly == legacy  # a legacy capsule cannot say it is writable
    del buf
    assert sys.getrefcount(array) == refs  # the deleter ran once the Buffer went


def test_read_only_versioned_export_is_refused_as_out(comm):
    array = np.zeros(4, dtype=np.float32)
    array.flags.writeable = False
    assert as_buffer(Exporter(array)).readonly
    with pytest.raises(ValueError, match="out is read-only"):
        comm.all_reduce(np.ones(4, dtype=np.float32), out=Exporter(array))


def test_jax_array_as_out_is_refused_as_read_only(comm):
    jnp = pytest.importorskip("jax.numpy", reason=_NO_JAX)
    with pytest.raises(ValueError, match="out is read-only"):  # float32: through the buffer protocol
        comm.all_reduce(np.ones(4, dtype=np.float32), out=jnp.zeros(4, dtype=jnp.float32))
    with pytest.raises(ValueError, match="out is read-only.*JAX"):  # bfloat16: through DLPack
        comm.all_reduce(np.ones(4, dtype=np.float32).astype(jnp.bfloat16), out=jnp.zeros(4, dtype=jnp.bfloat16))


def test_exporter_errors_become_type_errors_naming_the_argument(comm):
    with pytest.raises(TypeError, match=r"out: Exporter cannot be exported through DLPack \(RuntimeError: boom\)"):
        comm.all_reduce(np.ones(4), out=Exporter(np.ones(4), error=RuntimeError("boom")))
    not_a_capsule = Exporter(np.ones(4))
    not_a_capsule.__dlpack__ = lambda **kwargs: object()
    with pytest.raises(TypeError, match="x: Exporter cannot be exported through DLPack.*not an unused DLPack capsule"):
        comm.all_reduce(not_a_capsule)


def test_tensor_that_requires_grad_says_detach(comm):
    torch = pytest.importorskip("torch", reason=_NO_TORCH)
    w = torch.ones(4, requires_grad=True)
    with pytest.raises(TypeError, match=re.escape("x: Tensor cannot be exported")) as info:
        comm.all_reduce(w)
    assert "pass x.detach() (or x.data)" in str(info.value)
    with pytest.raises(TypeError, match=re.escape("pass out.detach() (or out.data)")):
        comm.all_reduce(torch.ones(4), out=w)


@pytest.mark.parametrize("dtype", ["bool", "uint16", "int16"])
def test_unsupported_torch_dtype_is_named(comm, dtype):
    torch = pytest.importorskip("torch", reason=_NO_TORCH)
    with pytest.raises(TypeError, match=f"^out: unsupported dtype {dtype}; pycoll supports"):
        comm.all_reduce(torch.ones(4), out=torch.ones(4, dtype=getattr(torch, dtype)))
    with pytest.raises(TypeError, match=f"^x: unsupported dtype {dtype}"):
        comm.all_reduce(torch.ones(4, dtype=getattr(torch, dtype)))


def test_torch_out_on_every_collective_that_has_one(comm):
    torch = pytest.importorskip("torch", reason=_NO_TORCH)
    x = torch.arange(4, dtype=torch.bfloat16)
    for call in (lambda out: comm.all_reduce(x, out=out), lambda out: comm.reduce_scatter(x, out),
                 lambda out: comm.all_gather(x, out), lambda out: comm.reduce(x, root=0, out=out)):
        out = torch.zeros(4, dtype=torch.bfloat16)
        assert call(out) is out
        assert torch.equal(out, x)


def _two_ranks(scenario):
    with Ranks(2, "dlpack_worker.py", scenario, timeout=40) as ranks:
        reports = ranks.reports(deadline_s=50)
    for rank, report in reports.items():
        assert report.get("ok"), (rank, report.get("error"))


def test_torch_every_dtype_and_bfloat16_out_across_two_ranks():
    pytest.importorskip("torch", reason=_NO_TORCH)
    _two_ranks("torch")


def test_jax_bfloat16_into_a_torch_out_across_two_ranks():
    pytest.importorskip("torch", reason=_NO_TORCH)
    pytest.importorskip("jax", reason=_NO_JAX)
    _two_ranks("jax")
