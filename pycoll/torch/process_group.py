"""torch.distributed's process group over pycoll communicators: CPU tensors on a pycoll host communicator, CUDA
tensors on a pycoll NCCL communicator made on first use.

torch 2.13 lets Python extend c10d only by subclassing `ProcessGroup` (its C++ `Backend` has no Python
constructor), so this is that subclass; torch then names it (`group_name`, which functional collectives,
DeviceMesh and `destroy_process_group` look groups up by) through the overrides below, since a Python group has
no C++ backend to keep the name in.

Collectives start as pycoll non-blocking collectives, so they run in call order on pycoll's progress thread;
each returns a `PycollWork`. The progress thread runs no Python, so the Works are completed by one Python
thread per group ("completer"), which waits on the pycoll Works in call order (they complete in that order).
Callbacks chained on their futures (DDP's) run there.

A failed collective fails where the caller looks: `wait()` (and so every blocking call) raises pycoll's own
error, and the future torch hands to DDP's hooks and to `work.get_future()` completes with an error. torch's
Python `Future.set_exception` cannot do the latter -- it stores the exception as the value, which C++ waiters
and `_create_work_from_future`'s Work report as success -- so each Work's future is the child of a private one
through a callback that raises the error: a raising callback is the one way Python gives a torch future a real
error. On CUDA tensors `wait()` does not block the host, as ProcessGroupNCCL's does not: it orders the current
stream after the collective (pycoll.Work.wait), and a failure then raises from the group's next call, the future
and exception().

Tensors go in and out as gloo takes them: a non-contiguous one is copied into a contiguous buffer (and the
result copied back), bool tensors travel as bytes (reductions over them are logical: or for sum and max, and
for product and min).
"""

from __future__ import annotations

import datetime
import functools
import itertools
import os
import queue
import threading
import time

import torch
import torch.distributed as dist

import pycoll
from pycoll.errors import MismatchError, Timeout
from pycoll.torch import flight_recorder
from pycoll.torch.store import TorchStore

BACKEND_NAME = "pycoll"
DEVICES = ["cpu", "cuda"]

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod", dist.ReduceOp.MIN: "min",
        dist.ReduceOp.MAX: "max", dist.ReduceOp.AVG: "avg"}
# Bools are reduced as bytes holding 0 or 1, on which max and min are exactly "or" and "and".
_BOOL_OPS = {"sum": "max", "max": "max", "prod": "min", "min": "min"}
# The tag of the point-to-point messages of an uneven all-to-all: the count exchange before them is a
# collective, so every send and receive of the caller's own has completed by then and none can be confused.
_ALL_TO_ALL_TAG = 0xFFFF_FF00
# Where a rank that refuses a collective leaves its reason for the others (torch's store of the group), and the
# name of the thread that enters its stand-in barrier (pycoll tags each thread's collectives with its name).
_REFUSED_KEY = "pycoll-refused"
_REFUSAL_THREAD = "pycoll-torch-refusal"


def _op_name(opts, dtype):
    reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
    for op, name in _OPS.items():
        if reduce_op == op:
            break
    else:
        name = getattr(getattr(reduce_op, "op", reduce_op), "name", reduce_op)  # ReduceOp wraps a RedOpType
        raise ValueError(f"reduceOp: pycoll has no {name} (it has SUM, PRODUCT, MIN, MAX, AVG)")
    if dtype != torch.bool:
        return name
    if name not in _BOOL_OPS:
        raise ValueError(f"reduceOp: {name} of bool tensors is not defined (sum, product, min and max are)")
    return _BOOL_OPS[name]


def _root(opts):
    return opts.rootRank if opts is not None else 0


def _device_type(t):
    """The device type a tensor's call is routed by (tests replace it to route without a GPU)."""
    return t.device.type


def _raw(t):
    return t.view(torch.uint8) if t.dtype == torch.bool else t


def _tensor(t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t.detach()


def _one(tensors, name):
    if len(tensors) != 1:
        raise ValueError(f"{name}: one tensor per call, got {len(tensors)}")
    return tensors[0]


def _same_dtype(tensors, name):
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        raise TypeError(f"{name}: every tensor must have one dtype, got {sorted(map(str, dtypes))}")


def _overlap(a, b):
    """Whether contiguous tensors a and b share any byte."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


class _Staging:
    """The buffers pycoll is handed -- contiguous, bools as bytes -- and, for the caller's tensors that are not
    contiguous, the copies back that finish() makes once the collective has completed (gloo's copy in and out)."""

    def __init__(self):
        self._back = []

    def input(self, t, name, *, apart_from=None):
        """`apart_from`: the call's output, which pycoll's collectives that are not in place must not share
        memory with; an input inside it (FSDP gathers each rank's shard from its own block of the output, as
        NCCL allows) is copied out first."""
        buf = _raw(_tensor(t, name).contiguous())
        if apart_from is not None and _overlap(buf, apart_from):
            buf = buf.clone()
        return buf

    def output(self, t, name, *, in_place=False):
        """A buffer for result `t`; `in_place`: its values are the call's input too (all_reduce)."""
        t = _tensor(t, name)
        if t.is_contiguous():
            return _raw(t)
        buf = t.contiguous() if in_place else torch.empty_like(t, memory_format=torch.contiguous_format)
        self._back.append((t, buf))
        return _raw(buf)

    @property
    def copies_back(self):
        """Whether finish() has copies to make once the collective has completed (on the host's word)."""
        return bool(self._back)

    def flat_inputs(self, tensors, name):
        """One flat buffer holding `tensors` (all of one dtype) in order."""
        _same_dtype([_tensor(t, f"{name}[{i}]") for i, t in enumerate(tensors)], name)
        return _raw(torch.cat([t.detach().reshape(-1) for t in tensors]))

    def flat_outputs(self, tensors, name):
        """One flat buffer, on the tensors' device, whose consecutive blocks finish() copies into `tensors`."""
        _same_dtype([_tensor(t, f"{name}[{i}]") for i, t in enumerate(tensors)], name)
        flat = torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device=tensors[0].device)
        start = 0
        for t in tensors:
            self._back.append((t.detach(), flat[start:start + t.numel()].view(t.shape)))
            start += t.numel()
        return _raw(flat)

    def finish(self):
        for dst, src in self._back:
            dst.copy_(src)


class PycollWork(dist.Work):
    """The c10d Work of one call: `wait()` raises the pycoll error the call ended with, `get_future()` completes
    with `value` (the call's tensors) or with that error (a RuntimeError naming it, as torch futures carry)."""

    def __init__(self, value, device_works=()):
        """device_works: the pycoll Works whose wait() may leave the collective to the device (nothing to copy
        back after it), as ProcessGroupNCCL's wait() does."""
        super().__init__()
        self._value = value
        self._device_works = device_works
        self._error = None
        self._source = -1
        self._done = threading.Event()
        self._settle = torch.futures.Future()
        self._future = self._settle.then(self._outcome)

    def _outcome(self, settled):
        if self._error is not None:
            raise self._error
        return settled.value()

    def complete(self, error=None, source=-1):
        """Called once, by the thread that saw the call end: record the outcome, complete the future (its
        callbacks run), then wake wait(). As gloo's Works: once wait() has returned, the future is complete,
        and callers that chain on it then (torchft's Manager) find it so."""
        self._error = error
        self._source = source
        self._settle.set_result(self._value)
        self._done.set()

    def wait(self, timeout=datetime.timedelta(0)):
        """Block until the call completes (torch's zero timeout: no limit) and raise its error if it failed. A
        collective on CUDA tensors is not waited for on the host, as ProcessGroupNCCL's wait() does not: the
        current stream is ordered after its end (pycoll.Work.wait), and a failure comes from the group's next
        call, the future, or exception()."""
        seconds = timeout.total_seconds() if timeout else 0.0
        if not seconds and not self._done.is_set() and self._device_works and \
                all(w._ordered() for w in self._device_works):
            return True
        if not self._done.wait(seconds if seconds > 0 else None):
            raise Timeout(f"Work.wait: the collective did not complete within {seconds:g} s; it is still running")
        if self._error is not None:
            raise self._error
        return True

    def get_future(self):
        return self._future

    def result(self):
        return self._value

    def is_completed(self):
        return self._done.is_set()

    def is_success(self):
        return self._done.is_set() and self._error is None

    def exception(self):
        return self._error

    def _source_rank(self):
        """The sender of a receive from any source (torch's dist.recv(t) with no src asks)."""
        return self._source

    source_rank = _source_rank


class _Completer:
    """The thread that completes a group's PycollWorks, in call order."""

    def __init__(self, explain=lambda call, error: error, on_error=lambda: None):
        """`explain(call, error)`: the error to report for a collective that failed with MismatchError (the
        group looks for a peer that refused that call); `on_error()`: called at the first failure (the flight
        recorder's dump)."""
        self._explain = explain
        self._on_error = on_error
        self.first_error = None  # the error of the first Work that failed (PycollProcessGroup.failure)
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="pycoll-torch-completer", daemon=True)
        self._thread.start()

    def add(self, works, work, finish, call=None):
        """Complete `work` once every pycoll Work in `works` has; finish() first, on success (copies a result
        out of a staging buffer). `call`: the group's number of the collective, None for point-to-point."""
        self._queue.put((works, work, finish, call))

    def _run(self):
        # Idle until the next item or the stop sentinel (stop() sends it); each wait is bounded by the
        # collective's own deadline, and closing the communicator fails whatever is pending.
        while (item := self._queue.get()) is not None:
            works, work, finish, call = item
            error = None
            try:
                pycoll.wait_all(works)
                finish()
            except MismatchError as exc:
                error = self._explain(call, exc) if call is not None else exc
            except Timeout as exc:
                # Said as c10d's backends say it, which callers (torch's own tests) look for.
                error = Timeout(f"{exc} (the group's timeout expired)", exc.rank)
                error.__cause__ = exc
            except Exception as exc:  # noqa: BLE001 -- handed to the Work's waiters, as c10d does
                error = exc
            if error is not None and self.first_error is None:
                self.first_error = error  # before the Work's callbacks run: they may ask the group
                self._on_error()
            work.complete(error)

    def stop(self, timeout):
        self._queue.put(None)
        self._thread.join(timeout)


def _not_supported(op, instead):
    raise NotImplementedError(f"{op}: the pycoll torch backend does not have it; {instead}")


def _collective(method):
    """A collective every rank of the group enters: numbered (the key of a refusal's reason), and an argument
    this rank refuses (ValueError, TypeError) fails the call on every rank at once (`_refuse`), not only here.
    A collective implemented by another one counts once."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if self._in_call is not None:
            return method(self, *args, **kwargs)
        self._calls += 1
        self._in_call = self._calls
        try:
            return method(self, *args, **kwargs)
        except (ValueError, TypeError) as exc:
            self._refuse(exc)
            raise
        finally:
            self._in_call = None
    return call


def _split_counts(t, splits, size, name):
    """Elements per peer of all_to_all_single's `t` split along dim 0 by `splits` (equal blocks when empty)."""
    rows = t.shape[0] if t.dim() else 1
    per_row = t.numel() // rows if rows else 0
    if not splits:
        if rows % size:
            raise ValueError(f"{name}: dim 0 ({rows}) must divide into {size} equal blocks when no split sizes "
                             f"are given")
        return [rows // size * per_row] * size
    if len(splits) != size or any(s < 0 for s in splits) or sum(splits) != rows:
        raise ValueError(f"{name}_split_sizes must be {size} sizes >= 0 adding up to dim 0 of {name} ({rows}), "
                         f"got {list(splits)}")
    return [s * per_row for s in splits]


class PycollProcessGroup(dist.ProcessGroup):
    def __init__(self, comm, rank, size, *, store=None, timeout=300.0, cuda_engine=None):
        """`comm`: the pycoll communicator for CPU tensors; `store`: torch's store of this group (the
        announcements of receives from any source); `cuda_engine()`: makes the NCCL communicator for CUDA
        tensors, collectively, on the group's first call with them."""
        super().__init__(rank, size)
        self.comm = comm
        # The communicator shutdown() closes: this one, or for a shrunk group the communicator it was shrunk
        # from (closing that closes the shrunk one too). A group that was shrunk hands it over (_handed_over)
        # and closes nothing: its successor runs over the same connections.
        self._root = comm
        self._handed_over = False
        self._store = store
        self._timeout = float(timeout)
        self._make_cuda_engine = cuda_engine
        self._cuda = None
        self._group_name = ""
        self._group_desc = ""
        self._p2p_lock = threading.Lock()
        self._taken = [0] * size  # messages received (or claimed) from each peer, named or any source
        self._calls = 0  # collectives called so far (_collective), the same count on every rank
        self._in_call = None
        self._completer = _Completer(self._explain, lambda: flight_recorder.dump_on_error(self))
        self._coalesced = None  # the Works issued inside torch's _coalescing_manager(device=...), else None
        flight_recorder.register(self)

    def getBackendName(self):
        return BACKEND_NAME

    # torch names every group it creates (init_process_group, new_group, DeviceMesh); functional collectives
    # find the group by that name, destroy_process_group unregisters it.
    def setGroupName(self, name):
        self._group_name = name

    def getGroupName(self):
        return self._group_name

    def setGroupDesc(self, desc):
        self._group_desc = desc

    def getGroupDesc(self):
        return self._group_desc

    def _engine(self, *tensors):
        """The communicator for the tensors' device type: CPU tensors the host communicator, CUDA tensors the
        NCCL one (made on first use: every rank of the group calls the same collective with them)."""
        kinds = {_device_type(t) for t in tensors if t is not None}
        if len(kinds) > 1:
            raise TypeError(f"the tensors of one call must be on one device type, got {sorted(kinds)}")
        kind = kinds.pop() if kinds else "cpu"
        if kind == "cpu":
            return self.comm
        if kind != "cuda":
            raise TypeError(f"the pycoll torch backend takes CPU and CUDA tensors, got one on {kind}")
        if self._cuda is None:
            if self._make_cuda_engine is None:
                raise TypeError("CUDA tensors: this group was made without a CUDA communicator")
            self._cuda = self._make_cuda_engine()
        return self._cuda

    def _work(self, pycoll_works, value, finish):
        works = pycoll_works if isinstance(pycoll_works, list) else [pycoll_works]
        staging = getattr(finish, "__self__", None)
        nothing_back = isinstance(staging, _Staging) and not staging.copies_back
        work = PycollWork(value, works if nothing_back else ())
        self._completer.add(works, work, finish, self._in_call)
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    # -- torch's _coalescing_manager(device=...) ----------------------------------------------------------------
    # Every collective already starts without waiting, in call order, so a coalesced batch needs no batching of
    # its own: the ops inside run as they are called, and the Work the manager waits for (or hands back with
    # async_ops) completes when the last of them has, failing with the first error among them.
    def _start_coalescing(self, device):
        if self._coalesced is not None:
            raise ValueError("_start_coalescing: this group is already coalescing (a coalescing manager is open)")
        self._coalesced = []

    def _end_coalescing(self, device):
        if self._coalesced is None:
            raise ValueError("_end_coalescing: this group is not coalescing (no _start_coalescing before it)")
        works, self._coalesced = self._coalesced, None
        device_works = [d for w in works for d in w._device_works] if all(w._device_works for w in works) else ()
        whole = PycollWork([w.result() for w in works], device_works)
        torch.futures.collect_all([w._settle for w in works]).add_done_callback(lambda _: whole.complete(
            next((w.exception() for w in works if w.exception() is not None), None)))
        return whole

    # -- a collective one rank cannot serve -------------------------------------------------------------------
    # The rank that refuses its arguments raises at once; the others would wait for it until the group's
    # timeout. So the refusing rank still takes the collective's slot, with a barrier entered from a thread of
    # its own name: where another rank entered the real collective, the two differ (another collective, or a
    # barrier from another thread, since pycoll tags each thread's collectives with its name), and pycoll's
    # mismatch detection fails both within moments -- breaking the communicator, as any failed collective
    # does. Where every rank refused alike, every rank runs that barrier, it completes, and the group stays
    # usable. The reason goes to torch's store first, so the others' MismatchError can name it.
    def _refuse(self, error):
        if self._store is not None:
            key = f"{_REFUSED_KEY}/{self._in_call}/{self.rank()}"
            self._store.set(key, f"{type(error).__name__}: {error}")
            self._store.check([key])  # a round trip: the reason is in the store before any peer can look
        marker = threading.Thread(target=self._refusal_barrier, name=_REFUSAL_THREAD, daemon=True)
        marker.start()
        marker.join()  # bounded by the group's timeout, as every pycoll collective

    def _refusal_barrier(self):
        try:
            self.comm.barrier()
        except pycoll.PycollError:
            pass  # the mismatch the peers were meant to meet; this rank raises its own reason

    def _explain(self, call, error):
        """The error of collective number `call`, which failed with MismatchError: the reason of a peer that
        refused it, where one did (its key in the store), else `error` itself."""
        if self._store is None:
            return error
        for r in range(self.size()):
            key = f"{_REFUSED_KEY}/{call}/{r}"
            if r != self.rank() and self._store.check([key]):
                reason = self._store.get(key).decode(errors="replace")
                explained = MismatchError(f"rank {r} refused this collective (the group's call #{call}), so "
                                          f"every rank fails it: {reason}")
                explained.__cause__ = error
                return explained
        return error

    # -- reductions, broadcast, barrier ----------------------------------------------------------------------
    @_collective
    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "allreduce")
        stage = _Staging()
        buf = stage.output(t, "tensor", in_place=True)
        return self._work(self._engine(t).all_reduce(buf, _op_name(opts, t.dtype), async_op=True), tensors,
                          stage.finish)

    @_collective
    def allreduce_coalesced(self, tensors, opts=None):
        stage = _Staging()
        engine = self._engine(*tensors)
        works = [engine.all_reduce(stage.output(t, f"tensors[{i}]", in_place=True), _op_name(opts, t.dtype),
                                   async_op=True) for i, t in enumerate(tensors)]
        return self._work(works, tensors, stage.finish)

    @_collective
    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        stage = _Staging()
        buf = stage.output(t, "tensor", in_place=True)
        return self._work(self._engine(t).broadcast(buf, _root(opts), async_op=True), tensors, stage.finish)

    @_collective
    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce")
        stage = _Staging()
        buf = stage.output(t, "tensor", in_place=True)
        work = self._engine(t).reduce(buf, _root(opts), _op_name(opts, t.dtype), async_op=True)
        return self._work(work, tensors, stage.finish)

    @_collective
    def barrier(self, opts=None):
        return self._work(self.comm.barrier(async_op=True), [], _Staging().finish)

    # -- what FSDP uses: flat tensors gathered and reduce-scattered --------------------------------------------
    # torch 2.13 calls them *_single (all_gather_single, ...); earlier versions by the older names, kept as
    # aliases below so either finds them.
    @_collective
    def all_gather_single(self, output, input, opts=None):
        """dist.all_gather_single (all_gather_into_tensor): output holds size * input.numel() elements, block r
        from rank r."""
        return self.all_gather_single_coalesced([output], [input], opts)

    @_collective
    def reduce_scatter_single(self, output, input, opts=None):
        """dist.reduce_scatter_single (reduce_scatter_tensor): input holds size * output.numel() elements; rank
        r gets block r reduced."""
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    def _pairwise(self, outputs, inputs, name, start):
        """One Work over start(engine, stage, i, inputs[i], recv) for each pair, recv being outputs[i] as staged;
        all on one staging and one engine."""
        self._same_length(outputs, inputs, name)
        stage = _Staging()
        engine = self._engine(*outputs, *inputs)
        works = [start(engine, stage, i, x, stage.output(out, f"outputs[{i}]"))
                 for i, (out, x) in enumerate(zip(outputs, inputs))]
        return self._work(works, outputs, stage.finish)

    @_collective
    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        def start(engine, stage, i, x, recv):
            send = _raw(_tensor(x, f"inputs[{i}]").contiguous())
            # pycoll's all_gather runs in place when the input is exactly this rank's block of the output (as
            # FSDP2 calls it); any other overlap is copied out first.
            if send.data_ptr() != recv.data_ptr() + self.rank() * send.numel() * send.element_size():
                send = stage.input(x, f"inputs[{i}]", apart_from=recv)
            return engine.all_gather(send, recv, async_op=True)
        return self._pairwise(outputs, inputs, "all_gather_single_coalesced", start)

    @_collective
    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        def start(engine, stage, i, x, recv):
            return engine.reduce_scatter(stage.input(x, f"inputs[{i}]", apart_from=recv), recv,
                                         _op_name(opts, x.dtype), async_op=True)
        return self._pairwise(outputs, inputs, "reduce_scatter_single_coalesced", start)

    _allgather_base = all_gather_single
    _reduce_scatter_base = reduce_scatter_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    @staticmethod
    def _same_length(outputs, inputs, name):
        if len(outputs) != len(inputs):
            raise ValueError(f"{name}: {len(outputs)} outputs for {len(inputs)} inputs")

    # -- the list forms: staged through one flat tensor, copied in (and out, by the completer thread) ----------
    def _rank_list(self, tensor_lists, coll, arg, flatten):
        """The one list of a tensor per rank that argument `arg` of `coll` holds, and that list as one flat buffer
        through flatten (a _Staging's flat_outputs or flat_inputs)."""
        if len(tensor_lists) != 1 or len(tensor_lists[0]) != self.size():
            raise ValueError(f"{coll} {arg}: one list of {self.size()} tensors expected")
        return tensor_lists[0], flatten(tensor_lists[0], arg)

    @_collective
    def allgather(self, output_lists, inputs, opts=None):
        x = _one(inputs, "allgather")
        stage = _Staging()
        outs, flat = self._rank_list(output_lists, "allgather", "output_tensor_list", stage.flat_outputs)
        work = self._engine(x, *outs).all_gather(stage.input(x, "input_tensor"), flat, async_op=True)
        return self._work(work, output_lists, stage.finish)

    @_collective
    def allgather_coalesced(self, output_lists, inputs, opts=None):
        """dist.all_gather_coalesced: output_lists[r][i] gets rank r's inputs[i]; one all-gather of them all."""
        if len(output_lists) != self.size() or any(len(outs) != len(inputs) for outs in output_lists):
            raise ValueError(f"all_gather_coalesced: output_tensor_lists must hold {self.size()} lists of "
                             f"{len(inputs)} tensors (one per input)")
        stage = _Staging()
        flat_in = stage.flat_inputs(inputs, "input_tensor_list")
        flat_out = stage.flat_outputs([t for outs in output_lists for t in outs], "output_tensor_lists")
        work = self._engine(*inputs).all_gather(flat_in, flat_out, async_op=True)
        return self._work(work, output_lists, stage.finish)

    @_collective
    def reduce_scatter(self, outputs, input_lists, opts=None):
        out = _one(outputs, "reduce_scatter")
        stage = _Staging()
        ins, flat = self._rank_list(input_lists, "reduce_scatter", "input_list", stage.flat_inputs)
        work = self._engine(out, *ins).reduce_scatter(flat, stage.output(out, "output"), _op_name(opts, out.dtype),
                                                      async_op=True)
        return self._work(work, outputs, stage.finish)

    # -- all-to-all: equal blocks as one pycoll all_to_all, uneven ones over point-to-point ---------------------
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        """dist.all_to_all_single: equal blocks, or blocks of the split sizes (uneven, over point-to-point)."""
        stage = _Staging()
        try:
            engine = self._engine(output, input)
            send_counts = _split_counts(input, input_split_sizes, self.size(), "input")
            recv_counts = _split_counts(output, output_split_sizes, self.size(), "output")
            _same_dtype([_tensor(output, "output"), _tensor(input, "input")], "all_to_all_single output and input")
            send, recv = stage.input(input, "input").reshape(-1), stage.output(output, "output").reshape(-1)
        except (ValueError, TypeError) as exc:
            # The others learn of it in the exchange of counts (or meet it as a mismatched collective), rather
            # than waiting for a message that will not come.
            self._exchange_counts(None, None, 1, "all_to_all_single", exc)
        if not (input_split_sizes or output_split_sizes) and send_counts == recv_counts:
            return self._work(engine.all_to_all(send, recv, async_op=True), [output], stage.finish)
        works = self._all_to_all_v(engine, send, send_counts, recv, recv_counts, "all_to_all_single")
        return self._work(works, [output], stage.finish)

    alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts=None):
        """The list form: block j of this rank's inputs goes to rank j; blocks may differ in size."""
        stage = _Staging()
        try:
            if len(outputs) != self.size() or len(inputs) != self.size():
                raise ValueError(f"all_to_all: {self.size()} output and {self.size()} input tensors expected")
            _same_dtype([_tensor(t, "all_to_all tensors") for t in [*outputs, *inputs]],
                        "all_to_all output_tensor_list and input_tensor_list")
            engine = self._engine(*outputs, *inputs)
            flat_in = stage.flat_inputs(inputs, "input_tensor_list")
            flat_out = stage.flat_outputs(outputs, "output_tensor_list")
        except (ValueError, TypeError) as exc:
            self._exchange_counts(None, None, 1, "all_to_all", exc)  # the others fail alike, then this raises
        works = self._all_to_all_v(engine, flat_in, [t.numel() for t in inputs], flat_out,
                                   [t.numel() for t in outputs], "all_to_all")
        return self._work(works, outputs, stage.finish)

    def _exchange_counts(self, send_counts, recv_counts, itemsize, what, local_error=None):
        """Every rank's bytes to and from every peer, so that all ranks agree whether the exchange can run: a
        rank whose own arguments failed (`local_error`, counts None) or counts that do not pair up fail every
        rank alike, with MismatchError on the others."""
        n = self.size()
        mine = ([-1] * (2 * n) if local_error is not None else
                [c * itemsize for c in send_counts] + [c * itemsize for c in recv_counts])
        table = torch.empty(n * 2 * n, dtype=torch.int64)
        self.comm.all_gather(torch.tensor(mine, dtype=torch.int64), table)
        if local_error is not None:
            raise local_error
        table = table.view(n, 2, n)
        failed = [r for r in range(n) if table[r, 0, 0] < 0]
        if failed:
            raise MismatchError(f"{what}: rank {failed[0]} could not serve its arguments (it raised the reason)")
        sends, recvs = table[:, 0, :], table[:, 1, :]
        bad = (sends != recvs.T).nonzero()
        if len(bad):
            i, j = bad[0].tolist()
            raise MismatchError(f"{what}: rank {i} sends {int(sends[i, j])} bytes to rank {j}, which expects "
                                f"{int(recvs[j, i])} bytes from it")

    def _all_to_all_v(self, engine, send, send_counts, recv, recv_counts, what):
        """Block r of flat `send` (send_counts[r] elements) to rank r, block r of flat `recv` from rank r: the
        counts exchanged first (_exchange_counts), then one pair of messages per peer with a nonzero block,
        every receive posted before the sends. Returns the pycoll Works."""
        if sum(send_counts) != send.numel() or sum(recv_counts) != recv.numel():
            raise ValueError(f"{what}: the blocks must fill the tensors")
        self._exchange_counts(send_counts, recv_counts, send.element_size(), what)
        if engine is self._cuda:
            # The vendor's messages complete only together with their peers' (a send past the vendor's buffer
            # waits for its receive): one group of every send and receive, as ProcessGroupNCCL runs it.
            return [engine._all_to_all_v(send, send_counts, recv, recv_counts, async_op=True)]
        me = self.rank()
        send_at = [0, *itertools.accumulate(send_counts)]
        recv_at = [0, *itertools.accumulate(recv_counts)]
        recv[recv_at[me]:recv_at[me + 1]].copy_(send[send_at[me]:send_at[me + 1]])
        peers = [(me + k) % self.size() for k in range(1, self.size())]  # a different first peer on each rank
        works = [engine.recv(recv[recv_at[r]:recv_at[r + 1]], r, _ALL_TO_ALL_TAG, async_op=True)
                 for r in peers if recv_counts[r]]
        works += [engine.send(send[send_at[r]:send_at[r + 1]], r, _ALL_TO_ALL_TAG, async_op=True)
                  for r in peers if send_counts[r]]
        return works

    # -- rooted ------------------------------------------------------------------------------------------------
    def _root_list(self, tensor_lists, opts, coll, flatten):
        """A rooted collective's root, and its list of a tensor per rank (<coll>_list) as one flat buffer through
        flatten on the root, None elsewhere."""
        root = _root(opts)
        if self.rank() != root:
            return root, None
        return root, self._rank_list(tensor_lists, coll, f"{coll}_list", flatten)[1]

    @_collective
    def gather(self, output_lists, inputs, opts=None):
        x = _one(inputs, "gather")
        stage = _Staging()
        root, flat = self._root_list(output_lists, opts, "gather", stage.flat_outputs)
        work = self._engine(x).gather(stage.input(x, "tensor"), flat, root, async_op=True)
        return self._work(work, output_lists, stage.finish)

    @_collective
    def scatter(self, outputs, input_lists, opts=None):
        out = _one(outputs, "scatter")
        stage = _Staging()
        root, flat = self._root_list(input_lists, opts, "scatter", stage.flat_inputs)
        work = self._engine(out).scatter(flat, stage.output(out, "tensor"), root, async_op=True)
        return self._work(work, outputs, stage.finish)

    # -- point to point ----------------------------------------------------------------------------------------
    # pycoll's receives name their source. For a receive from any source, every send first counts itself in
    # torch's store (one counter per ordered pair of ranks); the receiver polls its peers' counters against
    # the messages it has taken from each and receives from the first peer with one more. That needs nothing
    # of the transports: the message itself still travels in order between the pair.
    def _sent_key(self, src, dst):
        return f"pycoll-p2p/{src}/{dst}"

    def send(self, tensors, dst, tag=0):
        t = _one(tensors, "send")
        stage = _Staging()
        buf = stage.input(t, "tensor")
        engine = self._engine(t)
        if self._store is not None:
            self._store.add(self._sent_key(self.rank(), dst), 1)
        return self._work(engine.send(buf, dst, tag, async_op=True), tensors, stage.finish)

    def recv(self, tensors, src, tag=0):
        t = _one(tensors, "recv")
        stage = _Staging()
        buf = stage.output(t, "tensor")
        engine = self._engine(t)
        with self._p2p_lock:
            work = engine.recv(buf, src, tag, async_op=True)
            self._taken[src] += 1
        return self._work(work, tensors, stage.finish)

    def recv_anysource(self, tensors, tag=0):
        t = _one(tensors, "recv")
        if self._store is None:
            _not_supported("recv from any source", "this group has no store to announce sends in")
        stage = _Staging()
        buf = stage.output(t, "tensor")
        engine = self._engine(t)
        work = PycollWork(tensors)
        threading.Thread(target=self._receive_from_any, args=(engine, buf, tag, work, stage.finish),
                         name="pycoll-torch-recv-any", daemon=True).start()
        return work

    def _receive_from_any(self, engine, buf, tag, work, finish):
        me, deadline, delay = self.rank(), time.monotonic() + self._timeout, 0.0005
        try:
            while True:
                with self._p2p_lock:
                    for r in range(self.size()):
                        if r != me and self._store.add(self._sent_key(r, me), 0) > self._taken[r]:
                            pending = engine.recv(buf, r, tag, async_op=True)
                            self._taken[r] += 1
                            break
                    else:
                        pending = None
                if pending is not None:
                    pending.wait()
                    finish()
                    work.complete(source=r)
                    return
                if time.monotonic() > deadline:
                    raise Timeout(f"recv from any source: no rank sent to rank {me} within {self._timeout:g} s")
                time.sleep(delay)
                delay = min(delay * 2, 0.01)
        except Exception as exc:  # noqa: BLE001 -- handed to the Work's waiters
            work.complete(exc)

    # -- what pycoll does not do ---------------------------------------------------------------------------------
    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        _not_supported("monitored_barrier", "torch restricts it to gloo; barrier() raises naming a rank that "
                                            "does not arrive")

    def split_group(self, *args, **kwargs):
        _not_supported("split_group", "use dist.new_group")

    def merge_remote_group(self, *args, **kwargs):
        _not_supported("merge_remote_group", "use dist.new_group")

    def set_timeout(self, timeout):
        _not_supported("set_timeout", "pass timeout= to init_process_group or new_group")

    def abort(self):
        self.shutdown()

    def shutdown(self):
        flight_recorder.stop_watching(self)
        if not self._handed_over:
            self._root.close()  # fails pending Works, which completes them
        if self._cuda is not None:
            self._cuda.close()
        self._completer.stop(timeout=10.0)

    @property
    def failure(self):
        """The error of this group's first collective that failed (its Work raised it), else None."""
        return self._completer.first_error

    def shrunk(self, excluded, store, *, revoke=False):
        """The group of the ranks of this one still alive, less `excluded` (this group's ranks), over
        Communicator.shrink: collective over the survivors, the dead never answer. Ranks pycoll finds lost are
        left out too (`new.comm.ranks` lists the members by their rank here). `store`: torch's store for the new
        group; `revoke`: revoke this group first, so that the survivors' pending collectives end at once
        (torch's SHRINK_ABORT). CUDA tensors get a new NCCL communicator on the new group's first call with
        them (the NCCL one of this group is not shrunk). This group then hands its connections over: shut
        down, it closes nothing; the new group's shutdown closes both."""
        if revoke:
            self.comm.revoke()
        comm = self.comm.shrink(exclude=excluded)
        self._handed_over = True
        new = PycollProcessGroup(comm, comm.rank, comm.size, store=store, timeout=self._timeout,
                                 cuda_engine=lambda: _communicator("nccl", store, "nccl/", comm.rank, comm.size,
                                                                   self._timeout))
        new._root = self._root
        return new


def _master_addr(store):
    """The address the communicator's rank 0 listens toward: MASTER_ADDR where set, else the host of torch's
    TCP store (file:// rendezvous has neither: loopback, one host)."""
    addr = os.environ.get("MASTER_ADDR")
    while addr is None and store is not None:
        addr = getattr(store, "host", None)
        store = getattr(store, "underlying_store", None)
    return addr or "127.0.0.1"


def create_process_group(store, rank, size, timeout):
    """torch.distributed's backend creator: a pycoll communicator that meets through torch's store, and the
    NCCL one for CUDA tensors made through the same store when first needed. Rank and size come from torch,
    never from the launcher's environment (init_method="file://..." sets none)."""
    seconds = timeout.total_seconds()
    return PycollProcessGroup(_communicator(None, store, "host/", rank, size, seconds), rank, size, store=store,
                              timeout=seconds,
                              cuda_engine=lambda: _communicator("nccl", store, "nccl/", rank, size, seconds))


def _communicator(backend, store, prefix, rank, size, seconds):
    """A pycoll communicator of `backend` (None: the default host backend) that meets through torch's `store`
    under `prefix`."""
    return pycoll.init(backend, rank=rank, world_size=size, master_addr=_master_addr(store),
                       store=TorchStore(dist.PrefixStore(prefix, store), seconds), timeout=seconds)
