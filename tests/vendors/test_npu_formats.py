"""NPU tensors in torch_npu's private storage formats (NZ, 5HD: blocked and padded) are refused by name, since a
collective over numel() elements from their data pointer would reduce padding; base formats are taken. With a
fake tensor object and a fake torch_npu module (torch_npu.get_npu_format), as no NPU is available here."""

import sys
import types

import pytest

from pycoll.buffers import as_buffer

ND, NCHW, NC1HWC0, FRACTAL_NZ = 2, 0, 3, 29


class _Device:
    def __init__(self):
        self.index = 1

    def __str__(self):
        return "npu:1"


class FakeNpuTensor:
    """What pycoll reads of a torch_npu tensor: DLPack device (not host, not CUDA), `device`, data_ptr, ..."""

    def __init__(self, fmt, numel=12):
        self.fmt = fmt
        self._numel = numel
        self.dtype = "torch.float32"
        self.device = _Device()

    def __dlpack_device__(self):
        return (12, 1)  # kDLExtDev, as torch_npu reports

    def is_contiguous(self):
        return True

    def data_ptr(self):
        return 0x1000

    def numel(self):
        return self._numel

    def element_size(self):
        return 4


@pytest.fixture
def fake_torch_npu(monkeypatch):
    module = types.ModuleType("torch_npu")
    module.get_npu_format = lambda t: t.fmt
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    return module


def _tensor(fmt):
    return FakeNpuTensor(fmt)


@pytest.mark.parametrize("fmt, label", [(FRACTAL_NZ, "FRACTAL_NZ"), (NC1HWC0, "NC1HWC0 (5HD)"),
                                        (31, "a private format")])
def test_private_format_is_refused_naming_the_cast(fake_torch_npu, fmt, label):
    with pytest.raises(ValueError, match=r"grad is an NPU tensor in storage format") as info:
        as_buffer(_tensor(fmt), name="grad")
    message = str(info.value)
    assert f"{label} (aclFormat {fmt})" in message
    assert "grad = torch_npu.npu_format_cast(grad, 2) (ND)" in message


@pytest.mark.parametrize("fmt", [ND, NCHW])
def test_base_format_is_taken(fake_torch_npu, fmt):
    buf = as_buffer(_tensor(fmt), name="x")
    assert (buf.memory, buf.count, buf.device_id, buf.ptr) == ("npu", 12, 1, 0x1000)
