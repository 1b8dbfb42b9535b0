"""Copies between a rank's memory and host memory, and device scratch, for the step between islands.

Device memory is copied through the vendor's own runtime, the library the vendor backend loaded: the CUDA
runtime's cudaMemcpy (cudaMemcpyDefault: the driver knows each pointer's side) and AscendCL's aclrtMemcpy; scratch
comes from cudaMalloc / aclrtMalloc, kept for the communicator's life and grown when a call needs more. Host
memory needs no copy: its ranks hand their own arrays to the step between islands.

Stream order: cudaMemcpy and aclrtMemcpy run on the default (legacy) stream, which waits for no work on a
non-blocking stream -- and the streams of torch's pool, where the caller may have written its input, are
non-blocking. So before every copy the caller's current stream (vendor.current_stream of the buffer's owner) is
waited for, within the communicator's timeout: the copy then reads what the caller's earlier work wrote. Both
copies return once done, before the caller queues anything more, so its later work sees their results.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from pycoll.buffers import Buffer
from pycoll.errors import BackendUnavailable, PycollError, Timeout

# AscendCL's aclrtMemcpyKind (acl_rt.h).
_ACL_HOST_TO_DEVICE, _ACL_DEVICE_TO_HOST, _ACL_DEVICE_TO_DEVICE = 1, 2, 3
_CUDA_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: the direction from the pointers (unified addressing)


def host_array(buf, dtype):
    """A NumPy view of host Buffer `buf` as `dtype` (no copy)."""
    if not buf.nbytes:
        return np.empty(0, dtype)
    raw = (ctypes.c_char * buf.nbytes).from_address(buf.ptr)
    return np.frombuffer(raw, dtype=dtype)


def host_buffer(arr, dtype_id):
    """A Buffer over host array `arr` (contiguous, which np.empty's are), of pycoll dtype `dtype_id`."""
    return Buffer(ptr=arr.ctypes.data, count=arr.size, dtype=dtype_id, itemsize=arr.itemsize, memory="host",
                  device_id=0, readonly=False, owner=arr)


def _open_runtime(backend):
    """The runtime library the vendor backend loaded second (libcudart, libascendcl), as a ctypes library."""
    candidates, _ = backend.libraries[1]
    reasons = []
    for path in candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as exc:
            reasons.append(str(exc))
    raise BackendUnavailable(f"{backend.name}: its runtime library could not be opened for host staging "
                             f"({'; '.join(reasons)})")


_CUDA_NOT_READY = 600  # cudaErrorNotReady
_ACL_STREAM_SYNC_TIMEOUT = 507046  # ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
# How long one look at the caller's stream waits (a polling runtime) before looking again.
_STREAM_POLL_S = 0.0002


class HostRuntime:
    """Host memory: copies are memmoves; no scratch beyond NumPy's; no streams."""

    memory = "host"

    def wait_stream(self, stream, timeout):
        """Nothing to wait for."""

    def copy(self, dst, src, nbytes):
        if nbytes:
            ctypes.memmove(dst, src, nbytes)

    to_host = to_device = copy

    def allocate(self, nbytes):
        arr = np.empty(max(nbytes, 1), np.uint8)
        return arr.ctypes.data, arr

    def free(self, handle):
        """NumPy frees it."""


class CudaRuntime:
    """CUDA memory through the CUDA runtime NCCL runs with."""

    memory = "cuda"

    def __init__(self, backend):
        self._lib = _open_runtime(backend)
        self._lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self._lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self._lib.cudaFree.argtypes = [ctypes.c_void_p]

        self._lib.cudaStreamQuery.argtypes = [ctypes.c_void_p]

    def _check(self, code, what):
        if code:
            raise PycollError(f"host staging: {what} failed (cudaError {code})")

    def wait_stream(self, stream, timeout):
        """Until the work queued on `stream` (the caller's current stream) has completed; Timeout after
        `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while (code := self._lib.cudaStreamQuery(stream)) == _CUDA_NOT_READY:
            if time.monotonic() > deadline:
                raise Timeout(f"host staging: the caller's stream {stream:#x} did not finish its earlier work "
                              f"within {timeout} s")
            time.sleep(_STREAM_POLL_S)
        self._check(code, f"cudaStreamQuery of the caller's stream {stream:#x}")

    def copy(self, dst, src, nbytes):
        if nbytes:
            self._check(self._lib.cudaMemcpy(dst, src, nbytes, _CUDA_MEMCPY_DEFAULT), "cudaMemcpy")

    to_host = to_device = copy

    def allocate(self, nbytes):
        ptr = ctypes.c_void_p()
        self._check(self._lib.cudaMalloc(ctypes.byref(ptr), max(nbytes, 1)), f"cudaMalloc of {nbytes} bytes")
        return ptr.value, ptr.value

    def free(self, handle):
        self._lib.cudaFree(handle)


class NpuRuntime:
    """NPU memory through AscendCL, which HCCL runs with."""

    memory = "npu"

    def __init__(self, backend):
        self._lib = _open_runtime(backend)
        self._lib.aclrtMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                          ctypes.c_int]
        self._lib.aclrtMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_int]
        self._lib.aclrtFree.argtypes = [ctypes.c_void_p]
        self._lib.aclrtSynchronizeStreamWithTimeout.argtypes = [ctypes.c_void_p, ctypes.c_int32]

    def wait_stream(self, stream, timeout):
        """As CudaRuntime.wait_stream, through aclrtSynchronizeStreamWithTimeout."""
        code = self._lib.aclrtSynchronizeStreamWithTimeout(stream, max(1, int(timeout * 1000)))
        if code == _ACL_STREAM_SYNC_TIMEOUT:
            raise Timeout(f"host staging: the caller's stream {stream:#x} did not finish its earlier work "
                          f"within {timeout} s")
        if code:
            raise PycollError(f"host staging: aclrtSynchronizeStreamWithTimeout failed (aclError {code})")

    def _copy(self, dst, src, nbytes, kind):
        if nbytes:
            code = self._lib.aclrtMemcpy(dst, nbytes, src, nbytes, kind)
            if code:
                raise PycollError(f"host staging: aclrtMemcpy failed (aclError {code})")

    def to_host(self, dst, src, nbytes):
        self._copy(dst, src, nbytes, _ACL_DEVICE_TO_HOST)

    def to_device(self, dst, src, nbytes):
        self._copy(dst, src, nbytes, _ACL_HOST_TO_DEVICE)

    def copy(self, dst, src, nbytes):
        self._copy(dst, src, nbytes, _ACL_DEVICE_TO_DEVICE)

    def allocate(self, nbytes):
        ptr = ctypes.c_void_p()
        code = self._lib.aclrtMalloc(ctypes.byref(ptr), max(nbytes, 1), 0)  # ACL_MEM_MALLOC_HUGE_FIRST
        if code:
            raise PycollError(f"host staging: aclrtMalloc of {nbytes} bytes failed (aclError {code})")
        return ptr.value, ptr.value

    def free(self, handle):
        self._lib.aclrtFree(handle)


def runtime_for(memory, backend):
    """The runtime of `memory` ("host", "cuda", "npu"); backend: the vendor backend whose libraries it uses."""
    if memory == "host":
        return HostRuntime()
    return CudaRuntime(backend) if memory == "cuda" else NpuRuntime(backend)


class Scratch:
    """Memory of this rank's kind for a collective's intermediate results, one region per name, each kept and
    grown as calls need: device memory is allocated outside the framework's allocator, so it is reused rather
    than allocated per call."""

    def __init__(self, runtime):
        self._runtime = runtime
        self._regions = {}  # name -> (bytes, ptr, handle)

    def buffer(self, name, like, count):
        """A Buffer of `count` elements of like's dtype in scratch region `name`, on like's device; its owner is
        like's, so a vendor call on it goes on the caller's stream."""
        nbytes = count * like.itemsize
        region = self._regions.get(name)
        if region is None or region[0] < nbytes:
            if region is not None:
                self._runtime.free(region[2])
            ptr, handle = self._runtime.allocate(nbytes)
            region = self._regions[name] = (nbytes, ptr, handle)
        return Buffer(ptr=region[1], count=count, dtype=like.dtype, itemsize=like.itemsize, memory=like.memory,
                      device_id=like.device_id, readonly=False, owner=like.owner)

    def close(self):
        regions, self._regions = self._regions, {}
        for _, _, handle in regions.values():
            self._runtime.free(handle)
