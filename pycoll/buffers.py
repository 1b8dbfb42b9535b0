"""One place that turns "anything array-like" into a Buffer: the buffer protocol first (NumPy and anything
exporting it), then DLPack (PyTorch, JAX, CuPy), then __cuda_array_interface__ -- the order mpi4py uses.
No data is copied: a Buffer is a pointer, a count and a dtype, holding a reference that keeps the memory alive.
"""

from __future__ import annotations

import typing

import numpy as np

from pycoll._buffer import host_view
from pycoll.dtypes import dtype_id

# DLPack device types (dlpack.h): what kind of memory a tensor lives in.
_DLPACK_CPU = 1
_DLPACK_CUDA = 2
_DLPACK_CUDA_HOST = 3
_DLPACK_CUDA_MANAGED = 13
_DLPACK_ASCEND = 20  # kDLExtDev is used by torch_npu; NPU tensors are detected by their device attribute too


class Buffer(typing.NamedTuple):
    """An immutable view of an array's memory. A NamedTuple, not a frozen dataclass: it is built on every
    collective call, and a frozen dataclass's __init__ costs more than a small collective's transfer."""

    ptr: int
    count: int           # elements
    dtype: int           # pycoll dtype id (pycoll.dtypes)
    itemsize: int
    memory: str          # "host", "cuda" or "npu"
    device_id: int
    readonly: bool
    owner: object        # what keeps the memory alive (and what a vendor backend may need, e.g. its stream)

    @property
    def nbytes(self):
        return self.count * self.itemsize


def _from_numpy(arr: np.ndarray, owner, name: str) -> Buffer:
    ptr, readonly, contiguous = host_view(arr)
    if not contiguous:
        raise ValueError(f"{name} must be C-contiguous (got strides {arr.strides} for shape {arr.shape})")
    dtype = arr.dtype
    return Buffer(ptr=ptr, count=arr.size, dtype=dtype_id(dtype), itemsize=dtype.itemsize, memory="host",
                  device_id=0, readonly=readonly, owner=owner)


def _from_cuda_array_interface(obj, name: str) -> Buffer:
    cai = obj.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    strides = cai.get("strides")
    if strides is not None and count > 1:
        expected = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * dtype.itemsize for i in range(len(shape)))
        if tuple(strides) != expected:
            raise ValueError(f"{name} must be C-contiguous (got strides {tuple(strides)} for shape {shape})")
    ptr, readonly = cai["data"]
    device_id = 0
    dev = getattr(obj, "device", None)
    if dev is not None:
        device_id = int(getattr(dev, "id", getattr(dev, "index", 0)) or 0)
    return Buffer(ptr=int(ptr), count=count, dtype=dtype_id(dtype), itemsize=dtype.itemsize, memory="cuda",
                  device_id=device_id, readonly=bool(readonly), owner=obj)


def as_buffer(x, *, name: str = "x", writable: bool = False) -> Buffer:
    """A Buffer over x's memory, or TypeError/ValueError naming `name`."""
    if isinstance(x, np.ndarray):
        buf = _from_numpy(x, x, name)
    elif hasattr(x, "__cuda_array_interface__"):
        buf = _from_cuda_array_interface(x, name)
    else:
        try:
            arr = np.asarray(memoryview(x))
        except TypeError:
            arr = None
        if arr is not None:
            buf = _from_numpy(arr, x, name)
        elif hasattr(x, "__dlpack_device__"):
            device_type, _ = x.__dlpack_device__()
            if device_type in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
                buf = _from_numpy(np.from_dlpack(x), x, name)
            elif device_type in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
                buf = _from_dlpack_cuda(x, name)
            elif "npu" in str(getattr(x, "device", "")):
                buf = _from_npu_tensor(x, name)
            else:
                raise TypeError(f"{name}: DLPack device type {device_type} is not supported "
                                f"(host, CUDA and Ascend NPU memory are)")
        else:
            raise TypeError(f"{name} must be an array (buffer protocol, DLPack or __cuda_array_interface__), "
                            f"got {type(x).__name__}")
    if writable and buf.readonly:
        raise ValueError(f"{name} is read-only, but the collective writes its result there")
    return buf


def _from_dlpack_cuda(x, name: str) -> Buffer:
    """A CUDA array that speaks only DLPack (JAX on a GPU, for one): CuPy wraps it without a copy and exports
    the CUDA array interface. The Buffer's owner stays x, which keeps the memory alive."""
    try:
        import cupy
    except ImportError:
        raise TypeError(f"{name} is a DLPack CUDA array without __cuda_array_interface__; install CuPy "
                        f"(pip install cupy-cuda12x) so pycoll can take it without a copy") from None
    return _from_cuda_array_interface(cupy.from_dlpack(x), name)._replace(owner=x)


def _from_npu_tensor(t, name: str) -> Buffer:
    """torch_npu tensors: pointer and dtype through torch's own accessors."""
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    dtype_name = str(t.dtype).replace("torch.", "")
    return Buffer(ptr=int(t.data_ptr()), count=int(t.numel()), dtype=dtype_id(dtype_name),
                  itemsize=int(t.element_size()), memory="npu", device_id=int(t.device.index or 0),
                  readonly=False, owner=t)
