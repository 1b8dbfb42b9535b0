"""One place that turns "anything array-like" into a Buffer: the buffer protocol first (NumPy and anything
exporting it), then DLPack (PyTorch, JAX, CuPy), then __cuda_array_interface__ -- the order mpi4py uses.
No data is copied: a Buffer is a pointer, a count and a dtype, holding a reference that keeps the memory alive.
"""

from __future__ import annotations

import typing

import numpy as np

from pycoll._bindings.buffer import DLPackTensor, host_view, take_dlpack
from pycoll.dtypes import DTYPES, dtype_id, unsupported_dtype

# DLPack device types (DLDeviceType in dlpack.h): what kind of memory a tensor lives in.
_DLPACK_CPU = 1            # kDLCPU
_DLPACK_CUDA = 2           # kDLCUDA
_DLPACK_CUDA_HOST = 3      # kDLCUDAHost: pinned host memory
_DLPACK_EXT_DEV = 12       # kDLExtDev: the generic extension device, shared by several (an NPU may report
                           # it), so NPU tensors are recognised by their device attribute ("npu:0") instead
_DLPACK_CUDA_MANAGED = 13  # kDLCUDAManaged
_DLPACK_HOST = (_DLPACK_CPU, _DLPACK_CUDA_HOST)
# The newest DLPack ABI take_dlpack reads: 1.x (the versioned capsule, which can say "read-only").
_DLPACK_MAX_VERSION = (1, 0)


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


def _not_contiguous(name: str, strides, shape) -> ValueError:
    return ValueError(f"{name} must be C-contiguous (got strides {strides} for shape {shape})")


def _from_numpy(arr: np.ndarray, owner, name: str) -> Buffer:
    ptr, readonly, contiguous = host_view(arr)
    if not contiguous:
        raise _not_contiguous(name, arr.strides, arr.shape)
    dtype = arr.dtype
    return Buffer(ptr=ptr, count=arr.size, dtype=dtype_id(dtype, name), itemsize=dtype.itemsize,
                  memory="host", device_id=0, readonly=readonly, owner=owner)


def _from_cuda_array_interface(obj, name: str) -> Buffer:
    cai = obj.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    strides = cai.get("strides")
    if strides is not None and count > 1:
        expected = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * dtype.itemsize for i in range(len(shape)))
        if tuple(strides) != expected:
            raise _not_contiguous(name, tuple(strides), shape)
    ptr, readonly = cai["data"]
    dev = getattr(obj, "device", None)
    if dev is not None:
        device_id = int(getattr(dev, "id", getattr(dev, "index", 0)) or 0)
    else:
        device_id = _cuda_pointer_device(int(ptr))
    return Buffer(ptr=int(ptr), count=count, dtype=dtype_id(dtype, name), itemsize=dtype.itemsize,
                  memory="cuda", device_id=device_id, readonly=bool(readonly), owner=obj)


def _cuda_pointer_device(ptr: int) -> int:
    """The device of CUDA memory whose array names none (the CUDA array interface has no device field): the
    driver's word (cuPointerGetAttribute). Where the driver cannot say -- it is not installed, so no GPU memory
    exists, or it does not know the pointer -- 0, and the vendor's own checks decide."""
    if not ptr:
        return 0
    from pycoll._bindings import vendor
    from pycoll.plugins.nccl import load_cuda_driver

    if load_cuda_driver() is not None:
        return 0
    device = vendor.cuda_pointer_device(ptr)
    return 0 if device is None else device


def as_buffer(x, *, name: str = "x", writable: bool = False) -> Buffer:
    """A Buffer over x's memory, or TypeError/ValueError naming `name`."""
    if isinstance(x, np.ndarray):
        buf = _from_numpy(x, x, name)
    elif _is_torch_device_tensor(x):  # before DLPack's device query and the CUDA array interface: see there
        buf = _from_torch_device_tensor(x, name)
    elif hasattr(x, "__cuda_array_interface__"):
        buf = _from_cuda_array_interface(x, name)
    else:
        try:
            arr = np.asarray(memoryview(x))
        except (TypeError, BufferError):  # BufferError: e.g. JAX exports bfloat16 only through DLPack
            arr = None
        if arr is not None:
            buf = _from_numpy(arr, x, name)
        elif hasattr(x, "__dlpack_device__"):
            device_type, _ = x.__dlpack_device__()
            if device_type in _DLPACK_HOST:
                buf = _from_dlpack_host(x, name)
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
        why = _READ_ONLY_DLPACK if isinstance(buf.owner, DLPackTensor) else ""
        raise ValueError(f"{name} is read-only, but the collective writes its result there{why}")
    return buf


_READ_ONLY_DLPACK = ("; its DLPack export is marked read-only or a copy, or is a legacy capsule, which cannot say "
                     "it is writable (JAX arrays, which are immutable, come that way): pass a NumPy array or a "
                     "PyTorch tensor")


def _from_dlpack_host(x, name: str) -> Buffer:
    """Host memory through DLPack, read directly (not through np.from_dlpack, which refuses bfloat16)."""
    t = _take_dlpack(x, name)
    if t.device_type not in _DLPACK_HOST:
        raise TypeError(f"{name}: __dlpack__() exported memory of DLPack device type {t.device_type}, "
                        f"but __dlpack_device__() said host memory")
    return _dlpack_buffer(t, name, memory="host", readonly=t.read_only, owner=t)


def _dlpack_buffer(t, name: str, memory: str, readonly: bool, owner) -> Buffer:
    """The Buffer over DLPack tensor t, whose device type the caller checked: refused unless contiguous and of
    a dtype pycoll knows."""
    if not t.contiguous:
        raise _not_contiguous(name, t.byte_strides, t.shape)
    ident = DTYPES.get(t.dtype)
    if ident is None:
        raise unsupported_dtype(t.dtype, name)
    return Buffer(ptr=t.address, count=t.count, dtype=ident, itemsize=t.itemsize, memory=memory,
                  device_id=t.device_id, readonly=readonly, owner=owner)


def _take_dlpack(x, name: str):
    """x's DLPack tensor: from a versioned capsule, without a copy, where the exporter knows the DLPack 1.0
    keywords, else from whatever plain __dlpack__() gives. What the exporter (or reading its capsule) raises
    becomes a TypeError naming the argument."""
    try:
        try:
            capsule = x.__dlpack__(max_version=_DLPACK_MAX_VERSION, copy=False)
        except TypeError:  # an exporter older than DLPack 1.0 takes neither keyword
            capsule = x.__dlpack__()
        return take_dlpack(capsule)
    except Exception as exc:
        hint = ""
        if getattr(x, "requires_grad", False) is True:
            hint = f"; it requires grad: pass {name}.detach() (or {name}.data)"
        raise TypeError(f"{name}: {type(x).__name__} cannot be exported through DLPack "
                        f"({type(exc).__name__}: {exc}){hint}") from exc


def _from_dlpack_cuda(x, name: str) -> Buffer:
    """A CUDA array that speaks only DLPack (JAX on a GPU, for one): CuPy wraps it without a copy and exports
    the CUDA array interface. The Buffer's owner stays x, which keeps the memory alive."""
    try:
        import cupy
    except ImportError:
        raise TypeError(f"{name} is a DLPack CUDA array without __cuda_array_interface__; install CuPy "
                        f"(pip install cupy-cuda12x) so pycoll can take it without a copy") from None
    return _from_cuda_array_interface(cupy.from_dlpack(x), name)._replace(owner=x)


# AscendCL's aclFormat codes of the base formats, whose memory holds numel() elements in logical order (acl_base.h:
# NCHW 0, NHWC 1, ND 2, NDHWC 27, NCDHW 30). The others are private formats (NC1HWC0 "5HD" 3, FRACTAL_Z 4,
# FRACTAL_NZ 29, ...): blocked and padded, so numel() elements from the data pointer are not the tensor's values.
_NPU_BASE_FORMATS = {0: "NCHW", 1: "NHWC", 2: "ND", 27: "NDHWC", 30: "NCDHW"}
_NPU_PRIVATE_FORMATS = {3: "NC1HWC0 (5HD)", 4: "FRACTAL_Z", 29: "FRACTAL_NZ", 32: "NDC1HWC0", 33: "FRACTAL_Z_3D"}


def _npu_format(t):
    """t's storage format (aclFormat code) as torch_npu reports it; None where torch_npu is not loaded."""
    import sys

    torch_npu = sys.modules.get("torch_npu")
    get = getattr(torch_npu, "get_npu_format", None)
    return None if get is None else int(get(t))


def _from_npu_tensor(t, name: str) -> Buffer:
    """torch_npu tensors: pointer and dtype through torch's own accessors. A tensor in a private format is
    refused: its memory is a padded, blocked layout, and a collective over numel() elements from its data
    pointer would reduce the padding and miss values. torch_npu's own ProcessGroupHCCL casts such tensors to a
    base format first; pycoll leaves that copy (and the cast back) to the caller, who can keep the cast tensor."""
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    fmt = _npu_format(t)
    if fmt is not None and fmt not in _NPU_BASE_FORMATS:
        label = _NPU_PRIVATE_FORMATS.get(fmt, "a private format")
        raise ValueError(f"{name} is an NPU tensor in storage format {label} (aclFormat {fmt}), whose memory is a "
                         f"padded, blocked layout rather than its {int(t.numel())} elements in order; cast it to a "
                         f"base format first: {name} = torch_npu.npu_format_cast({name}, 2) (ND)")
    dtype_name = str(t.dtype).replace("torch.", "")
    return Buffer(ptr=int(t.data_ptr()), count=int(t.numel()), dtype=dtype_id(dtype_name, name),
                  itemsize=int(t.element_size()), memory="npu", device_id=int(t.device.index or 0),
                  readonly=False, owner=t)


# ---- PyTorch device tensors (CUDA, and torch_npu's NPU), checked before the generic paths, because those go
# wrong on them:
# - `__dlpack_device__()` of a torch_npu tensor raises in torch (its device is torch's "privateuse1"), so an NPU
#   tensor is recognised by its `device.type` before anything asks DLPack;
# - torch's `__cuda_array_interface__` describes bfloat16 as `"<V2"` (older torch: no entry), which is no dtype,
#   so a CUDA tensor is read through DLPack first, whose dtype codes include bfloat16;
# - a tensor that requires grad is refused by torch's exporters with torch's own error: pycoll refuses it first,
#   with a TypeError naming the argument and what to pass instead (writing a collective's result into it behind
#   autograd's back would be wrong anyway).


def _is_torch_device_tensor(x) -> bool:
    """A torch tensor on a CUDA or NPU device (cheap: no torch import)."""
    if type(x).__module__.partition(".")[0] != "torch":
        return False
    return getattr(getattr(x, "device", None), "type", None) in ("cuda", "npu")


def _from_torch_device_tensor(x, name: str):
    """The Buffer of a torch CUDA or NPU tensor (_is_torch_device_tensor), or TypeError/ValueError naming `name`."""
    if getattr(x, "requires_grad", False) is True:
        raise TypeError(f"{name} requires grad: pass {name}.detach() (a collective writes its result in place, "
                        f"which autograd cannot follow)")
    if x.device.type == "npu":
        return _from_npu_tensor(x, name)
    return _cuda_buffer(x, name)


def _capsule(x):
    """x's DLPack capsule with no stream synchronisation (stream=-1: pycoll queues on torch's current stream
    itself, vendor.current_stream), the versioned one where torch can give it."""
    for kwargs in ({"stream": -1, "max_version": (1, 0)}, {"stream": -1}, {}):
        try:
            return x.__dlpack__(**kwargs)
        except TypeError:  # an older torch takes fewer keywords
            continue
    return x.__dlpack__()


def _cuda_buffer(x, name: str):
    try:
        t = take_dlpack(_capsule(x))
    except Exception as exc:
        raise TypeError(f"{name}: {type(x).__name__} cannot be exported through DLPack "
                        f"({type(exc).__name__}: {exc})") from exc
    if t.device_type not in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
        raise TypeError(f"{name}: a CUDA tensor exported DLPack device type {t.device_type}, not CUDA memory")
    # torch tensors are always writable (a legacy capsule cannot say so); the tensor keeps its memory alive and
    # names the stream the collective goes on.
    return _dlpack_buffer(t, name, memory="cuda", readonly=False, owner=x)
