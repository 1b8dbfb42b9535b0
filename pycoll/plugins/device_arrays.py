"""PyTorch device tensors (CUDA, and torch_npu's NPU) as pycoll Buffers, for the vendor backends. Checked before
the generic paths of pycoll.buffers, because those go wrong on them:
- `__dlpack_device__()` of a torch_npu tensor raises in torch (its device is torch's "privateuse1"), so an NPU
  tensor is recognised by its `device.type` before anything asks DLPack;
- torch's `__cuda_array_interface__` describes bfloat16 as `"<V2"` (older torch: no entry), which is no dtype,
  so a CUDA tensor is read through DLPack first, whose dtype codes include bfloat16;
- a tensor that requires grad is refused by torch's exporters with torch's own error: pycoll refuses it first,
  with a TypeError naming the argument and what to pass instead (writing a collective's result into it behind
  autograd's back would be wrong anyway)."""

from __future__ import annotations

_KDL_CUDA = 2           # kDLCUDA (dlpack.h DLDeviceType)
_KDL_CUDA_MANAGED = 13  # kDLCUDAManaged


def is_torch_device_tensor(x) -> bool:
    """A torch tensor on a CUDA or NPU device (cheap: no torch import)."""
    if type(x).__module__.partition(".")[0] != "torch":
        return False
    return getattr(getattr(x, "device", None), "type", None) in ("cuda", "npu")


def device_buffer(x, name: str):
    """The Buffer of a torch CUDA or NPU tensor (is_torch_device_tensor), or TypeError/ValueError naming `name`."""
    if getattr(x, "requires_grad", False) is True:
        raise TypeError(f"{name} requires grad: pass {name}.detach() (a collective writes its result in place, "
                        f"which autograd cannot follow)")
    if x.device.type == "npu":
        from pycoll.buffers import _from_npu_tensor
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
    from pycoll._bindings.buffer import take_dlpack
    from pycoll.buffers import Buffer, _not_contiguous
    from pycoll.dtypes import DTYPES, unsupported_dtype
    try:
        t = take_dlpack(_capsule(x))
    except Exception as exc:
        raise TypeError(f"{name}: {type(x).__name__} cannot be exported through DLPack "
                        f"({type(exc).__name__}: {exc})") from exc
    if t.device_type not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        raise TypeError(f"{name}: a CUDA tensor exported DLPack device type {t.device_type}, not CUDA memory")
    if not t.contiguous:
        raise _not_contiguous(name, t.byte_strides, t.shape)
    ident = DTYPES.get(t.dtype)
    if ident is None:
        raise unsupported_dtype(t.dtype, name)
    # torch tensors are always writable (a legacy capsule cannot say so); the tensor keeps its memory alive and
    # names the stream the collective goes on.
    return Buffer(ptr=t.address, count=t.count, dtype=ident, itemsize=t.itemsize, memory="cuda",
                  device_id=t.device_id, readonly=False, owner=x)
