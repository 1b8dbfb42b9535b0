"""The vendor backends (NCCL, HCCL, ...) as one engine over libpycoll's vendor family (pycoll/vendor.h). A
vendor plugin is a declaration -- a VendorBackend subclass naming the vendor, where its libraries are found,
its algorithm setting and what it supports -- and this module does the rest: loading the libraries, exchanging
the communicator's id through the job's store, one vendor communicator per algorithm (the algorithm is an
environment setting the vendor reads when a communicator is created), the stream a framework's array is being
used on, average where the vendor has none, and compensated sums where the vendor has send/recv."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os

import numpy as np

from pycoll import settings
from pycoll.dtypes import COMPLEX_DTYPES
from pycoll.errors import BackendUnavailable, CommunicatorClosed, PycollError
from pycoll.plugins import ALL_DTYPES, Backend, Engine


def _ids():
    """pycoll's op and dtype ids, from the C headers (pycoll._bindings.vendor binds them)."""
    from pycoll._bindings import vendor as _vendor
    return _vendor


def load_first(loader, candidates):
    """Load the first candidate path that works; None, or every candidate's reason for failing."""
    reasons = []
    for path in candidates:
        reason = loader(path)
        if reason is None:
            return None
        reasons.append(reason)
    return "; ".join(reasons)


def load_libraries(libraries, loader):
    """Load each (candidates, hint) library in order with loader(index, path); None, or the first failure's hint
    with every candidate's reason in it."""
    for library, (candidates, hint) in enumerate(libraries):
        why = load_first(lambda path: loader(library, path), candidates())
        if why:
            return hint.format(why=why)
    return None


def library_candidates(env, names, dirs=()):
    """Where a library is looked for, first found wins: the path in $env when set; else each of `names` in each
    of `dirs` that exists; else the names themselves, for the system loader."""
    if settings.get(env):
        return [settings.get(env)]
    found = [os.path.join(d, n) for n in names for d in dirs if os.path.exists(os.path.join(d, n))]
    return found + list(names)


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


def framework_stream(memory: str) -> int:
    """The stream the framework of `memory` ("cuda", "npu") is queueing work on now, for a call with no array to
    take it from (a barrier); 0 where no framework is loaded (the vendor layer then uses the communicator's
    own stream where the vendor refuses none)."""
    import sys
    torch = sys.modules.get("torch")
    if memory == "npu" and torch is not None and "torch_npu" in sys.modules:
        return int(torch.npu.current_stream().npu_stream)
    if memory == "cuda" and torch is not None and torch.cuda.is_initialized():
        return int(torch.cuda.current_stream().cuda_stream)
    return 0


def divide_in_place(buf, divisor: int) -> None:
    """buf /= divisor on the buffer's own device, through the array that owns it; integers truncate toward
    zero (as NCCL's avg does)."""
    owner = buf.owner
    is_float = buf.dtype in _ids().FLOAT_DTYPES
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


# run() maps a Call onto the engine's method named after the collective: its arguments, in their order.
_METHOD_ARGS = {
    "all_reduce": lambda c: (c.send, c.recv, c.op, c.algorithm, c.accuracy),
    "reduce_scatter": lambda c: (c.send, c.recv, c.op, c.algorithm, c.accuracy),
    "all_gather": lambda c: (c.send, c.recv),
    "broadcast": lambda c: (c.recv, c.root),
    "reduce": lambda c: (c.send, c.recv, c.op, c.root, c.accuracy),
    "barrier": lambda c: (),
    "all_to_all": lambda c: (c.send, c.recv, c.counts),
    "gather": lambda c: (c.send, c.recv, c.root),
    "scatter": lambda c: (c.send, c.recv, c.root),
    "send": lambda c: (c.send, c.dest, c.tag),
    "recv": lambda c: (c.recv, c.source, c.tag),
}


class VendorEngine(Engine):
    """An Engine over one vendor communicator per algorithm, created on first use, as its VendorBackend
    declares. run() calls the method named after the collective -- all_reduce(send, recv, op, algorithm,
    accuracy), reduce_scatter(same), all_gather(send, recv), broadcast(buf, root), reduce(send, recv, op, root,
    accuracy), barrier(), all_to_all(send, recv, counts), gather(send, recv, root), scatter(send, recv, root),
    send(buf, dest, tag), recv(buf, source, tag) -- or, async, start(name, *those arguments)."""

    _serials = itertools.count()

    def __init__(self, backend, *, rank, world_size, store, timeout, options, comms=None):
        # comms: the vendor communicators by algorithm, already made (shrink()); else the default one is made.
        from pycoll._bindings import vendor as _vendor
        self.backend = backend
        self.name = backend.name
        self.vendor = _vendor.Vendor(backend.name)
        self.rank = rank
        self.size = world_size
        self.timeout = float(timeout)
        self._store = store
        self._prefix = f"pycoll/{self.name}/{next(VendorEngine._serials)}"
        self._default = (options or {}).get("algorithm", "auto")
        self._comms = dict(comms or {})
        self._closed = False
        self._enqueue = False   # inside start(): the vendor's collectives return once enqueued
        self._work_comm = None  # the communicator of the collective start() enqueued
        self._work_stream = None  # the framework's current stream of its array, when asked (VendorWork)
        self._comm(self._default)  # fail at init, not at the first collective

    def _call(self, comm, method, *args, owner=None, enqueue=True):
        """comm.<method>(*args). Inside start() (async_op=True), where the result needs nothing more from the
        host (enqueue), it returns once enqueued on the stream, and start() returns its work, whose wait orders
        the current stream of `owner`'s framework (None: of the backend's memory) after it."""
        if not (self._enqueue and enqueue):
            return getattr(comm, method)(*args)
        from pycoll._bindings import vendor as _vendor
        _vendor.set_async(comm, True)
        try:
            getattr(comm, method)(*args)
        finally:
            _vendor.set_async(comm, False)
        self._work_comm = comm
        self._work_stream = functools.partial(framework_stream, self.backend.memory) if owner is None else \
            functools.partial(current_stream, owner)

    def run(self, call, async_op=False):
        name = call.collective
        if name == "send/recv":
            name = "send" if call.dest >= 0 else "recv"
        args = _METHOD_ARGS[name](call)
        return self.start(name, *args) if async_op else getattr(self, name)(*args)

    def start(self, collective, *args):
        """The collective enqueued on its stream, its handle the communicator's work: the watchdog thread of
        the communicator (one, whatever the number of calls) completes it when its event has, or fails it with
        the vendor's asynchronous error or at the deadline (then the communicator is aborted). Its wait orders
        the caller's current stream after the collective's end event, without a host wait, where the memory is
        the device's (VendorWork.order_stream). What needs the host after the vendor's call -- pycoll's own
        schedules, compensated sums, HCCL's average (a division after the sum) -- runs at call time, and its
        handle is complete, as before."""
        from pycoll._bindings import vendor as _vendor
        from pycoll.work import CompletedHandle

        self._enqueue, self._work_comm, self._work_stream = True, None, None
        try:
            algorithm = getattr(self, collective)(*args)
        except Exception as exc:  # noqa: BLE001 -- delivered by Work.wait, as a background failure would be
            return CompletedHandle(error=exc)
        finally:
            self._enqueue = False
        comm, self._work_comm = self._work_comm, None
        stream, self._work_stream = self._work_stream, None  # it holds the array: the work's alone from now
        work = _vendor.take_work(comm, algorithm) if comm is not None else None
        if work is None:
            return CompletedHandle(algorithm=algorithm)
        work.current_stream = stream
        return work

    def _comm(self, algorithm):
        if self._closed:
            raise CommunicatorClosed(f"{self.name}: communicator is closed")
        if algorithm == "auto":
            algorithm = self._default
        settings = self.backend.algorithm_settings
        if algorithm not in settings:
            raise ValueError(f"algorithm must be one of {', '.join(self.backend.algorithms)} for backend "
                             f"{self.name!r}, got {algorithm!r}{self.backend.algorithm_hint}")
        comm = self._comms.get(algorithm)
        if comm is None:
            # Every rank asks for algorithms in the same order, so each new communicator's key matches.
            key = f"{self._prefix}/{algorithm}/id"
            if self.rank == 0:
                unique_id = self.vendor.unique_id()
                self._store.set(key, unique_id)
            else:
                unique_id = bytes(self._store.get(key, self.timeout))
            with env_setting(self.backend.algorithm_env, settings[algorithm]), self.backend.init_settings(self.timeout):
                comm = self.vendor.comm(unique_id, self.rank, self.size, self.timeout)
            self._comms[algorithm] = comm
        return comm

    def _resolved(self, algorithm):
        return self._default if algorithm == "auto" else algorithm

    def _check_device(self, buf):
        device = self._comm("auto").device
        if device >= 0 and buf.device_id != device:
            memory = self.backend.memory
            raise ValueError(f"the array is on {memory}:{buf.device_id}, but this rank's {self.name.upper()} "
                             f"communicator is on {memory}:{device} (set the device before pycoll.init)")

    def _runs_own_arithmetic(self, buf, op, accuracy):
        """Whether this call runs pycoll's own arithmetic for its accuracy. Compensated: float sums and averages;
        anything else is exact or has no compensated form, so it runs as the vendor's own (as the C algorithms
        do). Reproducible: every call, so that what it does not cover is refused as on host memory."""
        if accuracy == "fast":
            return False
        if accuracy not in self.backend.accuracies:
            raise PycollError(f"{self.name}: accuracy={accuracy!r} is not supported on this backend (only "
                              f"{', '.join(map(repr, self.backend.accuracies))}); use backend='nccl', or "
                              f"backend='tcp' with host arrays, for {accuracy} sums")
        if accuracy == "reproducible":
            return True
        ids = _ids()
        return buf.dtype in ids.FLOAT_DTYPES and op in (ids.SUM, ids.AVG)

    def _check_supported(self, kind, buf, op):
        """The vendor's own rules for this device, checked before the call: a TypeError naming what is refused,
        and the communicator stays usable (the vendor would refuse it itself, or fail it on the device)."""
        why = self.backend.refusal(kind, buf.dtype, op, self._device_name())
        if why:
            raise TypeError(f"{self.name}: {why}; the communicator is still usable")

    def _device_name(self):
        if not hasattr(self, "_device"):
            self._device = self.vendor.device_name()
        return self._device

    def _own_arithmetic(self, kind, accuracy, *args):
        """The ring, the schedule verified over the vendor transport (neither accuracy's result depends on it)."""
        return self._own(kind, *args, "ring", accuracy)

    def _own(self, kind, *args):
        """pycoll's C schedules over the vendor's send/recv. On device memory they run the backend's device
        kernels: loaded first, and where they cannot be, the refusal says what is missing and what to install."""
        missing = self.backend.load_device_kernels()
        try:
            return self._comm("auto").own(kind, *args)
        except BackendUnavailable as exc:
            if missing:
                raise BackendUnavailable(f"{exc}: {missing}") from None
            raise

    def _vendor_op(self, op):
        """The op the vendor runs, and whether pycoll divides afterwards (a vendor without average sums)."""
        ids = _ids()
        if op == ids.AVG and not self.backend.native_avg:
            return ids.SUM, True
        return op, False

    def _reduction(self, kind, send, recv, op, algorithm, accuracy):
        """all_reduce or reduce_scatter (`kind`), recv.count elements per rank."""
        self._check_device(recv)
        stream = current_stream(recv.owner)
        if self._runs_own_arithmetic(recv, op, accuracy):
            return self._own_arithmetic(kind, accuracy, send.ptr, recv.ptr, recv.count, recv.dtype, op, -1, stream)
        own = self.backend.own_schedule(kind, self._resolved(algorithm))
        if own:  # an algorithm the vendor cannot run for this collective: pycoll's, over its send/recv
            return self._own(kind, send.ptr, recv.ptr, recv.count, recv.dtype, op, -1, stream, own, "fast")
        self._check_supported(kind, recv, op)
        vop, divide = self._vendor_op(op)
        self._call(self._comm(algorithm), kind, send.ptr, recv.ptr, recv.count, recv.dtype, vop, stream,
                   owner=recv.owner, enqueue=not divide)
        if divide:
            divide_in_place(recv, self.size)
        return self._resolved(algorithm)

    def all_reduce(self, send, recv, op, algorithm, accuracy):
        return self._reduction("all_reduce", send, recv, op, algorithm, accuracy)

    def reduce_scatter(self, send, recv, op, algorithm, accuracy):
        return self._reduction("reduce_scatter", send, recv, op, algorithm, accuracy)

    def all_gather(self, send, recv):
        self._check_device(recv)
        self._call(self._comm("auto"), "all_gather", send.ptr, recv.ptr, send.count, send.dtype,
                   current_stream(recv.owner), owner=recv.owner)
        return self._resolved("auto")

    def broadcast(self, buf, root):
        self._check_device(buf)
        self._call(self._comm("auto"), "broadcast", buf.ptr, buf.count, buf.dtype, root, current_stream(buf.owner),
                   owner=buf.owner)
        return self._resolved("auto")

    def reduce(self, send, recv, op, root, accuracy):
        self._check_device(send)
        # Off the root NCCL ignores recvbuf; HCCL may write it, so there the vendor layer passes scratch of its
        # own (vendor.h: reduce_writes_every_rank). send's address stands in when the caller has none.
        target = recv if recv is not None else send
        if self._runs_own_arithmetic(send, op, accuracy):
            return self._own_arithmetic("reduce", accuracy, send.ptr, target.ptr, send.count, send.dtype, op, root,
                                        current_stream(send.owner))
        self._check_supported("reduce", send, op)
        vop, divide = self._vendor_op(op)
        self._call(self._comm("auto"), "reduce", send.ptr, target.ptr, send.count, send.dtype, vop, root,
                   current_stream(send.owner), owner=send.owner, enqueue=not (divide and self.rank == root))
        if divide and self.rank == root:
            divide_in_place(recv, self.size)
        return self._resolved("auto")

    def barrier(self):
        # No array to take a stream from: the framework's current one, else the communicator's own (HCCL refuses
        # a NULL stream; the vendor layer substitutes its own).
        self._call(self._comm("auto"), "barrier", framework_stream(self.backend.memory))
        return self._resolved("auto")

    # -- point-to-point and what runs as one group of it (ProcessGroupNCCL's gather, scatter, all-to-all) ------
    # The vendor matches messages per pair of ranks in the order they are issued and carries no tag: a tag is
    # accepted and not sent. Each call completes before it returns (the group is waited for on its stream).
    uneven_all_to_all = True

    def send(self, buf, dest, tag):
        self._check_device(buf)
        self._comm("auto").send_recv(buf.ptr, buf.count, dest, 0, 0, -1, buf.dtype, current_stream(buf.owner))

    def recv(self, buf, source, tag):
        self._check_device(buf)
        self._comm("auto").send_recv(0, 0, -1, buf.ptr, buf.count, source, buf.dtype, current_stream(buf.owner))

    def _exchange(self, send, send_counts, recv, recv_counts, stream_owner):
        for b in (send, recv):
            if b is not None:
                self._check_device(b)
        dtype = (send if send is not None else recv).dtype
        self._comm("auto").exchange(0 if send is None else send.ptr, send_counts, 0 if recv is None else recv.ptr,
                                    recv_counts, dtype, current_stream(stream_owner.owner))
        return self._resolved("auto")

    def _one_hot(self, rank, count):
        counts = [0] * self.size
        counts[rank] = count
        return counts

    def all_to_all(self, send, recv, counts):
        if counts is None:
            counts = [send.count // self.size] * (2 * self.size)
        counts = [int(c) for c in counts]
        return self._exchange(send, counts[:self.size], recv, counts[self.size:], recv)

    def gather(self, send, recv, root):
        at_root = self.rank == root
        return self._exchange(send, self._one_hot(root, send.count), recv,
                              [send.count] * self.size if at_root else None, send)

    def scatter(self, send, recv, root):
        at_root = self.rank == root
        return self._exchange(send, [recv.count] * self.size if at_root else None, recv,
                              self._one_hot(root, recv.count), recv)

    def request_abort(self, failed_rank, reason):
        """From any thread: a peer failure learned of elsewhere (pycoll/islands/failures.py). The call waiting on
        any of this engine's communicators, else the next, raises PeerFailure saying `reason` (VendorComm's)."""
        for comm in list(self._comms.values()):
            comm.request_abort(failed_rank, reason)

    def revoke(self):
        """From any thread: the call waiting on any of this engine's communicators, else the next, raises
        CommunicatorRevoked; the vendor's work in flight stops (by its revoke where it has one, which keeps each
        communicator the parent of a shrink, else by its abort)."""
        for comm in list(self._comms.values()):
            comm.revoke()

    def can_shrink(self):
        """Whether the loaded library shrinks communicators (ncclCommShrink): the same on every rank that loaded
        the same library, which the caller checks with them before shrink()."""
        return "shrink" in self.vendor.fault_tolerance()

    def shrunk(self, exclude, store, *, by_vendor):
        """The engine of this one's ranks but `exclude` (ascending), called by those ranks alike. by_vendor: each
        communicator shrunk by the vendor (no new id, so no rendezvous: ncclCommShrink); else the default one is
        created afresh among them. `store` is where the new engine's ids are exchanged from now on (the job's
        store may have died with its host)."""
        excluded = set(exclude)
        survivors = [r for r in range(self.size) if r not in excluded]
        comms = {algorithm: comm.shrink(list(exclude), self.timeout) for algorithm, comm in self._comms.items()} \
            if by_vendor else None
        return VendorEngine(self.backend, rank=survivors.index(self.rank), world_size=len(survivors), store=store,
                            timeout=self.timeout, options={"algorithm": self._default}, comms=comms)

    def close(self):
        self._closed = True
        comms, self._comms = self._comms, {}
        for comm in comms.values():
            comm.close()


class VendorBackend(Backend):
    """A vendor plugin, declared by its class attributes: `name` (the vendor's name in libpycoll), `memory`,
    `algorithms` (the keys of algorithm_settings), `accuracies`; `libraries`, one (candidates, what to install)
    pair per library the vendor loads, in its order (`candidates()` lists the paths to try; the install hint is
    formatted with {why});
    `algorithm_env` and `algorithm_settings` (pycoll algorithm -> the setting's value, None for the vendor's own
    choice); `native_avg` (False: avg is a sum, then a division on the device)."""

    # NCCL and HCCL have no complex type (and pycoll_vendor_v1 maps none): refused by name before any call.
    dtypes = tuple(name for name in ALL_DTYPES if name not in COMPLEX_DTYPES)
    libraries: tuple = ()
    device_kernel_libraries: tuple = ()  # the same, for the device memory table compensated mode runs with
    algorithm_env = ""
    algorithm_settings: dict = {"auto": None}
    algorithm_hint = ""  # appended to the refusal of an algorithm the backend does not offer
    # The collectives the vendor's own algorithm communicators serve; for the others, and for own_algorithms,
    # pycoll runs its own schedule over the vendor's send/recv.
    vendor_algorithm_collectives: tuple = ("all_reduce", "reduce_scatter")
    own_algorithms: dict = {}  # collective -> the pycoll algorithms run as pycoll's own schedule
    native_avg = True
    # What the vendor refuses, checked before each call (vendor_capabilities.py's Refusal rows).
    refusals: tuple = ()

    def refusal(self, kind, dtype, op, device_name):
        """Why the vendor refuses `kind` on dtype/op ids on this device (its model, "" if unknown), or None."""
        from pycoll.plugins.vendor_capabilities import refusal
        return refusal(self, kind, dtype, op, device_name)

    @staticmethod
    def device_generation(device_name):
        """The device generation (Refusal.generation) of the vendor's device model."""
        return device_name

    def own_schedule(self, kind, algorithm):
        """The pycoll algorithm to run as pycoll's own schedule for `kind`, or None: the vendor runs it."""
        return algorithm if algorithm in self.own_algorithms.get(kind, ()) else None

    def init_settings(self, timeout):
        """The environment the vendor reads while a communicator is created, besides the algorithm."""
        return contextlib.nullcontext()

    def load(self):
        """None when the vendor's libraries are loaded, else why not and what to install or set."""
        from pycoll._bindings import vendor as _vendor
        return load_libraries(self.libraries, _vendor.Vendor(self.name).load)

    def load_device_kernels(self):
        """None when the libraries of the device kernels (device_kernel_libraries) are loaded, else why not and
        what to install or set. Tried once per backend: a failed dlopen does not start working later."""
        if not hasattr(self, "_device_kernels_missing"):
            from pycoll._bindings import vendor as _vendor
            self._device_kernels_missing = load_libraries(self.device_kernel_libraries, _vendor.cuda_kernels_load)
        return self._device_kernels_missing

    def probe(self):
        try:
            return self.load()
        except ImportError as exc:
            return f"pycoll was built without its vendor bindings ({exc})"

    def create(self, *, rank, world_size, store, timeout, options):
        reason = self.load()
        if reason:
            raise BackendUnavailable(f"{self.name}: {reason}")
        return VendorEngine(self, rank=rank, world_size=world_size, store=store, timeout=timeout, options=options)
