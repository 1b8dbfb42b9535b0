"""What the NCCL and HCCL backends share: finding the vendor library, exchanging the communicator's id through
the job's store, one vendor communicator per algorithm (the algorithm is an environment setting the vendor
reads when a communicator is created), and finding the stream a framework's array is being used on."""

from __future__ import annotations

import contextlib
import itertools
import os

import numpy as np

from pycoll.errors import CommunicatorClosed, PycollError
from pycoll.plugins import Backend, Engine

_DTYPE_FLOAT = {4, 5, 6, 7}  # pycoll dtype ids of float16, bfloat16, float32, float64


def load_first(loader, candidates):
    """Load the first candidate path that works; None, or every candidate's reason for failing."""
    reasons = []
    for path in candidates:
        reason = loader(path)
        if reason is None:
            return None
        reasons.append(reason)
    return "; ".join(reasons)


@contextlib.contextmanager
def env_setting(name, value):
    """os.environ[name] = value for the block (nothing when value is None), restored afterwards."""
    if value is None:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def current_stream(owner) -> int:
    """The stream the array's framework is queueing work on now: CuPy's and PyTorch's current stream (CUDA or
    torch_npu), else the __cuda_array_interface__ "stream" its producer names, else the default stream (0)."""
    package = type(owner).__module__.partition(".")[0]
    if package == "cupy":
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)
    if package == "torch":
        import torch
        if owner.device.type == "npu":
            return int(torch.npu.current_stream(owner.device).npu_stream)
        return int(torch.cuda.current_stream(owner.device).cuda_stream)
    cai = getattr(owner, "__cuda_array_interface__", None)
    if isinstance(cai, dict) and cai.get("stream"):
        return int(cai["stream"])
    return 0


def divide_in_place(buf, divisor: int) -> None:
    """buf /= divisor on the buffer's own device, through the array that owns it; integers truncate toward
    zero (as NCCL's avg does)."""
    owner = buf.owner
    is_float = buf.dtype in _DTYPE_FLOAT
    if type(owner).__module__.partition(".")[0] == "torch":
        import torch
        if is_float:
            owner.div_(divisor)
        else:
            owner.copy_(torch.div(owner, divisor, rounding_mode="trunc"))
        return
    arr = np.asarray(owner)  # host memory: arrays a test or a host-memory vendor library hands in
    if is_float:
        arr /= divisor
    else:
        wide = arr.astype(np.int64)
        q = np.abs(wide) // divisor
        arr[...] = np.where(wide < 0, -q, q).astype(arr.dtype)


class VendorEngine(Engine):
    """An Engine over one vendor communicator per algorithm, created on first use. Subclasses set `name`,
    `algorithm_env` (the environment variable) and `algorithm_settings` (pycoll name -> its value, None for
    the vendor's own choice), and implement _new_id() and _new_comm(id)."""

    name = ""
    algorithm_env = ""
    algorithm_settings: dict = {}
    _serials = itertools.count()

    def __init__(self, *, rank, world_size, store, timeout, options):
        self.rank = rank
        self.size = world_size
        self.timeout = float(timeout)
        self._store = store
        self._prefix = f"pycoll/{self.name}/{next(VendorEngine._serials)}"
        self._default = (options or {}).get("algorithm", "auto")
        self._comms = {}
        self._closed = False
        self._comm(self._default)  # fail at init, not at the first collective

    def _new_id(self) -> bytes:
        raise NotImplementedError

    def _new_comm(self, unique_id: bytes):
        raise NotImplementedError

    def _comm(self, algorithm):
        if self._closed:
            raise CommunicatorClosed(f"{self.name}: communicator is closed")
        if algorithm == "auto":
            algorithm = self._default
        if algorithm not in self.algorithm_settings:
            raise ValueError(f"algorithm must be one of {', '.join(self.algorithm_settings)} for backend "
                             f"{self.name!r}, got {algorithm!r}")
        comm = self._comms.get(algorithm)
        if comm is None:
            # Every rank asks for algorithms in the same order, so each new communicator's key matches.
            key = f"{self._prefix}/{algorithm}/id"
            if self.rank == 0:
                unique_id = self._new_id()
                self._store.set(key, unique_id)
            else:
                unique_id = bytes(self._store.get(key, self.timeout))
            with env_setting(self.algorithm_env, self.algorithm_settings[algorithm]):
                comm = self._new_comm(unique_id)
            self._comms[algorithm] = comm
        return comm

    def _check_accuracy(self, accuracy):
        if accuracy != "fast":
            raise PycollError(f"{self.name}: accuracy={accuracy!r} is not supported on this backend (only "
                              f"'fast'); use backend='nccl', or backend='tcp' with host arrays, for compensated sums")

    def _resolved(self, algorithm):
        return self._default if algorithm == "auto" else algorithm

    def all_reduce(self, send, recv, op, algorithm, accuracy):
        self._check_accuracy(accuracy)
        comm = self._comm(algorithm)
        comm.all_reduce(send.ptr, recv.ptr, recv.count, recv.dtype, op, current_stream(recv.owner))
        return self._resolved(algorithm)

    def reduce_scatter(self, send, recv, op, algorithm, accuracy):
        self._check_accuracy(accuracy)
        comm = self._comm(algorithm)
        comm.reduce_scatter(send.ptr, recv.ptr, recv.count, recv.dtype, op, current_stream(recv.owner))
        return self._resolved(algorithm)

    def all_gather(self, send, recv):
        self._comm("auto").all_gather(send.ptr, recv.ptr, send.count, send.dtype, current_stream(recv.owner))
        return self._resolved("auto")

    def broadcast(self, buf, root):
        self._comm("auto").broadcast(buf.ptr, buf.count, buf.dtype, root, current_stream(buf.owner))
        return self._resolved("auto")

    def reduce(self, send, recv, op, root, accuracy):
        self._check_accuracy(accuracy)
        # Off the root, NCCL and HCCL ignore recvbuf; send's address stands in when the caller has none.
        target = recv if recv is not None else send
        self._comm("auto").reduce(send.ptr, target.ptr, send.count, send.dtype, op, root,
                                  current_stream(send.owner))
        return self._resolved("auto")

    def barrier(self):
        self._comm("auto").barrier(0)
        return self._resolved("auto")

    def close(self):
        self._closed = True
        comms, self._comms = self._comms, {}
        for comm in comms.values():
            comm.close()


class VendorBackend(Backend):
    """A vendor plugin: `engine` is its VendorEngine subclass; load() finds and loads its libraries and says
    why not (None when loaded)."""

    engine = VendorEngine

    def load(self):
        raise NotImplementedError

    def probe(self):
        try:
            return self.load()
        except ImportError as exc:
            return f"pycoll was built without its vendor bindings ({exc})"

    def create(self, *, rank, world_size, store, timeout, options):
        return self.engine(rank=rank, world_size=world_size, store=store, timeout=timeout, options=options)
