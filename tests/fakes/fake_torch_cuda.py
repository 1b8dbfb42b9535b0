"""CUDA tensors for a torch built without CUDA, against the fake NCCL (whose "device" memory is host memory):
a FakeCudaTensor is a CPU tensor that says it is on cuda:0 -- to torch code through `.device`, to pycoll through
a DLPack capsule of device type kDLCUDA -- and `enable()` makes torch's factories called with a CUDA device
(torch.empty(n, device=t.device)) return them, and torch.cuda.current_stream() the legacy stream. A tensor made
without a device stays a plain CPU tensor, so code that forgets the device hands pycoll host memory, which the
NCCL communicator refuses, as it would a real CPU tensor beside CUDA ones.

Only what the torch backend (pycoll/torch/process_group.py) and pycoll's buffers use is covered."""

from __future__ import annotations

import ctypes
import types

import torch
from torch.overrides import TorchFunctionMode

_KDLCUDA = 2
CUDA = torch.device("cuda", 0)


class FakeCudaTensor(torch.Tensor):
    """A CPU tensor presented as a CUDA one; torch's default subclass handling keeps every op's result one."""

    @property
    def device(self):
        return CUDA

    @property
    def is_cuda(self):
        return True

    def __dlpack_device__(self):
        return (_KDLCUDA, 0)

    def __dlpack__(self, *args, **kwargs):
        """The CPU tensor's legacy capsule with its device rewritten to cuda:0 (DLManagedTensor starts with the
        DLTensor: data pointer, then the device's type and id)."""
        capsule = torch.utils.dlpack.to_dlpack(self.as_subclass(torch.Tensor))
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        device = ctypes.cast(get(capsule, b"dltensor") + ctypes.sizeof(ctypes.c_void_p),
                             ctypes.POINTER(ctypes.c_int32))
        device[0], device[1] = _KDLCUDA, 0
        return capsule

    def __repr__(self):
        return f"FakeCudaTensor({self.as_subclass(torch.Tensor).tolist()}, dtype={self.dtype})"


FakeCudaTensor.__module__ = "torch"  # how pycoll recognises a torch tensor without importing torch


def cuda(t: torch.Tensor) -> FakeCudaTensor:
    """t's values as a (fake) CUDA tensor."""
    return t.detach().clone().as_subclass(FakeCudaTensor)


def _is_cuda(device) -> bool:
    return device is not None and torch.device(device).type == "cuda"


def _on_cuda(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_on_cuda(v) for v in value)
    return isinstance(value, FakeCudaTensor)


def _as_cuda(value):
    if isinstance(value, (list, tuple)):
        return type(value)(_as_cuda(v) for v in value)
    if type(value) is torch.Tensor:
        return value.as_subclass(FakeCudaTensor)
    return value


class _FactoriesOnCuda(TorchFunctionMode):
    """Factories given a CUDA device make their tensor on the CPU and return it as a FakeCudaTensor, and an op on
    FakeCudaTensors returns them -- also where torch.distributed turns subclass dispatch off
    (DisableTorchFunctionSubclass), which leaves function modes on."""

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
            return _as_cuda(func(*args, **kwargs))
        out = func(*args, **kwargs)
        if _on_cuda(args) or _on_cuda(list(kwargs.values())):
            return _as_cuda(out)
        return out


def enable():
    """In this process (and thread: torch's function modes are per thread, and the torch backend allocates on the
    caller's): CUDA factories and torch.cuda.current_stream() as described above."""
    _FactoriesOnCuda().__enter__()
    torch.cuda.current_stream = lambda device=None: types.SimpleNamespace(cuda_stream=0)
    torch.cuda.is_available = lambda: True
