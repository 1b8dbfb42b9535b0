"""A torch.distributed ProcessGroup over a pycoll Communicator (CPU tensors).

Collectives that DDP and the torch.distributed functions use start as pycoll non-blocking collectives, so they
run in call order on pycoll's progress thread; each returns a `PycollWork`. The progress thread runs no Python,
so the Works are completed by one Python thread per group ("completer"), which waits on the pycoll Works in call
order (they complete in that order). Callbacks chained on their futures (DDP's) run there.

A failed collective must fail where the caller looks: `wait()` (and so every blocking call) raises pycoll's own
error, and the future torch hands to DDP's hooks and to `work.get_future()` completes with an error. torch's
Python `Future.set_exception` cannot do the latter -- it stores the exception as the value, which C++ waiters
and `_create_work_from_future`'s Work report as success -- so each Work's future is the child of a private
one through a callback that raises the error: a raising callback is the one way Python gives a torch future a
real error.
"""

from __future__ import annotations

import datetime
import queue
import threading

import torch
import torch.distributed as dist

import pycoll
from pycoll.errors import Timeout
from pycoll.torch.store import TorchStore

BACKEND_NAME = "pycoll"

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod", dist.ReduceOp.MIN: "min",
        dist.ReduceOp.MAX: "max", dist.ReduceOp.AVG: "avg"}


def _op_name(reduce_op):
    for op, name in _OPS.items():
        if reduce_op == op:
            return name
    raise ValueError(f"reduceOp: pycoll has no {reduce_op} (it has sum, product, min, max, avg)")


def _host(t, name):
    if t.device.type != "cpu":
        raise TypeError(f"{name}: the pycoll torch backend takes CPU tensors, got one on {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return t.detach()


def _single(tensors, name):
    if len(tensors) != 1:
        raise ValueError(f"{name}: one tensor per call, got {len(tensors)}")
    return _host(tensors[0], name)


class PycollWork(dist.Work):
    """The c10d Work of one call: `wait()` raises the pycoll error the call ended with, `get_future()` completes
    with `value` (the call's tensors) or with that error (a RuntimeError naming it, as torch futures carry)."""

    def __init__(self, value):
        super().__init__()
        self._value = value
        self._error = None
        self._done = threading.Event()
        self._settle = torch.futures.Future()
        self._future = self._settle.then(self._outcome)

    def _outcome(self, settled):
        if self._error is not None:
            raise self._error
        return settled.value()

    def complete(self, error=None):
        """Called once, by the completer: record the outcome, wake wait(), then run the future's callbacks."""
        self._error = error
        self._done.set()
        self._settle.set_result(self._value)

    def wait(self, timeout=datetime.timedelta(0)):
        """Block until the call completes (torch's zero timeout: no limit) and raise its error if it failed."""
        seconds = timeout.total_seconds() if timeout else 0.0
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


class _Completer:
    """The thread that completes a group's PycollWorks, in call order."""

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="pycoll-torch-completer", daemon=True)
        self._thread.start()

    def add(self, works, work, finish=None):
        """Complete `work` once every pycoll Work in `works` has; finish() first, on success (copies a result
        out of a staging buffer)."""
        self._queue.put((works, work, finish))

    def _run(self):
        # Idle until the next item or the stop sentinel (stop() sends it); each wait is bounded by the
        # collective's own deadline, and closing the communicator fails whatever is pending.
        while (item := self._queue.get()) is not None:
            works, work, finish = item
            try:
                pycoll.wait_all(works)
                if finish is not None:
                    finish()
            except Exception as exc:  # noqa: BLE001 -- handed to the Work's waiters, as c10d does
                work.complete(exc)
            else:
                work.complete()

    def stop(self, timeout):
        self._queue.put(None)
        self._thread.join(timeout)


def _same_length(outputs, inputs, name):
    if len(outputs) != len(inputs):
        raise ValueError(f"{name}: {len(outputs)} outputs for {len(inputs)} inputs")


def _not_yet(op, instead):
    raise NotImplementedError(f"{op}: the pycoll torch backend does not have it yet; {instead}")


class PycollProcessGroup(dist.ProcessGroup):
    def __init__(self, comm, rank, size):
        super().__init__(rank, size)
        self.comm = comm
        self._completer = _Completer()

    def getBackendName(self):
        return BACKEND_NAME

    def _work(self, pycoll_works, value, finish=None):
        work = PycollWork(value)
        works = pycoll_works if isinstance(pycoll_works, list) else [pycoll_works]
        self._completer.add(works, work, finish)
        return work

    def allreduce(self, tensors, opts=None):
        op = _op_name(opts.reduceOp) if opts is not None else "sum"
        t = _single(tensors, "allreduce")
        return self._work(self.comm.all_reduce(t, op, async_op=True), tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        op = _op_name(opts.reduceOp) if opts is not None else "sum"
        works = [self.comm.all_reduce(_host(t, f"tensors[{i}]"), op, async_op=True) for i, t in enumerate(tensors)]
        return self._work(works, tensors)

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        return self._work(self.comm.broadcast(_single(tensors, "broadcast"), root, async_op=True), tensors)

    def reduce(self, tensors, opts=None):
        op = _op_name(opts.reduceOp) if opts is not None else "sum"
        root = opts.rootRank if opts is not None else 0
        return self._work(self.comm.reduce(_single(tensors, "reduce"), root, op, async_op=True), tensors)

    def barrier(self, opts=None):
        return self._work(self.comm.barrier(async_op=True), [])

    # -- what FSDP uses: flat tensors gathered and reduce-scattered --------------------------------------------
    # torch 2.13 calls them *_single (all_gather_single, ...); earlier versions by the older names, kept as
    # aliases below so either finds them.
    def all_gather_single(self, output, input, opts=None):
        """dist.all_gather_single (all_gather_into_tensor): output holds size * input.numel() elements, block r from rank r."""
        work = self.comm.all_gather(_host(input, "input"), _host(output, "output"), async_op=True)
        return self._work(work, [output])

    def reduce_scatter_single(self, output, input, opts=None):
        """dist.reduce_scatter_single (reduce_scatter_tensor): input holds size * output.numel() elements; rank r gets block r reduced."""
        op = _op_name(opts.reduceOp) if opts is not None else "sum"
        work = self.comm.reduce_scatter(_host(input, "input"), _host(output, "output"), op, async_op=True)
        return self._work(work, [output])

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        _same_length(outputs, inputs, "all_gather_single_coalesced")
        works = [self.comm.all_gather(_host(x, f"inputs[{i}]"), _host(out, f"outputs[{i}]"), async_op=True)
                 for i, (out, x) in enumerate(zip(outputs, inputs))]
        return self._work(works, outputs)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        _same_length(outputs, inputs, "reduce_scatter_single_coalesced")
        op = _op_name(opts.reduceOp) if opts is not None else "sum"
        works = [self.comm.reduce_scatter(_host(x, f"inputs[{i}]"), _host(out, f"outputs[{i}]"), op, async_op=True)
                 for i, (out, x) in enumerate(zip(outputs, inputs))]
        return self._work(works, outputs)

    _allgather_base = all_gather_single
    _reduce_scatter_base = reduce_scatter_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # -- the list forms: staged through one flat tensor, copied in (or out, by the completer thread) -----------
    def allgather(self, output_lists, inputs, opts=None):
        x = _single(inputs, "allgather")
        if len(output_lists) != 1 or len(output_lists[0]) != self.size():
            raise ValueError(f"allgather: one list of {self.size()} output tensors expected")
        flat = torch.empty((self.size(), *x.shape), dtype=x.dtype)
        work = self.comm.all_gather(x, flat.view(-1), async_op=True)

        def finish():
            for out, block in zip(output_lists[0], flat):
                out.copy_(block)
        return self._work(work, output_lists, finish)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        out = _single(outputs, "reduce_scatter")
        if len(input_lists) != 1 or len(input_lists[0]) != self.size():
            raise ValueError(f"reduce_scatter: one list of {self.size()} input tensors expected")
        op = _op_name(opts.reduceOp) if opts is not None else "sum"
        flat = torch.cat([_host(t, f"input_list[{r}]").reshape(-1) for r, t in enumerate(input_lists[0])])
        return self._work(self.comm.reduce_scatter(flat, out, op, async_op=True), outputs)

    # -- all-to-all, rooted and point-to-point ----------------------------------------------------------------
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        """dist.all_to_all_single with equal blocks (no split sizes, or all equal)."""
        for name, sizes in (("output_split_sizes", output_split_sizes), ("input_split_sizes", input_split_sizes)):
            if sizes and len(set(sizes)) > 1:
                _not_yet(f"all_to_all_single with uneven {name}",
                         "pad the blocks to one size, or use the gloo backend for it")
        work = self.comm.all_to_all(_host(input, "input"), _host(output, "output"), async_op=True)
        return self._work(work, [output])

    alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts=None):
        """The list form: one block per rank, all of one shape, staged through flat tensors."""
        if len(outputs) != self.size() or len(inputs) != self.size():
            raise ValueError(f"all_to_all: {self.size()} output and {self.size()} input tensors expected")
        flat_in = torch.cat([_host(t, f"input_tensor_list[{r}]").reshape(-1) for r, t in enumerate(inputs)])
        flat_out = torch.empty_like(flat_in)
        work = self.comm.all_to_all(flat_in, flat_out, async_op=True)

        def finish():
            for out, block in zip(outputs, flat_out.view(self.size(), -1)):
                out.copy_(block.view(out.shape))
        return self._work(work, outputs, finish)

    def gather(self, output_lists, inputs, opts=None):
        x = _single(inputs, "gather")
        root = opts.rootRank if opts is not None else 0
        mine = self.rank() == root
        if mine and (len(output_lists) != 1 or len(output_lists[0]) != self.size()):
            raise ValueError(f"gather: one list of {self.size()} output tensors expected on the root")
        flat = torch.empty((self.size(), *x.shape), dtype=x.dtype) if mine else None
        work = self.comm.gather(x, flat.view(-1) if mine else None, root, async_op=True)

        def finish():
            for out, block in zip(output_lists[0], flat):
                out.copy_(block)
        return self._work(work, output_lists, finish if mine else None)

    def scatter(self, outputs, input_lists, opts=None):
        out = _single(outputs, "scatter")
        root = opts.rootRank if opts is not None else 0
        flat = None
        if self.rank() == root:
            if len(input_lists) != 1 or len(input_lists[0]) != self.size():
                raise ValueError(f"scatter: one list of {self.size()} input tensors expected on the root")
            flat = torch.cat([_host(t, f"scatter_list[{r}]").reshape(-1) for r, t in enumerate(input_lists[0])])
        return self._work(self.comm.scatter(flat, out, root, async_op=True), outputs)

    def send(self, tensors, dst, tag=0):
        return self._work(self.comm.send(_single(tensors, "send"), dst, tag, async_op=True), tensors)

    def recv(self, tensors, src, tag=0):
        return self._work(self.comm.recv(_single(tensors, "recv"), src, tag, async_op=True), tensors)

    def recv_anysource(self, tensors, tag=0):
        _not_yet("recv from any source", "name the source rank (pycoll matches messages per pair of ranks)")

    def shutdown(self):
        self.comm.close()  # fails pending Works, which completes their futures
        self._completer.stop(timeout=10.0)


def create_process_group(store, rank, size, timeout):
    """torch.distributed's backend creator: a pycoll communicator that meets through torch's store."""
    seconds = timeout.total_seconds()
    comm = pycoll.init(rank=rank, world_size=size, store=TorchStore(store, seconds), timeout=seconds)
    return PycollProcessGroup(comm, rank, size)
